"""gpu_claim: a verified-idle GPU, locked for the whole run; or NO_GPU with the fact it rests on.

When no GPU is claimed, the gpu-requirement probe runs the head target once with no visible
device: `not-required` only when it passes and executes at least one test. Such a target still
runs its correctness stages, but earns no architecture and no PASS.
"""
from __future__ import annotations

import socket

from kvtasks import harness
from kvtasks.gpu import picker
from kvtasks.stages import Context, StageResult, result
from kvtasks.worktree import PatchRefused

NAME = "gpu_claim"


def _no_gpu(note: str, **fields) -> StageResult:
    stage = result(NAME, "skip", note, **fields)
    stage.facts["degraded_mode"] = "NO_GPU"
    stage.finding("note", "no GPU was claimed (see gpu_claim); no runtime correctness claim is made")
    return stage


def run(ctx: Context) -> StageResult:
    held = picker.held()
    if held:
        # one validator process (a batch) keeps the device it verified and locked for every PR
        return _claimed(held[0], held[0].basis, {}, "claim held by this validator since an earlier PR of the run")
    settings = ctx.request.host.idle
    override = ctx.request.host.picker
    windows: dict[int, picker.Window] = {}
    if override:
        command = picker.resolve_external(override)
        if command is None:
            return _no_gpu(f"picker unavailable: PICKER={override!r} is not an executable")
        code, ranked, basis, said = picker.run_external(command, settings)
        picker_name = f"PICKER {override}"
    else:
        chosen = picker.pick(settings)
        code, said, basis = chosen.code, chosen.message, chosen.basis
        ranked = [window.device.index for window in chosen.ranked]
        windows = {window.device.index: window for window in chosen.ranked}
        picker_name = "built-in picker"
    if code != picker.CHOSEN:
        headline = picker.HEADLINES.get(code, f"picker failed with exit {code}")
        return _no_gpu(f"{headline} ({picker_name}, exit {code}){': ' + said if said else ''}", picker_exit=code)
    if not ranked:
        return _no_gpu(f"picker exited 0 but named no device ({picker_name})", picker_exit=code)

    lease = next((lease for lease in map(picker.try_lock, ranked) if lease is not None), None)
    if lease is None:
        stage = _no_gpu(f"all {len(ranked)} verified-idle GPUs were already locked by another validator")
        return stage.finding("note", "another validator holds every idle GPU; rerun when one frees up")
    return _claimed(lease, basis, windows, picker_name)


def _claimed(lease: picker.Lease, basis: str, windows: dict[int, picker.Window], picker_name: str) -> StageResult:
    found = picker.find_device(lease.index)
    if found is None:
        picker.release(lease)
        return _no_gpu(f"selected index {lease.index} could not be mapped back to SMI metadata")
    device, backend = found
    try:
        before = backend.activity(device)
        visible = backend.visible_devices(device)
        source = backend.source
    finally:
        backend.close()
    window = windows.get(device.index)
    basis = window.basis if window else basis
    picker.remember_basis(lease, basis)
    index_field = "hip_index" if device.vendor == "amd" else "cuda_index"
    smi_field = "amd_smi_index" if device.vendor == "amd" else "nvml_index"
    stage = result(
        NAME, "pass", f"{device.model} ({device.arch}) at {device.bdf} locked via {lease.path.name}"
                      f"{f'; {source}' if source else ''}",
        host=socket.gethostname(), vendor=device.vendor, **{index_field: device.index, smi_field: device.smi_index},
        bdf=device.bdf, model=device.model, arch=device.arch,
        gfx_activity_before_pct=None if before is None else round(before),
        idleness_basis=basis, lock=str(lease.path), picker=picker_name, **({"smi_source": source} if source else {}),
    )
    if basis == "vram-only":
        stage.finding("note", "GPU activity is unavailable on this host; the device was judged idle by VRAM only")
    stage.facts.update(degraded_mode=None, visible_devices=visible)
    return stage


def after_run(ctx: Context) -> StageResult | None:
    """Record activity after every run on the claimed device (a neighbour may have started)."""
    claim = ctx.earlier.get(NAME)
    if claim is None or claim.stage.status != "pass":
        return None
    updated = claim.model_copy(deep=True)
    index = claim.stage.model_extra.get("hip_index", claim.stage.model_extra.get("cuda_index"))
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


def visible_devices(ctx: Context) -> dict[str, str]:
    return ctx.fact("visible_devices") or harness.NO_DEVICE


def requirement(ctx: Context) -> StageResult | None:
    """Without a claimed GPU, ask the head target whether it needs one; return the updated claim."""
    claim = ctx.earlier.get(NAME)
    if claim is None or claim.stage.status == "pass":
        return None
    updated = claim.model_copy(deep=True)
    runner = ctx.selected("runner", "none")
    if runner == "none":
        updated.selection.update(gpu_requirement="required",
                                 gpu_requirement_basis="not probed: no runner was selected; conservative default")
        return updated
    try:
        with ctx.worktree.lend("head"):
            ctx.say("gpu_claim: running gpufree-probe with no visible device")
            run = harness.run(ctx.request, runner=runner, run_dir=ctx.run_dir, label="gpufree-probe")
    except PatchRefused as refused:
        updated.selection.update(gpu_requirement="required", gpu_requirement_basis=f"not probed: {refused}")
        return updated
    executed, observed = run.stats.executed, run.stats.observed_work
    if run.passed and executed >= 1 and observed != 0:
        basis = f"passed with no visible device, {executed} executed ({run.runner})"
        updated.selection.update(gpu_requirement="not-required", gpu_requirement_basis=basis)
        updated.stage.requirement_note = f"target does not need a GPU: {basis}; correctness runs, no arch is credited"
        updated.finding("note", f"the target ran without a GPU ({basis}); its correctness evidence is CPU-only "
                                "and PASS stays unreachable without a claimed GPU")
    else:
        updated.selection.update(gpu_requirement="required",
                                 gpu_requirement_basis=f"with no visible device: exit {run.exit}, {executed} executed, "
                                                       f"observed_work {observed}")
    updated.runs.append(run)
    return updated
