"""The Request: every flag that describes the PR and every env var that describes the host.

All usage errors are raised here, before anything touches the worktree, so a bad invocation
exits 2 with one line and writes no report.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field

from kvtasks import processes

RUNNERS = ("pytest", "script")
CPU_TIERS = ("off", "triton", "auto")
SENSITIVITY_MODES = ("tail", "nan", "both")
HEX40 = re.compile(r"[0-9a-f]{40}")
CAPABILITY = re.compile(r"\d{1,2}\.\d")
PATCH_HEADER = re.compile(rb"^(diff --git |\+\+\+ )", re.MULTILINE)


class UsageError(Exception):
    """A caller mistake: reported as one line, exit 2, no report, worktree untouched."""


class HostSettings(BaseModel):
    """Environment variables: they describe the host and are set once for many PRs."""

    model_config = ConfigDict(frozen=True)

    pylib: str | None = None
    python_bin: str
    picker: str | None = None
    timeout: int = 1800
    perf_timeout: int = 1800
    perf_repeat: int = 3
    perf_threshold: float = 0.95
    perf_min_rows: int = 3
    perf_control_tol: float = 0.10

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> "HostSettings":
        def positive_int(name: str, default: int) -> int:
            raw = environ.get(name, "").strip()
            if not raw:
                return default
            if not raw.isdigit() or int(raw) <= 0:
                raise UsageError(f"{name} must be a positive integer, got {raw!r}")
            return int(raw)

        def fraction(name: str, default: float, low: float, high: float) -> float:
            raw = environ.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise UsageError(f"{name} must be a number, got {raw!r}") from None
            if not low < value <= high:
                raise UsageError(f"{name} must be in ({low:g}, {high:g}], got {raw}")
            return value

        python_bin = environ.get("PYTHON_BIN", "").strip() or _default_python()
        resolved = shutil.which(python_bin)
        if resolved is None:
            raise UsageError(f"PYTHON_BIN {python_bin!r} is not an executable interpreter")
        pylib = environ.get("PYLIB", "").strip() or None
        if pylib is not None and not Path(pylib).is_dir():
            raise UsageError(f"PYLIB {pylib!r} is not a directory")
        timeout = positive_int("TIMEOUT", 1800)
        return cls(
            pylib=str(Path(pylib).resolve()) if pylib else None,
            python_bin=str(Path(resolved).absolute()),
            picker=environ.get("PICKER", "").strip() or None,
            timeout=timeout,
            perf_timeout=positive_int("PERF_TIMEOUT", timeout),
            perf_repeat=positive_int("PERF_REPEAT", 3),
            perf_threshold=fraction("PERF_THRESHOLD", 0.95, 0.0, 2.0),
            perf_min_rows=positive_int("PERF_MIN_ROWS", 3),
            perf_control_tol=fraction("PERF_CONTROL_TOL", 0.10, 0.0, 1.0),
        )


def _default_python() -> str:
    import sys

    return sys.executable


class Request(BaseModel):
    """One validation: the PR (flags) plus the host (env), checked and normalised."""

    model_config = ConfigDict(frozen=True)

    repo: str
    target: str
    patch: str | None = None
    head_sha: str | None = None
    expected_route: str = ""
    shape_vars: str = ""
    shape_env: str = ""
    shape_arg: str = ""
    shape_argnames: str = ""
    grid: str = ""
    axis: tuple[str, ...] = ()
    runner: Literal["pytest", "script"] | None = None
    tol_table: str = ""
    runtime_module: str = ""
    perf_args: str = ""
    perf_control_column: str = ""
    no_perf: bool = False
    cpu_tier: Literal["off", "triton", "auto"] = "off"
    cpu_sparse_grid: int = 4096  # launches with more programs run only their first and last; 0 = never
    cpu_device_capability: str = "8.0"  # what torch.cuda.get_device_capability() answers on the tier
    python_path: tuple[str, ...] = ()  # checkout folders put on the target's path after the packaging's roots
    no_network: tuple[str, ...] = ()  # the command prefix that gives targets no network; () = host network
    # the sensitivity run: how the route's output is corrupted (None: the last element becomes 2*x + 1)
    sensitivity_error: float | None = None
    sensitivity_mode: Literal["tail", "nan", "both"] = "tail"
    sensitivity_output: str = ""  # the argument the route writes its output into, corrupted after the call
    sandbox: tuple[str, ...] = ()  # the unshare command (mount namespace) --sandbox found working; () = none
    readonly: tuple[str, ...] = ()  # folders --sandbox mounts read-only for targets: the front door's workspace
    label: str = "run"
    out: str | None = None
    host: HostSettings = Field(default_factory=lambda: HostSettings.from_environ(os.environ))

    @property
    def target_path(self) -> str:
        """The file part of the target (a pytest node id keeps its file before '::')."""
        return self.target.split("::", 1)[0]

    @property
    def routes(self) -> list[str]:
        return _names(self.expected_route)

    @property
    def shape_var_names(self) -> list[str]:
        return _names(self.shape_vars)

    @property
    def argnames(self) -> list[str]:
        return _names(self.shape_argnames)

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


LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def build_request(options: Mapping[str, object], environ: Mapping[str, str] | None = None) -> Request:
    """Check every option and return a Request, or raise UsageError naming the first problem.

    `options` uses the flag names with underscores; empty strings mean "not given". `default_out`
    is the report copy a front door writes when `out` is not given, dropped where it would land
    inside the worktree; an `out` given there is a usage error.
    """
    environ = os.environ if environ is None else environ

    def text(name: str) -> str:
        value = options.get(name)
        return "" if value is None else str(value).strip()

    repo_arg = text("repo")
    if not repo_arg:
        raise UsageError("--repo is required")
    target = text("target") or text("tests")
    if not target:
        raise UsageError("--target is required: a forgotten target must never read as 'there is no test'")
    repo = Path(repo_arg).expanduser().resolve()
    if not repo.is_dir():
        raise UsageError(f"--repo {repo_arg!r} is not a directory")
    toplevel = _git_toplevel(repo)
    if toplevel is None:
        raise UsageError(f"--repo {repo_arg!r} is not a git worktree")
    if toplevel != repo:
        raise UsageError(f"--repo {repo_arg!r} is inside the worktree {toplevel}; pass its top level")

    target_file = (repo / target.split("::", 1)[0]).resolve()
    if not target_file.is_relative_to(repo):
        raise UsageError(f"--target {target!r} escapes the worktree")

    patch = text("patch") or None
    if patch is not None:
        patch_path = Path(patch).expanduser().resolve()
        try:
            patch_text = patch_path.read_bytes()
        except OSError as exc:
            raise UsageError(f"--patch {patch!r} is unreadable: {exc.strerror or exc}") from None
        if not patch_text.strip():
            raise UsageError(f"--patch {patch!r} is empty")
        if not PATCH_HEADER.search(patch_text):
            raise UsageError(f"--patch {patch!r} is not a patch: no 'diff --git' or '+++' header")
        escaping = [path for path in patch_paths(patch_text) if _escapes(path)]
        if escaping:
            raise UsageError(f"--patch {patch!r} touches a path outside the worktree: {escaping[0]!r}")
        if patch_path.is_relative_to(repo):
            raise UsageError(f"--patch {patch!r} lies inside the worktree; the tree would not be clean")
        patch = str(patch_path)

    head_sha = text("head_sha").lower() or None
    if head_sha is not None and not HEX40.fullmatch(head_sha):
        raise UsageError(f"--head-sha must be a full 40-hex commit OID, got {text('head_sha')!r}")

    runner = text("runner") or None
    if runner is not None and runner not in RUNNERS:
        raise UsageError(f"--runner must be one of {', '.join(RUNNERS)}, got {runner!r}")

    label = text("label") or "run"
    if not LABEL.fullmatch(label):
        raise UsageError(f"--label {label!r} must be letters, digits, '.', '_' or '-' (at most 100)")

    out = text("out") or None
    if out is not None:
        out_path = Path(out).expanduser().resolve()
        if out_path.is_relative_to(repo):
            raise UsageError(f"--out {out!r} lies inside the worktree; the next run would find it dirty")
        out = str(out_path)
    elif text("default_out"):
        # a front door's own default (the CLI's ./validation_report.json, run from inside the
        # worktree) is no mistake of the caller's: inside the worktree it is simply not written
        default_path = Path(text("default_out")).expanduser().resolve()
        out = None if default_path.is_relative_to(repo) else str(default_path)

    no_network = network_namespace() if _truthy(options.get("no_network")) else ()
    sandbox = mount_namespace() if _truthy(options.get("sandbox")) else ()

    cpu_tier = text("cpu_tier") or "off"
    if cpu_tier not in CPU_TIERS:
        raise UsageError(f"--cpu-tier must be one of {', '.join(CPU_TIERS)}, got {cpu_tier!r}")
    sparse = text("cpu_sparse_grid") or "4096"
    if not sparse.isdigit():
        raise UsageError(f"--cpu-sparse-grid must be a program count (0 = never sparse), got {sparse!r}")

    sensitivity_mode = text("sensitivity_mode") or "tail"
    if sensitivity_mode not in SENSITIVITY_MODES:
        raise UsageError(f"--sensitivity-mode must be one of {', '.join(SENSITIVITY_MODES)}, got {sensitivity_mode!r}")
    sensitivity_error = None
    if text("sensitivity_error"):
        try:
            sensitivity_error = float(text("sensitivity_error"))
        except ValueError:
            sensitivity_error = -1.0
        if not 0 < sensitivity_error < float("inf"):
            raise UsageError(f"--sensitivity-error must be a positive relative error such as 1e-3, "
                             f"got {text('sensitivity_error')!r}")
        if sensitivity_mode == "nan":
            raise UsageError("--sensitivity-error sizes the tail corruption; --sensitivity-mode nan makes no tail run")
    sensitivity_output = text("sensitivity_output")
    if sensitivity_output and not sensitivity_output.isidentifier():
        raise UsageError(f"--sensitivity-output must name one argument of the route, got {sensitivity_output!r}")

    capability = text("cpu_device_capability") or "8.0"
    if not CAPABILITY.fullmatch(capability):
        raise UsageError(f"--cpu-device-capability must be MAJOR.MINOR (e.g. 8.0, 9.0), got {capability!r}")

    python_path = options.get("python_path") or ()
    if isinstance(python_path, str):
        python_path = tuple(part for part in python_path.split(os.pathsep) if part.strip())
    for folder in python_path:
        resolved = (repo / str(folder).strip()).resolve()
        if Path(str(folder).strip()).is_absolute() or not resolved.is_relative_to(repo):
            raise UsageError(f"--python-path {folder!r} must be a folder inside the checkout, relative to it")
        if not resolved.is_dir():
            raise UsageError(f"--python-path {folder!r} is not a folder of the checkout")

    axis = options.get("axis") or ()
    if isinstance(axis, str):
        axis = tuple(part for part in axis.split("|") if part.strip())

    shape_argnames = text("shape_argnames")
    grid = text("grid")
    if grid.count("(") != grid.count(")") or grid.count("[") != grid.count("]"):
        raise UsageError(f"--grid {grid!r} has unbalanced brackets: a tuple cell is written (2049,2)")
    if shape_argnames and grid:
        arity = len(_names(shape_argnames))
        for row in grid_rows(grid):
            if len(row) != arity:
                raise UsageError(f"--grid row {','.join(row)!r} has {len(row)} cells; --shape-argnames names {arity}")

    return Request(
        repo=str(repo),
        target=target,
        patch=patch,
        head_sha=head_sha,
        expected_route=text("expected_route"),
        shape_vars=text("shape_vars"),
        shape_env=text("shape_env"),
        shape_arg=text("shape_arg"),
        shape_argnames=shape_argnames,
        grid=grid,
        axis=tuple(str(a) for a in axis),
        runner=runner,
        tol_table=text("tol_table"),
        runtime_module=text("runtime_module"),
        perf_args=text("perf_args"),
        perf_control_column=text("perf_control_column"),
        no_perf=_truthy(options.get("no_perf")),
        cpu_tier=cpu_tier,
        cpu_sparse_grid=int(sparse),
        cpu_device_capability=capability,
        python_path=tuple(str(folder).strip().rstrip("/") for folder in python_path),
        no_network=no_network,
        sensitivity_error=sensitivity_error,
        sensitivity_mode=sensitivity_mode,
        sensitivity_output=sensitivity_output,
        sandbox=sandbox,
        label=label,
        out=out,
        host=HostSettings.from_environ(environ),
    )


# a ---/+++ pair (never a lone hunk line that happens to start with "+++"), renames and copies
_PATH_LINE = re.compile(rb"^--- (.+)\n\+\+\+ (.+)$|^(?:rename|copy) (?:from|to) (.+)$", re.MULTILINE)
_GIT_LINE = re.compile(rb"^diff --git (.+)$", re.MULTILINE)


def _unquote(raw: str) -> str:
    raw = raw.strip().split("\t")[0]
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return raw


def patch_paths(data: bytes) -> list[str]:
    """Every path a patch names (headers, renames, copies), with git's a/ and b/ prefixes removed."""
    paths = []
    for match in _PATH_LINE.finditer(data):
        for group in filter(None, match.groups()):
            path = _unquote(group.decode("utf-8", "replace"))
            if path != "/dev/null":
                paths.append(path[2:] if path[:2] in ("a/", "b/") else path)
    for match in _GIT_LINE.finditer(data):
        line = match.group(1).decode("utf-8", "replace")
        paths += [_unquote(half)[2:] for half in re.split(r' (?="?b/)', line, maxsplit=1) if _unquote(half)[:2] in ("a/", "b/")]
    return paths


