"""Content keys: what a piece of evidence is about, as a SHA-256.

- base_oid: the supplied worktree's HEAD.
- patch_sha256: the exact patch bytes.
- runtime_hash: the interpreter (path, version, installed distributions: numpy, torch, triton ...),
  the runtime package's resolved path, PYLIB's content identity (every file's path and SHA-256)
  and the claimed GPU's vendor, arch and model ("no-gpu" when none was claimed); on the Triton CPU
  tier also the interpreter's triton/torch/numpy versions, the sparse-grid setting and the assumed
  compute capability.
- runtime_hash also carries the GPU driver, ROCm and CUDA versions the host reports and the
  source identity of every editable-installed distribution outside the worktree (name==version
  alone does not change when its source does).
- base key: base_oid, target, runner, grid channel and cells, axes, route, shape vars, --python-path,
  CPU tier, the runtime hash, and every other input that can change how the base run comes out:
  kvtasks' own launch, probe, environment and stage code (`kvtasks_identity`), TIMEOUT,
  --no-network, --sandbox, and the values of the host variables passed through to targets. No
  patch in it, so every PR against the same base shares it; PRs of a batch whose options differ
  here do not.
- head key: the base key, the patch SHA-256 and how the sensitivity run corrupts the route's output
  (its runs are head evidence, stored under the head key).
- base sensitivity key: the base key and one mode of corruption (with its error and output
  argument): base's corrupted run, which the sensitivity stage makes only when a PR changed the
  suite, depends on nothing else, so the PRs of a batch share it.
Every key is the SHA-256 of a canonical JSON document, so it is deterministic across runs and
machines given the same inputs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from pydantic import BaseModel

from kvtasks.request import Request
from kvtasks.records import CpuTier, RuntimeFingerprint, Selection

_PACKAGE = Path(__file__).resolve().parent


def digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def patch_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_identity(root: str | None) -> str | None:
    """Content identity of a folder: every file's relative path and SHA-256 (caches skipped)."""
    if not root:
        return None
    files = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_file():
                files.append([str(path.relative_to(root)), hashlib.sha256(path.read_bytes()).hexdigest()])
    return digest(files)


@functools.cache
def kvtasks_identity() -> str:
    """The code that launches targets, probes them, builds their environment and judges a base
    run: a changed kvtasks is a changed base run, whatever its version string says."""
    return digest([tree_identity(str(_PACKAGE / "harness")), tree_identity(str(_PACKAGE / "stages")),
                   hashlib.sha256((_PACKAGE / "processes.py").read_bytes()).hexdigest()])


def runtime_hash(request: Request, fingerprint: RuntimeFingerprint | None, gpu: BaseModel | None,
                 cpu_tier: CpuTier | None = None, driver: dict | None = None) -> str:
    """`gpu`: the passing gpu_claim stage (its vendor, arch and model), None when none was claimed."""
    fingerprint = fingerprint or RuntimeFingerprint()
    return digest({
        "driver": driver or {},
        "editable_sources": fingerprint.editable_sources,
        "python_bin": request.host.python_bin,
        "python_executable": fingerprint.python_executable,
        "python_version": fingerprint.python_version,
        "distributions": fingerprint.distributions,
        "module_path": fingerprint.module_path,
        "pylib": tree_identity(request.host.pylib),
        "gpu": {key: getattr(gpu, key, None) for key in ("vendor", "arch", "model")} if gpu else "no-gpu",
        "cpu_tier": cpu_tier.model_dump(include={"interpreter", "triton", "torch", "numpy", "sparse_grid_programs",
                                                 "device_capability"}) if cpu_tier else None,
    })


def base_key(request: Request, base_oid: str, selection: Selection, runtime: str,
             target_environment: dict[str, str] | None = None) -> str:
    """`target_environment`: the values of the host variables passed through to the target."""
    return digest({
        "kvtasks": kvtasks_identity(),
        "timeout": request.host.timeout,
        "no_network": bool(request.no_network),
        "sandbox": bool(request.sandbox),
        "cpu_tier": [request.cpu_tier, request.cpu_sparse_grid, request.cpu_device_capability],
        "target_environment": target_environment or {},
        "base_oid": base_oid,
        "target": request.target,
        "runner": selection.runner,
        "grid_channel": selection.grid_channel,
        "grid_cells": selection.grid_cells,
        "axes": list(request.axis),
        "route": request.expected_route,
        "shape_vars": request.shape_vars,
        "shape_env": request.shape_env,
        "shape_arg": request.shape_arg,
        "shape_argnames": request.shape_argnames,
        "python_path": list(request.python_path),
        "env": list(request.env),
        "runtime_hash": runtime,
    })


def base_sensitivity_key(base: str, request: Request, mode: str) -> str:
    """Base's corrupted run in one mode depends on the base alone: every PR against the same base
    key that needs it shares it."""
    return digest({"base_key": base, "sensitivity": {"mode": mode, "output": request.sensitivity_output,
                                                     "error": request.sensitivity_error if mode == "tail" else None}})


def head_key(base: str, patch: str | None, request: Request) -> str:
    return digest({"base_key": base, "patch_sha256": patch,
                   "sensitivity": {"mode": request.sensitivity_mode, "error": request.sensitivity_error,
                                   "output": request.sensitivity_output},
                   **({"no_replay": True} if request.no_replay else {})})
