"""The pipeline, declared: its groups (prepare, base, head, report) and their rows in the order they
run, each row one stage module's StageSpec; the report layout they make; and how one group runs. Nothing else says which
stages exist, which the report requires, or which the Triton CPU tier changes.

It never stores evidence (phases.py does), never judges or writes a report (kvtasks.report does) and
knows nothing of doit (graph.py turns the groups into tasks).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from kvtasks import report
from kvtasks.system import faults
from kvtasks.report import Entry, Layout, Report, Stage
from kvtasks.stages.coverage import arch_coverage
from kvtasks.stages import (Context, StageResult, StageSpec, base_oracle, baseline_control, cpu_tier, gpu_activity, gpu_claim,
                            gpu_requirement, grid, merge_sim, perf, receipt, repo_tests, run_facts, runtime_compat,
                            replay, selection, sensitivity, skips_taken, test_policy, tolerances_used)


@dataclass(frozen=True)
class Row:
    """One stage (or step) of a group: its module's StageSpec, and what the report makes of it."""

    spec: StageSpec
    # required: the verdict needs it passing; optional: shown, never needed; None: a step the report
    # shows no stage object for (what it learned goes into test_selection or the report's facts)
    report: Literal["required", "optional"] | None = None
    tiered: bool = False  # the Triton CPU tier changes its runs, so its stage says evidence_tier
    amends: StageSpec | None = None  # a later look at an earlier stage: its result replaces that stage's

    @property
    def name(self) -> str:
        return self.spec.name

    def run(self, ctx: Context) -> StageResult | None:  # None: the row has nothing to do for this PR
        return self.spec.run(ctx)


PIPELINE: dict[str, tuple[Row, ...]] = {
    # always runs; computes the content keys from what it learned (phases.py, kvtasks.evidence.keys)
    "prepare": (
        Row(run_facts.STAGE),
        Row(merge_sim.STAGE, "required"),  # halts the PR when the tree is dirty or the patch does not apply
        Row(selection.STAGE),
        Row(grid.CHANNEL_STAGE),
        Row(test_policy.STAGE, "required"),
        Row(gpu_claim.STAGE, "required"),
        Row(runtime_compat.STAGE, "required"),
        Row(cpu_tier.STAGE),
        Row(gpu_requirement.STAGE, amends=gpu_claim.STAGE),
    ),
    # one run per base key, shared by every PR against the same base, target and runtime
    "base": (
        Row(baseline_control.STAGE, "required", tiered=True),
    ),
    "head": (
        # the policy read again once base's run said what it loads: the route and test sides observed
        Row(test_policy.SIDES, amends=test_policy.STAGE),
        Row(repo_tests.STAGE, "required", tiered=True),
        Row(skips_taken.STAGE, amends=test_policy.STAGE),
        Row(grid.STAGE, "required", tiered=True),
        Row(base_oracle.STAGE, "optional", tiered=True),
        Row(tolerances_used.STAGE, amends=test_policy.STAGE),
        Row(replay.STAGE, "optional"),
        Row(sensitivity.STAGE, "required", tiered=True),
        Row(receipt.STAGE, "required", tiered=True),
        Row(perf.STAGE, "optional", tiered=True),
        Row(gpu_activity.STAGE, amends=gpu_claim.STAGE),
    ),
    # composes and judges the stored results of the groups above (kvtasks.report); runs no stage
    "report": (),
}

ROWS: tuple[Row, ...] = tuple(row for rows in PIPELINE.values() for row in rows)
# the stage objects of a report, in the order they run
REPORTED: tuple[Row, ...] = tuple(row for row in ROWS if row.report is not None)


def _checked(rows: tuple[Row, ...]) -> tuple[Row, ...]:
    """Each row's requirements have an earlier provider: a row whose payload or fact record it is.
    Each Facts and Selection field has one first writer; a later row sets it again only as the
    amendment of that writer's stage or by naming it in its `updates`, and updates only what an
    earlier row set: a field never gains a second writer unseen, whose value would then depend on
    which ran last."""
    provided: set[type] = set()
    writer: dict[str, str] = {}  # field -> the stage that set it first (an amending row's: the amended one)
    for row in rows:
        missing = [kind.__name__ for kind in row.spec.requires if kind not in provided]
        if missing:
            raise TypeError(f"pipeline row {row.name} requires {', '.join(missing)}, which no earlier row provides")
        if row.amends is not None and row.spec.payload not in (None, row.amends.payload):
            raise TypeError(f"pipeline row {row.name} amends {row.amends.name} with another payload")
        amended = row.amends.name if row.amends is not None else None
        again = sorted(name for name in row.spec.written() if name in writer and writer[name] != amended)
        if again:
            raise TypeError(f"pipeline row {row.name} sets {', '.join(again)}, which "
                            f"{', '.join(sorted({writer[name] for name in again}))} set first: amend that stage "
                            "or declare the fields in its `updates`")
        unset = sorted(name for name in row.spec.updates if name not in writer)
        if unset:
            raise TypeError(f"pipeline row {row.name} updates {', '.join(unset)}, which no earlier row sets")
        writer.update({name: amended or row.name for name in row.spec.written() if name not in writer})
        provided |= set(row.spec.provides) | ({row.spec.payload} if row.spec.payload else set())
    return rows


_checked(ROWS)

# the report this pipeline writes: its stage objects, which the verdict needs passing, and what
# each stage requires of a PASS
REPORT = Layout(
    entries=tuple(Entry(row.name, row.spec.payload or Stage, row.report == "required", row.tiered) for row in REPORTED),
    requirements=tuple((row.name, row.spec.passes) for row in ROWS if row.spec.passes is not None),
    coverage=arch_coverage)


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
    ctx.running = row.spec
    try:
        produced = row.run(ctx)
    finally:
        ctx.running = None
    if produced is None:
        ctx.say(f"{row.name}: nothing to do ({time.monotonic() - started:.1f}s)")
        return None
    for path in ctx.worktree.take_tampered():
        produced.finding("containment.git-changed-by-run", "blocker",
                         f"a run of this stage changed the repository's own {path}; it was put back as supplied")
    reported = row.amends.name if row.amends is not None else row.name
    if produced.name != reported:
        raise ValueError(f"pipeline row {row.name} returned a result for {produced.name}, not {reported}")
    # an amending row hands back the amended stage's result, with what that stage set
    undeclared = [name for name in row.spec.owns(produced) if row.amends is None or name in row.amends.owns(produced)]
    if undeclared:
        raise ValueError(f"pipeline row {row.name} set {undeclared}, which its spec does not declare it sets")
    status = produced.stage.status if produced.stage else "done"
    reason = produced.stage.note if produced.stage else ""
    ctx.say(f"{row.name}: {status} ({time.monotonic() - started:.1f}s){' - ' + reason if reason else ''}")
    ctx.earlier[reported] = produced
    return produced


def compose(label: str, results: list[StageResult], finished_utc: str | None = None) -> Report:
    """This pipeline's report from stored stage results (kvtasks.report.compose with its layout)."""
    return report.compose(REPORT, label, results, finished_utc)
