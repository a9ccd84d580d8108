"""The host: environment variables that describe the machine, set once for many PRs.

Owns the one way of reading them: each settings field declares its variable (`Variable`) and
`HostVariables.from_environ` reads, checks and defaults them all, a bad value being a UsageError
that names the variable. It never reads a flag, a worktree or a GPU.
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from kvtasks.usage import UsageError

Reader = Callable[[str, str], object]  # (variable, its non-empty value) -> the field's value


@dataclass(frozen=True)
class Variable:
    """Field metadata: the environment variable a settings field is read from and how.

    `fallback` gives the text to read when the variable is unset or empty, from the values read
    so far (fields are read in declaration order, defaults included); without one an unset
    variable leaves the field at its default."""

    name: str
    read: Reader
    fallback: Callable[[dict], str] | None = None


def positive_int(name: str, raw: str) -> int:
    if not raw.isdigit() or int(raw) <= 0:
        raise UsageError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def between(low: float, high: float) -> Reader:
    """A number in (low, high]."""

    def read(name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"{name} must be a number, got {raw!r}") from None
        if not low < value <= high:
            raise UsageError(f"{name} must be in ({low:g}, {high:g}], got {raw}")
        return value

    return read


def at_least_zero(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name} must be a number, got {raw!r}") from None
    if not 0 <= value < float("inf"):
        raise UsageError(f"{name} must be a number >= 0, got {raw}")
    return value


def text(name: str, raw: str) -> str:
    return raw


def interpreter(name: str, raw: str) -> str:
    resolved = shutil.which(raw)
    if resolved is None:
        raise UsageError(f"{name} {raw!r} is not an executable interpreter")
    return str(Path(resolved).absolute())


def directory(name: str, raw: str) -> str:
    if not Path(raw).is_dir():
        raise UsageError(f"{name} {raw!r} is not a directory")
    return str(Path(raw).resolve())


class HostVariables(BaseModel):
    """Settings read from the environment: every field declares its `Variable`, or is itself
    HostVariables read from the same environment."""

    model_config = ConfigDict(frozen=True)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for field_name, field in cls.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, HostVariables):
                values[field_name] = field.annotation.from_environ(environ)
                continue
            variable = next(item for item in field.metadata if isinstance(item, Variable))
            raw = environ.get(variable.name, "").strip()
            if not raw and variable.fallback is not None:
                raw = variable.fallback(values)
            if raw:
                values[field_name] = variable.read(variable.name, raw)
            elif not field.is_required():
                values[field_name] = field.get_default(call_default_factory=True)
        return cls(**values)

    @classmethod
    def variables(cls) -> list[str]:
        """Every variable these settings read, nested settings included, in declaration order."""
        names = []
        for field in cls.model_fields.values():
            if isinstance(field.annotation, type) and issubclass(field.annotation, HostVariables):
                names += field.annotation.variables()
            else:
                names += [item.name for item in field.metadata if isinstance(item, Variable)]
        return names


def _idle(field: str, read: Reader) -> Variable:
    return Variable(f"KVTASKS_IDLE_{field.upper()}", read)


class IdleSettings(HostVariables):
    """When the built-in picker counts a GPU idle, over how long a sampling window."""

    samples: Annotated[int, _idle("samples", positive_int)] = 10
    interval_s: Annotated[float, _idle("interval_s", at_least_zero)] = 1.0
    max_busy_pct: Annotated[float, _idle("max_busy_pct", at_least_zero)] = 2.0
    max_used_gib: Annotated[float, _idle("max_used_gib", at_least_zero)] = 2.0
    min_free_gib: Annotated[float, _idle("min_free_gib", at_least_zero)] = 16.0


class HostSettings(HostVariables):
    """What the host gives every validation: interpreter, libraries, GPU picking, time limits."""

    pylib: Annotated[str | None, Variable("PYLIB", directory)] = None
    python_bin: Annotated[str, Variable("PYTHON_BIN", interpreter, fallback=lambda _: sys.executable)]
    picker: Annotated[str | None, Variable("PICKER", text)] = None
    # a fleet task claims a GPU of the architecture it was scheduled for, never another
    gpu_arch: Annotated[str | None, Variable("KVTASKS_GPU_ARCH", text)] = None
    # the default grid's secret, when several workspaces must draw the same cells (a fleet's nodes, a
    # rerun elsewhere); unset, each store keeps its own (Store.grid_secret)
    grid_secret: Annotated[str | None, Variable("KVTASKS_GRID_SECRET", text)] = None
    timeout: Annotated[int, Variable("TIMEOUT", positive_int)] = 1800
    perf_timeout: Annotated[int, Variable("PERF_TIMEOUT", positive_int,
                                          fallback=lambda read: str(read["timeout"]))] = 1800
    perf_repeat: Annotated[int, Variable("PERF_REPEAT", positive_int)] = 3
    perf_threshold: Annotated[float, Variable("PERF_THRESHOLD", between(0.0, 2.0))] = 0.95
    perf_min_rows: Annotated[int, Variable("PERF_MIN_ROWS", positive_int)] = 3
    perf_control_tol: Annotated[float, Variable("PERF_CONTROL_TOL", between(0.0, 1.0))] = 0.10
    idle: IdleSettings = Field(default_factory=IdleSettings)
