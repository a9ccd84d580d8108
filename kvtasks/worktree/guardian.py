"""The guardian of a lent tree: a small process that outlives its validator only to hand the tree back.

Every lend starts one (`guardian_start.watch`), detached in a session of its own and no child of its lender (it
forks once more and the first process exits), so nothing that kills the validator's process
group, its doit worker or its Ray worker (Ray kills a dying worker's children) takes it along,
and not armed to die with it. The lender holds the write end of a pipe whose read end is the guardian's stdin; the
kernel closes that end however the lender dies (SIGKILL and the OOM killer included), so the
guardian learns of the death at once, with no polling while the lend goes well. At the end of a
lend the lender closes it itself, after the journal is settled.

On end of input the guardian reads the tree's journal. None, or one another live process now
holds (the next lend of a parallel worker): its work is done. Still the lender's: it waits for
that process to be gone, then, under the tree lock, kills the process groups the journal recorded
and undoes the lend through the dead-owner recovery every run does (`Worktree.recover`). It holds
no GPU, writes no evidence, and acts on the one tree it was given, only through its journal.

It is started by path, not as a module of the package, so its start imports nothing of kvtasks
(git, pydantic): a lend pays for one small process, and only a recovery imports the rest.

    python kvtasks/worktree/guardian.py TREE PID PID_START     (stdin: the lender's pipe)
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

_POLL_S = 0.05


def _alive(pid: int, started: int | None) -> bool:
    # the same reading as kvtasks.system.processes.alive, without importing the package to make it
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] != "Z" and (started is None or int(fields[19]) == started)


def _pending(journal: Path) -> dict | None:
    try:
        return json.loads(journal.read_text())
    except (OSError, ValueError):
        return None


def guard(tree: Path, pid: int, pid_start: int | None) -> int:
    """Wait for the lender's end; hand the tree back if its lend is still open. Return an exit status."""
    while os.read(0, 4096):  # nothing is ever written: only the end of input matters
        pass
    journal = _journal_path(tree)
    if journal is None:
        return 0  # no git dir there any more: not a tree to touch
    while True:
        entry = _pending(journal)
        if entry is None or (entry.get("pid"), entry.get("pid_start")) != (pid, pid_start):
            return 0  # settled, or another process's lend now
        if not _alive(pid, pid_start):
            break
        time.sleep(_POLL_S)  # the pipe closes as the process exits, a moment before it is gone
    return _recover(tree, pid)


def _journal_path(tree: Path) -> Path | None:
    git_dir = tree / ".git"
    if git_dir.is_file():  # a linked worktree: "gitdir: <path>"
        text = git_dir.read_text().strip()
        if not text.startswith("gitdir:"):
            return None
        git_dir = (tree / text.split(":", 1)[1].strip()).resolve()
    return git_dir / "kvtasks" / "journal.json" if git_dir.is_dir() else None


def _recover(tree: Path, pid: int) -> int:
    from kvtasks.worktree import GitFailed, Worktree, WorktreeBusy

    try:
        recovered = Worktree(tree, None).recover()
    except WorktreeBusy:
        return 0  # another validator took the tree meanwhile, after recovering it itself
    except GitFailed as exc:
        print(f"kvtasks guardian: the worktree {tree} of pid {pid} was not handed back: {exc}", file=sys.stderr)
        return 1
    if recovered is not None:
        patch = {True: "its patch reversed", False: "its patch did not reverse", None: "no patch applied"}
        left = f"; the tree is NOT handed back: {recovered['still_dirty']} entries still differ from base" \
            if recovered["still_dirty"] else ""
        print(f"kvtasks guardian: pid {pid} died with the worktree {tree} lent: "
              f"{len(recovered['killed_processes'])} leftover processes killed, {patch[recovered['patch_reversed']]}, "
              f"{len(recovered['removed'])} files it wrote removed or restored{left}", file=sys.stderr)
    return 0 if recovered is None or not recovered["still_dirty"] else 1


if __name__ == "__main__":
    if os.fork():  # the lender reaps this first process at once: the guardian is no child of the lender
        os._exit(0)
    sys.path[0] = str(Path(__file__).resolve().parents[2])  # the checkout this file belongs to, not its folder
    sys.exit(guard(Path(sys.argv[1]), int(sys.argv[2]), None if sys.argv[3] == "None" else int(sys.argv[3])))
