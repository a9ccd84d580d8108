"""The Request model: the one declaration of every option a validation takes, and its checks.

Each option field carries its `Option` (flags, help, doit variables, how its value is written), and
the CLI parser, dodo's variables and the README's table are derived from or checked against it.
Its validators read each value however a front door spells it and refuse a bad one with a
UsageError naming the flag; they are pure: they never touch the worktree, git, the host or the
environment (kvtasks.host reads that). What needs them is resolution.py's, after the worktree's lock
is held; `resolved` says whether it ran.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticUseDefault

from kvtasks import variables
from kvtasks.errors import UsageError
from kvtasks.host import HostSettings
from kvtasks.records import InferredTarget
from kvtasks.request.namespaces import PID_NAMESPACE, SANDBOX_SCRIPT
from kvtasks.request.options import DeclaredOption, Option, Route, grid_rows, names, option_of, switched

HEX40 = re.compile(r"[0-9a-f]{40}")
CAPABILITY = re.compile(r"\d{1,2}\.\d")
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class Request(BaseModel):
    """One validation: the PR (flags) plus the host (env), checked and normalised."""

    model_config = ConfigDict(frozen=True)

    repo: Annotated[str, Option("worktree to validate (required)", path=True, keys="neither")]
    target: Annotated[str, Option("script file or pytest node/file the PR ships", flags=("--target", "--tests"),
                                  variables=("target", "tests"), keys="base")]
    patch: Annotated[str | None, Option("base-to-head patch to apply; a conflict is a blocker", path=True,
                                        keys="neither")] = None
    head_sha: Annotated[str | None, Option("exact remote PR head (40 hex) the patch represents", keys="neither")] = None
    base_ref: Annotated[str | None, Option(
        "instead of --patch, with --head-ref: the branch, tag or commit the PR targets; --repo may then be any "
        "clone (never written) or a git URL", keys="neither")] = None
    head_ref: Annotated[str | None, Option(
        "the PR's branch, pull ref (pull/N/head) or commit; its change is the diff from its merge-base with "
        "--base-ref", keys="neither")] = None
    # given refs: the repository the caller named; `repo` is then kvtasks' private base worktree
    source: str | None = None
    expected_route: Annotated[str, Option("module:function the route probe must observe", keys="base")] = ""
    shape_vars: Annotated[str, Option("comma-separated local names captured from each route call", keys="base")] = ""
    shape_env: Annotated[str, Option("env var the target reads its shapes from", keys="base")] = ""
    shape_arg: Annotated[str, Option("the target's own CLI flag that accepts shapes", dash_led=True, keys="base")] = ""
    shape_argnames: Annotated[str, Option("pytest parameter names the grid replaces", keys="base")] = ""
    # the grid and the runner reach the base key as the selection resolved them (its cells, its runner), so
    # two spellings of the same cells, or a forced runner equal to the one found, share base evidence
    grid: Annotated[str, Option('shape rows "c1,c2,c3;c1,c2,c3"', keys="neither")] = ""
    axis: Annotated[tuple[str, ...], Option("repeatable NAME=--flag:v1;v2", repeated=True, joined_by="|",
                                            dash_led=True, keys="base")] = ()
    runner: Annotated[Literal["pytest", "script"] | None, Option("force pytest or script", keys="neither")] = None
    tol_table: Annotated[str, Option('reference tolerances "f32=1e-5,f16=2e-3"', keys="head")] = ""
    runtime_module: Annotated[str, Option("module the runtime probe imports (default: by repository layout)",
                                          keys="base")] = ""
    perf_args: Annotated[str, Option("benchmark entry point for the timing stage", dash_led=True, keys="head")] = ""
    perf_control_column: Annotated[str, Option("a timing column the patch does not touch", keys="head")] = ""
    no_perf: Annotated[bool, Option("skip the timing stage", switch=True, keys="head")] = False
    no_replay: Annotated[bool, Option("skip the replay outside the test (PASS then waits on it)", switch=True,
                                      keys="head")] = False
    cpu_tier: Annotated[Literal["off", "triton", "auto"], Option(
        "triton: run Triton kernels in the interpreter on the CPU with a bounds sanitizer; auto: only when no GPU "
        "was claimed and the target imports triton (default off)", keys="base")] = "off"
    # launches with more programs run only their first and last; 0 = never
    cpu_sparse_grid: Annotated[int, Option("on the CPU tier, launches of more programs run only the first and last "
                                           "program of each axis (0 = never)", keys="base")] = 4096
    # what torch.cuda.get_device_capability() answers on the tier
    cpu_device_capability: Annotated[str, Option(
        "on the CPU tier, the compute capability torch.cuda reports (MAJOR.MINOR, default 8.0): it picks a "
        "repository's kernel paths and is recorded as an assumption", keys="base")] = "8.0"
    cpu_device_name: Annotated[str, Option(
        "on the CPU tier, the device name torch.cuda reports (default: an NVIDIA device of "
        "--cpu-device-capability): libraries pick their vendor backend by it", keys="base")] = ""
    # checkout folders put on the target's path after the packaging's roots
    python_path: Annotated[tuple[str, ...], Option(
        "repeatable: a checkout folder (relative to it) put on the target's import path after the roots its "
        "packaging declares", repeated=True, joined_by=os.pathsep, keys="base")] = ()
    # NAME=VALUE pairs set in every target's environment on both sides (a repository's own switches)
    env: Annotated[tuple[str, ...], Option(
        "repeatable NAME=VALUE: a variable set in both sides' targets and recorded in the base key; never a name "
        "kvtasks sets, TRITON_INTERPRET, *_VISIBLE_DEVICES or a credential-like name", repeated=True,
        joined_by="|", keys="base")] = ()
    no_network: Annotated[bool, Option("run targets in a fresh network namespace (refused if impossible)",
                                       switch=True, keys="base")] = False
    # the command prefix that gives targets no network, found working here by resolve(); () = host network
    network_namespace: tuple[str, ...] = ()
    # the sensitivity run: how the route's output is corrupted (None: the last element becomes 2*x + 1)
    sensitivity_error: Annotated[float | None, Option(
        "the sensitivity run applies this relative error to the last element of the route's output instead of "
        "2*x + 1", keys="head")] = None
    sensitivity_mode: Annotated[Literal["tail", "nan", "both"], Option(
        "tail (last element wrong), nan (whole output NaN) or both (two runs); default tail", keys="head")] = "tail"
    # the argument the route writes its output into, corrupted after the call
    sensitivity_output: Annotated[str, Option(
        "the argument the route writes its output into (for routes that return nothing): corrupted after each "
        "call", keys="head")] = ""
    sandbox: Annotated[bool, Option(
        "run targets in a mount namespace where the evidence store is read-only (refused if impossible)",
        switch=True, keys="base")] = False
    sandbox_namespace: tuple[str, ...] = ()  # the unshare command --sandbox found working here by resolve(); () = none
    readonly: tuple[str, ...] = ()  # folders --sandbox mounts read-only for targets: the front door's workspace
    label: Annotated[str, Option("run name (default run)", keys="neither")] = "run"
    out: Annotated[str | None, Option(
        "report path (default ./validation_report.json; run from inside the worktree, only the workspace's "
        "reports/<label>/ copy is written)", path=True, keys="neither")] = None
    default_out: str | None = None  # the report copy a front door writes without --out; resolve() drops it in the tree
    unvalidated_changes: tuple[str, ...] = ()  # changed files base's map sends to no target: no PASS (pr_targets)
    inferred: InferredTarget | None = None  # the impact map chose this target (kvtasks.front.inference)
    host: HostSettings = Field(default_factory=HostSettings.from_environ)
    # whether resolve() has checked it against the worktree and the host (and found the namespaces)
    resolved: bool = False

    @field_validator("*", mode="before")
    @classmethod
    def _as_given(cls, value: object, info: ValidationInfo) -> object:
        """An option's value however a front door spells it: a switch read, a repeated option's
        values split and stripped, a text stripped (blank: not given), a choice checked."""
        declared = _declared(info.field_name)
        if declared is None:
            return value
        option = declared.option
        if option.switch:
            return switched(value)
        if option.repeated:
            parts = value.split(option.joined_by) if isinstance(value, str) else value or ()
            return tuple(str(part).strip() for part in parts if str(part).strip())
        text = "" if value is None else str(value).strip()
        if not text:
            raise PydanticUseDefault()
        if declared.choices and text not in declared.choices:
            raise UsageError(f"{declared.flags[0]} must be one of {', '.join(declared.choices)}, got {text!r}")
        return _READERS.get(info.field_name, lambda given: given)(text)

    @field_validator("python_path")
    @classmethod
    def _inside_the_checkout(cls, folders: tuple[str, ...]) -> tuple[str, ...]:
        for folder in folders:
            if Path(folder).is_absolute() or os.path.normpath(folder).split(os.sep)[0] == "..":
                raise UsageError(f"--python-path {folder!r} must be a folder inside the checkout, relative to it")
        return tuple(folder.rstrip("/") for folder in folders)

    @model_validator(mode="after")
    def _consistent(self) -> "Request":
        """What one option says about another."""
        if bool(self.base_ref) != bool(self.head_ref):
            raise UsageError("--base-ref and --head-ref go together: the PR is the head ref's change over its "
                             "merge-base with the base ref")
        if self.base_ref and (self.patch or self.head_sha) and not self.source:
            raise UsageError("give the PR either by refs (--base-ref, --head-ref) or by a patch (--patch, "
                             "--head-sha), not both")
        if Path(self.target_path).is_absolute() or os.path.normpath(self.target_path).split(os.sep)[0] == "..":
            raise UsageError(f"--target {self.target!r} escapes the worktree")
        if self.sensitivity_error is not None and self.sensitivity_mode == "nan":
            raise UsageError("--sensitivity-error sizes the tail corruption; --sensitivity-mode nan makes no tail run")
        for pair in self.env:
            name, equals, _ = pair.partition("=")
            why = variables.refusal(name) if equals else "is not NAME=VALUE"
            if why is None and name == self.shape_env:
                why = "is --shape-env's: the grid sets it"
            if why:
                raise UsageError(f"--env {pair!r}: {name or pair!r} {why}")
        if self.shape_argnames and self.grid:
            arity = len(self.argnames)
            for row in grid_rows(self.grid):
                if len(row) != arity:
                    raise UsageError(f"--grid row {','.join(row)!r} has {len(row)} cells; --shape-argnames names "
                                     f"{arity}")
        return self

    @property
    def target_path(self) -> str:
        """The file part of the target (a pytest node id keeps its file before '::')."""
        return self.target.split("::", 1)[0]

    @property
    def routes(self) -> list[Route]:
        return [Route(name) for name in names(self.expected_route)]

    @property
    def shape_var_names(self) -> list[str]:
        return names(self.shape_vars)

    @property
    def argnames(self) -> list[str]:
        return names(self.shape_argnames)

    @property
    def sensitivity_modes(self) -> list[str]:
        """The corrupted runs to make, one per mode: `both` is a tail run and a NaN run."""
        return ["tail", "nan"] if self.sensitivity_mode == "both" else [self.sensitivity_mode]

    @property
    def has_patch(self) -> bool:
        return self.patch is not None

    def patch_bytes(self) -> bytes:
        return Path(self.patch).read_bytes() if self.patch else b""

    def patch_sha256(self) -> str | None:
        """The exact patch bytes' digest (what the head key holds of the patch); None without one."""
        return hashlib.sha256(self.patch_bytes()).hexdigest() if self.has_patch else None

    def launch_prefix(self, writable: list[str] | tuple[str, ...] = (), left: str = "") -> tuple[str, ...]:
        """What a target command runs under: the sandbox's mount namespace (the `readonly` folders
        mounted read-only, the `writable` ones, the tree and the run's scratch, kept writable even
        inside them) and a PID namespace of its own (whose end takes every process in it; `left`
        names the file that lists what was alive there once the target exited), with the network
        namespace of --no-network; or just the latter."""
        if (self.no_network or self.sandbox) and not self.resolved:
            raise ValueError("an unresolved request has no namespaces to launch in: resolve() it first")
        if not self.sandbox:
            return self.network_namespace
        network = ("--net",) if self.no_network else ()
        return (*self.sandbox_namespace, *network, *PID_NAMESPACE, "--", "sh", "-c", SANDBOX_SCRIPT, "kvtasks-sandbox",
                *self.readonly, "--", self.repo, *writable, "--", left)


