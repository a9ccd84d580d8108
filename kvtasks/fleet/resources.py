"""What the driver and a joining GPU host agree on: the Ray resource that stands for an architecture,
and the label one arch's run is stored under. It imports no Ray.
"""
from __future__ import annotations

import importlib.util
from collections import Counter

from kvtasks.errors import UsageError

ARCH_RESOURCE = "kvtasks-arch:{}"


def arch_resources(archs: Counter) -> dict[str, int]:
    """The resources a host with `archs` (GPUs per architecture) advertises."""
    return {ARCH_RESOURCE.format(arch): count for arch, count in sorted(archs.items())}


def arch_label(label: str, arch: str | None) -> str:
    """The label one arch's run is stored and published under: the PR's own when the manifest
    names no archs (its one run is "any")."""
    return f"{label}.{arch}" if arch and arch != "any" else label


def require_ray() -> None:
    """Refuse a fleet batch before anything runs where Ray is not installed."""
    if importlib.util.find_spec("ray") is None:
        raise UsageError("engine=ray needs Ray: pip install 'kvtasks[fleet]'")
