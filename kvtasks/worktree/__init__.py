"""The lent tree: the supplied worktree, read from git and lent to a stage on base or head.

The tree is supplied clean (no tracked, untracked or ignored entries) and is handed back that way
on every exit path, SIGINT, SIGTERM and SIGHUP included. Reading the head side never touches it:
the patch is applied to a private index and object directory. The tree changes only inside
`lend(side)`; this package is the only code that runs git (`git_commands`), keeps the journal of
a lend (`journal`), holds the validator lock (`exclusive`), handles signals during a lend
(`signals`) or starts the process that hands a tree back when its lender dies (`guardian`).
"""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterator, Literal, Sequence

import git

from kvtasks import faults, locks, processes
from kvtasks.worktree.exclusive import (WorktreeBusy, held_by_a_validator, hold_exclusively, open_lock,
                                        release_exclusive)
from kvtasks.worktree.git_commands import (GitFailed, PatchRefused, forget_callers_repository, git_environment, run_git,
                                           source_identity, state_dir, toplevel_is)
from kvtasks.worktree.journal import Journal, recover_dead, remove_untracked
from kvtasks.worktree.signals import Interrupted
from kvtasks.worktree import guardian, signals

__all__ = ["GitFailed", "HeadView", "Interrupted", "PatchRefused", "Side", "StatusEntry", "Worktree", "WorktreeBusy",
           "forget_callers_repository", "git_environment", "held_by_a_validator", "hold_exclusively", "in_use",
           "release_exclusive", "run_git", "source_identity", "state_dir"]


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

