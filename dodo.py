"""doit entry point: task creators only; every action calls kvtasks.

    doit validate                          the embedded demo (demo=NAME picks another demo PR)
    doit validate repo=W patch=P head_sha=H target=T [label=L out=F ...]
"""
import os
from pathlib import Path

from doit import create_after, get_var

from kvtasks import demo, graph
from kvtasks.request import UsageError, build_request

# cache/ and reports/ beside this file, unless KVTASKS_HOME puts them elsewhere
WORKSPACE = graph.Workspace(Path(os.environ.get("KVTASKS_HOME") or Path(__file__).resolve().parent))
DOIT_CONFIG = WORKSPACE.doit_config()

OPTIONS = ("repo", "target", "tests", "patch", "head_sha", "expected_route", "shape_vars", "shape_env",
           "shape_arg", "shape_argnames", "grid", "axis", "runner", "tol_table", "runtime_module", "perf_args",
           "perf_control_column", "no_perf", "label", "out")


def _options() -> dict:
    given = {name: get_var(name) for name in OPTIONS if get_var(name) is not None}
    if "repo" in given:
        return given
    try:
        return {**demo.options(WORKSPACE.store.root, get_var("demo", demo.DEFAULT_PR)), **given}
    except demo.UnknownDemo as exc:
        graph.fail_usage(str(exc))


@create_after(executed=None)
def task_validate():
    """Validate one PR (the embedded demo when no repo= is given)."""
    try:
        request = build_request(_options())
    except UsageError as exc:
        graph.fail_usage(str(exc))
    quiet = get_var("quiet", "") not in ("", "0")
    yield from graph.validate_tasks(request, WORKSPACE, quiet=quiet)
