"""The Request: what one validation is asked to do (every flag, doit variable and manifest key) and
the host it runs on; model.py declares the options and checks them (pure), resolution.py checks them
against the worktree and the host once its lock is held, build.py is the front doors' entry.
"""
from kvtasks.errors import UsageError
from kvtasks.host import HostSettings
from kvtasks.request.build import build_request, validate_request
from kvtasks.request.model import Request, declared_options, doit_variables, path_variables
from kvtasks.request.namespaces import SANDBOX_SCRIPT, mount_namespace, network_namespace
from kvtasks.request.options import DeclaredOption, Option, grid_rows
from kvtasks.request.patch import base_hunks, patch_paths
from kvtasks.request.resolution import locate, resolve

__all__ = ["DeclaredOption", "HostSettings", "Option", "Request", "SANDBOX_SCRIPT", "UsageError", "build_request",
           "declared_options", "doit_variables", "grid_rows", "locate", "mount_namespace", "network_namespace",
           "base_hunks", "patch_paths", "path_variables", "resolve", "validate_request"]
