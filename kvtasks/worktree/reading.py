"""Reading the supplied tree through git without changing it: its status, its base files, and the
merged head (the patch applied to a private index and object store, never to the tree).

`Worktree` is a TreeReader that also lends the tree; everything here is safe outside a lend.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from kvtasks.worktree.git_commands import GitFailed, run_git


@dataclass(frozen=True)
class StatusEntry:
    code: str  # the two porcelain letters: ' M', '??', '!!', 'D ' ...
    path: str

    @property
    def untracked(self) -> bool:
        return self.code in ("??", "!!")


def shown(entries: list[StatusEntry], most: int = 5) -> str:
    """How many entries, and the first few as git prints them: `2 entries: ?? notes.txt, M kernel.py`."""
    return f"{len(entries)} entries: " + ", ".join(f"{entry.code.strip()} {entry.path}" for entry in entries[:most])


@dataclass
class HeadView:
    """The merged head as git objects: what the patch changes and the head text of any file."""

    changes: dict[str, str] = field(default_factory=dict)  # path -> A / M / D / R...
    _blobs: dict[str, bytes | None] = field(default_factory=dict)

    def read(self, path: str) -> str | None:
        blob = self._blobs.get(path)
        return None if blob is None else blob.decode("utf-8", errors="replace")


# the merged heads this process already built, by (worktree, base commit, patch content): each group
# of a validation asks for its PR's, and building one costs git a private index and object store
_HEAD_VIEWS: dict[tuple[str, str, str], HeadView] = {}
_HEAD_VIEWS_KEPT = 8


class TreeReader:
    """The supplied checkout, read through git: what it holds at base and what a patch makes of it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        # base files already read: HEAD never moves while kvtasks holds the tree (a lend changes the
        # working tree only), and the same file is read by several stages
        self._base_texts: dict[str, str | None] = {}
        self._head_oid: str | None = None

    def _run(self, *args: str, env: dict[str, str] | None = None, check: bool = True) -> tuple[int, str, str]:
        done = run_git(self.path, *args, env=env)
        status = -1 if done.returncode is None else done.returncode
        if check and not done.ok:
            raise GitFailed(f"git {args[0]}: {done.said()}")
        return status, done.stdout, done.stderr

    def head_oid(self) -> str:
        if self._head_oid is None:  # read once, like the base files: HEAD never moves while kvtasks holds the tree
            self._head_oid = self._run("rev-parse", "HEAD")[1].strip()
        return self._head_oid

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
        """The base commit's text of the file at `path`; None where base has no file there."""
        return self.read_base_many([path])[path]

    def read_base_many(self, paths: Iterable[str]) -> dict[str, str | None]:
        """`read_base` of each path, the ones not read before in one git call (a stage reads a
        dozen files at a time, and each git process costs more than the reading)."""
        paths = list(dict.fromkeys(paths))
        unread = [path for path in paths if path not in self._base_texts]
        by_line = [path for path in unread if "\n" not in path]  # cat-file's input is one object name a line
        if by_line:
            self._base_texts.update(self._cat_files(by_line))
        for path in unread:
            if path not in self._base_texts:
                status, out, _ = self._run("show", f"HEAD:{path}", check=False)
                self._base_texts[path] = out if status == 0 and not out.startswith(f"tree HEAD:{path}") else None
        return {path: self._base_texts[path] for path in paths}

    def _cat_files(self, paths: list[str]) -> dict[str, str | None]:
        names = "".join(f"HEAD:{path}\n" for path in paths).encode("utf-8", "surrogateescape")
        done = run_git(self.path, "cat-file", "--batch", stdin_bytes=names, text=False)
        if not done.ok:
            raise GitFailed(f"git cat-file: {done.said()}")
        out, found, at = done.stdout, {}, 0
        for path in paths:  # each answer: "<oid> <type> <size>\n<content>\n", or "<name> missing\n"
            end = out.index(b"\n", at)
            header = out[at:end].split()
            at = end + 1
            if header[-1] in (b"missing", b"ambiguous"):
                found[path] = None
                continue
            size = int(header[2])
            content = out[at:at + size]
            at += size + 1
            # as `git show` read in text mode gave it: UTF-8, undecodable bytes kept, universal newlines
            found[path] = content.decode("utf-8", "surrogateescape").replace("\r\n", "\n").replace("\r", "\n") \
                if header[1] == b"blob" else None
        return found

    def grep_base(self, needles: list[str], suffix: str = ".py") -> list[str]:
        """Files of the base commit containing any of `needles` (fixed strings), in one git call."""
        args = ["grep", "-l", "-F", "-z", *(arg for needle in needles for arg in ("-e", needle)), "HEAD", "--",
                f"*{suffix}"]
        status, out, _ = self._run(*args, check=False)
        return [item.split(":", 1)[1] for item in out.split("\0") if item] if status == 0 else []

    def exists_on_base(self, path: str) -> bool:
        """Whether base has a file at `path`."""
        return self.read_base(path) is not None

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

    def check_apply(self, patch: str) -> None:
        """Raise GitFailed unless `patch` applies to the tree as it is (git apply --check changes nothing)."""
        self._run("apply", "--check", "--whitespace=nowarn", patch)
