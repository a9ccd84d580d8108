"""The doit task graph: it turns the pipeline's groups (kvtasks.run.pipeline) into tasks and runs a
front door's task creators (kvtasks.front.front_doors) in this process through doit's Python API; the
work of every task is another module's (phases, batch, cache_commands).

Per PR (label L):  prepare:L -> base:<base key> -> head:<head key> -> report:L
- prepare:L always runs; it computes the content keys (kvtasks.evidence.keys).
- base:<key> is up to date when evidence of a completed baseline for that key exists, so PRs
  against the same base, target and runtime share one base run, across runs and in a batch.
- head:<key> and report:L always run. The base/head/report tasks are created by a delayed creator
  once prepare has run, because their names are keys that prepare computes.
`doit report` rebuilds reports from stored evidence only; it runs no target and no git.
Exit codes: the report task turns the verdict into doit's result (PASS 0, BLOCK and NEEDS_WORK
fail = 1, INCONCLUSIVE error = 2), so `doit validate` exits with the verdict's code.
"""
from __future__ import annotations

import sys
from typing import Iterator

from doit import create_after
from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.exceptions import TaskError, TaskFailed

from kvtasks import report
from kvtasks.front import pr_targets, reporting
from kvtasks.report import pages
from kvtasks.run import batch, phases, session
from kvtasks.system import progress
from kvtasks.errors import UsageError
from kvtasks.run.pipeline import PIPELINE
from kvtasks.request import Request
from kvtasks.evidence.workspace import Workspace
from kvtasks.worktree import signals


def _doc(group: str) -> str:
    return ", ".join(row.name for row in PIPELINE[group])


def _verdict_result(code: int, message: str):
    """doit's result for an exit code: 1 fails the task, 2 is a task error. `message` starts with
    "verdict" (kvtasks.front.reporting says it as a verdict, never as a failure of kvtasks)."""
    if code == 1:
        return TaskFailed(message)
    if code == 2:
        return TaskError(message)
    return None


def _publish(request: Request, workspace: Workspace, verdict_is_result: bool):
    composed = phases.publish(request, workspace, draw_index=verdict_is_result)
    paths = workspace.report_paths(request)
    progress.result(f"{report.summary_markdown(composed)}\nreport: {paths[-1]}\npage: {paths[0].parent / pages.PAGE}")
    if not verdict_is_result:  # a batch's verdict is its index's
        return None
    destination = workspace.report_paths(request)[-1]
    return _verdict_result(composed.process_exit_code,
                           f"verdict {composed.verdict} (exit {composed.process_exit_code}): {destination}")


def _write_index(requests: list[Request], workspace: Workspace, name: str, one_pr: bool):
    worst, index = batch.write_index(requests, workspace, name)
    if one_pr:  # the targets of one PR: its own report says the worst verdict, with each target's
        worst, pr_report = pr_targets.write_pr_report(workspace.reports, [request.label for request in requests])
        return _verdict_result(worst, f"verdict of PR {name}: exit {worst} ({pr_report})")
    return _verdict_result(worst, f"verdict of batch {name}: exit {worst} ({index})")


def fleet_action(run_batch, requests: list[Request], workspace: Workspace, name: str, archs):
    """A fleet batch (kvtasks.fleet) is one doit task: Ray schedules its runs; its exit is the index's."""
    worst = run_batch(requests, workspace, name, archs)
    return _verdict_result(worst, f"verdict of batch {name}: exit {worst}")


def prepare_tasks(requests: list[Request], workspace: Workspace) -> Iterator[dict]:
    for request in requests:
        yield {"basename": "prepare", "name": request.label, "actions": [(phases.run_prepare, [request, workspace])],
               "uptodate": [False], "verbosity": 2, "doc": f"{_doc('prepare')} for {request.label}"}


def side_tasks(requests: list[Request], workspace: Workspace, batch: bool) -> Iterator[dict]:
    """base/head/report tasks, named by the keys prepare stored; a key shared by PRs is one task."""
    created: set[str] = set()
    for request in requests:
        record = workspace.store.label(request.label)
        report_deps = []
        if record and not record.get("halted"):
            base, head = record["base_key"], record["head_key"]
            if f"base:{base}" not in created:
                created.add(f"base:{base}")
                yield {"basename": "base", "name": base, "actions": [(phases.run_side, [request, workspace, "base"])],
                       "uptodate": [(phases.base_done, [workspace, base])], "verbosity": 2,
                       "doc": f"{_doc('base')} for {request.label} (shared by every PR with this key)"}
            if f"head:{head}" not in created:
                created.add(f"head:{head}")
                yield {"basename": "head", "name": head, "actions": [(phases.run_side, [request, workspace, "head"])],
                       "task_dep": [f"base:{base}"], "uptodate": [False], "verbosity": 2,
                       "doc": f"{_doc('head')} for {request.label}"}
            report_deps = [f"head:{head}"]
        yield {"basename": "report", "name": request.label, "task_dep": report_deps, "uptodate": [False],
               "actions": [(_publish, [request, workspace, not batch])], "verbosity": 2,
               "doc": f"compose, judge and publish the report for {request.label}"}


# the namespace's record of the requests it validates (doit loads only task_ creators and DOIT_CONFIG)
REQUESTS = "KVTASKS_REQUESTS"


