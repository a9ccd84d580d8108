"""gpu_activity: the claimed device's activity after every run (a neighbour may have started).

It amends gpu_claim's result (the pipeline table says so) and launches nothing.
"""
from __future__ import annotations

from kvtasks.gpu import picker
from kvtasks.stages import Context, StageResult, StageSpec, gpu_claim
from kvtasks.stages.payloads import GpuClaim

NAME = "gpu_activity"


def run(ctx: Context) -> StageResult | None:
    """Record activity after every run on the claimed device (a neighbour may have started)."""
    claim = ctx.result_of(gpu_claim.GpuClaim)
    if claim is None or claim.stage.status != "pass":
        return None
    updated = claim.model_copy(deep=True)
    index = claim.stage.hip_index if claim.stage.hip_index is not None else claim.stage.cuda_index
    found = picker.find_device(index)
    if found is None:
        updated.stage.post_run_note = "activity after the run could not be recorded: the device was not found"
        return updated
    device, backend = found
    try:
        after = backend.activity(device)
    finally:
        backend.close()
    if after is None:
        updated.stage.post_run_note = "the activity API does not report on this host"
    else:
        updated.stage.gfx_activity_after_pct = round(after)
    return updated


# a later look at gpu_claim after the runs: its result replaces the claim's
STAGE = StageSpec(NAME, run, requires=(GpuClaim,))
