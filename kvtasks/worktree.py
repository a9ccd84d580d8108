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
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator, Literal, Sequence

import git

from kvtasks import processes

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
_GIT_TIMEOUT_S = 600  # a status with --ignored on a large checkout is the slowest call
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class GitFailed(Exception):
    """A git command failed; the message carries git's own last line."""


class PatchRefused(GitFailed):
    """The patch did not apply to the lent tree, so the head side was not built; the message is
    the one skip reason every stage gives for it."""

    def __init__(self, git_said: str):
        super().__init__(f"the patch could not be applied to the worktree for a head run: {git_said}")


class WorktreeBusy(Exception):
    """Another validator is using this worktree; running beside it would corrupt both."""


def run_git(cwd: str | os.PathLike, *args: str, env: dict[str, str] | None = None,
        timeout_s: float = _GIT_TIMEOUT_S) -> processes.Finished:
    """One git command in its own process group, killed whole after `timeout_s`."""
    return processes.run(["git", *args], cwd=cwd, env={**os.environ, **_GIT_ENV, **(env or {})}, timeout_s=timeout_s)


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
    top = run_git(root, "rev-parse", "--show-toplevel", timeout_s=60)
    sha = hashlib.sha256()
    if top.ok:
        for args in (("rev-parse", "HEAD"), ("diff", "HEAD", "--binary", "--", "."),
                     ("ls-files", "-z", "--others", "--exclude-standard", "--", ".")):
            done = run_git(root, *args)
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


