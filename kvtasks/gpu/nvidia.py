"""NVIDIA GPUs through NVML (nvidia-ml-py), using only the calls DESIGN.md lists.

NVML enumerates by PCI bus id; CUDA, by default, fastest first. The target is therefore run with
CUDA_DEVICE_ORDER=PCI_BUS_ID, and a device's CUDA index is its rank among the bus ids.
"""
from __future__ import annotations

from kvtasks.gpu.backend import BackendUnavailable, Device, call_quietly, import_quietly


def open_backend() -> "NvidiaBackend":
    nvml = import_quietly("pynvml")
    try:
        call_quietly(nvml.nvmlInit)
    except Exception as exc:
        raise BackendUnavailable(f"nvmlInit failed: {type(exc).__name__}: {exc}") from None
    return NvidiaBackend(nvml)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvidiaBackend:
    vendor = "nvidia"
    source = None

    def __init__(self, nvml):
        self._nvml = nvml
        self._handles: dict[int, object] = {}

    def devices(self) -> list[Device]:
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
            found = []
            for smi_index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(smi_index)
                bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId).lower()
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                found.append((bus_id, smi_index, handle, _text(nvml.nvmlDeviceGetName(handle)), f"sm_{major}{minor}"))
        except nvml.NVMLError as exc:
            raise BackendUnavailable(f"NVML could not enumerate devices: {exc}") from None
        cuda_index = {bus_id: rank for rank, (bus_id, *_rest) in enumerate(sorted(found))}
        devices = []
        for bus_id, smi_index, handle, name, arch in found:
            self._handles[smi_index] = handle
            devices.append(Device(vendor=self.vendor, index=cuda_index[bus_id], smi_index=smi_index,
                                  bdf=bus_id, model=name, arch=arch))
        return devices

    def activity(self, device: Device) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetUtilizationRates(self._handles[device.smi_index]).gpu)
        except Exception:  # NVMLError_NotSupported on some boards and MIG slices
            return None

    def vram_mib(self, device: Device) -> tuple[float, float]:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(self._handles[device.smi_index])
        return memory.used / 2**20, memory.total / 2**20

    def visible_devices(self, device: Device) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": str(device.index), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass
