"""The Request model: the one declaration of every option a validation takes.

Each option field carries its `Option` (flags, help, doit variables, how its value is written), and
the CLI parser, dodo's variables and the README's table are derived from or checked against it.
It never checks a value against the host or a worktree (build.py does), nor reads the environment
(kvtasks.host does).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

from kvtasks.host import HostSettings
from kvtasks.request.namespaces import SANDBOX_SCRIPT


@dataclass(frozen=True)
class Option:
    """Field metadata: how the caller gives one Request field.

    `flags` default to the field's name spelt `--like-this` and `variables` (doit's) to the name
    itself. A `switch` takes no value (doit: `name=1`); a `repeated` option is given once per value
    (doit: one variable, values joined by `joined_by`); a `dash_led` value may start with '-' and
    then follow its flag as the next word. A `path` names a file or folder of the caller's, so a
    manifest gives it relative to itself."""

    help: str
    flags: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()
    switch: bool = False
    repeated: bool = False
    joined_by: str = ""
    dash_led: bool = False
    path: bool = False


@dataclass(frozen=True)
class DeclaredOption:
    """One option as the front doors see it: the Request field it fills and its spellings."""

    field: str
    option: Option

    @property
    def flags(self) -> tuple[str, ...]:
        return self.option.flags or ("--" + self.field.replace("_", "-"),)

    @property
    def variables(self) -> tuple[str, ...]:
        return self.option.variables or (self.field,)

    @property
    def choices(self) -> tuple[str, ...]:
        """The values a Literal-typed field allows (empty for a free value)."""
        annotation = Request.model_fields[self.field].annotation
        for candidate in (annotation, *get_args(annotation)):  # Literal[...] or Literal[...] | None
            if get_origin(candidate) is Literal:
                return get_args(candidate)
        return ()

    @property
    def default(self):
        return Request.model_fields[self.field].default


class Request(BaseModel):
    """One validation: the PR (flags) plus the host (env), checked and normalised."""

    model_config = ConfigDict(frozen=True)

    repo: Annotated[str, Option("worktree to validate (required)", path=True)]
    target: Annotated[str, Option("script file or pytest node/file the PR ships", flags=("--target", "--tests"),
                                  variables=("target", "tests"))]
    patch: Annotated[str | None, Option("base-to-head patch to apply; a conflict is a blocker", path=True)] = None
    head_sha: Annotated[str | None, Option("exact remote PR head (40 hex) the patch represents")] = None
    base_ref: Annotated[str | None, Option(
        "instead of --patch, with --head-ref: the branch, tag or commit the PR targets; --repo may then be any "
        "clone (never written) or a git URL")] = None
    head_ref: Annotated[str | None, Option(
        "the PR's branch, pull ref (pull/N/head) or commit; its change is the diff from its merge-base with "
        "--base-ref")] = None
    # given refs: the repository the caller named; `repo` is then kvtasks' private base worktree
    source: str | None = None
    expected_route: Annotated[str, Option("module:function the route probe must observe")] = ""
    shape_vars: Annotated[str, Option("comma-separated local names captured from each route call")] = ""
    shape_env: Annotated[str, Option("env var the target reads its shapes from")] = ""
    shape_arg: Annotated[str, Option("the target's own CLI flag that accepts shapes", dash_led=True)] = ""
    shape_argnames: Annotated[str, Option("pytest parameter names the grid replaces")] = ""
    grid: Annotated[str, Option('shape rows "c1,c2,c3;c1,c2,c3"')] = ""
    axis: Annotated[tuple[str, ...], Option("repeatable NAME=--flag:v1;v2", repeated=True, joined_by="|",
                                            dash_led=True)] = ()
    runner: Annotated[Literal["pytest", "script"] | None, Option("force pytest or script")] = None
    tol_table: Annotated[str, Option('reference tolerances "f32=1e-5,f16=2e-3"')] = ""
    runtime_module: Annotated[str, Option("module the runtime probe imports (default: by repository layout)")] = ""
    perf_args: Annotated[str, Option("benchmark entry point for the timing stage", dash_led=True)] = ""
    perf_control_column: Annotated[str, Option("a timing column the patch does not touch")] = ""
    no_perf: Annotated[bool, Option("skip the timing stage", switch=True)] = False
    cpu_tier: Annotated[Literal["off", "triton", "auto"], Option(
        "triton: run Triton kernels in the interpreter on the CPU with a bounds sanitizer; auto: only when no GPU "
        "was claimed and the target imports triton (default off)")] = "off"
    # launches with more programs run only their first and last; 0 = never
    cpu_sparse_grid: Annotated[int, Option("on the CPU tier, launches of more programs run only the first and last "
                                           "program of each axis (0 = never)")] = 4096
    # what torch.cuda.get_device_capability() answers on the tier
    cpu_device_capability: Annotated[str, Option(
        "on the CPU tier, the compute capability torch.cuda reports (MAJOR.MINOR, default 8.0): it picks a "
        "repository's kernel paths and is recorded as an assumption")] = "8.0"
    # checkout folders put on the target's path after the packaging's roots
    python_path: Annotated[tuple[str, ...], Option(
        "repeatable: a checkout folder (relative to it) put on the target's import path after the roots its "
        "packaging declares", repeated=True, joined_by=os.pathsep)] = ()
    # NAME=VALUE pairs set in every target's environment on both sides (a repository's own switches)
    env: Annotated[tuple[str, ...], Option(
        "repeatable NAME=VALUE: a variable set in both sides' targets and recorded in the base key; never a name "
        "kvtasks sets, TRITON_INTERPRET, *_VISIBLE_DEVICES or a credential-like name", repeated=True,
        joined_by="|")] = ()
    # the command prefix that gives targets no network; () = host network
    no_network: Annotated[tuple[str, ...], Option("run targets in a fresh network namespace (refused if impossible)",
                                                  switch=True)] = ()
    # the sensitivity run: how the route's output is corrupted (None: the last element becomes 2*x + 1)
    sensitivity_error: Annotated[float | None, Option(
        "the sensitivity run applies this relative error to the last element of the route's output instead of "
        "2*x + 1")] = None
    sensitivity_mode: Annotated[Literal["tail", "nan", "both"], Option(
        "tail (last element wrong), nan (whole output NaN) or both (two runs); default tail")] = "tail"
    # the argument the route writes its output into, corrupted after the call
    sensitivity_output: Annotated[str, Option(
        "the argument the route writes its output into (for routes that return nothing): corrupted after each "
        "call")] = ""
    # the unshare command (mount namespace) --sandbox found working; () = none
    sandbox: Annotated[tuple[str, ...], Option(
        "run targets in a mount namespace where the evidence store is read-only (refused if impossible)",
        switch=True)] = ()
    readonly: tuple[str, ...] = ()  # folders --sandbox mounts read-only for targets: the front door's workspace
    label: Annotated[str, Option("run name (default run)")] = "run"
    out: Annotated[str | None, Option(
        "report path (default ./validation_report.json; run from inside the worktree, only the workspace's "
        "reports/<label>/ copy is written)", path=True)] = None
    host: HostSettings = Field(default_factory=HostSettings.from_environ)

    @property
    def target_path(self) -> str:
        """The file part of the target (a pytest node id keeps its file before '::')."""
        return self.target.split("::", 1)[0]

    @property
    def routes(self) -> list[str]:
        return names(self.expected_route)

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

    def launch_prefix(self, writable: list[str] | tuple[str, ...] = ()) -> tuple[str, ...]:
        """What a target command runs under: the sandbox's mount namespace (the `readonly` folders
        mounted read-only, the `writable` ones, the tree and the run's scratch, kept writable even
        inside them), with the network namespace of --no-network; or just the latter."""
        if not self.sandbox:
            return self.no_network
        network = ("--net",) if self.no_network else ()
        return (*self.sandbox, *network, "--", "sh", "-c", SANDBOX_SCRIPT, "kvtasks-sandbox", *self.readonly, "--",
                self.repo, *writable, "--")


def declared_options() -> list[DeclaredOption]:
    """Every option the Request declares, in declaration order (the order --help lists them)."""
    return [DeclaredOption(name, option) for name, field in Request.model_fields.items()
            for option in field.metadata if isinstance(option, Option)]


def doit_variables() -> tuple[str, ...]:
    """Every doit variable that fills a Request field (aliases included)."""
    return tuple(variable for declared in declared_options() for variable in declared.variables)


def path_variables() -> tuple[str, ...]:
    """The doit variables (and manifest keys) that name a file or folder of the caller's."""
    return tuple(variable for declared in declared_options() if declared.option.path for variable in declared.variables)


def names(text: str) -> list[str]:
    """A comma-separated flag value (routes, shape vars, argnames) as its names."""
    return [part.strip() for part in text.split(",") if part.strip()]


def grid_rows(text: str) -> list[list[str]]:
    """A --grid value's rows of cells: ';' between rows, ',' between cells, neither inside brackets,
    so a tuple-valued cell stays one cell: "(2049,2);(4097,4)" is two rows of one cell."""
    rows, row, cell, depth = [], [], "", 0
    for char in text + ";":
        depth += (char in "([") - (char in ")]")
        if depth <= 0 and char in ",;":
            row.append(cell.strip())
            cell = ""
            if char == ";":
                rows.append(row)
                row = []
        else:
            cell += char
    return [row for row in rows if any(row)]
