"""The repository's own control files, held while a tree is lent: `.git/hooks`, `.git/info` and
`.git/config`, and what says where git finds its repository (`commondir`, a linked worktree's
`gitdir` and `config.worktree`, the tree's own `.git` entry).

A run that plants a hook, an `info/exclude` line, a `core.fsmonitor` or `core.hooksPath` setting, a
filter, or a `commondir` that sends git to a configuration of its own would have code of the PR's
run inside kvtasks' own next git call, or inside the user's next commit. They are read when the
lend opens and compared after every launch (before kvtasks' next git call) and at hand-back:
whatever a run changed is put back as it was supplied, and named. Only regular files of a modest
size are read whole; a FIFO or a huge file a run puts there is named and removed, never read.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

HELD = ("hooks", "info", "config", "commondir")
MOST_READ = 1 << 20  # a held file larger than this is compared by size and time, never read


def _entries(folder: Path, top: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every file, link and folder under `folder` (or `folder` itself), by path relative to `top`:
    (kind, content or link target, mode)."""
    found: dict[str, tuple[str, bytes, int]] = {}

    def add(path: Path) -> None:
        try:
            status = path.lstat()
        except OSError:
            return
        relative = str(path.relative_to(top))
        if stat.S_ISLNK(status.st_mode):
            found[relative] = ("link", os.readlink(path).encode(), 0)
        elif stat.S_ISDIR(status.st_mode):
            found[relative] = ("folder", b"", stat.S_IMODE(status.st_mode))
            for child in sorted(path.iterdir()):
                add(child)
        elif not stat.S_ISREG(status.st_mode):  # a FIFO would block the read, a device never end it
            found[relative] = ("special", str(stat.S_IFMT(status.st_mode)).encode(), 0)
        elif status.st_size > MOST_READ:
            found[relative] = ("large", f"{status.st_size}:{status.st_mtime_ns}:{status.st_ino}".encode(),
                               stat.S_IMODE(status.st_mode))
        else:
            try:
                with open(path, "rb") as held:
                    found[relative] = ("file", held.read(MOST_READ + 1), stat.S_IMODE(status.st_mode))
            except OSError:
                found[relative] = ("file", b"", stat.S_IMODE(status.st_mode))

    add(folder)
    return found


class HeldFiles:
    """The held files of one repository, as supplied."""

    def __init__(self, git_dir: Path, tree: Path):
        common = git_dir
        pointer = git_dir / "commondir"  # a linked worktree's git dir names the repository's
        if pointer.is_file():
            common = (git_dir / pointer.read_text().strip()).resolve()
        self.roots = list(dict.fromkeys([(common, name) for name in HELD]
                                        + [(git_dir, name) for name in ("config.worktree", "commondir", "gitdir")]))
        self.tree = tree
        self.supplied = self._read()
        self.dot_git = _entries(tree / ".git", tree) if (tree / ".git").is_file() else {".git": ("folder", b"", 0)}

    def _dot_git_replaced(self) -> bool:
        """Whether the tree's own `.git` is another thing than it was (a folder, or a file naming its
        git dir). One that vanished is no repository at all, which every git call refuses already."""
        tree_git = self.tree / ".git"
        if not tree_git.exists() and not tree_git.is_symlink():
            return False
        if tree_git.is_symlink():
            return True
        now = _entries(tree_git, self.tree) if tree_git.is_file() else {".git": ("folder", b"", 0)}
        return now != self.dot_git

    def _read(self) -> dict[tuple[Path, str], dict[str, tuple[str, bytes, int]]]:
        return {(top, name): _entries(top / name, top) for top, name in self.roots}

    def restore(self) -> list[str]:
        """Put back whatever differs from what was supplied; return those paths (as `.git/...`).
        Raises ReplacedGitDir when the tree's `.git` itself was replaced: git would now read a
        repository of the run's choosing, and no git command may run on the tree again."""
        if self._dot_git_replaced():
            raise ReplacedGitDir(f"a run replaced {self.tree / '.git'}: kvtasks runs no git command on it again, and "
                                 "the repository must be checked by hand")
        changed = []
        now = self._read()
        for key, supplied in self.supplied.items():
            top, _ = key
            present = now[key]
            if present == supplied or not top.is_dir():  # a git dir removed under the lend is no repository to mend
                continue
            for relative in sorted(set(present) - set(supplied), key=len, reverse=True):
                _remove(top / relative, present[relative][0])
                changed.append(relative)
            for relative in sorted(supplied):  # folders before what they hold
                if present.get(relative) == supplied[relative]:
                    continue
                kind, content, mode = supplied[relative]
                path = top / relative
                if relative in present and (present[relative][0] != kind or kind == "link"):
                    _remove(path, present[relative][0])
                if kind in ("large", "special"):  # never read, so named and left: the user must look
                    changed.append(relative)
                    continue
                if kind == "folder":
                    path.mkdir(exist_ok=True)
                    path.chmod(mode)
                elif kind == "link":
                    os.symlink(content.decode(), path)
                else:
                    path.write_bytes(content)
                    path.chmod(mode)
                changed.append(relative)
        return sorted({f".git/{path}" for path in changed})


class ReplacedGitDir(Exception):
    """The tree's own `.git` was replaced during a lend."""


def _remove(path: Path, kind: str) -> None:
    if kind == "folder":
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
