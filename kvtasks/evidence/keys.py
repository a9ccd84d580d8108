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
- base key: base_oid, the runner, grid channel and cells the selection chose, the runtime hash,
  kvtasks' own launch, probe, environment and stage code (`kvtasks_identity`), the values of the
  host variables passed through to targets, and every option and host setting declared part of it
  (`Option.keys == "base"`, HOST_SETTINGS: the target, route, shapes, grid, axes, CPU tier, import
  path, environment, TIMEOUT, --no-network, --sandbox ...). No patch in it, so every PR against the
  same base shares it; PRs of a batch whose options differ here do not.
- head key: the base key, the patch SHA-256 and every option and setting declared part of it: how
  the sensitivity run corrupts the route's output, the tolerance table the replay judges with, the
  timing stage's options (head's evidence, stored under the head key).
Each option declares which key it is part of, and the Request's other fields and the host's settings
are declared here: a field declared nowhere fails the tests, so a new one cannot be left out.
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

from kvtasks.host import HostSettings
from kvtasks.request import Request, declared_options
from kvtasks.records import CpuTier, RuntimeFingerprint, Selection

_PACKAGE = Path(__file__).resolve().parents[1]


def digest(document: object) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
                   *(hashlib.sha256((_PACKAGE / module).read_bytes()).hexdigest()
                     for module in ("system/processes.py", "run/executor.py", "variables.py"))])


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
                                                 "device_capability", "device_name"}) if cpu_tier else None,
    })


# The Request's fields that are no options, and the host's settings: which key each is part of (an
# option says it itself, kvtasks.request.options.Option.keys). "neither" for these: derived from an
# option that is keyed (the namespaces), where things are, or what reaches the keys through what it
# decides (the interpreter and PYLIB through the runtime hash, the grid's secret through the cells).
REQUEST_FIELDS = {"source": "neither", "network_namespace": "neither", "sandbox_namespace": "neither",
                  "readonly": "neither", "default_out": "neither", "host": "neither", "resolved": "neither",
                  # said by prepare's selection, which runs for every validation
                  "unvalidated_changes": "neither", "inferred": "neither"}
HOST_SETTINGS = {"pylib": "neither", "python_bin": "neither", "picker": "neither", "gpu_arch": "neither",
                 "grid_secret": "neither", "gpu_reclaim_s": "neither", "idle": "neither", "heartbeat_s": "neither",
                 "timeout": "base",
                 "log_ceiling": "base", "perf_timeout": "head", "perf_repeat": "head", "perf_threshold": "head",
                 "perf_min_rows": "head", "perf_control_tol": "head"}


def keyed(request: Request, key: str) -> dict:
    """The options and host settings declared part of `key` ("base" or "head"), with their values."""
    options = {option.field: getattr(request, option.field) for option in declared_options() if option.option.keys == key}
    fields = {name: getattr(request, name) for name, keyed_as in REQUEST_FIELDS.items() if keyed_as == key}
    host = {name: getattr(request.host, name) for name in HostSettings.model_fields if HOST_SETTINGS[name] == key}
    return {"options": {**options, **fields}, "host": host}


def base_key(request: Request, base_oid: str, selection: Selection, runtime: str,
             target_environment: dict[str, str] | None = None) -> str:
    """`target_environment`: the values of the host variables passed through to the target."""
    return digest({
        "kvtasks": kvtasks_identity(),
        "target_environment": target_environment or {},
        "base_oid": base_oid,
        "runner": selection.runner,
        "grid_channel": selection.grid_channel,
        "grid_cells": selection.grid_cells,
        "runtime_hash": runtime,
        **keyed(request, "base"),
    })


def base_sensitivity_key(base: str, request: Request, mode: str) -> str:
    """Base's corrupted run in one mode depends on the base alone: every PR against the same base
    key that needs it shares it."""
    return digest({"base_key": base, "sensitivity": {"mode": mode, "output": request.sensitivity_output,
                                                     "error": request.sensitivity_error if mode == "tail" else None}})


def head_key(base: str, patch: str | None, request: Request) -> str:
    return digest({"base_key": base, "patch_sha256": patch, **keyed(request, "head")})
