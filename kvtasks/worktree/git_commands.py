"""Git commands on the supplied worktree, and what they say when they fail.

It owns running git (each command in its own process group, killed whole on timeout) and the
errors of that; it never changes the tree itself (only a lend does, in `kvtasks.worktree`).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kvtasks.system import processes

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
_GIT_TIMEOUT_S = 600  # a status with --ignored on a large checkout is the slowest call
# what git reads to choose a repository, index or object store (`git rev-parse --local-env-vars`):
# set by a git hook that runs kvtasks, they would point kvtasks' git at the caller's repository
REPOSITORY_VARIABLES = ("GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
                        "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE",
                        "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
                        "GIT_SHALLOW_FILE", "GIT_COMMON_DIR")


def git_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a git command kvtasks runs: this process's, without the variables that
    choose another repository, plus `extra`."""
    inherited = {name: value for name, value in os.environ.items()
                 if name not in REPOSITORY_VARIABLES and not name.startswith("GIT_CONFIG_KEY_")
                 and not name.startswith("GIT_CONFIG_VALUE_")}
    return {**inherited, **_GIT_ENV, **(extra or {})}


def forget_callers_repository() -> None:
    """A front door's first step: drop the repository a git hook that runs kvtasks has selected,
    so neither kvtasks' git nor GitPython's nor a target's git reaches the caller's repository."""
    for name in [name for name in os.environ if name in REPOSITORY_VARIABLES]:
        del os.environ[name]


class GitFailed(Exception):
    """A git command failed; the message carries git's own last line."""


class NotClean(GitFailed):
    """The tree is not as a lend needs it (no tracked change, untracked or ignored entry): lending it
    would remove what the caller has there, so it is refused untouched."""


class PatchRefused(GitFailed):
    """The patch did not apply to the lent tree, so the head side was not built; the message is
    the one skip reason every stage gives for it."""

    def __init__(self, git_said: str):
        super().__init__(f"the patch could not be applied to the worktree for a head run: {git_said}")


# git commands that only read (status included: GIT_OPTIONAL_LOCKS=0 keeps it from refreshing the
# index): one that outlives a validator killed outright changes nothing, so it needs no death signal
_QUERIES = frozenset({"rev-parse", "show", "cat-file", "status", "diff", "grep", "ls-files", "ls-tree", "log",
                      "merge-base"})


# settings a run could write into the repository's .git/config (which is put back after every
# launch, kvtasks.worktree.held) that would execute a command inside kvtasks' own next git call:
# every git command kvtasks runs overrides them
NEUTRALISED = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external=",
               "-c", "core.pager=cat", "-c", "core.sshCommand=false", "-c", "core.askPass=false")


def run_git(cwd: str | os.PathLike, *args: str, env: dict[str, str] | None = None,
            timeout_s: float = _GIT_TIMEOUT_S, text: bool = True, confined: bool = True,
            stdin_bytes: bytes | None = None) -> processes.Finished:
    """One git command on the repository at `cwd`, in its own process group, killed whole after
    `timeout_s`; `text=False` keeps its output as bytes (a patch's CRs are content).

    Confined (the default), git looks for no repository above `cwd`: a tree whose `.git` vanished
    (removed by a rebuild or a cleanup while a run had it) is then no repository at all, never
    the one that happens to enclose it, whose uncommitted work a restore would otherwise act on."""
    ceiling = {"GIT_CEILING_DIRECTORIES": str(Path(cwd).resolve().parent)} if confined else {}
    return processes.run(["git", *NEUTRALISED, *args], cwd=cwd, env=git_environment({**ceiling, **(env or {})}),
                         timeout_s=timeout_s, text=text, stdin_bytes=stdin_bytes,
                         outlives_us_harmlessly=args[0] in _QUERIES)


def toplevel_is(tree: str | os.PathLike) -> None:
    """Before git changes `tree` (checkout, apply, removal): raise GitFailed unless git's top
    level there is `tree` itself, so a command meant for it cannot reach another repository."""
    path = Path(tree).resolve()
    done = run_git(path, "rev-parse", "--show-toplevel", timeout_s=60)
    top = done.stdout.strip() if done.ok else None
    if top is None or Path(top).resolve() != path:
        found = f"its top level is {top}" if top else f"git finds no repository there ({done.said()})"
        raise GitFailed(f"refusing to change {path}: {found}, not the tree kvtasks was given")


def state_dir(worktree: str | os.PathLike) -> Path:
    """Where kvtasks keeps the lock and the journal of a worktree: in its own git dir
    (`.git/kvtasks/`; a linked worktree's is `.git/worktrees/<name>/kvtasks/`), so every
    KVTASKS_HOME and every TMPDIR sees the same ones."""
    done = run_git(worktree, "rev-parse", "--absolute-git-dir", timeout_s=60)
    if not done.ok:
        raise GitFailed(f"git rev-parse: {done.said()}")
    return Path(done.stdout.strip()) / "kvtasks"


_SOURCE_SUFFIXES = (".py", ".pyi", ".so", ".pyd", ".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp", ".hip", ".pyx",
                    ".pxd", ".json", ".toml", ".cfg")


def source_identity(folder: str | os.PathLike) -> str:
    """What an editable-installed distribution's source is right now, as a SHA-256: in a git
    checkout its HEAD, uncommitted diff and untracked files; elsewhere every source-like file's
    path and content (hidden folders and caches skipped)."""
    root = Path(folder)
    # read-only, and an installed package's folder may sit anywhere inside its checkout
    top = run_git(root, "rev-parse", "--show-toplevel", timeout_s=60, confined=False)
    sha = hashlib.sha256()
    if top.ok:
        for args in (("rev-parse", "HEAD"), ("diff", "HEAD", "--binary", "--", "."),
                     ("ls-files", "-z", "--others", "--exclude-standard", "--", ".")):
            done = run_git(root, *args, confined=False)
            sha.update(f"{args[0]}:{done.returncode}:{done.stdout}".encode("utf-8", "surrogateescape"))
            if args[0] == "ls-files":
                for name in filter(None, done.stdout.split("\0")):
                    path = root / name
                    if path.is_file():
                        sha.update(name.encode("utf-8", "surrogateescape") + hashlib.sha256(path.read_bytes()).digest())
        return sha.hexdigest()
    for where, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            path = Path(where) / name
            if name.endswith(_SOURCE_SUFFIXES) and path.is_file():
                sha.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape")
                           + hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()
