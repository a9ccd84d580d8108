"""GPU discovery behind one Backend protocol; vendor libraries are imported only when asked.

amdsmi and pynvml are optional: importing kvtasks never imports them, and their absence (or a
library that cannot talk to a driver) is a recorded environment fact, never a crash.
"""
from __future__ import annotations

import os

from kvtasks.gpu import amd, nvidia
from kvtasks.gpu.backend import Backend, BackendUnavailable


def open_backends() -> tuple[list[Backend], list[str]]:
    """Every backend this host can query, and why each of the others could not be opened."""
    opened, failures = [], []
    for opener in (amd.open_backend, nvidia.open_backend):
        try:
            opened.append(opener())
        except BackendUnavailable as exc:
            failures.append(str(exc))
    return opened, failures


def device_nodes_present() -> bool:
    """Whether the kernel exposes any GPU device node (AMD KFD or NVIDIA control device)."""
    return os.path.exists("/dev/kfd") or os.path.exists("/dev/nvidiactl")


def driver_versions(environ=os.environ) -> dict[str, str]:
    """The GPU driver, ROCm and CUDA versions this host reports, where it reports them: a changed
    driver or toolkit is a changed run, so they enter the cache keys. Missing files are simply absent."""
    rocm = environ.get("ROCM_PATH") or "/opt/rocm"
    cuda = environ.get("CUDA_HOME") or environ.get("CUDA_PATH") or "/usr/local/cuda"
    sources = {"amdgpu": "/sys/module/amdgpu/version", "rocm": f"{rocm}/.info/version",
               "nvidia": "/proc/driver/nvidia/version", "cuda": f"{cuda}/version.json",
               "cuda_txt": f"{cuda}/version.txt"}
    found = {}
    for name, path in sources.items():
        try:
            with open(path, errors="replace") as handle:
                found[name] = handle.read(4096).strip()
        except OSError:
            continue
    return found