def declared_options() -> list[DeclaredOption]:
    """Every option the Request declares, in declaration order (the order --help lists them)."""
    return [DeclaredOption(name, option, field) for name, field in Request.model_fields.items()
            for option in field.metadata if isinstance(option, Option)]


def doit_variables() -> tuple[str, ...]:
    """Every doit variable that fills a Request field (aliases included)."""
    return tuple(variable for declared in declared_options() for variable in declared.variables)


def path_variables() -> tuple[str, ...]:
    """The doit variables (and manifest keys) that name a file or folder of the caller's."""
    return tuple(variable for declared in declared_options() if declared.option.path for variable in declared.variables)


def _declared(field: str) -> DeclaredOption | None:
    info = Request.model_fields.get(field)
    option = option_of(info) if info is not None else None
    return DeclaredOption(field, option, info) if option is not None else None


def _head_sha(text: str) -> str:
    if not HEX40.fullmatch(text.lower()):
        raise UsageError(f"--head-sha must be a full 40-hex commit OID, got {text!r}")
    return text.lower()


def checked_label(text: str) -> str:
    """A label as a folder name may take it (reports/<label>/); a UsageError otherwise."""
    if not LABEL.fullmatch(text):
        raise UsageError(f"--label {text!r} must be letters, digits, '.', '_' or '-' (at most 100)")
    return text


