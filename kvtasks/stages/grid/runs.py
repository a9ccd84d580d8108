"""The grid's runs: one launch through the chosen channel, the base side (inside the baseline's
lend), the sensitivity rerun and the base oracle's rerun, and which cells each run executed.

Asks for its launches (ctx.launch) inside a lend its caller holds; it must never judge head.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvtasks import sources
from kvtasks.harness import session
from kvtasks.harness.in_target.grid import coerce
from kvtasks.harness.in_target.nonfinite import normalise
from kvtasks.harness.target_run import TargetRun
from kvtasks.request import Request, grid_rows
from kvtasks.sources import row_text
from kvtasks.stages.launches import Launch
from kvtasks.stages import Context, cpu_tier, nonfinite
from kvtasks.stages.grid.plan import NAME, Plan, plan_of
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid
from kvtasks.stages.grid.proof import poisoned, proves_channel
from kvtasks.stages.target_runs import state


def run_grid(ctx: Context, plan: Plan, label: str, rows: list[list[str]], axis_argv: list[str] = (),
             sensitivity: dict | None = None, poisoned_row: list[str] = (), seen_as: str | None = None,
             scratch: Path | None = None, request: Request | None = None) -> TargetRun:
    """The grid's cells through the plan's channel, on `request`'s target (default: the run's)."""
    request = request or ctx.request
    grid_text = ";".join(row_text(row) for row in rows)
    argv, env_extra, argnames = [], {}, []
    if plan.channel == "cli":
        argv = [request.shape_arg, *(row_text(row) for row in rows)]
    elif plan.channel == "env":
        env_extra = {request.shape_env: grid_text}
    elif plan.channel == "pytest":  # a wider mark's other names keep their cell in every row, the poisoned one's too
        argnames = [*request.argnames, *plan.fill]
        rows = [[*row, *plan.fill.values()] for row in rows]
        poisoned_row = [*poisoned_row, *plan.fill.values()] if poisoned_row else poisoned_row
    ctx.say(f"{NAME}: running {label} ({len(rows)} cells)")
    return ctx.launch(Launch(label=label, target=None if request is ctx.request else request.target,
                             argv=(*argv, *axis_argv), env=tuple(env_extra.items()), grid_argnames=tuple(argnames),
                             grid_rows=tuple(map(tuple, rows)) if argnames else (), poisoned_row=tuple(poisoned_row),
                             corruption=sensitivity, seen_as=seen_as, scratch=scratch))


@dataclass
class Session:
    """One side's merged pytest session (kvtasks.harness.session): the launch and, when it can stand
    for them, its repo, proof and grid parts; otherwise why not (the parts then run alone)."""

    launch: TargetRun
    repo: TargetRun | None = None
    probe: TargetRun | None = None
    grid: TargetRun | None = None
    unusable: str = ""

    @property
    def runs(self) -> list[TargetRun]:
        return [self.launch, *(run for run in (self.repo, self.probe, self.grid) if run is not None)]


def merged_session(ctx: Context, side: str) -> Session | None:
    """The side's repository tests, grid cells and poisoned cell in one pytest session (inside the
    caller's lend), when the plan merges them (the argnames channel, one mark); None otherwise."""
    plan = plan_of(ctx)
    if plan is None or not plan.merged_session or not plan.rows or ctx.selection.runner != "pytest":
        return None
    launch = run_grid(ctx, plan, f"{side}-session", plan.rows, poisoned_row=poisoned(plan)[0])
    why = session.unusable(launch)
    if why:
        return Session(launch, unusable=f"the merged {side} session stands for nothing ({why}), so its repository "
                                        "tests, poisoned cell and grid ran alone")
    return Session(launch, repo=session.part(launch, "repo", f"{side}-repo"),
                   probe=session.part(launch, "proof", f"{side}-grid-probe"),
                   grid=session.part(launch, "grid", f"{side}-grid"))


def rerun(ctx: Context, label: str, axis_argv: list[str], sensitivity: dict, seen_as: str,
          scratch: Path | None) -> TargetRun:
    """The grid run once more, same channel, cells and axes, with the route's output corrupted
    (the sensitivity stage's run, seen as the run it repeats; the caller lends the tree)."""
    plan = plan_of(ctx)
    return run_grid(ctx, plan, label, plan.rows, axis_argv, sensitivity=sensitivity, seen_as=seen_as, scratch=scratch)


def rerun_session(ctx: Context, label: str, sensitivity: dict, seen_as: str, scratch: Path | None) -> TargetRun:
    """A side's merged session once more, its repository tests, grid and poisoned cell, with the
    route's output corrupted (seen as the session it repeats; the caller lends the tree)."""
    plan = plan_of(ctx)
    return run_grid(ctx, plan, label, plan.rows, poisoned_row=poisoned(plan)[0], sensitivity=sensitivity,
                    seen_as=seen_as, scratch=scratch)


