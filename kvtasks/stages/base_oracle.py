"""correctness_base_oracle: head's code judged by the tests that existed before the PR.

A PR that changes its own suite can loosen the oracle that judges it: the target, a conftest.py (a
hook that rewrites outcomes), pytest's configuration, or a test helper the target imports. So when
the PR changes any of them, head's code runs once more with base's version of each changed one in
place of head's: the patch is applied with those paths kept at base
(`Worktree.lend("head", keep_base=...)`), inside the same lend that hands the tree back clean. The grid
cells run the same way when the grid ran on both sides. Optional: its skip never changes a verdict.
Head failing where base passes is should-fix, a blocker when test_policy found the PR widened,
skipped or removed a check in one of those files; a failure to import or collect (a renamed API)
is a note that says so. Code outside the test paths is the code under test and always runs as head.
"""
from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from pydantic import ConfigDict

from kvtasks import harness
from kvtasks.stages import Context, Stage, StageResult, baseline_control, cpu_tier, grid, payload, result, test_policy
from kvtasks.stages.target_runs import gate
from kvtasks.harness.launch import TargetRun
from kvtasks.worktree import PatchRefused

NAME = "correctness_base_oracle"


@payload(NAME)
class BaseOracle(Stage):
    """Head's code under base's version of what the PR changed in its suite."""

    model_config = ConfigDict(extra="forbid")

    kept_at_base: list[str] | None = None
    runs: dict[str, Any] | None = None  # label -> exit, log, stats, outcome
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran
# what a test that no longer fits head's API fails with
_API_CHANGE = re.compile(r"\b(ImportError|ModuleNotFoundError|AttributeError|NameError)\b|"
                         r"TypeError: .*(argument|positional)")


# pytest's own configuration: a PR's edits to it shape the oracle as much as the target's
_PYTEST_CONFIGS = {"pytest.ini", "tox.ini", "setup.cfg"}


def _shapes_the_suite(ctx: Context, path: str) -> bool:
    name = PurePosixPath(path).name
    if name == "conftest.py" or name in _PYTEST_CONFIGS:
        return True
    if name == "pyproject.toml":
        return any("tool.pytest" in (text or "") for text in (ctx.head_text(path), ctx.worktree.read_base(path)))
    return False


def _kept_at_base(ctx: Context) -> list[str]:
    """The target and every file around it the PR changes that shapes its verdict: conftest.py files,
    pytest's configuration, and the test helpers the target imports (never the route's modules)."""
    changes, target_path = ctx.head_view.changes, ctx.request.target_path
    route_files = ctx.route_files()
    helpers = [path for path in ctx.suite_sources()
               if path in changes and test_policy.is_test_path(path) and path not in route_files]
    around = [path for path in changes if _shapes_the_suite(ctx, path)]
    kept = [path for path in dict.fromkeys([*helpers, *around]) if path != target_path]
    return [target_path, *kept] if target_path in changes else kept


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if ctx.head_view is None:
        return result(NAME, "skip", "no patch: there is no base version of the target to judge head with")
    change = ctx.head_view.changes.get(request.target_path)
    kept = _kept_at_base(ctx)
    if not kept:
        return result(NAME, "skip", "the PR changes neither the target nor what shapes it (conftest.py, pytest's "
                                    "configuration, test helpers): head already ran the tests base had")
    if change not in (None, "M"):
        what = "adds" if change == "A" else "deletes"
        return result(NAME, "skip", f"the PR {what} the target: there is no base oracle to hold head to")
    blocked = gate(ctx)
    if blocked:
        return result(NAME, "skip", blocked)
    baseline = ctx.earlier.get(baseline_control.NAME)
    base_repo = baseline.stage.repo_tests if baseline and baseline.stage.status == "pass" else None
    if not base_repo or base_repo.get("state") != "ran" or base_repo.get("exit") != 0:
        return result(NAME, "skip", "the target does not pass on base, so base's tests cannot judge head")

    runs: list[TargetRun] = []
    try:
        with ctx.worktree.lend("head", keep_base=kept):
            ctx.say(f"{NAME}: running head's code under base's {', '.join(kept)}")
            runs.append(harness.run(request, runner=ctx.selection.runner, run_dir=ctx.run_dir,
                                   label="head-baseoracle", **cpu_tier.launch_options(ctx)))
            grid_run = grid.oracle_run(ctx)
            if grid_run is not None:
                runs.append(grid_run)
    except PatchRefused as refused:
        return result(NAME, "skip", f"{refused} (with base's {', '.join(kept)} kept)")
    stage = _judge(ctx, runs, kept)
    stage.runs = runs
    return stage


