"""The host: environment variables that describe the machine, set once for many PRs.

Read through pydantic-settings: each settings field names its variable (its alias) and a
`Variable` check that turns the raw text into the value or refuses it with a message naming the
variable; a blank variable keeps the field's default. `from_environ` reads them all, a bad value
being a UsageError. It never reads a flag, a worktree or a GPU.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable, Mapping

from pydantic import AliasChoices, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, SettingsConfigDict

from kvtasks.errors import UsageError

Reader = Callable[[str, str], object]  # (variable, its non-empty value) -> the field's value
READERS: dict[str, Reader] = {}  # variable -> how its text is read (Variable fills it)


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


def Variable(name: str, read: Reader, **field) -> object:
    """A settings field read from the variable `name` through `read`."""
    READERS[name] = read
    return Field(validation_alias=AliasChoices(name), **field)


class HostVariables(BaseSettings):
    """Settings read from the environment: every field names its variable (`Variable`), or is itself
    HostVariables read from the same environment."""

    model_config = SettingsConfigDict(frozen=True, case_sensitive=True, env_ignore_empty=True, extra="ignore",
                                      populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _read(cls, raw: object, info: ValidationInfo) -> object:
        field = cls.model_fields[info.field_name]
        if _nested(field) or not isinstance(raw, str):  # nested settings, or a value given in code
            return raw
        if not raw.strip():
            raise PydanticUseDefault()
        return READERS[_variable(field)](_variable(field), raw.strip())

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None):
        """The settings `environ` (default: the process's environment) gives; a bad value is a UsageError."""
        try:
            if environ is None:
                return cls()
            return cls.model_validate({**{name: environ[name] for name in cls.variables(own=True) if name in environ},
                                       **{field_name: field.annotation.from_environ(environ)
                                          for field_name, field in cls.model_fields.items() if _nested(field)}})
        except ValidationError as invalid:
            raise _usage_error(invalid) from None

    @classmethod
    def variables(cls, own: bool = False) -> list[str]:
        """Every variable these settings read (nested settings' too unless `own`), in declaration order."""
        names = []
        for field in cls.model_fields.values():
            if _nested(field):
                names += [] if own else field.annotation.variables()
            else:
                names.append(_variable(field))
        return names


def _nested(field) -> bool:
    return isinstance(field.annotation, type) and issubclass(field.annotation, HostVariables)


def _variable(field) -> str:
    return field.validation_alias.choices[0]


def _usage_error(invalid: ValidationError) -> UsageError:
    """The first refusal a settings check raised, as it said it."""
    for error in invalid.errors():
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, UsageError):
            return cause
    first = invalid.errors()[0]
    return UsageError(f"{first['loc'][0]}: {first['msg']}")


def _idle(field: str, read: Reader, default: float) -> object:
    return Variable(f"KVTASKS_IDLE_{field.upper()}", read, default=default)


class IdleSettings(HostVariables):
    """When the built-in picker counts a GPU idle, over how long a sampling window."""

    samples: int = _idle("samples", positive_int, 10)
    interval_s: float = _idle("interval_s", at_least_zero, 1.0)
    max_busy_pct: float = _idle("max_busy_pct", at_least_zero, 2.0)
    max_used_gib: float = _idle("max_used_gib", at_least_zero, 2.0)
    min_free_gib: float = _idle("min_free_gib", at_least_zero, 16.0)


class HostSettings(HostVariables):
    """What the host gives every validation: interpreter, libraries, GPU picking, time limits."""

    pylib: str | None = Variable("PYLIB", directory, default=None)
    python_bin: str = Variable("PYTHON_BIN", interpreter, default_factory=lambda: sys.executable,
                               validate_default=True)
    picker: str | None = Variable("PICKER", text, default=None)
    # a fleet task claims a GPU of the architecture it was scheduled for, never another
    gpu_arch: str | None = Variable("KVTASKS_GPU_ARCH", text, default=None)
    # the default grid's secret, when several workspaces must draw the same cells (a fleet's nodes, a
    # rerun elsewhere); unset, each store keeps its own (Store.grid_secret)
    grid_secret: str | None = Variable("KVTASKS_GRID_SECRET", text, default=None)
    # how long a fleet node's base or head task waits for the GPU its prepare claimed
    gpu_reclaim_s: int = Variable("KVTASKS_GPU_RECLAIM_S", positive_int, default=3600)
    timeout: int = Variable("TIMEOUT", positive_int, default=1800)
    perf_timeout: int = Variable("PERF_TIMEOUT", positive_int, default=1800)
    perf_repeat: int = Variable("PERF_REPEAT", positive_int, default=3)
    perf_threshold: float = Variable("PERF_THRESHOLD", between(0.0, 2.0), default=0.95)
    perf_min_rows: int = Variable("PERF_MIN_ROWS", positive_int, default=3)
    perf_control_tol: float = Variable("PERF_CONTROL_TOL", between(0.0, 1.0), default=0.10)
    # the most of a target's output a log keeps (its first and last halves; the report says what was cut)
    # how often a long target run says how far it got (items done of collected, elapsed): kvtasks.harness.heartbeat
    heartbeat_s: int = Variable("KVTASKS_HEARTBEAT_S", positive_int, default=30)
    log_ceiling: int = Variable("KVTASKS_LOG_CEILING", positive_int, default=16 << 20)  # kvtasks.harness.capped_log.DEFAULT_CEILING
    idle: IdleSettings = Field(default_factory=IdleSettings)

    @model_validator(mode="before")
    @classmethod
    def _perf_timeout_follows_timeout(cls, data: object) -> object:
        """An unset PERF_TIMEOUT is TIMEOUT's."""
        if isinstance(data, dict) and not str(data.get("PERF_TIMEOUT") or "").strip() and "TIMEOUT" in data:
            return {**data, "PERF_TIMEOUT": data["TIMEOUT"]}
        return data
