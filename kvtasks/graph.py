"""The doit task graph for one validation: the only module that knows doit.

One Request becomes a chain of tasks, each a stage group that stores its results as evidence:
prepare (merge_sim, runner selection) -> base (baseline_control) -> head (correctness_repo_tests)
-> report. The report task composes the stored evidence, publishes it, and turns the verdict into
doit's own result so `doit validate` exits with the verdict's code: PASS succeeds (0), BLOCK and
NEEDS_WORK fail (1), INCONCLUSIVE is a task error (2).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.exceptions import TaskError, TaskFailed

from kvtasks import report, target
from kvtasks.request import Request
from kvtasks.gpu import picker
from kvtasks.stages import (Context, StageResult, correctness, gpu_claim, grid, merge_sim, receipt, runtime_compat,
                            selection, test_policy, timed)
from kvtasks.store import Store
from kvtasks.worktree import Worktree

BASENAME = "validate"


@dataclass(frozen=True)
class Workspace:
    """Where a front door keeps evidence (cache/) and publishes reports (reports/)."""

    root: Path

    @property
    def store(self) -> Store:
        return Store(self.root / "cache")

    def report_paths(self, request: Request) -> list[Path]:
        paths = [self.root / "reports" / request.label / "validation_report.json"]
        if request.out:
            paths.append(Path(request.out))
        return paths

    def doit_config(self) -> dict:
        (self.root / "cache").mkdir(parents=True, exist_ok=True)
        return {"dep_file": str(self.root / "cache" / "doit.sqlite3"), "backend": "sqlite3",
                "default_tasks": [BASENAME]}


def _prepare(ctx: Context) -> list[StageResult]:
    facts = StageResult(name="run", facts={"started_utc": report.utc_now(), "isolation": target.isolation_facts()})
    merged = timed(ctx, merge_sim.NAME, merge_sim.run)
    if "halt" in merged.facts:
        return [facts, merged]
    return [facts, merged, timed(ctx, selection.NAME, selection.run), timed(ctx, grid.CHANNEL, grid.channel),
            timed(ctx, test_policy.NAME, test_policy.run)]


def _gpu(ctx: Context) -> list[StageResult]:
    results = [timed(ctx, gpu_claim.NAME, gpu_claim.run), timed(ctx, runtime_compat.NAME, runtime_compat.run)]
    probed = gpu_claim.requirement(ctx) if runtime_compat.established(ctx) else None
    return results if probed is None else [*results, probed]


def _base(ctx: Context) -> list[StageResult]:
    return [timed(ctx, correctness.BASELINE, correctness.baseline_control)]


def _head(ctx: Context) -> list[StageResult]:
    results = [timed(ctx, correctness.REPO_TESTS, correctness.repo_tests), timed(ctx, grid.NAME, grid.head),
               timed(ctx, receipt.NAME, receipt.run)]
    after = gpu_claim.after_run(ctx)
    return results if after is None else [*results, after]


GROUPS: dict[str, Callable[[Context], list[StageResult]]] = {
    "prepare": _prepare, "gpu": _gpu, "base": _base, "head": _head}


def run_group(request: Request, workspace: Workspace, group: str, quiet: bool = False) -> None:
    store = workspace.store
    if group == "prepare":
        store.reset(request.label)
        for path in workspace.report_paths(request):
            # a run owns its output paths: a stale report must never stand in for this run's
            path.unlink(missing_ok=True)
            path.with_name("summary.md").unlink(missing_ok=True)
    earlier = {result.name: result for result in store.read_all(request.label, list(GROUPS)[:list(GROUPS).index(group)])}
    ctx = Context(request=request, worktree=Worktree(request.repo), run_dir=store.run_dir(request.label),
                  earlier=earlier, quiet=quiet)
    halted = ctx.fact("halt")
    results = [] if halted else GROUPS[group](ctx)
    store.write(request.label, group, results)


def publish(request: Request, workspace: Workspace, quiet: bool = False):
    results = workspace.store.read_all(request.label, list(GROUPS))
    composed = report.compose(request.label, results)
    paths = workspace.report_paths(request)
    report.publish(composed, paths)
    picker.release_all()  # the claim is held until the report is written, and no longer
    if not quiet:
        print(report.summary_markdown(composed))
        print(f"report: {paths[-1]}")
    message = f"verdict {composed.verdict} (exit {composed.process_exit_code}): {paths[-1]}"
    if composed.process_exit_code == 1:
        return TaskFailed(message)
    if composed.process_exit_code == 2:
        return TaskError(message)
    return None


def validate_tasks(request: Request, workspace: Workspace, quiet: bool = False) -> Iterator[dict]:
    previous: list[str] = []
    for group in GROUPS:
        yield {
            "name": group,
            "actions": [(run_group, [request, workspace, group, quiet])],
            "targets": [str(workspace.store.evidence_path(request.label, group))],
            "task_dep": previous,
            "uptodate": [False],
            "verbosity": 2,
        }
        previous = [f"{BASENAME}:{group}"]
    yield {
        "name": "report",
        "actions": [(publish, [request, workspace, quiet])],
        "task_dep": previous,
        "uptodate": [False],
        "verbosity": 2,
    }


def run(request: Request, workspace: Workspace, quiet: bool = False) -> int:
    """Execute the validation graph through doit's Python API; return the verdict's exit code."""
    def task_validate():
        yield from validate_tasks(request, workspace, quiet)

    loader = ModuleTaskLoader({"task_validate": task_validate, "DOIT_CONFIG": workspace.doit_config()})
    args = ["run", *(["--verbosity", "0", "--reporter", "zero"] if quiet else []), BASENAME]
    code = DoitMain(loader, extra_config={"GLOBAL": {}}).run(args)
    # doit: 0 success, 1 task failed, 2 task error, 3 could not start; the last is INCONCLUSIVE too
    return code if code in (0, 1, 2) else 2


def fail_usage(message: str) -> None:
    print(f"validate-kernel-pr: error: {message}", file=sys.stderr)
    raise SystemExit(2)
