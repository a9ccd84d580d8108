"""What every vendor backend shares: the device record, the Backend protocol each vendor module
implements, and calling a vendor library with its banners kept off kvtasks' stdout.

The vendor modules (`amd`, `nvidia`) import this; the package opens them (`open_backends`).
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