# the merged heads this process already built, by (worktree, base commit, patch content): each group
# of a validation asks for its PR's, and building one costs git a private index and object store
_HEAD_VIEWS: dict[tuple[str, str, str], HeadView] = {}
_HEAD_VIEWS_KEPT = 8


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
        # base files already read: HEAD never moves while kvtasks holds the tree (a lend changes the
        # working tree only), and the same file is read by several stages
        self._base_texts: dict[str, str | None] = {}

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
        if path not in self._base_texts:
            status, out, _ = self._run("show", f"HEAD:{path}", check=False)
            self._base_texts[path] = out if status == 0 else None
        return self._base_texts[path]

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
        key = (str(self.path.resolve()), self.head_oid(), hashlib.sha256(Path(patch).read_bytes()).hexdigest())
        if key not in _HEAD_VIEWS:
            while len(_HEAD_VIEWS) >= _HEAD_VIEWS_KEPT:
                _HEAD_VIEWS.pop(next(iter(_HEAD_VIEWS)))
            _HEAD_VIEWS[key] = self._merged_head(patch)
        return _HEAD_VIEWS[key]

    def _merged_head(self, patch: str) -> HeadView:
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

    def check_out_base(self, paths: Sequence[str]) -> None:
        """Committed files back to their base version (a recovery's; a lend's restore does its own)."""
        toplevel_is(self.path)
        self._run("checkout", "HEAD", "--", *paths)

    def check_apply(self, patch: str) -> None:
        self._run("apply", "--check", "--whitespace=nowarn", patch)

    # -- changing the tree (only inside a lend) -------------------------------------------
    def apply(self, patch: str, keep_base: Sequence[str] = ()) -> None:
        """Apply the patch; the paths in keep_base keep their base version (absent if the patch adds them)."""
        excludes = [f"--exclude={_literal_pattern(path)}" for path in keep_base]
        toplevel_is(self.path)
        self._run("apply", "--check", "--whitespace=nowarn", *excludes, patch)
        self.journal.patch_applied(patch, excludes)
        self._applied_patch, self._kept_base = patch, excludes
        self._run("apply", "--whitespace=nowarn", *excludes, patch)
        faults.point("apply")

    def recover(self) -> dict | None:
        """Under the tree lock, undo what a dead validator left (see `journal.recover_dead`)."""
        with self._tree_lock():
            return recover_dead(self)

    def reverse(self, patch: str, excludes: Sequence[str]) -> bool:
        """Reverse exactly `patch` (applied with `excludes`) when it still reverses; say whether it did."""
        toplevel_is(self.path)
        if self._run("apply", "-R", "--check", "--whitespace=nowarn", *excludes, patch, check=False)[0] != 0:
            return False
        self._run("apply", "-R", "--whitespace=nowarn", *excludes, patch)
        return True

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
        """One lender at a time: parallel workers of one validator take turns with the tree."""
        return locks.held(open_lock(self.path, self.journal.entry.parent / "tree.lock"))

    @contextmanager
    def lend(self, side: Side, keep_base: Sequence[str] = ()) -> Iterator["Worktree"]:
        """Lend the tree on `side` for the runs of one stage, and hand it back clean on every path.

        Base is the tree as supplied; head has the patch applied (the paths in keep_base stay at
        base). A patch that does not apply raises PatchRefused once the tree is back: no run ever
        sees a half-built head."""
        with self._lent():
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
    def _lent(self) -> Iterator["Worktree"]:
        """The tree as supplied, for the block; on every exit path handed back clean."""
        with signals.raising(), self._tree_lock():
            recovered = recover_dead(self)
            if recovered is not None:
                self.recovered = recovered
                print(f"kvtasks: a dead validator (pid {recovered['pid']}) had this worktree lent; its processes "
                      "were killed and the tree was restored", file=sys.__stderr__)
            directories = self._lent_directories = self._directories()  # git does not see empty folders
            # before the journal opens: a lender killed from here on leaves a journal the guardian settles
            guard = guardian.watch(self.path, os.getpid(), processes.start_time(os.getpid()))
            try:
                self.journal.open(self.path)
                processes.spawned.append(self.journal.group_started)
                try:
                    yield self
                except BaseException as raised:
                    self._give_back(directories, raised)
                    raise
                self._give_back(directories, None)
            finally:
                guard.release()

    def _give_back(self, directories: set[str], raised: BaseException | None) -> None:
        """Restore the tree with signals held back. An interrupt wins over everything else: a
        restore that fails under it is said and left to the journal's recovery, never raised in
        its place, or an `except Exception` above would carry on validating after the signal."""
        failure = None
        try:
            with signals.deferred():
                try:
                    self._hand_back(directories)
                except Exception as exc:
                    failure = exc
        except Interrupted as late:  # arrived during the restore, delivered as signals were let through
            raised = raised if isinstance(raised, Interrupted) else late
        if not isinstance(raised, Interrupted) and signals.received:
            raised = Interrupted(signals.received[0])  # a handler's raise was swallowed on the way up
        if isinstance(raised, Interrupted):
            said = "the worktree was restored" if failure is None else \
                f"the worktree was not handed back ({failure}); its guardian restores it once this process has gone"
            print(f"kvtasks: interrupted by {raised.name}; {said} and no report is written", file=sys.__stderr__)
            raised.said = True
            raise raised
        if failure is not None:
            raise failure

    def _hand_back(self, directories: set[str]) -> None:
        processes.spawned.remove(self.journal.group_started)
        # nothing launched in the lend outlives it: a run that escaped its own kill would write
        # into the tree while it is restored
        self.journal.kill_groups()
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
        toplevel_is(self.path)
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
                remove_untracked(self.path / entry.path, root=self.path)
        if directories is not None:
            for folder in sorted(self._directories() - directories, key=len, reverse=True):
                path = self.path / folder
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
                    leftovers.append(StatusEntry("??", folder + "/"))
        # nothing was left: the status just read is the tree's (nothing runs in it during a restore)
        remaining = self.status() if leftovers else []
        if remaining:
            raise GitFailed(f"worktree could not be restored: {[e.path for e in remaining][:5]}")
        return [entry.path for entry in leftovers]


def in_use(path: str | os.PathLike) -> bool:
    """Whether a tree is in use: a running validator holds it, or a lend of it is open or being
    recovered (a fleet node lends without the validator lock; a guardian recovers under the tree
    lock)."""
    tree = Path(path)
    if held_by_a_validator(tree):
        return True
    if not (tree / ".git").exists():
        return False
    try:
        folder = state_dir(tree)
    except GitFailed:
        return False
    if (folder / "journal.json").is_file():
        return True
    if not folder.is_dir():
        return False
    fd = locks.try_hold(folder / "tree.lock")
    if fd is None:
        return True
    os.close(fd)
    return False


def _literal_pattern(path: str) -> str:
    """A path as a git apply --exclude pattern that matches only itself."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in path)


