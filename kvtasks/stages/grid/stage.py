"""correctness_grid, the head stage: lend the head tree, prove the channel with a poisoned run
(only after the unpoisoned head run passed), prove the axes, run the grid, and judge it against
base: a head-only failure with routed work observed blocks; cells only base executed block; a grid
that duplicates the target's defaults earns no pass.

Returns a StageResult; it must never write the report nor apply the patch itself.
"""
from __future__ import annotations

from contextlib import nullcontext


from kvtasks.harness.in_target.cpu_state import BF16_REASON
from kvtasks.harness.target_run import TargetRun
from kvtasks.sources import row_text
from kvtasks.stages import Context, StageResult, StageSpec, cpu_tier, nonfinite, result
from kvtasks.stages.grid.plan import NAME, Plan, plan_of
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat
from kvtasks.stages.grid.proof import axis_probes, poisoned, proves_channel
from kvtasks.stages.grid.runs import base_side, cell_outcomes, failing_cells, run_grid
from kvtasks.stages.target_runs import attribute, crashed
from kvtasks.worktree import PatchRefused


def head(ctx: Context) -> StageResult:
    plan = plan_of(ctx)
    repo_tests = ctx.result_of(RepoTests)
    head_repo = next((r for r in (repo_tests.runs if repo_tests else []) if r.label == "head-repo"), None)
    if plan is None:
        return result(NAME, "skip", "grid channel selection did not run")
    if not plan.channel:
        reason = plan.reason or "no channel"
        stage = result(NAME, "skip", f"{reason}; coverage is repo-default-only")
        return stage.finding("grid.no-channel", "note", "coverage is limited to repository defaults: no grid channel was established")
    if not plan.rows and plan.interpreter_skipped:
        stage = result(NAME, "skip", f"every grid cell is an interpreter limitation ({BF16_REASON}); "
                                     "coverage is repo-default-only", interpreter_skipped_cells=_limited(plan))
        return stage.finding("grid.cells-interpreter-skipped", "note", f"grid cells {', '.join(plan.interpreter_skipped)} were not run: "
                                     f"{BF16_REASON}")
    if not plan.rows:
        stage = result(NAME, "skip", "no --grid was supplied and none could be generated; coverage is "
                                     "repo-default-only")
        return stage.finding("grid.no-cells", "note", "coverage is limited to repository defaults: no grid cells")
    if head_repo is None:
        return result(NAME, "skip", f"head repo tests did not run ({repo_tests.stage.note if repo_tests else ''}); "
                                    "the grid was not attempted")
    if not head_repo.passed:
        attempted = "the merged session's grid cells are not judged" if head_repo.session else "grid not attempted"
        return result(NAME, "skip", f"{attempted} because the unpoisoned head run failed: a poisoned run could not "
                                    "prove the channel")

    runs: list[TargetRun] = []
    # the merged head session's parts, when one ran and stands for them: nothing more to launch
    parts = {run.label: run for run in repo_tests.runs if run.session is not None}
    try:
        with ctx.worktree.lend("head") if "head-grid" not in parts else nullcontext():
            probe = parts.get("head-grid-probe") or run_grid(ctx, plan, "head-grid-probe", poisoned(plan))
            runs.append(probe)
            probe_fields = {"hook_probe_exit": probe.exit, "hook_probe_log": probe.log, "grid": ctx.request.grid,
                            "cells": [row_text(r) for r in plan.rows], "channel": plan.channel,
                            **({"interpreter_skipped_cells": _limited(plan)} if plan.interpreter_skipped else {})}
            proven, why = proves_channel(plan, probe)
            probe_fields["hook_proof"] = why
            if not proven:
                unproven = "consumed" if probe.exit == 0 else "proven"
                stage = result(NAME, "skip", f"the declared {plan.channel} channel was not {unproven}: {why}",
                               **probe_fields)
                stage.finding("grid.channel-not-shown", "note", f"the {plan.channel} channel was not shown to reach the target ({why}); the grid "
                                      "proves nothing")
                stage.runs = runs
                return stage
            axis_argv, axis_state, axis_reason = [], plan.axis_state, ""
            if plan.axis_state == "declared":
                axis_state, axis_reason, axis_runs = axis_probes(ctx, plan)
                runs += axis_runs
                axis_argv = [token for axis in plan.axes if axis.hook_proof == "refused-invalid-value"
                             for token in (axis.flag, *axis.values)]
            run = parts.get("head-grid") or run_grid(ctx, plan, "head-grid", plan.rows, axis_argv)
            runs.append(run)
    except PatchRefused as refused:
        return result(NAME, "skip", str(refused))

    independence, independence_reason = run_independence(ctx, plan)
    stage = _judge(ctx, plan, run, head_repo, probe_fields, axis_argv, independence)
    stage.selection.set(grid_independence=independence, grid_independence_reason=independence_reason)
    base_grid = base_side(ctx)
    cpu_tier.credit_fixes(stage, run, base_grid)
    cpu_tier.observe(stage, run)
    if ctx.request.has_patch and base_grid:
        nonfinite.judge(stage, run, base_grid.get("route_outputs"))
    if axis_state != plan.axis_state:
        stage.selection.set(axis_state=axis_state, axis_state_reason=axis_reason,
                               axes=list(plan.axes))
        if axis_state == "hook-not-consumed":
            stage.finding("grid.axes-not-run", "note", f"axis {axis_reason}; those axes were not run")
    stage.runs = runs
    return stage


