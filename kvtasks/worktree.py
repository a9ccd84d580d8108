"""Git state of the supplied worktree: the only module that runs git.

The tree is supplied clean (no tracked, untracked or ignored entries) and is handed back that way
on every exit path. Reading the head side never touches it: the patch is applied to a private
index and object directory, so file contents and provenance of the merged head come from git
objects. The tree itself changes only inside `handback()`, which restores it whatever happens,
SIGINT, SIGTERM and SIGHUP included.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import git

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class GitFailed(Exception):
    """A git command failed; the message carries git's own last line."""


class WorktreeBusy(Exception):
    """Another validator is using this worktree; running beside it would corrupt both."""


def _lock_path(worktree: Path, purpose: str) -> Path:
    tag = hashlib.sha256(str(worktree.resolve()).encode()).hexdigest()[:16]
    return Path(os.environ.get("KVTASKS_LOCK_DIR") or tempfile.gettempdir()) / f"kvtasks-worktree-{tag}.{purpose}.lock"


_VALIDATOR_LOCKS: dict[str, int] = {}


def hold_exclusively(path: str | os.PathLike) -> None:
    """Take this worktree for the rest of the process, or raise WorktreeBusy at once.

    Worker processes forked afterwards (doit -n) share the lock; another validator does not."""
    worktree = Path(path)
    if str(worktree) in _VALIDATOR_LOCKS:
        return
    lock = _lock_path(worktree, "validator")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        raise WorktreeBusy(f"worktree {worktree} is busy: another validator (pid {holder or 'unknown'}) is "
                           "validating in it; wait for it or use another worktree") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _VALIDATOR_LOCKS[str(worktree)] = fd


def release_exclusive(path: str | os.PathLike) -> None:
    fd = _VALIDATOR_LOCKS.pop(str(Path(path)), None)
    if fd is not None:
        os.close(fd)


