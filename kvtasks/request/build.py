"""validate_request: every option a front door was given, checked and normalised into a Request,
without touching anything; build_request: that request resolved at once, for a caller that holds
no lock (check, tests).

A front door validates, takes the worktree's lock, then resolves (resolution.py): a bad invocation
exits 64 with one line and writes no report, and what resolve reads of the worktree is read
while no other validator has it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from kvtasks.errors import UsageError
from kvtasks.host import HostSettings
from kvtasks.request.model import Request, doit_variables
from kvtasks.request.resolution import locate, resolve

# what a front door may add beside the declared options: its own report copy when --out is not given,
# the changed files base's map sends to no target (kvtasks.front.pr_targets), and how the impact map
# chose a target where none was configured (kvtasks.front.inference)
FRONT_DOOR_DEFAULTS = ("default_out", "unvalidated_changes", "inferred")


def validate_request(options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> Request:
    """Check every option and return the (unresolved) Request, or raise UsageError naming the first
    problem; the host's settings are read from `environ` (default: the process's environment).

    `options` uses the doit variable names (the flag names with underscores); empty strings mean
    "not given", and a name that is no option is a mistake (a misspelt manifest key would
    otherwise be dropped without a word). `default_out` is the report copy a front door writes
    when `out` is not given.
    """
    unknown = sorted(set(options) - set(doit_variables()) - set(FRONT_DOOR_DEFAULTS))
    if unknown:
        raise UsageError(f"{unknown[0]!r} is no option; the options are {', '.join(doit_variables())}")

    def text(name: str) -> str:
        value = options.get(name)
        return "" if value is None else str(value).strip()

    if not text("repo"):
        raise UsageError("--repo is required")
    target = text("target") or text("tests")
    if not target:
        raise UsageError("--target is required: a forgotten target must never read as 'there is no test'")
    given = {name: value for name, value in options.items() if name != "tests"}
    return Request.model_validate({**given, "target": target, "host": HostSettings.from_environ(environ)})


def build_request(options: Mapping[str, object], environ: Mapping[str, str] | None = None,
                  clones_root: Path | None = None) -> Request:
    """validate_request, then locate and resolve the request at once (no lock held).

    Given `base_ref` and `head_ref`, `repo` may be any clone or a git URL: the refs are resolved in
    kvtasks' private clone under `clones_root` (the front door's workspace).
    """
    return resolve(locate(validate_request(options, environ), clones_root))
