"""The journal of a lent worktree, and the recovery that settles a dead validator's journal.

It owns what a lend owes the tree (kept in the worktree's git dir while it is lent) and undoing
it after a validator died without handing the tree back; it never lends the tree itself.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kvtasks.system import cgroups, processes
from kvtasks.worktree.exclusive import WorktreeBusy
from kvtasks.worktree.git_commands import toplevel_is

if TYPE_CHECKING:
    from kvtasks.worktree import Worktree


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

    def group_started(self, pgid: int, started: int | None, cgroup: str | None = None) -> None:
        self._update(groups=[*(self.pending() or {}).get("groups", []), [pgid, started, cgroup]])

    def kill_groups(self) -> list[int]:
        """Kill what is left of every launch recorded under this journal: its process group, and
        its cgroup where it had one (which also holds what left the group: a dead validator's
        orphans were reparented past it, so only the cgroup still finds them); return the pids
        killed."""
        entry = self.pending() or {}
        killed = []
        for pgid, started, *cgroup in entry.get("groups", []):
            killed += processes.kill_orphaned_group(pgid, started)
            if cgroup and cgroup[0]:
                killed += [pid for pid in cgroups.end(Path(cgroup[0])) if pid not in killed]
        return killed

    def end(self) -> None:
        for path in (self.entry, self.patch_copy):
            path.unlink(missing_ok=True)

    def pending(self) -> dict | None:
        try:
            return json.loads(self.entry.read_text())
        except (OSError, ValueError):
            return None


def recover_dead(tree: "Worktree") -> dict | None:
    """Undo a journal whose validator is dead: kill the process groups it launched (before
    anything else, so none writes into the tree afterwards), reverse exactly its patch, then
    remove the untracked files written since it took the tree. Only ever called holding the
    tree lock; a journal whose validator still runs is that validator's, and is left alone."""
    journal = tree.journal
    entry = journal.pending()
    if entry is None:
        return None
    ours = entry.get("pid") == os.getpid() and entry.get("pid_start") == processes.start_time(os.getpid())
    if not ours and processes.alive(entry.get("pid", 0), entry.get("pid_start")):
        raise WorktreeBusy(f"worktree {tree.path} is busy: kvtasks pid {entry['pid']} has it lent and still runs")
    killed = journal.kill_groups()
    toplevel_is(tree.path)  # the journal is the tree's, so is what it removes
    reversed_ok = None
    if entry.get("patch"):
        reversed_ok = tree.reverse(entry["patch"], entry.get("exclude") or [])
    removed, written = [], []
    for status in tree.status():
        path = tree.path / status.path
        since = path.lstat().st_mtime >= entry["started"] - 1 if path.exists() or path.is_symlink() else True
        if status.untracked and path.exists() and since:
            remove_untracked(path, root=tree.path)
            removed.append(status.path)
        elif not status.untracked and since:  # a committed file the dead run changed (or deleted)
            written.append(status.path)
    if written:
        tree.check_out_base(written)
        removed += written
    journal.end()
    return {**{key: entry.get(key) for key in ("pid", "patch_sha256", "started")}, "patch_reversed": reversed_ok,
            "killed_processes": killed, "removed": removed, "still_dirty": len(tree.status())}


def remove_untracked(path: Path, root: Path) -> None:
    """Remove a file or folder a run left, and every folder it leaves empty up to `root`."""
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
