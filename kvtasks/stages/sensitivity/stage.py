"""The sensitivity stage: which run is repeated corrupted, in which modes, on base too, and whose a
green corrupted run is."""
from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import Context, Report, Stage, StageResult, StageSpec, baseline_control, grid, result
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat
from kvtasks.stages.sensitivity.runs import NAME, combine, describe, green_run, judge_run, launch
from kvtasks.stages.sides import KERNEL_SUFFIXES, is_test_path
from kvtasks.worktree import PatchRefused

# base's corrupted runs: the store's kind for them (under their base sensitivity keys) and their names
BASE_EVIDENCE = "base-sensitivity"


class Sensitivity(Stage):
    """Whether the suite fails when the route's output is corrupted."""

    model_config = ConfigDict(extra="forbid")

    route: str | None = None
    corrupted_run: str | None = None  # which run was repeated corrupted (head-repo or head-grid)
    modes_run: list[str] | None = None
    modes: dict[str, dict[str, Any]] | None = None  # mode -> status, reason and what the run saw
    test_changes: list[str] | None = None  # the suite files the PR changed, when it stays green
    base: dict[str, Any] | None = None  # the same corrupted run on base
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran
def run(ctx: Context) -> StageResult:
    request = ctx.request
    if not request.routes:
        return result(NAME, "skip", "--expected-route was not supplied: there is no route whose output to corrupt")
    kind, green, why_not = green_run(ctx)
    if green is None:
        return result(NAME, "skip", why_not)
    grid_stage = ctx.result_of(grid.CorrectnessGrid)
    axis_argv = (grid_stage.stage.axis_argv or []) if kind == "grid" and grid_stage else []
    runs, outcomes = [], {}
    try:
        with ctx.worktree.lend("head"):
            for mode in request.sensitivity_modes:
                judged, launched, unusable = launch(ctx, kind, green, f"head-sensitivity-{mode}", mode, axis_argv)
                runs += launched
                outcomes[mode] = judge_run(ctx, mode, judged, unusable)
    except PatchRefused as refused:
        return result(NAME, "skip", str(refused))
    status, reason = combine(outcomes)
    route = request.expected_route
    fields = {"route": route, "corrupted_run": f"head-{kind}", "modes_run": list(outcomes),
              "modes": {mode: {"status": state, "reason": why, **detail} for mode, (state, why, detail)
                        in outcomes.items()}}
    if status == "pass":
        stage = result(NAME, "pass", f"the suite fails when {route}'s output is corrupted ({reason})", **fields)
    elif status == "skip":
        stage = result(NAME, "skip", reason, **fields)
    else:
        failed = [mode for mode, (state, _, _) in outcomes.items() if state == "fail"]
        detail = (f"the tests pass with {route}'s output corrupted: they cannot detect a wrong kernel here "
                  f"({'; '.join(describe(ctx, mode) for mode in failed)})")
        stage = result(NAME, "fail", f"the tests pass with {route}'s output corrupted: they cannot detect a wrong "
                                     f"kernel here ({reason})", **fields)
        stage.runs = runs
        return _blame(ctx, stage, failed, detail)
    stage.runs = runs
    return stage


# -- blame -------------------------------------------------------------------------------------------

