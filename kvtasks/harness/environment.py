"""The environment a target sees: an allowlist of the caller's variables, never a credential,
and a private HOME and cache set per phase so JIT output cannot cross from base to head."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from kvtasks.variables import PHASE_CACHES, passed_through

# Until a device is claimed the target sees none: an empty list hides every GPU.
NO_DEVICE = {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": ""}


def given_pairs(pairs) -> dict[str, str]:
    """NAME=VALUE strings as a mapping (checked by the request's builder)."""
    return dict(pair.split("=", 1) for pair in pairs)


def construct(
    environ: Mapping[str, str],
    *,
    phase_dir: Path,
    label: str,
    python_path: list[str],
    visible_devices: Mapping[str, str],
) -> dict[str, str]:
    env = {name: environ[name] for name in passed_through(environ)}
    for name, folder in PHASE_CACHES.items():
        path = phase_dir / folder
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    env["PYTHONPATH"] = ":".join(python_path)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # the user site lies in the private HOME, where only a run of this validation can have written:
    # its .pth files and usercustomize would run at the next run's start-up, before the probe
    env["PYTHONNOUSERSITE"] = "1"
    env["VALIDATION_PHASE"] = label
    env.update(visible_devices)
    return env
