"""The repository's own control files, held while a tree is lent: `.git/hooks`, `.git/info` and
`.git/config` (a linked worktree's `config.worktree` too).

A run that plants a hook, an `info/exclude` line or a `core.fsmonitor` or `core.hooksPath` setting
would have code of the PR's run inside kvtasks' own next git call, or inside the user's next
commit. They are read when the lend opens and compared after every launch (before kvtasks' next
git call) and at hand-back: whatever a run changed is put back as it was supplied, and named.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

HELD = ("hooks", "info", "config")


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
        else:
            try:
                found[relative] = ("file", path.read_bytes(), stat.S_IMODE(status.st_mode))
            except OSError:
                found[relative] = ("file", b"", stat.S_IMODE(status.st_mode))

    add(folder)
    return found


class HeldFiles:
    """The held files of one repository, as supplied."""

    def __init__(self, git_dir: Path):
        common = git_dir
        pointer = git_dir / "commondir"  # a linked worktree's git dir names the repository's
        if pointer.is_file():
            common = (git_dir / pointer.read_text().strip()).resolve()
        self.roots = [(common, name) for name in HELD] + [(git_dir, "config.worktree")]
        self.supplied = self._read()

    def _read(self) -> dict[tuple[Path, str], dict[str, tuple[str, bytes, int]]]:
        return {(top, name): _entries(top / name, top) for top, name in self.roots}

    def restore(self) -> list[str]:
        """Put back whatever differs from what was supplied; return those paths (as `.git/...`)."""
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


def _remove(path: Path, kind: str) -> None:
    if kind == "folder":
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
