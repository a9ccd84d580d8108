"""Collecting kvtasks' private clones and their base trees: whatever `clones` made and no one has
used for longer than an age (the modification times its uses stamp), never a tree a validator or
a lend holds nor a clone a front door is preparing.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kvtasks.system import locks
from kvtasks.worktree.clones import PLAIN_GIT
from kvtasks.worktree import in_use, run_git


@dataclass
class Collected:
    """What `collect` did: the trees and clones it removed, and the trees it kept because they were in use."""

    trees: list[Path]
    clones: list[Path]
    in_use: list[Path]


def collect(clones_root: Path, older_than_s: float) -> Collected:
    """Remove every base tree unused for longer than `older_than_s`, then every clone left with no
    tree and itself unused that long; never a tree a running validator holds, nor a clone a front
    door is preparing (its lock is held: it is skipped whole, this time). A clone's lock file stays,
    so a front door waiting on it never shares it with one that opens a new one."""
    collected = Collected([], [], [])
    if not clones_root.is_dir():
        return collected
    now = time.time()
    for folder in sorted(path for path in clones_root.iterdir() if path.is_dir()):
        fd = locks.try_hold(folder / "clone.lock")
        if fd is None:
            continue
        try:
            trees = folder / "trees"
            for tree in sorted(trees.iterdir()) if trees.is_dir() else []:
                if in_use(tree):
                    collected.in_use.append(tree)
                elif now - tree.lstat().st_mtime > older_than_s:
                    shutil.rmtree(tree)
                    collected.trees.append(tree)
            clone = folder / "repo.git"
            if clone.is_dir():
                run_git(clone, "worktree", "prune", env=PLAIN_GIT)
            unused = now - (folder / "clone.lock").stat().st_mtime > older_than_s
            contents = [path for path in folder.iterdir() if path.name != "clone.lock"]
            if unused and contents and not (trees.is_dir() and any(trees.iterdir())):
                for path in contents:
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
                collected.clones.append(folder)
        finally:
            os.close(fd)
    return collected
