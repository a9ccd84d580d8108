"""The runtime half of a channel's proof: a deliberately invalid grid (or axis value) must make the
target fail in time, naming the invalid value (or failing at the poisoned parametrize cell); a
pass, a timeout or an unrelated crash proves nothing.

Judges probe runs; it must never lend the tree (the caller holds the lend).
"""
from __future__ import annotations

from kvtasks.harness.target_run import TargetRun
from kvtasks.harness.session import cells_by_case
from kvtasks.stages.launches import Launch
from kvtasks.stages import Context
from kvtasks.stages.grid.plan import Plan


SENTINEL = "__VALIDATOR_INVALID_GRID__"
AXIS_SENTINEL = "__VALIDATOR_INVALID_AXIS__"


def poisoned(plan: Plan) -> list[list[str]]:
    width = len(plan.rows[0]) if plan.rows else 1
    return [[SENTINEL] * width]


def log_names(run: TargetRun, marker: str) -> bool:
    try:
        with open(run.log, errors="replace") as log:
            return any(marker in line for line in log)
    except OSError:
        return False


def proves_channel(plan: Plan, probe: TargetRun) -> tuple[bool, str]:
    """A poisoned run proves the channel only by failing in time over the invalid value: its output
    names the marker, or the parametrized test failed at the poisoned cell. In a merged session
    only the poisoned item itself counts: the session's log names the marker in the item's id."""
    if probe.session is not None:
        if any(case.outcome in ("failed", "error") for case in probe.cases):
            return True, f"the poisoned cell failed in the merged session {probe.session}"
        if not probe.cases:
            return False, f"the merged session {probe.session} ran no poisoned cell: the grid did not reach the test"
        return False, f"the poisoned cell {probe.cases[0].outcome} in the merged session {probe.session}"
    if probe.exit == 0:
        return False, f"the target passed with {SENTINEL} as its grid"
    if probe.timed_out:
        return False, "the poisoned run timed out: a timeout proves nothing about the channel"
    if log_names(probe, SENTINEL):
        return True, f"failed, naming {SENTINEL}"
    cells = cells_by_case(probe)
    if plan.channel == "pytest" and any(case.outcome in ("failed", "error")
                                        and cells.get((case.classname, case.name)) == 0 for case in probe.cases):
        return True, "the parametrized test failed at the poisoned cell"
    return False, (f"the poisoned run failed (exit {probe.exit}) without naming {SENTINEL}: an unrelated crash "
                   f"proves nothing about the channel ({probe.log_tail(2)})")


def axis_probes(ctx: Context, plan: Plan) -> tuple[str, str, list[TargetRun]]:
    runs, accepted = [], []
    for axis in plan.axes:
        run = ctx.launch(Launch(label=f"head-axisprobe-{axis.name}", runner="script", argv=(axis.flag, AXIS_SENTINEL)))
        runs.append(run)
        refused = run.exit not in (0, None) and not run.timed_out and log_names(run, AXIS_SENTINEL)
        axis.hook_proof = "refused-invalid-value" if refused else "accepted-invalid-value"
        if axis.hook_proof == "accepted-invalid-value":
            accepted.append(axis.flag)
    if accepted:
        return "hook-not-consumed", f"dropped: {', '.join(accepted)} accepted {AXIS_SENTINEL}", runs
    return "proven", "every axis flag refused an invalid value; its values ride the grid run's argv", runs
