"""The lent tree: the supplied worktree, read from git and lent to a stage on base or head.

The tree is supplied clean (no tracked, untracked or ignored entries) and is handed back that way
on every exit path, SIGINT, SIGTERM and SIGHUP included. Reading the head side never touches it:
the patch is applied to a private index and object directory (`reading`). The tree changes only
inside `lend(side)`; this package is the only code that runs git (`git_commands`), keeps the
journal of a lend (`journal`), holds the validator lock (`exclusive`), handles signals during a
lend (`signals`) or starts the process that hands a tree back when its lender dies
(`guardian_start`, `guardian`).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Iterator, Literal, Sequence

from kvtasks.system import faults, locks, processes
from kvtasks.worktree.exclusive import (WorktreeBusy, held_by_a_validator, hold_exclusively, open_lock,
                                        release_exclusive)
from kvtasks.worktree.git_commands import (GitFailed, NotClean, PatchRefused, forget_callers_repository,
                                           git_environment, run_git, source_identity, state_dir, toplevel_is)
from kvtasks.worktree.held import HeldFiles
from kvtasks.worktree.journal import Journal, recover_dead, remove_untracked
from kvtasks.worktree.reading import HeadView, StatusEntry, TreeReader, shown
from kvtasks.worktree.signals import Interrupted
from kvtasks.worktree import guardian_start, signals

__all__ = ["GitFailed", "HeadView", "Interrupted", "NotClean", "PatchRefused", "Side", "StatusEntry", "Worktree",
           "WorktreeBusy", "forget_callers_repository", "git_environment", "held_by_a_validator", "hold_exclusively",
           "in_use", "release_exclusive", "run_git", "shown", "source_identity", "state_dir"]


Side = Literal["base", "head"]


class Worktree(TreeReader):
    """The supplied checkout and the patch under review: `lend(side)` is the only way a run gets it."""

    def __init__(self, path: str | os.PathLike, patch: str | None):
        super().__init__(path)
        self.patch = patch  # None: head is base (a run on the checkout as supplied); never defaulted, so
        # no caller can forget it and run base under the name of head
        self._applied_patch: str | None = None
        self._kept_base: list[str] = []  # --exclude arguments the applied patch was applied with
        self._lent_directories: set[str] | None = None
        self.recovered: dict | None = None  # what a lend found a dead validator had left, and undid
        self._held: HeldFiles | None = None  # the repository's control files as supplied, while lent
        self.tampered: list[str] = []  # held files a run changed (put back), until a stage takes them
        self._seen_clean = False  # whether a lend found the tree as supplied clean (asked of git once)

    @cached_property
    def journal(self) -> Journal:
        return Journal(state_dir(self.path))

    # -- changing the tree (only inside a lend, or a recovery's) ----------------------------
    def check_out_base(self, paths: Sequence[str]) -> None:
        """Committed files back to their base version (a recovery's; a lend's restore does its own)."""
        toplevel_is(self.path)
        self._run("checkout", "HEAD", "--", *paths)

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
            if not self._seen_clean:  # the hand-back removes all that is not committed: never lend what the
                dirty = self.status()  # caller still has; once seen clean, every hand-back leaves it so
                if dirty:
                    raise NotClean(f"the worktree is not clean ({shown(dirty)}); it was not lent")
                self._seen_clean = True
            directories = self._lent_directories = self._directories()  # git does not see empty folders
            # before the journal opens: a lender killed from here on leaves a journal the guardian settles
            guard = guardian_start.watch(self.path, os.getpid(), processes.start_time(os.getpid()))
            try:
                self.journal.open(self.path)
                self._held = HeldFiles(self.journal.entry.parent.parent, self.path)
                processes.spawned.append(self.journal.group_started)
                processes.ended.append(self.check_held)
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
        processes.ended.remove(self.check_held)
        # nothing launched in the lend outlives it: a run that escaped its own kill would write
        # into the tree while it is restored
        self.journal.kill_groups()
        self.check_held()
        self._held = None
        self.restore(directories)
        self.journal.end()  # only once the tree is back: a failed restore leaves it for recovery

    def check_held(self) -> None:
        """After a launch (before the next git call) and at hand-back: put back the repository's
        control files a run changed, and keep their paths for the stage to name."""
        if self._held is not None:
            self.tampered += [path for path in self._held.restore() if path not in self.tampered]

    def take_tampered(self) -> list[str]:
        """The held files runs changed since the last call (each was put back)."""
        taken, self.tampered = self.tampered, []
        return taken

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