def _open_lock(worktree: Path, path: Path) -> int:
    """An fd to flock on; a lock file or folder another user owns reads as busy, in one line."""
    try:
        path.parent.mkdir(exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        try:
            return os.open(path, os.O_RDONLY)  # flock needs no write access
        except OSError:
            pass
    except OSError:
        pass
    try:
        owner = f"uid {path.stat().st_uid}" if path.exists() else f"uid {path.parent.stat().st_uid}"
    except OSError:
        owner = "another user"
    raise WorktreeBusy(f"worktree {worktree} is busy: its lock {path} belongs to {owner} and this user cannot "
                       "take it; wait for that user's validator or use another worktree")


_VALIDATOR_LOCKS: dict[str, int] = {}
_DYING_HOLDER_S = 5.0


def hold_exclusively(path: str | os.PathLike) -> None:
    """Take this worktree for the rest of the process, or raise WorktreeBusy at once.

    Worker processes forked afterwards (doit -n) share the lock; another validator does not."""
    worktree = Path(path)
    if str(worktree) in _VALIDATOR_LOCKS:
        return
    lock = state_dir(worktree) / "validator.lock"
    fd = _open_lock(worktree, lock)
    deadline = time.monotonic() + _DYING_HOLDER_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            # a killed validator's workers die with it, a moment later: wait for them, briefly
            if holder.isdigit() and processes.start_time(int(holder)) is None and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
        os.close(fd)
        raise WorktreeBusy(f"worktree {worktree} is busy: another validator (pid {holder or 'unknown'}) is "
                           "validating in it; wait for it or use another worktree") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass  # another user's lock file opened read-only: ours now, without our pid in it
    _VALIDATOR_LOCKS[str(worktree)] = fd


def release_exclusive(path: str | os.PathLike) -> None:
    fd = _VALIDATOR_LOCKS.pop(str(Path(path)), None)
    if fd is not None:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_bytes(data)
    os.replace(temp, path)


class Journal:
    """What a lent worktree owes, kept in its git dir while it is lent: the validator's pid and
    start time, the patch applied to it (a copy of the exact bytes) and every process group
    launched in it. A validator killed outright (SIGKILL, a reboot) leaves it behind; the next
    run kills those groups, reverses that patch and removes what they wrote."""

    def __init__(self, folder: Path):
        self.entry = folder / "journal.json"
        self.patch_copy = folder / "journal.patch"

    def _update(self, **fields) -> None:
        entry = self.pending() or {}
        _write_atomic(self.entry, json.dumps({**entry, **fields}).encode())

    def open(self, worktree: Path) -> None:
        self.entry.parent.mkdir(exist_ok=True)
        self._update(worktree=str(worktree), pid=os.getpid(), pid_start=processes.start_time(os.getpid()),
                     started=time.time(), patch=None, patch_sha256=None, groups=[])

    def patch_applied(self, patch: str, exclude: list[str] = ()) -> None:
        """Record the patch before it touches the tree, with the --exclude arguments it is applied with."""
        data = Path(patch).read_bytes()
        _write_atomic(self.patch_copy, data)
        self._update(patch=str(self.patch_copy), patch_sha256=hashlib.sha256(data).hexdigest(), exclude=list(exclude))

    def patch_reversed(self) -> None:
        self._update(patch=None, patch_sha256=None, exclude=[])

    def group_started(self, pgid: int, started: int | None) -> None:
        self._update(groups=[*(self.pending() or {}).get("groups", []), [pgid, started]])

    def end(self) -> None:
        for path in (self.entry, self.patch_copy):
            path.unlink(missing_ok=True)

    def pending(self) -> dict | None:
        try:
            return json.loads(self.entry.read_text())
        except (OSError, ValueError):
            return None


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


Side = Literal["base", "head"]


class Worktree:
    """The supplied checkout and the patch under review: `lend(side)` is the only way a run gets it."""

    def __init__(self, path: str | os.PathLike, patch: str | None):
        self.path = Path(path)
        self.patch = patch  # None: head is base (a run on the checkout as supplied); never defaulted, so
        # no caller can forget it and run base under the name of head
        self._repo = git.Repo(self.path)
        self._applied_patch: str | None = None
        self._kept_base: list[str] = []  # --exclude arguments the applied patch was applied with
        self._lent_directories: set[str] | None = None
        self.recovered: dict | None = None  # what a lend found a dead validator had left, and undid

    @cached_property
    def journal(self) -> Journal:
        return Journal(state_dir(self.path))

    # -- reading -------------------------------------------------------------------------
    def _run(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> tuple[int, str, str]:
        done = run_git(self.path, *args, env=env)
        status = -1 if done.returncode is None else done.returncode
        if check and not done.ok:
            raise GitFailed(f"git {args[0]}: {done.said()}")
        return status, done.stdout, done.stderr

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
    def apply(self, patch: str, keep_base: Sequence[str] = ()) -> None:
        """Apply the patch; the paths in keep_base keep their base version (absent if the patch adds them)."""
        excludes = [f"--exclude={_literal_pattern(path)}" for path in keep_base]
        self._run("apply", "--check", "--whitespace=nowarn", *excludes, patch)
        self.journal.patch_applied(patch, excludes)
        self._applied_patch, self._kept_base = patch, excludes
        self._run("apply", "--whitespace=nowarn", *excludes, patch)

    def recover(self) -> dict | None:
        """Under the tree lock, undo what a dead validator left (see `_recover_dead`)."""
        with self._tree_lock():
            return self._recover_dead()

    def _recover_dead(self) -> dict | None:
        """Undo a journal whose validator is dead: kill the process groups it launched (before
        anything else, so none writes into the tree afterwards), reverse exactly its patch, then
        remove the untracked files written since it took the tree. Only ever called holding the
        tree lock; a journal whose validator still runs is that validator's, and is left alone."""
        entry = self.journal.pending()
        if entry is None:
            return None
        ours = entry.get("pid") == os.getpid() and entry.get("pid_start") == processes.start_time(os.getpid())
        if not ours and processes.alive(entry.get("pid", 0), entry.get("pid_start")):
            raise WorktreeBusy(f"worktree {self.path} is busy: kvtasks pid {entry['pid']} has it lent and still runs")
        killed = [pid for pgid, started in entry.get("groups", [])
                  for pid in processes.kill_orphaned_group(pgid, started)]
        reversed_ok = None
        if entry.get("patch"):
            excludes = entry.get("exclude") or []
            check = self._run("apply", "-R", "--check", "--whitespace=nowarn", *excludes, entry["patch"], check=False)
            reversed_ok = check[0] == 0
            if reversed_ok:
                self._run("apply", "-R", "--whitespace=nowarn", *excludes, entry["patch"])
        removed = []
        for status in self.status():
            path = self.path / status.path
            if status.untracked and path.exists() and path.lstat().st_mtime >= entry["started"] - 1:
                _remove(path, root=self.path)
                removed.append(status.path)
        self.journal.end()
        return {**{key: entry.get(key) for key in ("pid", "patch_sha256", "started")}, "patch_reversed": reversed_ok,
                "killed_processes": killed, "removed": removed, "still_dirty": len(self.status())}

    def _directories(self) -> set[str]:
        found = set()
        for folder, dirs, _ in os.walk(self.path):
            dirs[:] = [d for d in dirs if d != ".git"]
            found.update(str(Path(folder, d).relative_to(self.path)) for d in dirs)
        return found

    def quiescent(self):
        """Hold off every lender (parallel workers of this validator) while the tree is read."""
        return self._tree_lock()

    def _tree_lock(self):
        return _serialised(self.path, self.journal.entry.parent / "tree.lock")

    @contextmanager
    def lend(self, side: Side, keep_base: Sequence[str] = ()) -> Iterator["Worktree"]:
        """Lend the tree on `side` for the runs of one stage, and hand it back clean on every path.

        Base is the tree as supplied; head has the patch applied (the paths in keep_base stay at
        base). A patch that does not apply raises PatchRefused once the tree is back: no run ever
        sees a half-built head."""
        with self.handback():
            if side == "head":
                self._apply_patch(keep_base)
            yield self

    def switch(self, side: Side, keep_base: Sequence[str] = ()) -> list[str]:
        """Mid-lend: turn the tree to `side` (the clean base, then the patch for head); return
        what earlier runs had left and was removed. Raises PatchRefused as `lend` does."""
        removed = self.to_base()
        if side == "head":
            self._apply_patch(keep_base)
        return removed

    def _apply_patch(self, keep_base: Sequence[str]) -> None:
        if self.patch is None:
            return
        try:
            self.apply(self.patch, keep_base)
        except GitFailed as exc:
            raise PatchRefused(str(exc).removeprefix("git apply: ")) from None

    @contextmanager
    def handback(self) -> Iterator["Worktree"]:
        """Lend the tree to a run; on every exit path hand it back clean, as supplied."""
        with _signals_raise(), self._tree_lock():
            recovered = self._recover_dead()
            if recovered is not None:
                self.recovered = recovered
                print(f"kvtasks: a dead validator (pid {recovered['pid']}) had this worktree lent; its processes "
                      "were killed and the tree was restored", file=sys.__stderr__)
            directories = self._lent_directories = self._directories()  # git does not see empty folders
            self.journal.open(self.path)
            processes.spawned.append(self.journal.group_started)
            try:
                yield self
            except Interrupted as interrupted:
                with _signals_deferred():
                    self._hand_back(directories)
                print(f"kvtasks: interrupted by {interrupted.name}; the worktree was restored "
                      "and no report is written", file=sys.__stderr__)
                raise
            except BaseException:
                with _signals_deferred():
                    self._hand_back(directories)
                raise
            else:
                with _signals_deferred():
                    self._hand_back(directories)

    def _hand_back(self, directories: set[str]) -> None:
        processes.spawned.remove(self.journal.group_started)
        self.restore(directories)
        self.journal.end()  # only once the tree is back: a failed restore leaves it for recovery

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
            self._run("apply", "-R", "--whitespace=nowarn", *self._kept_base, patch, check=False)
            self.journal.patch_reversed()
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
        return [entry.path for entry in leftovers]


def _literal_pattern(path: str) -> str:
    """A path as a git apply --exclude pattern that matches only itself."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in path)


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
def _serialised(worktree: Path, lock: Path) -> Iterator[None]:
    """One lender at a time: parallel workers of one validator take turns with the tree."""
    fd = _open_lock(worktree, lock)
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
