"""The --patch file: read, recognised as a patch, and kept to paths inside the worktree.

It reads the patch's bytes and the paths its headers name; it never applies it (a `Worktree.lend` does)
and never runs git.
"""
from __future__ import annotations

import re
from pathlib import Path

from kvtasks.errors import UsageError

PATCH_HEADER = re.compile(rb"^(diff --git |\+\+\+ )", re.MULTILINE)
# a ---/+++ pair (never a lone hunk line that happens to start with "+++"), renames and copies
_PATH_LINE = re.compile(rb"^--- (.+)\n\+\+\+ (.+)$|^(?:rename|copy) (?:from|to) (.+)$", re.MULTILINE)
_GIT_LINE = re.compile(rb"^diff --git (.+)$", re.MULTILINE)


def checked_patch(given: str, repo: Path) -> str:
    """The absolute path of the patch `given` for the worktree `repo`, or a UsageError naming why not."""
    patch_path = Path(given).expanduser().resolve()
    try:
        patch_text = patch_path.read_bytes()
    except OSError as exc:
        raise UsageError(f"--patch {given!r} is unreadable: {exc.strerror or exc}") from None
    if not patch_text.strip():
        raise UsageError(f"--patch {given!r} is empty")
    if not PATCH_HEADER.search(patch_text):
        raise UsageError(f"--patch {given!r} is not a patch: no 'diff --git' or '+++' header")
    escaping = [path for path in patch_paths(patch_text) if _escapes(path)]
    if escaping:
        raise UsageError(f"--patch {given!r} touches a path outside the worktree: {escaping[0]!r}")
    if patch_path.is_relative_to(repo):
        raise UsageError(f"--patch {given!r} lies inside the worktree; the tree would not be clean")
    return str(patch_path)


def _unquote(raw: str) -> str:
    raw = raw.strip().split("\t")[0]
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return raw


def patch_paths(data: bytes) -> list[str]:
    """Every path a patch names (headers, renames, copies), with git's a/ and b/ prefixes removed."""
    paths = []
    for match in _PATH_LINE.finditer(data):
        for group in filter(None, match.groups()):
            path = _unquote(group.decode("utf-8", "replace"))
            if path != "/dev/null":
                paths.append(path[2:] if path[:2] in ("a/", "b/") else path)
    for match in _GIT_LINE.finditer(data):
        line = match.group(1).decode("utf-8", "replace")
        paths += [_unquote(half)[2:] for half in re.split(r' (?="?b/)', line, maxsplit=1) if _unquote(half)[:2] in ("a/", "b/")]
    return paths


def base_hunks(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """Per file base has, the line ranges (first, last) a patch changes there: an insertion is the
    two lines around it, so it is inside a function only when both are."""
    hunks: dict[str, list[tuple[int, int]]] = {}
    current = None
    for line in data.split(b"\n"):
        if line.startswith(b"--- "):
            path = _unquote(line[4:].decode("utf-8", "replace"))
            current = None if path == "/dev/null" else (path[2:] if path[:2] == "a/" else path)
        elif line.startswith(b"@@ -") and current is not None:
            old = line[4:].split(b" ", 1)[0].split(b",")
            start, count = int(old[0]), int(old[1]) if len(old) > 1 else 1
            hunks.setdefault(current, []).append((start, start + count - 1) if count else (start, start + 1))
    return hunks


def _escapes(path: str) -> bool:
    return path.startswith("/") or ".." in path.replace("\\", "/").split("/")