def run_independence(ctx: Context, plan: Plan) -> tuple[str, str]:
    """test_selection.grid_independence, the one answer for the run that happened: the shape cells'
    answer from channel selection, raised when a proven axis asks for values outside its default."""
    independence = ctx.selection.grid_independence or "unknown"
    reason = ctx.selection.grid_independence_reason or ""
    novel = [axis.name for axis in plan.axes
             if axis.hook_proof == "refused-invalid-value" and axis.independence == "adds-coverage"]
    if novel and independence != "adds-coverage":
        return "adds-coverage", f"the proven axis {', '.join(novel)} asks for values outside its flag's default"
    return independence, reason


def _limited(plan: Plan) -> dict[str, str]:
    return {cell: BF16_REASON for cell in plan.interpreter_skipped}


def _judge(ctx: Context, plan: Plan, run: TargetRun, head_repo: TargetRun, fields: dict,
           axis_argv: list[str], independence: str) -> StageResult:
    fields = {**fields, "exit": run.exit, "log": run.log, "log_bytes": run.log_bytes, "stats": run.stats.model_dump(),
              "axis_argv": axis_argv, **({"died": run.died} if run.died else {})}
    tier = cpu_tier.run_evidence(run)
    if tier:
        fields["cpu_tier"] = tier
    if nonfinite.outputs(run):
        fields["route_outputs"] = nonfinite.outputs(run)
    base = base_side(ctx)
    tiered = cpu_tier.blocker(ctx, NAME, run, base, fields) or cpu_tier.sparse_skip(NAME, run, fields)
    if tiered is not None:
        return tiered
    executed, observed = run.stats.executed, run.stats.observed_work
    cells, basis = cell_outcomes(ctx, plan, run)
    fields.update(cells=cells, cells_basis=basis)
    died = crashed(ctx, base, "grid", run)
    if died is not None:
        return result(NAME, "fail", f"the grid run died: {run.died}", **fields).finding(*died)
    if run.passed and cells is not None:
        unrun = [cell for cell, outcome in cells.items() if outcome != "executed"]
        on_base = [cell for cell in unrun if (base.get("cells") or {}).get(cell) == "executed"]
        if on_base:  # whether or not head executed anything else
            stage = result(NAME, "fail", f"{len(on_base)} cells ran on base and not on head: {', '.join(on_base)}",
                           cells_skipped=unrun, **fields)
            return stage.finding("grid.cells-skipped-on-head", "blocker", "grid cells that ran on base are skipped or deselected on head, so the "
                                            f"PR hides them from its own grid: {', '.join(on_base)} "
                                            f"({', '.join(cells[c] for c in on_base)} on head; {basis})")
        if unrun and executed > 0:
            stage = result(NAME, "skip", f"{len(unrun)} of {len(cells)} cells did not run ({', '.join(unrun)}), on "
                                         "base either: the grid falls short of a pass", cells_skipped=unrun, **fields)
            return stage.finding("grid.cells-unrun", "note", f"grid cells not executed on either side: {', '.join(unrun)} ({basis}); "
                                         "no correctness claim is made for them")
    if run.passed and executed > 0:
        if independence == "duplicates-target-defaults":
            stage = result(NAME, "skip", "the grid passed, but every cell is one of the target's own defaults: a "
                                         "duplicate proves only what the repo tests already said", **fields)
            return stage.finding("grid.duplicates-defaults", "note", "grid duplicates the target defaults; it earns no pass")
        evidenced = f"every cell executed ({basis})" if cells is not None else basis
        return result(NAME, "pass", f"{executed} executed over {len(plan.rows)} cells via {plan.channel}; {evidenced}",
                      **fields)
    if run.passed:
        stage = result(NAME, "skip", "the grid run executed no test", **fields)
        return stage.finding("grid.executed-nothing", "note", "the grid executed nothing; no correctness claim is made")

    stage = result(NAME, "fail", f"exit {run.exit} on the grid ({', '.join(row_text(r) for r in plan.rows)})",
                   **fields)
    tail = run.log_tail()
    if observed == 0 and head_repo.stats.observed_work != 0:
        return stage.finding("grid.failed-before-route", "note", "the grid run failed without reaching routed work, so no defect is attributed "
                                     f"(a missing channel or a crash before the route look the same): {tail}")
    cells = f" ({failing_cells(plan, run)})" if base.get("state") == "ran" and base.get("exit") == 0 else ""
    return stage.finding(*attribute(ctx, base, "grid", "fails", tail, run, cells))


STAGE = StageSpec(NAME, head, payload=CorrectnessGrid, requires=(BaselineControl, RepoTests, GpuClaim, RuntimeCompat),
                  updates=("grid_independence", "grid_independence_reason", "axis_state", "axis_state_reason", "axes"))
