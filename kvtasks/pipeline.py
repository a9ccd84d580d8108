"""The pipeline, declared: its groups (prepare, base, head, report) and their rows in the order they
run, each row one stage module's entry point; and how one group runs. Nothing else says which
stages exist, which the report requires, or which the Triton CPU tier changes.

It never stores evidence (phases.py does), never judges or writes a report (report.py does) and
knows nothing of doit (graph.py turns the groups into tasks).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

from kvtasks import faults
from kvtasks.stages import (Context, StageResult, base_oracle, baseline_control, cpu_tier, gpu_activity, gpu_claim,
                            gpu_requirement, grid, merge_sim, perf, receipt, repo_tests, run_facts, runtime_compat,
                            selection, sensitivity, test_policy)


@dataclass(frozen=True)
class Row:
    """One stage (or step) of a group: its module and that module's one entry point (called by name
    when the row runs), and what the report makes of it."""

    module: ModuleType
    # required: the verdict needs it passing; optional: shown, never needed; None: a step the report
    # shows no stage object for (what it learned goes into test_selection or the report's facts)
    report: Literal["required", "optional"] | None = None
    tiered: bool = False  # the Triton CPU tier changes its runs, so its stage says evidence_tier
    amends: str | None = None  # a later look at an earlier stage: its result replaces that stage's
    entry: str = "run"
    name: str = ""  # the module's NAME unless given

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", self.module.NAME)

    def run(self, ctx: Context) -> StageResult | None:  # None: the row has nothing to do for this PR
        return getattr(self.module, self.entry)(ctx)


PIPELINE: dict[str, tuple[Row, ...]] = {
    # always runs; computes the content keys from what it learned (phases.py, kvtasks.keys)
    "prepare": (
        Row(run_facts),
        Row(merge_sim, "required"),  # halts the PR when the tree is dirty or the patch does not apply
        Row(selection),
        Row(grid, entry="channel", name=grid.CHANNEL),
        Row(test_policy, "required"),
        Row(gpu_claim, "required"),
        Row(runtime_compat, "required"),
        Row(cpu_tier),
        Row(gpu_requirement, amends=gpu_claim.NAME),
    ),
    # one run per base key, shared by every PR against the same base, target and runtime
    "base": (
        Row(baseline_control, "required", tiered=True),
    ),
    "head": (
        # the policy read again once base's run said what it loads: the route and test sides observed
        Row(test_policy, amends=test_policy.NAME, name="test_sides"),
        Row(repo_tests, "required", tiered=True),
        Row(grid, "required", tiered=True, entry="head"),
        Row(base_oracle, "optional", tiered=True),
        Row(sensitivity, "required", tiered=True),
        Row(receipt, "required", tiered=True),
        Row(perf, "optional", tiered=True),
        Row(gpu_activity, amends=gpu_claim.NAME),
    ),
    # composes and judges the stored results of the groups above (report.py); runs no stage
    "report": (),
}

ROWS: tuple[Row, ...] = tuple(row for rows in PIPELINE.values() for row in rows)
# the stage objects of a report, in the order they run
REPORTED: tuple[Row, ...] = tuple(row for row in ROWS if row.report is not None)


def run_group(ctx: Context, group: str) -> list[StageResult]:
    """Run a group's rows in order; a result that halts the PR (merge_sim) ends the group."""
    results = []
    for row in PIPELINE[group]:
        produced = run_row(ctx, row)
        if produced is None:
            continue
        results.append(produced)
        if produced.facts.halt:
            break
    return results


def run_row(ctx: Context, row: Row) -> StageResult | None:
    """Run one row with a progress line as it starts and ends (a long run never looks hung), and
    record its result in `ctx.earlier` under the stage it reports: its own, or the one it amends."""
    ctx.say(f"{row.name}: started")
    faults.point(row.name)
    started = time.monotonic()
    produced = row.run(ctx)
    if produced is None:
        ctx.say(f"{row.name}: nothing to do ({time.monotonic() - started:.1f}s)")
        return None
    reported = row.amends or row.name
    if produced.name != reported:
        raise ValueError(f"pipeline row {row.name} returned a result for {produced.name}, not {reported}")
    status = produced.stage.status if produced.stage else "done"
    reason = produced.stage.note if produced.stage else ""
    ctx.say(f"{row.name}: {status} ({time.monotonic() - started:.1f}s){' - ' + reason if reason else ''}")
    ctx.earlier[reported] = produced
    return produced
