"""One validator per worktree: the validator lock, taken before anything runs and held to the end.

It owns that lock and the one-line refusal a busy worktree gets; it never lends the tree (the
tree lock that parallel workers of one validator take turns on is the lend's).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from kvtasks.system import locks, processes
from kvtasks.worktree.git_commands import GitFailed, state_dir

_VALIDATOR_LOCKS: dict[str, int] = {}
_DYING_HOLDER_S = 5.0


class WorktreeBusy(Exception):
    """Another validator is using this worktree; running beside it would corrupt both."""


def open_lock(worktree: Path, path: Path) -> int:
    """An fd to flock on; a lock file or folder another user owns reads as busy, in one line."""
    try:
        return locks.open_lock(path)
    except locks.Unopenable as refused:
        raise WorktreeBusy(f"worktree {worktree} is busy: its lock {path} belongs to {refused.owner} and this user "
                           "cannot take it; wait for that user's validator or use another worktree") from None


def hold_exclusively(path: str | os.PathLike) -> None:
    """Take this worktree for the rest of the process, or raise WorktreeBusy at once.

    Worker processes forked afterwards (doit -n) share the lock; another validator does not."""
    worktree = Path(path)
    if str(worktree) in _VALIDATOR_LOCKS:
        return
    fd = open_lock(worktree, state_dir(worktree) / "validator.lock")
    deadline = time.monotonic() + _DYING_HOLDER_S
    while not locks.take(fd):
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        # a killed validator's workers die with it, a moment later: wait for them, briefly
        if holder.isdigit() and processes.start_time(int(holder)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
            continue
        os.close(fd)
        raise WorktreeBusy(f"worktree {worktree} is busy: another validator (pid {holder or 'unknown'}) is "
                           "validating in it; wait for it or use another worktree")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass  # another user's lock file opened read-only: ours now, without our pid in it
    _VALIDATOR_LOCKS[str(worktree)] = fd


def held_by_a_validator(path: str | os.PathLike) -> bool:
    """Whether a running validator holds this worktree now (one that is no git worktree any more
    is held by nobody; another user's lock counts as held)."""
    worktree = Path(path)
    if not (worktree / ".git").exists():
        return False
    try:
        fd = locks.try_hold(state_dir(worktree) / "validator.lock")
    except GitFailed:
        return False
    except OSError:
        return True
    if fd is None:
        return True
    os.close(fd)
    return False


def release_exclusive(path: str | os.PathLike) -> None:
    fd = _VALIDATOR_LOCKS.pop(str(Path(path)), None)
    if fd is not None:
        os.close(fd)
