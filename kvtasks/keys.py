"""Content keys: what a piece of evidence is about, as a SHA-256.

- base_oid: the supplied worktree's HEAD.
- patch_sha256: the exact patch bytes.
- runtime_hash: the interpreter (path, version, installed distributions: numpy, torch, triton ...),
  the runtime package's resolved path, PYLIB's content identity (every file's path and SHA-256)
  and the claimed GPU's vendor, arch and model ("no-gpu" when none was claimed); on the Triton CPU
  tier also the interpreter's triton/torch/numpy versions, the sparse-grid setting and the assumed
  compute capability.
- base key: base_oid, target, runner, grid channel and cells, axes, route, shape vars, --python-path
  and the runtime hash. No patch in it, so every PR against the same base shares it.
- head key: the base key, the patch SHA-256 and how the sensitivity run corrupts the route's output
  (its runs are head evidence, stored under the head key).
Every key is the SHA-256 of a canonical JSON document, so it is deterministic across runs and
machines given the same inputs.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from kvtasks.request import Request


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


def runtime_hash(request: Request, fingerprint: dict | None, gpu: dict | None, cpu_tier: dict | None = None) -> str:
    fingerprint = fingerprint or {}
    return digest({
        "python_bin": request.host.python_bin,
        "python_executable": fingerprint.get("python_executable"),
        "python_version": fingerprint.get("python_version"),
        "distributions": fingerprint.get("distributions"),
        "module_path": fingerprint.get("module_path"),
        "pylib": tree_identity(request.host.pylib),
        "gpu": {key: (gpu or {}).get(key) for key in ("vendor", "arch", "model")} if gpu else "no-gpu",
        "cpu_tier": {key: cpu_tier.get(key) for key in ("interpreter", "triton", "torch", "numpy",
                                                        "sparse_grid_programs", "device_capability")}
        if cpu_tier else None,
    })


def base_key(request: Request, base_oid: str, selection: dict, runtime: str) -> str:
    return digest({
        "base_oid": base_oid,
        "target": request.target,
        "runner": selection.get("runner"),
        "grid_channel": selection.get("grid_channel"),
        "grid_cells": selection.get("grid_cells"),
        "axes": list(request.axis),
        "route": request.expected_route,
        "shape_vars": request.shape_vars,
        "shape_env": request.shape_env,
        "shape_arg": request.shape_arg,
        "shape_argnames": request.shape_argnames,
        "python_path": list(request.python_path),
        "runtime_hash": runtime,
    })


def head_key(base: str, patch: str | None, request: Request) -> str:
    return digest({"base_key": base, "patch_sha256": patch,
                   "sensitivity": {"mode": request.sensitivity_mode, "error": request.sensitivity_error,
                                   "output": request.sensitivity_output}})