def _escapes(path: str) -> bool:
    return path.startswith("/") or ".." in path.replace("\\", "/").split("/")


def network_namespace() -> tuple[str, ...]:
    """The prefix that runs a command in a fresh network namespace here, or a UsageError saying why not."""
    tried = []
    for prefix in (("unshare", "--net", "--"), ("unshare", "--net", "--map-root-user", "--")):
        if shutil.which(prefix[0]) is None:
            raise UsageError("--no-network needs unshare (util-linux), which this host lacks")
        done = processes.run([*prefix, "true"], timeout_s=30)
        if done.ok:
            return prefix
        tried.append(done.said())
    raise UsageError(f"--no-network: this host cannot create a network namespace ({'; '.join(tried)})")


# Runs first inside the mount namespace: read-only binds, then writable binds inside them, then the target.
SANDBOX_SCRIPT = """set -e
while [ "$1" != -- ]; do mount --bind "$1" "$1"; mount -o remount,bind,ro "$1"; shift; done; shift
while [ "$1" != -- ]; do mount --bind "$1" "$1"; mount -o remount,bind,rw "$1"; shift; done; shift
exec "$@"
"""


def mount_namespace() -> tuple[str, ...]:
    """The unshare command whose mount namespace can mount a folder read-only for one command here
    (tried on a scratch folder: the write must fail), or a UsageError saying why not."""
    import tempfile

    if shutil.which("unshare") is None or shutil.which("mount") is None:
        raise UsageError("--sandbox needs unshare and mount (util-linux), which this host lacks")
    tried = []
    with tempfile.TemporaryDirectory(prefix="kvtasks-sandbox-check-") as folder:
        for command in (("unshare", "--mount", "--propagation", "private"),
                        ("unshare", "--mount", "--propagation", "private", "--map-root-user")):
            done = processes.run([*command, "--", "sh", "-c", SANDBOX_SCRIPT, "kvtasks-sandbox", folder, "--", "--",
                                  "sh", "-c", 'touch "$0/probe" 2>/dev/null && exit 3 || exit 0', folder], timeout_s=30)
            if done.ok:
                return command
            tried.append("the folder stayed writable" if done.returncode == 3 else done.said())
    raise UsageError(f"--sandbox: this host cannot mount the evidence folder read-only for targets "
                     f"({'; '.join(tried)})")


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


def _names(text: str) -> list[str]:
    """A comma-separated flag value (routes, shape vars, argnames) as its names."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _truthy(value: object) -> bool:
    if isinstance(value, bool):
        return value
    return str(value or "").strip().lower() in {"1", "true", "yes", "on"}


def _git_toplevel(path: Path) -> Path | None:
    import git

    try:
        top = git.Repo(path, search_parent_directories=True).working_tree_dir
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return Path(top).resolve() if top else None
