"""An in-memory stage kit: a Context over a worktree held in dictionaries, so a stage's decisions are
unit-tested without git, a checkout on disk or a launched process.

    ctx = stage_context({"tests/test_x.py": BASE}, {"tests/test_x.py": HEAD}, target="tests/test_x.py")
    stage = test_policy.run(ctx)

`head` maps a path to its head text, or to None when the PR deletes it; a path in `head` and not in
`base` is one the PR adds. No patch file is read: the head view is built from the two dictionaries.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from kvtasks.request import Request
from kvtasks.stages import Context, StageResult
from kvtasks.worktree import HeadView

# the request's patch names no file: MemoryWorktree answers head_view without reading it
MEMORY_PATCH = "in-memory.patch"


class MemoryWorktree:
    """The reading half of a Worktree, over base and head dictionaries. Lending it is refused: a stage
    that launches a target is no unit of this kit."""

    def __init__(self, base: dict[str, str], head: dict[str, str | None] | None = None, root: Path | None = None):
        self.base = dict(base)
        self.head = dict(head or {})
        self.path = root or Path("/nonexistent/memory-worktree")
        self.patch = MEMORY_PATCH if self.head else None

    def read_base(self, path: str) -> str | None:
        return self.base.get(path)

    def read_base_many(self, paths) -> dict[str, str | None]:
        return {path: self.base.get(path) for path in paths}

    def exists_on_base(self, path: str) -> bool:
        return path in self.base

    def grep_base(self, needles: list[str], suffix: str = ".py") -> list[str]:
        return sorted(path for path, text in self.base.items()
                      if path.endswith(suffix) and any(needle in text for needle in needles))

    def head_view(self, patch: str) -> HeadView:
        changes = {path: "D" if text is None else ("M" if path in self.base else "A")
                   for path, text in self.head.items() if text != self.base.get(path)}
        blobs = {path: None if self.head[path] is None else self.head[path].encode() for path in changes}
        return HeadView(changes=changes, _blobs=blobs)

    def head_oid(self) -> str:
        return "0" * 40

    def take_tampered(self) -> list[str]:
        return []  # never lent, so no run ever changed its repository's files

    def kind(self) -> str:
        return "unknown"

    def lend(self, *args: Any, **kwargs: Any):
        raise AssertionError("the in-memory kit runs no target: test a launching stage end to end")


def stage_context(base: dict[str, str], head: dict[str, str | None] | None = None, *, target: str,
                  earlier: dict[str, StageResult] | None = None, run_dir: Path | None = None,
                  **options: Any) -> Context:
    """A Context for one stage: the request's options as keywords (the flags' field names)."""
    worktree = MemoryWorktree(base, head)
    request = Request(repo=str(worktree.path), target=target, patch=worktree.patch, **options)
    return Context(request=request, worktree=worktree, run_dir=run_dir or worktree.path / "run",
                   earlier=dict(earlier or {}), quiet=True)