def base_runs(ctx: Context, repo_run: TargetRun | None, merged: Session | None = None
              ) -> tuple[dict, list[TargetRun]]:
    """The base side of the grid (inside the baseline's lend): its state and the runs it launched
    (none when the merged base session's parts stand for them)."""
    plan = plan_of(ctx)
    if plan is None or not plan.rows:
        return {"state": "not-configured"}, []
    if not plan.channel:
        return {"state": "no-channel-declared"}, []
    if repo_run is None:
        return {"state": "target-not-present"}, []
    launched = merged is None or merged.grid is None
    probe = run_grid(ctx, plan, "base-grid-probe", poisoned(plan)) if launched else merged.probe
    proven, why = proves_channel(plan, probe)
    fields = {"hook_probe_exit": probe.exit, "hook_probe_log": probe.log, "hook_proof": why}
    if not proven or not repo_run.passed:
        return {"state": "hook-not-consumed", **fields}, [probe] if launched else []
    run = run_grid(ctx, plan, "base-grid", plan.rows) if launched else merged.grid
    tier = cpu_tier.run_evidence(run)
    cells, basis = cell_outcomes(ctx, plan, run)
    return {"state": state(run), "exit": run.exit, "log": run.log, "stats": run.stats.model_dump(),
            "timed_out": run.timed_out, **({"died": run.died} if run.died else {}), **fields,
            "cells": cells, "cells_basis": basis, **({"cpu_tier": tier} if tier else {}),
            **({"route_outputs": nonfinite.outputs(run)} if nonfinite.outputs(run) else {})}, \
        [probe, run] if launched else []


def canonical_cell(text) -> str:
    """A cell as the route sees it: the probe's own coercion and normalisation, dtypes by one name."""
    value = normalise(coerce(str(text).strip()))
    return sources.canonical_dtype(value) or value.replace(" ", "")


def canonical_row(text: str) -> tuple[str, ...]:
    """A row of cells (grid text, or a receipt's captured shape) as the route sees it."""
    cells = grid_rows(text)
    return tuple(canonical_cell(cell) for cell in (cells[0] if cells else []))


def failing_cells(plan: Plan, run: TargetRun) -> str:
    """Which cells a failed grid run failed: named per cell where JUnit tells them apart (the pytest
    channel), else the cells the one process ran."""
    cells = session.cells_by_case(run)
    failed = {cells.get((case.classname, case.name)) for case in run.cases if case.outcome in ("failed", "error")}
    named = [row_text(row) for index, row in enumerate(plan.rows) if index in failed]
    if plan.channel == "pytest" and named:
        return f"failing cells {', '.join(named)}"
    return f"grid cells {', '.join(row_text(row) for row in plan.rows)}, run as one"


def cell_outcomes(ctx: Context, plan: Plan, run: TargetRun) -> tuple[dict[str, str] | None, str]:
    """Each cell of one grid run: executed, skipped or absent; None (with why) when cells cannot be
    told apart in that run."""
    cells = [row_text(row) for row in plan.rows]
    if plan.channel == "pytest":
        seen: dict[int, list[str]] = {}
        by_case = session.cells_by_case(run)
        for case in run.cases:
            index = by_case.get((case.classname, case.name))
            if index is not None:
                seen.setdefault(index, []).append(case.outcome)
        outcomes = {}
        for index, cell in enumerate(cells):
            found = seen.get(index, [])
            outcomes[cell] = "absent" if not found else "skipped" if all(o == "skipped" for o in found) \
                else "executed"
        return outcomes, "per-cell JUnit items"
    names = ctx.request.shape_var_names
    if not names:
        return None, "no --shape-vars were named, so the cells (one process runs them all) were not individually " \
                     "evidenced"
    if any(len(row) != len(names) for row in plan.rows):
        return None, "the grid cells and --shape-vars differ in width, so the cells were not individually evidenced"
    captured = run.receipt.executed_shapes if run.receipt else []
    if not captured:
        return None, "the route captured no shape in this run, so the cells were not individually evidenced"
    shapes = {canonical_row(shape) for shape in captured}
    return {cell: "executed" if tuple(canonical_cell(v) for v in row) in shapes else "absent"
            for cell, row in zip(cells, plan.rows)}, "the receipt's captured shape vars"


def base_side(ctx: Context) -> dict:
    """What the grid did on base: baseline_control's s1_grid (base_runs' fields); {} when the baseline
    did not run."""
    baseline = ctx.result_of(BaselineControl)
    return (getattr(baseline.stage, "s1_grid", None) if baseline and baseline.stage else None) or {}


def oracle_run(ctx: Context, label: str, request: Request) -> TargetRun | None:
    """The grid cells once more in another lend for the base oracle: base's target file (`request`:
    the target at base's path when the PR renamed it) against head's code, or base's renamed file on
    base; with the axes head's grid ran. None when the plan has no cells on a channel."""
    plan = plan_of(ctx)
    if plan is None or not plan.rows or not plan.channel:
        return None
    head_grid = ctx.result_of(CorrectnessGrid)
    axis_argv = getattr(head_grid.stage, "axis_argv", None) if head_grid is not None and head_grid.stage else None
    return run_grid(ctx, plan, label, plan.rows, axis_argv or [], request=request)