def _outcome(run: TargetRun) -> str:
    if run.passed and run.stats.executed > 0:
        return "pass"
    if run.passed:
        return "executed-nothing"
    failing = [case.message for case in run.cases if case.outcome in ("failed", "error")]
    collected_nothing = run.runner == "pytest" and run.stats.executed == 0
    if collected_nothing or (failing and all(_API_CHANGE.search(message) for message in failing)) or \
            (run.runner == "script" and _API_CHANGE.search(run.log_tail(6, 1200))):
        return "api-change"
    return "fail"


def _judge(ctx: Context, runs: list[TargetRun], kept: list[str]) -> StageResult:
    outcomes = {run.label: _outcome(run) for run in runs}
    fields = {"kept_at_base": kept,
              "runs": {run.label: {"exit": run.exit, "log": run.log, "stats": run.stats.model_dump(),
                                   "outcome": outcomes[run.label]} for run in runs}}
    for run in runs:
        sparse = cpu_tier.sparse_skip(NAME, run, fields)
        if sparse is not None:
            return sparse
    failed = [run for run in runs if outcomes[run.label] == "fail"]
    if failed:
        return _blame(ctx, failed, fields)
    if "api-change" in outcomes.values():
        run = next(run for run in runs if outcomes[run.label] == "api-change")
        stage = result(NAME, "skip", "base's version of the target does not import or collect against head's code",
                       **fields)
        return stage.finding("note", "base's tests no longer fit head's API (a renamed or changed interface), so "
                                     f"they cannot judge head: {run.log_tail()}")
    if "executed-nothing" in outcomes.values():
        return result(NAME, "skip", "head's code under base's target executed no test", **fields)
    what = " and its grid cells" if len(runs) > 1 else ""
    return result(NAME, "pass", f"head's code passes base's version of the target{what}", **fields)


def _blame(ctx: Context, failed: list[TargetRun], fields: dict) -> StageResult:
    names = ", ".join(run.label for run in failed)
    stage = result(NAME, "fail", f"head's code fails base's version of the target ({names})", **fields)
    policy = ctx.earlier.get(test_policy.NAME)
    found = policy.stage if policy and policy.stage else None
    tail, path = failed[0].log_tail(), ctx.request.target_path
    kept = fields["kept_at_base"]
    weakened = [file for file in kept if found is not None and file in (found.weakened_files or [])]
    if weakened:
        named = "; ".join(item for file in weakened for item in _weakenings(found, file))
        return stage.finding("blocker", f"head fails the tests base had, and the PR weakened those tests in "
                                        f"{', '.join(weakened)}: {named} — base's version fails: {tail}")
    return stage.finding("should-fix", f"head fails the tests base had for {path} (with base's {', '.join(kept)}), "
                                       f"which pass on base; the PR changed them, so its own version passing is not "
                                       f"enough: {tail}")


def _weakenings(policy: Stage, path: str) -> list[str]:
    """What test_policy found in one file, as the blocker names it (at most five)."""
    prefix = f"{path}::"
    named = [f"{item['where'][len(prefix):]} widened {item['base']:g} -> {item['head']:g}"
             for item in policy.loosened or [] if item["where"].startswith(prefix)]
    named += [text[len(prefix):] for text in [*(policy.not_literal or []), *(policy.weakened or [])]
              if text.startswith(prefix)]
    named += [row[len(path) + 2:] + " commented out" for row in policy.newly_commented_rows or []
              if row.startswith(f"{path}: ")]
    return named[:5]
