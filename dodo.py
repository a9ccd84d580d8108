"""doit entry point: the front doors of kvtasks.front.front_doors, run from this source tree.

    doit validate                       the embedded demo (demo=NAME picks another demo PR)
    doit validate repo=W patch=P head_sha=H target=T [label=L out=F ...]
    doit batch manifest=FILE            every PR of a TOML/JSON manifest against one base
    doit report [label=L]               rebuild reports and their HTML pages from stored evidence; runs nothing
    doit serve [port=8000]              serve reports/ on localhost
    doit cache [base=OID] | doit cache-gc older=30d
    doit check [repo=W target=T ...] [json=F]   run a target once as a base run would; what a PR could reach
The installed `validate-kernel-pr validate|batch|report|serve|cache|cache-gc|check` runs the same task
creators. Only validate and batch build requests (the demo repository, the worktree lock); doit's
own commands (list, help, info, forget) see the front doors described and touch nothing.
"""
import os
import sys
from pathlib import Path

from doit import get_var

from kvtasks import errors, worktree
from kvtasks.front import front_doors, graph
from kvtasks.evidence.workspace import Workspace

# cache/ and reports/ beside this file, unless KVTASKS_HOME puts them elsewhere
worktree.forget_callers_repository()  # run from a git hook, git's variables name the caller's repository
WORKSPACE = Workspace(Path(os.environ.get("KVTASKS_HOME") or Path(__file__).resolve().parent))
COMMAND = graph.doit_command(sys.argv[1:])
# doit's own rule (DoitMain.process_args): every word not led by '-' that holds '=' is a variable
GIVEN = {word.split("=", 1)[0]: get_var(word.split("=", 1)[0]) for word in sys.argv[1:]
         if word[:1] != "-" and "=" in word}
SITE = errors.CrashSite(WORKSPACE.reports)


def _exit(error: Exception):
    """doit's main is this entry's: what a task creator raises ends it with its exit code."""
    sys.exit(errors.exit_code(error, SITE))


def _namespace() -> dict:
    namespace = front_doors.namespace(COMMAND, WORKSPACE, GIVEN, quiet=GIVEN.get("quiet", "") not in ("", "0"))
    labels = [request.label for request in namespace.get(graph.REQUESTS, [])]
    SITE.label = labels[0] if len(labels) == 1 else None
    return errors.namespace_through_doit(namespace, _exit)


NAMESPACE: dict = {}


def _load() -> int:
    NAMESPACE.update(_namespace())
    return 0


_CODE = errors.handled(_load, SITE)
if _CODE:
    sys.exit(_CODE)
globals().update(NAMESPACE)
