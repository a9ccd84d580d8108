"""GPU discovery behind one Backend protocol; vendor libraries are imported only when asked.

amdsmi and pynvml are optional: importing kvtasks never imports them, and their absence (or a
library that cannot talk to a driver) is a recorded environment fact, never a crash.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Iterator, Protocol


@dataclass(frozen=True)
class Device:
    vendor: str           # "amd" or "nvidia"
    index: int | None     # what the target's *_VISIBLE_DEVICES takes: HIP index or CUDA index
    smi_index: int        # position in the management library's own enumeration
    bdf: str
    model: str
    arch: str


class BackendUnavailable(Exception):
    """The vendor library is missing or cannot query the driver; says nothing about the GPUs."""


class Backend(Protocol):
    vendor: str
    source: str | None  # where the management library came from, when not from an installed package

    def devices(self) -> list[Device]: ...

    def activity(self, device: Device) -> float | None:
        """GFX busy percent now, or None when this host cannot report it (never 0 for unknown)."""

    def vram_mib(self, device: Device) -> tuple[float, float]:
        """(used, total) in MiB."""

    def visible_devices(self, device: Device) -> dict[str, str]: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def _stdout_silenced() -> Iterator[None]:
    """Vendor libraries print banners on import and init, at the C level too; stdout is ours."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def import_quietly(module: str):
    with _stdout_silenced():
        try:
            return importlib.import_module(module)
        except Exception as exc:  # ImportError, or KeyError/OSError from a library without its driver
            raise BackendUnavailable(f"{module} is not importable: {type(exc).__name__}: {exc}") from None


def call_quietly(function, *args):
    with _stdout_silenced():
        return function(*args)


def open_backends() -> tuple[list[Backend], list[str]]:
    """Every backend this host can query, and why each of the others could not be opened."""
    from kvtasks.gpu import amd, nvidia

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