def _base_outcome(ctx: Context, modes: list[str]) -> tuple[str, str, dict, list[TargetRun], list[StageResult]]:
    """The suite's sensitivity on base, for the modes head failed: (status, reason, fields, runs,
    the new base evidence). A mode another PR against this base already ran corrupted on base is
    that stored evidence, reused and said so."""
    baseline = ctx.result_of(baseline_control.BaselineControl)
    base_grid = (baseline.stage.s1_grid if baseline else None) or {}
    base_repo = (baseline.stage.repo_tests if baseline else None) or {}
    if base_grid.get("state") == "ran" and base_grid.get("exit") == 0:
        kind = "grid"
    elif base_repo.get("state") == "ran" and base_repo.get("exit") == 0:
        kind = "repo"
    else:
        return "skip", "base's own run of the target did not pass", {}, [], []
    ordinary = next((run for run in baseline.runs if run.label == f"base-{kind}"), None)
    if ordinary is None:
        return "skip", f"base's {kind} run is not among the baseline's runs", {}, [], []
    runs, outcomes, made, reused = [], {}, [], {}
    for mode in modes:
        stored = ctx.base_evidence.get(base_evidence_name(mode))
        if stored is not None and stored.stage is not None:
            outcomes[mode] = (stored.stage.status, stored.stage.note, dict(stored.stage.model_extra or {}))
            if stored.stage.reused_from is not None:
                reused[mode] = stored.stage.reused_from.model_dump()
    pending = [mode for mode in modes if mode not in outcomes]
    if pending:
        with ctx.worktree.lend("base"):
            for mode in pending:
                judged, launched, unusable = launch(ctx, kind, ordinary, f"base-sensitivity-{mode}", mode, [])
                runs += launched
                outcomes[mode] = judge_run(ctx, mode, judged, unusable)
                state, why, detail = outcomes[mode]
                if state in ("pass", "fail"):  # a conclusion about base; a skip (a timeout) is no evidence
                    kept = StageResult(name=base_evidence_name(mode), stage=Stage(status=state, note=why, **detail))
                    kept.runs = launched
                    made.append(kept)
    status, reason = combine(outcomes)
    fields = {"corrupted_run": f"base-{kind}", "status": status, "reason": reason,
              "modes": {mode: {"status": state, "reason": why, **detail,
                               **({"reused_from": reused[mode]} if mode in reused else {})}
                        for mode, (state, why, detail) in outcomes.items()}}
    return status, reason, fields, runs, made


def base_evidence_name(mode: str) -> str:
    """What base's corrupted run in `mode` is stored and read back as (under its base sensitivity key)."""
    return f"{BASE_EVIDENCE}:{mode}"


def _blame(ctx: Context, stage: StageResult, modes: list[str], detail: str) -> StageResult:
    request = ctx.request
    if ctx.head_view is None:
        return stage.finding("sensitivity.insensitive-no-patch", "note", f"{detail}; there is no patch, so this is about the supplied checkout")
    suite_files = ctx.suite_sources()
    kernel_files = ctx.route_files()
    changes = ctx.head_view.changes
    changed = [path for path in suite_files if path in changes and path not in kernel_files]
    if not changed:
        return stage.finding("sensitivity.insensitive-untouched", "note", f"{detail}; the PR changes neither the target nor its test helpers, so this "
                                     "is about the repository, not the PR")
    stage.stage.test_changes = changed
    if not ctx.worktree.exists_on_base(request.target_path):
        return stage.finding("sensitivity.insensitive-new-target", "should-fix", f"the PR adds this target and {detail}")
    status, reason, fields, runs, made = _base_outcome(ctx, modes)
    stage.stage.base = fields or {"status": status, "reason": reason}
    stage.runs += runs
    stage.base_evidence = made
    if status == "pass":
        # test_policy's rule (a code file outside the tests), and the route's own module whatever its name
        kernel_changed = any(path in kernel_files or (path.endswith(KERNEL_SUFFIXES) and not is_test_path(path))
                             for path in changes)
        severity = "should-fix" if kernel_changed else "blocker"
        scope = "" if kernel_changed else " in a PR that changes no kernel code"
        return stage.finding("sensitivity.lost-on-head", severity, f"the suite detects a corrupted {request.expected_route} on base and not on "
                                       f"head{scope}: the PR's changes to {', '.join(changed)} made it insensitive; "
                                       f"{detail}")
    if status == "fail":
        return stage.finding("sensitivity.insensitive-on-base-too", "note", f"{detail}; base's suite cannot detect it either ({reason}), so this is not "
                                     "attributed to the PR")
    return stage.finding("sensitivity.base-unknown", "note", f"{detail}; base's sensitivity could not be established ({reason}), so this is "
                                 "not attributed to the PR")


def passes(report: Report) -> list[str]:
    """PASS needs the suite shown to fail, in every mode, with the route's output corrupted."""
    sensitivity = report.stage_of(Sensitivity)
    modes = sensitivity.modes or {}
    if sensitivity.status != "pass" or not modes or not all(
            mode.get("status") == "pass" and mode.get("corrupted_calls") for mode in modes.values()):
        return ["sensitivity: the suite was not shown to fail with the route's output corrupted"]
    return []


STAGE = StageSpec(NAME, run, payload=Sensitivity, passes=passes,
                  requires=(BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat))
