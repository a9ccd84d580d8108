"""The environment a target sees: an allowlist of the caller's variables, never a credential,
and a private HOME and cache set per phase so JIT output cannot cross from base to head."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from kvtasks.records import TargetEnvironment

# Until a device is claimed the target sees none: an empty list hides every GPU.
NO_DEVICE = {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": ""}


_ALLOWED_PREFIXES = (
    "PATH", "LANG", "LC_", "TZ", "TERM", "USER", "LOGNAME", "TMPDIR", "LD_LIBRARY_PATH",
    "ROCM", "HIP", "HSA", "AMD", "GPU", "RCCL", "NCCL", "NVIDIA_",
    "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "KMP_",
    "CUDA", "TORCH", "PYTORCH", "TRITON", "FLYDSL", "AITER", "VIRTUAL_ENV",
    "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CMAKE_", "MAX_JOBS", "PYTEST_ADDOPTS",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS",
)
_CREDENTIAL = re.compile(
    r"TOKEN|SECRET|PASSW|CREDENTIAL|_KEY|KEY_|APIKEY|COOKIE|SESSION|AUTH|PRIVATE|NETRC"
    r"|^GH_|GITHUB|^SSH_|^GPG_|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^KRB5"
)
# Each phase (base, head, gpufree) gets its own copy of every cache a kernel stack writes.
_PHASE_CACHES = {
    "HOME": "home",
    "XDG_CACHE_HOME": "xdg-cache",
    "XDG_CONFIG_HOME": "xdg-config",
    "TRITON_CACHE_DIR": "triton",
    "TORCH_EXTENSIONS_DIR": "torch-extensions",
    "AITER_JIT_DIR": "aiter-jit",
    "FLYDSL_CACHE_DIR": "flydsl",
    "FLYDSL_RUNTIME_CACHE_DIR": "flydsl-runtime",
}
# Variables kvtasks itself sets; the caller's values never reach the target.
_OWNED = set(_PHASE_CACHES) | {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "VALIDATION_PHASE",
                               "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def refusal(name: str) -> str | None:
    """Why --env may not set `name`, or None: kvtasks' own variables and the CPU tier's switch decide
    what a run is, the device masks which device it may touch, and a credential never reaches a target."""
    if not _NAME.fullmatch(name):
        return "is not a variable name"
    if name.endswith("_VISIBLE_DEVICES"):
        return "is a device mask: the claimed device decides it"
    if name in _OWNED or name in ("TRITON_INTERPRET", "GIT_CEILING_DIRECTORIES") or name.startswith("KVTASKS"):
        return "is set by kvtasks itself"
    if _CREDENTIAL.search(name):
        return "looks like a credential, and credentials never reach a target"
    return None


def given_pairs(pairs) -> dict[str, str]:
    """NAME=VALUE strings as a mapping (checked by the request's builder)."""
    return dict(pair.split("=", 1) for pair in pairs)


def passed_through(environ: Mapping[str, str]) -> list[str]:
    return sorted(
        name for name in environ
        if name.startswith(_ALLOWED_PREFIXES) and not _CREDENTIAL.search(name) and name not in _OWNED
    )


def construct(
    environ: Mapping[str, str],
    *,
    phase_dir: Path,
    label: str,
    python_path: list[str],
    visible_devices: Mapping[str, str],
) -> dict[str, str]:
    env = {name: environ[name] for name in passed_through(environ)}
    for name, folder in _PHASE_CACHES.items():
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
