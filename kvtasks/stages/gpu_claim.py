"""gpu_claim: a verified-idle GPU, locked for the whole run; or NO_GPU with the fact it rests on.

It only claims: whether an unclaimed target needs a GPU is gpu_requirement's to ask, and the
device's activity after the runs is gpu_activity's to record (both amend this stage, as the
pipeline table says). It never launches a target.
"""
from __future__ import annotations

import socket

from kvtasks.harness.environment import NO_DEVICE
from kvtasks.gpu import picker
from kvtasks.stages import Context, Report, StageResult, StageSpec, result
from kvtasks.stages.payloads import GpuClaim
NAME = "gpu_claim"


def _no_gpu(note: str, **fields) -> StageResult:
    stage = result(NAME, "skip", note, **fields)
    stage.facts.degraded_mode = "NO_GPU"
    stage.finding("gpu.not-claimed", "note", "no GPU was claimed (see gpu_claim); no runtime correctness claim is made")
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
        chosen = picker.pick(settings, arch=ctx.request.host.gpu_arch)
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
        return stage.finding("gpu.all-busy", "note", "another validator holds every idle GPU; rerun when one frees up")
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
        stage.finding("gpu.activity-unavailable", "note", "GPU activity is unavailable on this host; the device was judged idle by VRAM only")
    stage.facts.set(degraded_mode=None, visible_devices=visible)
    return stage


def visible_devices(ctx: Context) -> dict[str, str]:
    return ctx.facts.visible_devices or NO_DEVICE


def passes(report: Report) -> list[str]:
    """PASS names the device it claimed, and that device's architecture was credited with a run that
    executed work (the report's arch_coverage)."""
    missing = [] if report.arch_coverage else ["no architecture was credited with runtime coverage"]
    claim = report.stage_of(GpuClaim)
    index = claim.hip_index if claim.hip_index is not None else claim.cuda_index
    if index is None or not claim.arch or not claim.bdf:
        missing.append("gpu_claim lacks a device index, arch or bdf")
    return missing


STAGE = StageSpec(NAME, run, payload=GpuClaim, sets=("degraded_mode", "visible_devices"), passes=passes)