def _sparse_grid(text: str) -> int:
    if not text.isdigit():
        raise UsageError(f"--cpu-sparse-grid must be a program count (0 = never sparse), got {text!r}")
    return int(text)


def _sensitivity_error(text: str) -> float:
    try:
        error = float(text)
    except ValueError:
        error = -1.0
    if not 0 < error < float("inf"):
        raise UsageError(f"--sensitivity-error must be a positive relative error such as 1e-3, got {text!r}")
    return error


def _sensitivity_output(text: str) -> str:
    if not text.isidentifier():
        raise UsageError(f"--sensitivity-output must name one argument of the route, got {text!r}")
    return text


def _capability(text: str) -> str:
    if not CAPABILITY.fullmatch(text):
        raise UsageError(f"--cpu-device-capability must be MAJOR.MINOR (e.g. 8.0, 9.0), got {text!r}")
    return text


def _grid(text: str) -> str:
    if text.count("(") != text.count(")") or text.count("[") != text.count("]"):
        raise UsageError(f"--grid {text!r} has unbalanced brackets: a tuple cell is written (2049,2)")
    return text


# the options whose text is more than a string: field -> its reader (the text stripped and non-empty)
_READERS = {"head_sha": _head_sha, "label": checked_label, "cpu_sparse_grid": _sparse_grid,
            "sensitivity_error": _sensitivity_error, "sensitivity_output": _sensitivity_output,
            "cpu_device_capability": _capability, "grid": _grid}