class Interrupted(SystemExit):
    """A signal arrived while the tree was ours; raised so every `finally` restores state."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass(frozen=True)
class StatusEntry:
    code: str  # the two porcelain letters: ' M', '??', '!!', 'D ' ...
    path: str

    @property
    def untracked(self) -> bool:
        return self.code in ("??", "!!")


@dataclass
class HeadView:
    """The merged head as git objects: what the patch changes and the head text of any file."""

    changes: dict[str, str] = field(default_factory=dict)  # path -> A / M / D / R...
    _blobs: dict[str, bytes | None] = field(default_factory=dict)

    def read(self, path: str) -> str | None:
        blob = self._blobs.get(path)
        return None if blob is None else blob.decode("utf-8", errors="replace")


class Worktree:
    def __init__(self, path: str | os.PathLike, journal=None):
        self.path = Path(path)
        self._journal = journal  # store.Journal: records an applied patch until it is reversed
        self._repo = git.Repo(self.path)
        self._applied_patch: str | None = None
        self._lent_directories: set[str] | None = None

    # -- reading -------------------------------------------------------------------------
    def _run(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> tuple[int, str, str]:
        status, out, err = self._repo.git.execute(
            ["git", *args],
            with_extended_output=True,
            with_exceptions=False,
            env={**_GIT_ENV, **(env or {})},
            strip_newline_in_stdout=False,
        )
        if check and status != 0:
            last = (err.strip().splitlines() or [f"exit {status}"])[-1]
            raise GitFailed(f"git {args[0]}: {last}")
        return status, out, err

    def head_oid(self) -> str:
        return self._run("rev-parse", "HEAD")[1].strip()

    def kind(self) -> str:
        if (self.path / "aiter" / "__init__.py").is_file():
            return "aiter"
        if (self.path / "python" / "flydsl" / "__init__.py").is_file():
            return "flydsl"
        return "unknown"

    def status(self) -> list[StatusEntry]:
        """Every tracked change, untracked file and ignored path, one entry each."""
        out = self._run("status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all")[1]
        entries: list[StatusEntry] = []
        fields = out.split("\0")
        index = 0
        while index < len(fields):
            item = fields[index]
            index += 1
            if not item:
                continue
            code, path = item[:2], item[3:]
            entries.append(StatusEntry(code, path))
            if code[0] in "RC":
                index += 1  # the rename source follows as its own field
        return entries

    def read_base(self, path: str) -> str | None:
        status, out, _ = self._run("show", f"HEAD:{path}", check=False)
        return out if status == 0 else None

    def grep_base(self, needles: list[str], suffix: str = ".py") -> list[str]:
        """Files of the base commit containing any of `needles` (fixed strings), in one git call."""
        args = ["grep", "-l", "-F", "-z", *(arg for needle in needles for arg in ("-e", needle)), "HEAD", "--",
                f"*{suffix}"]
        status, out, _ = self._run(*args, check=False)
        return [item.split(":", 1)[1] for item in out.split("\0") if item] if status == 0 else []

    def exists_on_base(self, path: str) -> bool:
        return self._run("cat-file", "-e", f"HEAD:{path}", check=False)[0] == 0

    def head_view(self, patch: str) -> HeadView:
        """Apply `patch` to a private index and object store; raise GitFailed on conflict.

        The head text of every changed path is read while the private index exists."""
        objects = self._run("rev-parse", "--path-format=absolute", "--git-common-dir")[1].strip()
        with tempfile.TemporaryDirectory(prefix="kvtasks-head-") as scratch:
            (Path(scratch) / "objects" / "info").mkdir(parents=True)
            env = {
                "GIT_INDEX_FILE": str(Path(scratch) / "index"),
                "GIT_OBJECT_DIRECTORY": str(Path(scratch) / "objects"),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(objects) / "objects"),
            }
            self._run("read-tree", "HEAD", env=env)
            self._run("apply", "--cached", "--whitespace=nowarn", patch, env=env)
            out = self._run("diff", "--cached", "--name-status", "-z", "--no-renames", "HEAD", env=env)[1]
            parts = [part for part in out.split("\0") if part]
            changes = dict(zip(parts[1::2], (code[0] for code in parts[0::2])))
            blobs: dict[str, bytes | None] = {}
            for path in changes:
                status, content, _ = self._run("show", f":{path}", env=env, check=False)
                blobs[path] = content.encode("utf-8", "surrogateescape") if status == 0 else None
        return HeadView(changes=changes, _blobs=blobs)

    def check_apply(self, patch: str) -> None:
        self._run("apply", "--check", "--whitespace=nowarn", patch)

    # -- changing the tree (only inside handback) -----------------------------------------
    def apply(self, patch: str) -> None:
        self._run("apply", "--check", "--whitespace=nowarn", patch)
        if self._journal is not None:
            self._journal.begin(self.path, patch)
        self._applied_patch = patch
        self._run("apply", "--whitespace=nowarn", patch)

    def recover(self) -> dict | None:
        """Undo what a killed validator left: reverse exactly its journalled patch, then remove
        the untracked files it wrote after it started. Returns what was done, or None."""
        entry = self._journal.pending(self.path) if self._journal is not None else None
        if entry is None:
            return None
        reversed_ok = self._run("apply", "-R", "--check", "--whitespace=nowarn", entry["patch"], check=False)[0] == 0
        if reversed_ok:
            self._run("apply", "-R", "--whitespace=nowarn", entry["patch"])
        removed = []
        for status in self.status():
            path = self.path / status.path
            if status.untracked and path.exists() and path.lstat().st_mtime >= entry["started"] - 1:
                _remove(path, root=self.path)
                removed.append(status.path)
        self._journal.end(self.path)
        return {**entry, "patch_reversed": reversed_ok, "removed": removed, "still_dirty": len(self.status())}

    def _directories(self) -> set[str]:
        found = set()
        for folder, dirs, _ in os.walk(self.path):
            dirs[:] = [d for d in dirs if d != ".git"]
            found.update(str(Path(folder, d).relative_to(self.path)) for d in dirs)
        return found

    def quiescent(self):
        """Hold off every lender (parallel workers of this validator) while the tree is read."""
        return _serialised(self.path)

    @contextmanager
    def handback(self) -> Iterator["Worktree"]:
        """Lend the tree to a run; on every exit path hand it back clean, as supplied."""
        with _signals_raise(), _serialised(self.path):
            directories = self._lent_directories = self._directories()  # git does not see empty folders
            try:
                yield self
            except Interrupted as interrupted:
                with _signals_deferred():
                    self.restore(directories)
                print(f"kvtasks: interrupted by {interrupted.name}; the worktree was restored "
                      "and no report is written", file=sys.__stderr__)
                raise
            except BaseException:
                with _signals_deferred():
                    self.restore(directories)
                raise
            else:
                with _signals_deferred():
                    self.restore(directories)

    def write_file(self, path: str, text: str) -> None:
        """Mid-lend only: place a file (a transplanted bench) that restore will remove again."""
        destination = (self.path / path).resolve()
        if not destination.is_relative_to(self.path.resolve()):
            raise GitFailed(f"{path} is outside the worktree")
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(text)

    def to_base(self) -> list[str]:
        """Mid-lend: back to the clean base tree (patch reversed, whatever a run wrote removed)."""
        return self.restore(self._lent_directories)

    def restore(self, directories: set[str] | None = None) -> list[str]:
        """Reverse the applied patch, then remove whatever else is there (and, given the folders
        that existed before, every new empty folder); return what was removed."""
        if self._applied_patch is not None:
            patch, self._applied_patch = self._applied_patch, None
            self._run("apply", "-R", "--whitespace=nowarn", patch, check=False)
        leftovers = self.status()
        tracked = [entry.path for entry in leftovers if not entry.untracked]
        if tracked:
            self._run("checkout", "HEAD", "--", *tracked)
        for entry in leftovers:
            if entry.untracked:
                _remove(self.path / entry.path, root=self.path)
        if directories is not None:
            for folder in sorted(self._directories() - directories, key=len, reverse=True):
                path = self.path / folder
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
                    leftovers.append(StatusEntry("??", folder + "/"))
        remaining = self.status()
        if remaining:
            raise GitFailed(f"worktree could not be restored: {[e.path for e in remaining][:5]}")
        if self._journal is not None:
            self._journal.end(self.path)
        return [entry.path for entry in leftovers]


def _remove(path: Path, root: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    parent = path.parent
    # git drops directories it no longer tracks anything in; so must we, or status stays clean
    # while the tree is not byte-identical to what was supplied.
    while parent != root and parent.is_relative_to(root) and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


@contextmanager
def _serialised(worktree: Path) -> Iterator[None]:
    """One lender at a time: parallel workers of one validator take turns with the tree."""
    fd = os.open(_lock_path(worktree, "handback"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _signals_raise() -> Iterator[None]:
    if not _in_main_thread():
        yield
        return

    def raise_interrupted(signum, _frame):
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, raise_interrupted) for sig in _HANDLED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold signals back while restoring; one arriving now is delivered once the tree is back."""
    if not _in_main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HANDLED_SIGNALS)
