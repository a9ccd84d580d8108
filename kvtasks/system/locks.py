"""Exclusive file locks (flock), the one way kvtasks takes a lock: a worktree, its tree, a GPU claim.

A lock is held by an open file descriptor, so the kernel drops it when its holder dies, however it
dies. This module opens and takes locks; it never decides what a lock protects or how a refusal is
worded (the caller knows what is busy).
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class Unopenable(OSError):
    """The lock file cannot be opened by this user: `owner` names who has it."""

    def __init__(self, path: Path, owner: str):
        super().__init__(f"{path} belongs to {owner}")
        self.path, self.owner = path, owner


def open_lock(path: Path) -> int:
    """An fd to flock on, creating the file (and its folder) when needed; another user's lock file
    opens read-only (flock needs no write access). Raises Unopenable when neither works."""
    try:
        path.parent.mkdir(exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            pass
    except OSError:
        pass
    try:
        owner = f"uid {path.stat().st_uid}" if path.exists() else f"uid {path.parent.stat().st_uid}"
    except OSError:
        owner = "another user"
    raise Unopenable(path, owner)


def take(fd: int) -> bool:
    """Take the exclusive lock on `fd` at once: False when another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def try_hold(path: Path) -> int | None:
    """The exclusive lock on `path`, taken at once: the fd that holds it (closing it releases the
    lock), or None when another holder has it."""
    fd = open_lock(path)
    if take(fd):
        return fd
    os.close(fd)
    return None


@contextmanager
def held(fd: int) -> Iterator[None]:
    """Wait for the exclusive lock on `fd` (from open_lock) and hold it for the block; the fd is
    closed after it, which releases the lock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