def loader_namespace(requests: list[Request], workspace: Workspace, batch_name: str | None = None,
                     one_pr: bool = False) -> dict:
    """The task creators for validating `requests` (one: validate; several: a batch, or with
    `one_pr` the targets of one PR, whose `validate` is that batch)."""
    # --sandbox mounts this workspace (evidence and reports) read-only for every target
    requests = [request.model_copy(update={"readonly": (str(workspace.root),)}) if request.sandbox else request
                for request in requests]
    def task_prepare():
        yield from prepare_tasks(requests, workspace)

    @create_after(executed="prepare", creates=["base", "head", "report"])
    def task_sides():
        yield from side_tasks(requests, workspace, batch=batch_name is not None)

    namespace = {"task_prepare": task_prepare, "task_sides": task_sides, "DOIT_CONFIG": reporting.doit_config(workspace),
                 REQUESTS: requests}
    if batch_name is None:
        namespace["task_validate"] = lambda: {"actions": None, "task_dep": ["report"], "doc": "validate one PR"}
    else:
        def task_batch():
            return {"actions": [(_write_index, [requests, workspace, batch_name, one_pr])], "task_dep": ["report"],
                    "uptodate": [False], "verbosity": 2, "doc": "validate every PR of a manifest against one base"}
        namespace["task_batch"] = task_batch
        if one_pr:
            namespace["task_validate"] = lambda: {"actions": None, "task_dep": ["batch"],
                                                  "doc": "validate one PR on each of its targets"}
    return namespace


def execute(build_namespace, command: str, quiet: bool = False, verbose: bool = False) -> int:
    """Run one front door's task graph in this process through doit's Python API (its loader over
    the namespace `build_namespace()` returns, built under the run's signal handlers); return
    doit's exit code, 0 to 2 (doit's 3, could not start, is INCONCLUSIVE's 2 too)."""
    with signals.raising():  # for this run only: an in-process caller keeps its own handlers afterwards
        try:
            loader = ModuleTaskLoader(build_namespace())
            output = ["--verbosity", "0"] if quiet else ["--verbosity", "2"] if verbose else []
            code = DoitMain(loader, extra_config={"GLOBAL": {}}).run(["run", *output, command])
        except signals.Interrupted as stopped:
            if not stopped.said:
                print(f"kvtasks: interrupted by {stopped.name} while no tree was lent; the worktree is as supplied "
                      "and the run stopped", file=sys.__stderr__)
            raise
        finally:
            session.release_held()
    return code if code in (0, 1, 2) else 2


def report_tasks(workspace: Workspace, label: str | None) -> Iterator[dict]:
    """One regeneration per label; a label whose evidence is gone (cache-gc, or never stored) or
    unreadable (another evidence schema) is said in one line: alone it is a usage error (exit 64), among all labels it is skipped."""
    labels = [label] if label else workspace.store.labels()
    for name in labels:
        fleet = (workspace.store.label(name) or {}).get("fleet")
        if fleet:  # a fleet PR: its archs' runs are labels of their own, merged again (kvtasks.fleet)
            from kvtasks.fleet import arch_report
            yield {"basename": "report", "name": name, "actions": [(arch_report.regenerate, [workspace, name, fleet])],
                   "uptodate": [False], "task_dep": [f"report:{arch_label}" for arch_label in fleet["archs"].values()
                                                     if arch_label and arch_label != name and not label],
                   "verbosity": 2, "doc": f"rebuild the fleet report for {name} from stored evidence"}
            continue
        missing = workspace.store.missing_evidence(name)
        if missing and label:
            raise UsageError(f"label {name!r} has no report to rebuild: its stored evidence is gone "
                       f"({', '.join(missing)}; removed by cache-gc, or never stored); validate it again")
        if missing:
            print(f"{name}: skipped, its stored evidence is gone ({', '.join(missing)})", file=sys.stderr)
            continue
        unreadable = workspace.store.unreadable_evidence(name)
        if unreadable and label:
            raise UsageError(f"label {name!r} has no report to rebuild: its stored evidence is unreadable to this kvtasks "
                       f"({'; '.join(unreadable)}); validate it again")
        if unreadable:
            print(f"{name}: skipped, its stored evidence is unreadable to this kvtasks ({'; '.join(unreadable)})",
                  file=sys.stderr)
            continue
        yield {"basename": "report", "name": name, "actions": [(phases.regenerate, [workspace, name])], "uptodate": [False],
               "verbosity": 2, "doc": f"rebuild the report for {name} from stored evidence"}
    # a label starts with a letter or digit, so this name never collides with one
    yield {"basename": "report", "name": "_index", "actions": [(phases.redraw_tables, [workspace])], "uptodate": [False],
           "task_dep": [f"report:{name}" for name in labels], "verbosity": 2,
           "doc": "redraw reports/index.html and every batch page from the published reports"}


_DOIT_OPTIONS_WITH_VALUES = {"-f", "--file", "-d", "--dir", "--db-file", "--backend", "--check_file_uptodate",
                             "-n", "--process", "-P", "--parallel-type", "-r", "--reporter", "-o", "--output-file",
                             "-v", "--verbosity", "--codec-cls", "--seek-file"}


def doit_command(argv: list[str]) -> str:
    """Which doit command or task this invocation names (dodo.py builds only that one's tasks)."""
    words, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _DOIT_OPTIONS_WITH_VALUES:
            skip = True
        elif not arg.startswith("-") and "=" not in arg:
            words.append(arg)
    if words and words[0] == "run":
        words = words[1:]
    return words[0] if words else "validate"
