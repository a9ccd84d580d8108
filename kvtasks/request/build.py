"""build_request: every option a front door was given, checked and normalised into a Request.

All usage errors are raised here, before anything touches the worktree, so a bad invocation exits
64 with one line and writes no report. It reads the worktree's top level and the patch, never
changes either, and never launches anything but the namespace checks --no-network/--sandbox ask for.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

from kvtasks import clones
from kvtasks.host import HostSettings
from kvtasks.request.model import Request, declared_options, doit_variables, grid_rows, names
from kvtasks.request.namespaces import mount_namespace, network_namespace
from kvtasks.request.patch import checked_patch
from kvtasks.errors import UsageError

HEX40 = re.compile(r"[0-9a-f]{40}")
CAPABILITY = re.compile(r"\d{1,2}\.\d")
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# what a front door may add beside the declared options: its own report copy when --out is not given
FRONT_DOOR_DEFAULTS = ("default_out",)

_DECLARED = {declared.field: declared for declared in declared_options()}


def build_request(options: Mapping[str, object], environ: Mapping[str, str] | None = None,
                  clones_root: Path | None = None) -> Request:
    """Check every option and return a Request, or raise UsageError naming the first problem.

    `options` uses the doit variable names (the flag names with underscores); empty strings mean
    "not given", and a name that is no option is a mistake (a misspelt manifest key would
    otherwise be dropped without a word). `default_out` is the report copy a front door writes
    when `out` is not given, dropped where it would land inside the worktree; an `out` given
    there is a usage error. Given `base_ref` and `head_ref`, `repo` may be any clone or a git URL:
    the refs are resolved in kvtasks' private clone under `clones_root` (the front door's workspace),
    and the Request names its base worktree and the PR's patch.
    """
    unknown = sorted(set(options) - set(doit_variables()) - set(FRONT_DOOR_DEFAULTS))
    if unknown:
        raise UsageError(f"{unknown[0]!r} is no option; the options are {', '.join(doit_variables())}")

    def text(name: str) -> str:
        value = options.get(name)
        return "" if value is None else str(value).strip()

    def given_or_default(name: str) -> str:
        return text(name) or str(_DECLARED[name].default)

    def one_of(name: str) -> str | None:
        value = given_or_default(name) if _DECLARED[name].default is not None else text(name) or None
        choices = _DECLARED[name].choices
        if value is not None and value not in choices:
            raise UsageError(f"{_DECLARED[name].flags[0]} must be one of {', '.join(choices)}, got {value!r}")
        return value

    repo_arg = text("repo")
    if not repo_arg:
        raise UsageError("--repo is required")
    target = text("target") or text("tests")
    if not target:
        raise UsageError("--target is required: a forgotten target must never read as 'there is no test'")
    refs = _refs(text("base_ref"), text("head_ref"), text("patch"), text("head_sha"), repo_arg, clones_root)
    if refs is not None:
        repo_arg = str(refs.worktree)
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

    patch_arg = str(refs.patch) if refs is not None else text("patch")
    patch = checked_patch(patch_arg, repo) if patch_arg else None

    head_sha = refs.head_oid if refs is not None else text("head_sha").lower() or None
    if head_sha is not None and not HEX40.fullmatch(head_sha):
        raise UsageError(f"--head-sha must be a full 40-hex commit OID, got {text('head_sha')!r}")

    runner = one_of("runner")

    label = given_or_default("label")
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

    no_network = network_namespace() if switched(options.get("no_network")) else ()
    sandbox = mount_namespace() if switched(options.get("sandbox")) else ()

    cpu_tier = one_of("cpu_tier")
    sparse = given_or_default("cpu_sparse_grid")
    if not sparse.isdigit():
        raise UsageError(f"--cpu-sparse-grid must be a program count (0 = never sparse), got {sparse!r}")

    sensitivity_mode = one_of("sensitivity_mode")
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

    capability = given_or_default("cpu_device_capability")
    if not CAPABILITY.fullmatch(capability):
        raise UsageError(f"--cpu-device-capability must be MAJOR.MINOR (e.g. 8.0, 9.0), got {capability!r}")

    python_path = repeated(options, "python_path")
    for folder in python_path:
        resolved = (repo / folder).resolve()
        if Path(folder).is_absolute() or not resolved.is_relative_to(repo):
            raise UsageError(f"--python-path {folder!r} must be a folder inside the checkout, relative to it")
        if not resolved.is_dir():
            raise UsageError(f"--python-path {folder!r} is not a folder of the checkout")

    from kvtasks.harness import environment  # the harness package imports this one's Request

    env = repeated(options, "env")
    for pair in env:
        name, equals, _ = pair.partition("=")
        why = environment.refusal(name) if equals else "is not NAME=VALUE"
        if why is None and name == text("shape_env"):
            why = "is --shape-env's: the grid sets it"
        if why:
            raise UsageError(f"--env {pair!r}: {name or pair!r} {why}")

    shape_argnames = text("shape_argnames")
    grid = text("grid")
    if grid.count("(") != grid.count(")") or grid.count("[") != grid.count("]"):
        raise UsageError(f"--grid {grid!r} has unbalanced brackets: a tuple cell is written (2049,2)")
    if shape_argnames and grid:
        arity = len(names(shape_argnames))
        for row in grid_rows(grid):
            if len(row) != arity:
                raise UsageError(f"--grid row {','.join(row)!r} has {len(row)} cells; --shape-argnames names {arity}")

    return Request(
        repo=str(repo),
        target=target,
        patch=patch,
        head_sha=head_sha,
        base_ref=refs.base_ref if refs is not None else None,
        head_ref=refs.head_ref if refs is not None else None,
        source=refs.source if refs is not None else None,
        expected_route=text("expected_route"),
        shape_vars=text("shape_vars"),
        shape_env=text("shape_env"),
        shape_arg=text("shape_arg"),
        shape_argnames=shape_argnames,
        grid=grid,
        axis=repeated(options, "axis"),
        runner=runner,
        tol_table=text("tol_table"),
        runtime_module=text("runtime_module"),
        perf_args=text("perf_args"),
        perf_control_column=text("perf_control_column"),
        no_perf=switched(options.get("no_perf")),
        cpu_tier=cpu_tier,
        cpu_sparse_grid=int(sparse),
        cpu_device_capability=capability,
        python_path=tuple(folder.rstrip("/") for folder in python_path),
        env=env,
        no_network=no_network,
        sensitivity_error=sensitivity_error,
        sensitivity_mode=sensitivity_mode,
        sensitivity_output=sensitivity_output,
        sandbox=sandbox,
        label=label,
        out=out,
        host=HostSettings.from_environ(os.environ if environ is None else environ),
    )


def _refs(base_ref: str, head_ref: str, patch: str, head_sha: str, repo: str,
          clones_root: Path | None) -> clones.RefsChange | None:
    """The PR given by refs, prepared in kvtasks' private clone; None when it is given by a patch."""
    if not base_ref and not head_ref:
        return None
    if not (base_ref and head_ref):
        raise UsageError("--base-ref and --head-ref go together: the PR is the head ref's change over its "
                         "merge-base with the base ref")
    if patch or head_sha:
        raise UsageError("give the PR either by refs (--base-ref, --head-ref) or by a patch (--patch, --head-sha), "
                         "not both")
    if clones_root is None:
        raise UsageError("this front door has no workspace to keep a private clone in; give --patch instead")
    try:
        return clones.prepare(repo, base_ref, head_ref, clones_root)
    except clones.RefsError as exc:
        raise UsageError(str(exc)) from None


def repeated(options: Mapping[str, object], name: str) -> tuple[str, ...]:
    """A repeated option's values: a list (the CLI's, a manifest's) or one doit variable joined by
    the option's separator; blank values dropped."""
    value = options.get(name) or ()
    if isinstance(value, str):
        value = value.split(_DECLARED[name].option.joined_by)
    return tuple(str(part).strip() for part in value if str(part).strip())


def switched(value: object) -> bool:
    """A switch as the CLI (a bool), doit (`name=1`) or a manifest (true, "yes") gives it."""
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
