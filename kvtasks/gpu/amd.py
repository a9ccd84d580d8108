"""AMD GPUs through amdsmi, using only the calls DESIGN.md lists.

The HIP index (what HIP_VISIBLE_DEVICES takes) comes from each handle's enumeration info
(`hip_id`); the handle's position is the AMD SMI index. The two orders are independent, so a
device is always found by `hip_id`, never by list position.

Without the amdsmi wheel, the copy a ROCm install ships is used: the first of $ROCM_PATH,
/opt/rocm and /opt/rocm-* (newest first) whose share/amd_smi (ROCm 7.1 and later) or
libexec/amdsmi_cli (older releases) holds it is appended to the import path.
"""
from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

from kvtasks.gpu.backend import BackendUnavailable, Device, call_quietly, import_quietly


def rocm_folders(environ=os.environ) -> list[Path]:
    """Where a ROCm install keeps its amdsmi package, in the order they are tried."""
    roots = ([environ["ROCM_PATH"]] if environ.get("ROCM_PATH") else []) + ["/opt/rocm"]
    roots += sorted(glob.glob("/opt/rocm-*"), reverse=True)
    return [Path(root) / folder for root in dict.fromkeys(roots) for folder in ("share/amd_smi", "libexec/amdsmi_cli")]


def _find_in_rocm() -> None:
    """Append the ROCm folder that holds amdsmi to the import path, when no installed one is found."""
    if importlib.util.find_spec("amdsmi") is not None:
        return
    for folder in rocm_folders():
        if importlib.machinery.PathFinder.find_spec("amdsmi", [str(folder)]) is not None:
            sys.path.append(str(folder))
            return


def _rocm_origin(module) -> str | None:
    """The ROCm folder this amdsmi was imported from, or None for an installed package."""
    location = Path(getattr(module, "__file__", None) or "").resolve()
    return next((str(folder) for folder in rocm_folders() if folder.resolve() in location.parents), None)


def open_backend() -> "AmdBackend":
    _find_in_rocm()
    try:
        amdsmi = import_quietly("amdsmi")
    except BackendUnavailable as exc:
        searched = ", ".join(str(folder) for folder in rocm_folders())
        raise BackendUnavailable(f"{exc}; no ROCm install holds it either ({searched})") from None
    try:
        call_quietly(amdsmi.amdsmi_init)
    except Exception as exc:
        raise BackendUnavailable(f"amdsmi_init failed: {type(exc).__name__}: {exc}") from None
    return AmdBackend(amdsmi)


class AmdBackend:
    vendor = "amd"

    def __init__(self, amdsmi):
        self._smi = amdsmi
        self._handles: dict[int, object] = {}
        origin = _rocm_origin(amdsmi)
        self.source = f"AMD SMI from the ROCm install at {origin}" if origin else None

    def devices(self) -> list[Device]:
        smi = self._smi
        try:
            handles = list(smi.amdsmi_get_processor_handles())
        except smi.AmdSmiException as exc:
            raise BackendUnavailable(f"amdsmi_get_processor_handles failed: {exc}") from None
        devices = []
        for smi_index, handle in enumerate(handles):
            try:
                hip_id = smi.amdsmi_get_gpu_enumeration_info(handle).get("hip_id")
            except smi.AmdSmiException:
                hip_id = None
            hip_index = hip_id if isinstance(hip_id, int) and hip_id >= 0 else None
            try:
                bdf = str(smi.amdsmi_get_gpu_device_bdf(handle))
                asic = smi.amdsmi_get_gpu_asic_info(handle)
            except smi.AmdSmiException as exc:
                raise BackendUnavailable(f"amdsmi could not describe device {smi_index}: {exc}") from None
            devices.append(Device(vendor=self.vendor, index=hip_index, smi_index=smi_index, bdf=bdf,
                                  model=str(asic.get("market_name") or "unknown"),
                                  arch=str(asic.get("target_graphics_version") or "unknown")))
            self._handles[smi_index] = handle
        return devices

    def activity(self, device: Device) -> float | None:
        try:
            value = self._smi.amdsmi_get_gpu_activity(self._handles[device.smi_index]).get("gfx_activity")
        except Exception:  # some driver/amd-smi combinations fail this query outright
            return None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def vram_mib(self, device: Device) -> tuple[float, float]:
        usage = self._smi.amdsmi_get_gpu_vram_usage(self._handles[device.smi_index])
        return float(usage["vram_used"]), float(usage["vram_total"])

    def visible_devices(self, device: Device) -> dict[str, str]:
        return {"HIP_VISIBLE_DEVICES": str(device.index)}

    def close(self) -> None:
        try:
            self._smi.amdsmi_shut_down()
        except Exception:
            pass
