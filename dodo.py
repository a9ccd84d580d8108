"""doit entry point: task creators only; every action calls kvtasks.

    doit validate                       the embedded demo (demo=NAME picks another demo PR)
    doit validate repo=W patch=P head_sha=H target=T [label=L out=F ...]
    doit batch manifest=FILE            every PR of a TOML/JSON manifest against one base
    doit report [label=L]               rebuild reports and their HTML pages from stored evidence; runs nothing
    doit serve [port=8000]              serve reports/ on localhost
    doit cache [base=OID] | doit cache-gc older=30d
    doit check [repo=W target=T ...] [json=F]   run a target once as a base run would; what a PR could reach
Only validate and batch build requests (the demo repository, the worktree lock); doit's own
commands (list, help, info, forget) see the front doors described and touch nothing.
The variables validate takes are the Request's options (kvtasks/request/model.py), never listed here.
"""
import os
import sys
from pathlib import Path

from doit import get_var

from kvtasks import batch, cache_commands, check, demo, graph, pages, worktree
from kvtasks.request import UsageError, build_request, doit_variables
from kvtasks.workspace import Workspace, fail_usage

# cache/ and reports/ beside this file, unless KVTASKS_HOME puts them elsewhere
worktree.forget_callers_repository()  # run from a git hook, git's variables name the caller's repository
WORKSPACE = Workspace(Path(os.environ.get("KVTASKS_HOME") or Path(__file__).resolve().parent))
DOIT_CONFIG = WORKSPACE.doit_config()
COMMAND = graph.doit_command(sys.argv[1:])
QUIET = get_var("quiet", "") not in ("", "0")

# every doit variable that fills a Request field, as the Request declares them
OPTIONS = doit_variables()
# doit's own rule (DoitMain.process_args): every word not led by '-' that holds '=' is a variable
GIVEN = {word.split("=", 1)[0] for word in sys.argv[1:] if word[:1] != "-" and "=" in word}


def _only_known_variables(known: tuple[str, ...]) -> None:
    """A misspelt variable (no_netwrok=1) would otherwise be dropped without a word."""
    unknown = sorted(GIVEN - set(known))
    if unknown:
        fail_usage(f"{unknown[0]!r} is no variable of `doit {COMMAND}`; it takes {', '.join(known)}")


def _request(options: dict):
    try:
        return build_request(options, clones_root=WORKSPACE.clones)
    except UsageError as exc:
        fail_usage(str(exc))


def _single_request():
    given = {name: get_var(name) for name in OPTIONS if get_var(name) is not None}
    if "repo" not in given:
        try:
            given = {**demo.options(WORKSPACE.store.root, get_var("demo", demo.DEFAULT_PR)), **given}
        except demo.UnknownDemo as exc:
            fail_usage(str(exc))
    return _request(given)


if COMMAND == "report":
    def task_report():
        """Rebuild reports from stored evidence (label=L for one); runs no target, no git."""
        yield from graph.report_tasks(WORKSPACE, get_var("label"))
elif COMMAND == "serve":
    def task_serve():
        """Serve reports/ (the HTML pages and JSON) on localhost; port=0 picks a free port."""
        port = get_var("port", "8000")
        if not port.isdigit() or int(port) > 65535:
            fail_usage(f"port= takes a port number, e.g. port=8000; got {port!r}")
        return {"actions": [(pages.serve, [WORKSPACE.reports, int(port)])], "uptodate": [False], "verbosity": 2}
elif COMMAND == "cache":
    def task_cache():
        """List stored evidence: key, kind, labels, size, age (base=OID: only that commit's)."""
        return {"actions": [(cache_commands.list_cache, [WORKSPACE, get_var("base")])], "uptodate": [False], "verbosity": 2}
elif COMMAND == "cache-gc":
    def task_cache_gc():
        """Remove stored evidence older than older=AGE (e.g. 30d), and private clones and trees unused that long; never one in use."""
        older = get_var("older") or fail_usage("cache-gc needs older=AGE, e.g. older=30d")
        return {"basename": "cache-gc", "actions": [(cache_commands.collect, [WORKSPACE, older])], "uptodate": [False],
                "verbosity": 2}
elif COMMAND == "batch":
    _only_known_variables(("manifest", "engine", "quiet"))  # a batch's options are its manifest's
    _manifest = get_var("manifest") or fail_usage("batch needs manifest=FILE (TOML or JSON)")
    _engine, _archs = batch.manifest_engine(_manifest, get_var("engine"))
    _name, _requests = batch.manifest_requests(_manifest, _request)
    if _engine == "ray":
        def task_batch():
            """Validate every PR of a manifest on a Ray cluster, on each of its archs."""
            from kvtasks.fleet import engine
            return {"actions": [(graph.fleet_action, [engine.run_batch, _requests, WORKSPACE, _name, _archs, QUIET])],
                    "uptodate": [False], "verbosity": 2}
    else:
        graph.hold_worktrees(_requests)
        globals().update(graph.loader_namespace(_requests, WORKSPACE, QUIET, batch_name=_name))
elif COMMAND == "check":
    _only_known_variables((*OPTIONS, "quiet", "json"))
    _given = {name: get_var(name) for name in OPTIONS if get_var(name) is not None}
    _check_request = _request(_given if "repo" in _given else {**check.demo_options(WORKSPACE.store.root), **_given})

    def task_check():
        """Run the target once as a validation's base run would and say what a PR could reach (no variables: the demo)."""
        return {"actions": [lambda: check.said(_check_request, get_var("json"), QUIET) == 0], "uptodate": [False],
                "verbosity": 2}
elif COMMAND == "validate":
    _only_known_variables((*OPTIONS, "demo", "quiet"))
    _requests = [_single_request()]
    graph.hold_worktrees(_requests)
    globals().update(graph.loader_namespace(_requests, WORKSPACE, QUIET))
else:
    # doit's own commands (list, help, info, forget, ...) import this file too: describe, build nothing
    globals().update(graph.catalogue())
