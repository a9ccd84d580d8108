"""The embedded demo: a small numpy kernel repository and five pull requests against it.

`materialize` turns the sources shipped here into a real git repository (base on `main`, one
branch per PR whose tip is that PR's head OID). Authors and dates are fixed, so the base and head
OIDs are the same on every machine and evidence keyed by them stays comparable.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from kvtasks.system import locks
from kvtasks.worktree import GitFailed, Worktree, WorktreeBusy, held_by_a_validator, run_git

SOURCES = Path(__file__).parent / "repo"
PATCHES = Path(__file__).parent / "prs"
DEFAULT_PR = "hidden-tail-bug"

# What each PR shows; the validation options are the same for all of them, but for the target of one.
PRS = {
    "hidden-tail-bug": "tail tiles dropped from the kernel; the non-aligned test rows commented out",
    "loosen-tolerance": "test-only change widening the f32 tolerance from 1e-5 to 1e-2",
    "clean-fix": "a correct single-pass store plus a new non-aligned test row",
    "weakened-oracle": "the tail tile dropped from the row sum, hidden by a new rtol and a skip of f16 tail rows",
    "hostile-helper": "the tail tile dropped from the row sum, hidden by a tolerance widened in the package helper "
                      "module the test imports it from",
}
OPTIONS = {
    "target": "tests/test_softmax.py",
    "expected_route": "kernels.tiled_softmax:softmax_rows",
    "shape_vars": "M,N,dtype_str",
    "shape_env": "DEMO_SOFTMAX_SHAPES",
    "grid": "64,2000,f32;4096,192,f32;7,4097,f16",
    "tol_table": "f32=1e-5,f16=2e-3",
}
# the PRs judged by another target of the same repository
TARGETS = {"hostile-helper": "tests/test_softmax_rows.py"}
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "kvtasks demo",
    "GIT_AUTHOR_EMAIL": "demo@kvtasks.invalid",
    "GIT_COMMITTER_NAME": "kvtasks demo",
    "GIT_COMMITTER_EMAIL": "demo@kvtasks.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


class UnknownDemo(ValueError):
    pass


def patch_path(name: str) -> Path:
    if name not in PRS:
        raise UnknownDemo(f"unknown demo PR {name!r}; choose one of {', '.join(PRS)}")
    return PATCHES / f"{name}.patch"


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for path in sorted([*SOURCES.rglob("*"), *PATCHES.glob("*.patch")]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(SOURCES.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _git(repo: Path, *args: str) -> str:
    done = run_git(repo, *args, env=_GIT_IDENTITY)
    if not done.ok:
        raise GitFailed(f"git {args[0]}: {done.said()}")
    return done.stdout.strip()


def materialize(root: Path) -> tuple[Path, dict[str, str]]:
    """Build (or reuse) the demo repository under `root`; return it and each PR's head OID.

    One process at a time builds it, and a repository a validator holds is never rebuilt: its
    `.git` removed under a running validation would leave that validation's git without a tree."""
    repo = root / "demo" / "softmax-kernels"
    repo.parent.mkdir(parents=True, exist_ok=True)
    with locks.held(locks.open_lock(repo.parent / "materialize.lock")):
        if held_by_a_validator(repo):  # its validator's lock refuses a second validation in one line
            return repo, {name: _git(repo, "rev-parse", f"pr/{name}") for name in PRS}
        return _materialize(repo)


def _materialize(repo: Path) -> tuple[Path, dict[str, str]]:
    marker = f"kvtasks demo base {_fingerprint()}"
    if (repo / ".git").is_dir():
        try:  # what a killed validator left, under the tree lock its guardian may hold right now
            Worktree(repo, None).recover()
        except (GitFailed, WorktreeBusy):
            pass  # judged below, and built again
        try:
            clean = _git(repo, "status", "--porcelain", "--ignored") == ""
            current = _git(repo, "log", "-1", "--format=%s", "main") == marker
            on_main = _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
        except GitFailed:
            clean = current = on_main = False
        if clean and current and on_main:
            return repo, {name: _git(repo, "rev-parse", f"pr/{name}") for name in PRS}
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(SOURCES, repo, ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", marker)
    heads = {}
    for name in PRS:
        _git(repo, "checkout", "-q", "-b", f"pr/{name}", "main")
        _git(repo, "apply", "--index", str(patch_path(name)))
        _git(repo, "commit", "-q", "-m", f"demo PR: {PRS[name]}")
        heads[name] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    return repo, heads


def options(root: Path, name: str = DEFAULT_PR) -> dict[str, str]:
    """The validation options for one demo PR, as the flag CLI or doit would pass them."""
    patch = patch_path(name)
    repo, heads = materialize(root)
    label = "demo" if name == DEFAULT_PR else f"demo-{name}"
    return {**OPTIONS, "target": TARGETS.get(name, OPTIONS["target"]), "repo": str(repo), "patch": str(patch),
            "head_sha": heads[name], "label": label}
