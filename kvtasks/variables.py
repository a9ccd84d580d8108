"""Which environment variables a target gets: the caller's that pass through (an allowlist, never a
credential), the ones kvtasks sets itself (a private HOME and caches per phase, the import path, the
phase's name, the device masks), and why --env may not set a name. Read by the request's checks and
by the harness that builds a target's environment.
"""
from __future__ import annotations

import re
from typing import Mapping

ALLOWED_PREFIXES = (
    "PATH", "LANG", "LC_", "TZ", "TERM", "USER", "LOGNAME", "TMPDIR", "LD_LIBRARY_PATH",
    "ROCM", "HIP", "HSA", "AMD", "GPU", "RCCL", "NCCL", "NVIDIA_",
    "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "KMP_",
    "CUDA", "TORCH", "PYTORCH", "TRITON", "FLYDSL", "AITER", "VIRTUAL_ENV",
    "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CMAKE_", "MAX_JOBS", "PYTEST_ADDOPTS",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS",
)
CREDENTIAL = re.compile(
    r"TOKEN|SECRET|PASSW|CREDENTIAL|_KEY|KEY_|APIKEY|COOKIE|SESSION|AUTH|PRIVATE|NETRC"
    r"|^GH_|GITHUB|^SSH_|^GPG_|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^KRB5"
)
# Each phase (base, head, gpufree) gets its own copy of every cache a kernel stack writes.
PHASE_CACHES = {
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
OWNED = set(PHASE_CACHES) | {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "VALIDATION_PHASE",
                              "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def refusal(name: str) -> str | None:
    """Why --env may not set `name`, or None: kvtasks' own variables and the CPU tier's switch decide
    what a run is, the device masks which device it may touch, and a credential never reaches a target."""
    if not NAME.fullmatch(name):
        return "is not a variable name"
    if name.endswith("_VISIBLE_DEVICES"):
        return "is a device mask: the claimed device decides it"
    if name in OWNED or name in ("TRITON_INTERPRET", "GIT_CEILING_DIRECTORIES") or name.startswith("KVTASKS"):
        return "is set by kvtasks itself"
    if CREDENTIAL.search(name):
        return "looks like a credential, and credentials never reach a target"
    return None


def passed_through(environ: Mapping[str, str]) -> list[str]:
    """The caller's variables a target gets: the allowlisted ones, never a credential or one kvtasks sets."""
    return sorted(
        name for name in environ
        if name.startswith(ALLOWED_PREFIXES) and not CREDENTIAL.search(name) and name not in OWNED
    )
