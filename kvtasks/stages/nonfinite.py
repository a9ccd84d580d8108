"""NaN and Inf in the route's outputs, head against base, whatever the test asserted.

With --expected-route the probe records, per route and cell (the pytest test, else the captured
shape), whether the route's floating outputs held NaN or Inf. A helper like `diff > tol` is blind
to NaN (the comparison is False), so a test can pass while the kernel returns NaN. NaN or Inf on
head where base returned only finite values for the same route and cell is a blocker naming the
cell. Only the repo-test and grid runs are compared; a run that corrupts outputs on purpose (the
sensitivity proof) records nothing.
"""
from __future__ import annotations

from dataclasses import asdict

from kvtasks.stages import StageResult
from kvtasks.harness.target_run import TargetRun


def outputs(run: TargetRun) -> list[dict]:
    """What the probe saw of the route's outputs in one run (stored with the run's stage fields)."""
    return [asdict(entry) for entry in run.receipt.route_outputs] if run.receipt else []


def appeared(head: TargetRun, base_outputs: list[dict] | None) -> list[dict]:
    """Head's route outputs holding NaN/Inf where base checked the same route and cell and saw none."""
    on_base = {(entry["route"], entry["cell"]): entry for entry in base_outputs or []}
    found = []
    for entry in outputs(head):
        before = on_base.get((entry["route"], entry["cell"]))
        if entry["nonfinite"] and before is not None and before["checked"] and not before["nonfinite"]:
            found.append(entry)
    return found


def judge(stage: StageResult, head: TargetRun, base_outputs: list[dict] | None) -> None:
    """Fail the stage with a blocker per route and cell whose outputs turned non-finite on head."""
    new = appeared(head, base_outputs)
    if not new:
        return
    described = [f"{entry['route']} in {entry['cell']}: {', '.join(entry['nonfinite'])}" for entry in new]
    stage.stage.status = "fail"
    stage.stage.note = f"NaN/Inf in the route's outputs on head and not on base: {'; '.join(described[:3])}"
    for text in described:
        stage.finding("nonfinite.new-on-head", "blocker", f"NaN/Inf on head where base returned only finite values, whatever the test "
                                 f"asserted: {text}")
