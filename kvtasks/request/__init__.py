"""The Request: what one validation is asked to do (every flag, doit variable and manifest key) and
the host it runs on; model.py declares the options once, build.py checks them.

Nothing here touches the worktree beyond reading its top level and the patch.
"""
from kvtasks.host import HostSettings
from kvtasks.request.build import build_request
from kvtasks.request.model import (DeclaredOption, Option, Request, declared_options, doit_variables, grid_rows,
                                   path_variables)
from kvtasks.request.namespaces import SANDBOX_SCRIPT, mount_namespace, network_namespace
from kvtasks.request.patch import patch_paths
from kvtasks.errors import UsageError

__all__ = ["DeclaredOption", "HostSettings", "Option", "Request", "SANDBOX_SCRIPT", "UsageError", "build_request",
           "declared_options", "doit_variables", "grid_rows", "mount_namespace", "network_namespace", "patch_paths",
           "path_variables"]
