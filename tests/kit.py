"""An in-memory stage kit: a Context over a worktree held in dictionaries, so a stage's decisions are
unit-tested without git, a checkout on disk or a launched process.

    ctx = stage_context({"tests/test_x.py": BASE}, {"tests/test_x.py": HEAD}, target="tests/test_x.py")
    stage = test_policy.run(ctx)

`head` maps a path to its head text, or to None when the PR deletes it; a path in `head` and not in
`base` is one the PR adds. No patch file is read: the head view is built from the two dictionaries.

A launching stage gets a RecordingLauncher (`launcher=`): it hands back the runs the test made
(`target_run`) and records what the stage asked for and on which side the tree was lent.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.request import Request
from kvtasks.stages import Context, StageResult
from kvtasks.stages.launches import Asked, ImportProbe, Launch, Replay, Timing
from kvtasks.worktree import HeadView

# the request's patch names no file: MemoryWorktree answers head_view without reading it
MEMORY_PATCH = "in-memory.patch"


class MemoryWorktree:
    """A Worktree over base and head dictionaries. Lending it turns nothing on disk: it records the
    side lent (`lent`: the side, and the paths held at base) for the launcher to see; `left` is what
    the lend's runs left in the tree so far (`status()`), which the recording launcher adds to."""

    def __init__(self, base: dict[str, str], head: dict[str, str | None] | None = None, root: Path | None = None,
                 kind: str = "unknown"):
        self.base = dict(base)
        self.head = dict(head or {})
        self.path = root or Path("/nonexistent/memory-worktree")
        self.patch = MEMORY_PATCH if self.head else None
        self.layout = kind
        self.lent: tuple[str, tuple[str, ...]] | None = None
        self.left: list[str] = []
        self.written: list[tuple[str | None, str, str]] = []  # (the side lent, path, text) of each write_file

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
        return self.layout

    def write_file(self, path: str, text: str) -> None:
        self.written.append((self.lent[0] if self.lent else None, path, text))

    @contextmanager
    def lend(self, side: str, keep_base: tuple[str, ...] | list[str] = ()) -> Iterator["MemoryWorktree"]:
        self.lent, self.left = (side, tuple(keep_base)), []
        try:
            yield self
        finally:
            self.lent, self.left = None, []

    def switch(self, side: str, keep_base: tuple[str, ...] | list[str] = ()) -> list[str]:
        removed = self.to_base()
        self.lent = (side, tuple(keep_base))
        return removed

    def to_base(self) -> list[str]:
        removed, self.left, self.lent = self.left, [], ("base", ())
        return removed

    def status(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(path=path) for path in self.left]


class RecordingLauncher:
    """The kit's launcher: records what a stage asked for, with the side the tree was lent on
    (`asked`: (side, Launch ...)), and hands back what the test made: `runs[label]` for a Launch or a
    Timing (a TargetRun, or a function of what was asked giving one), `replays[side]` for a Replay ("":
    it replayed), `probes` in turn for ImportProbes, `pytest` for a PytestCheck; `leaves[label]`: the
    paths that launch leaves in the tree. A launch the test made nothing for fails the test, naming it."""

    def __init__(self, runs: dict[str, Any] | None = None, *, replays: dict[str, str] | None = None,
                 probes: list[tuple[dict | None, str]] | None = None, pytest: str | None = None,
                 leaves: dict[str, list[str]] | None = None):
        self.runs = dict(runs or {})
        self.leaves = dict(leaves or {})
        self.replays = dict(replays or {})
        self.probes = list(probes or [])
        self.pytest = pytest
        self.asked: list[tuple[str | None, Asked]] = []
        self.kept_at_base: dict[str, tuple[str, ...]] = {}  # label -> the paths its lend held at base

    def __call__(self, ctx: Context, asked: Asked):
        lent = ctx.worktree.lent
        self.asked.append((lent[0] if lent else None, asked))
        if isinstance(asked, (Launch, Timing)):
            self.kept_at_base[asked.label] = lent[1] if lent else ()
            if asked.label not in self.runs:
                raise AssertionError(f"the stage launched {asked.label}, which the test made no run for")
            made = self.runs[asked.label]
            ctx.worktree.left += self.leaves.get(asked.label, [])
            return made(asked) if callable(made) else made
        if isinstance(asked, Replay):
            return self.replays.get(asked.side, "")
        if isinstance(asked, ImportProbe):
            return self.probes.pop(0)
        return self.pytest

    @property
    def labels(self) -> list[str]:
        return [asked.label for _, asked in self.asked if isinstance(asked, (Launch, Timing))]

    def launched(self, label: str) -> tuple[str | None, Launch]:
        """(the side the tree was lent on, the Launch) of the launch of `label`."""
        return next((side, asked) for side, asked in self.asked if getattr(asked, "label", None) == label)


def target_run(folder: Path, label: str, *, exit: int | None = 0, executed: int = 2, failures: int = 0,
               errors: int = 0, skipped: int = 0, log: str = "", runner: str = "pytest", **fields: Any) -> TargetRun:
    """A run as the harness reads one back; its log is written under `folder` (stages read its tail)."""
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{label}.log"
    log_path.write_text(log or f"{executed - failures - errors} passed\n")
    stats = ExecutionStats(tests=executed + skipped, failures=failures, errors=errors, skipped=skipped,
                           executed=executed, basis="junit")
    return TargetRun(label=label, runner=runner, command=["python", "-m", "pytest"], exit=exit, duration_s=0.1,
                     log=str(log_path), stats=stats, **fields)


def stage_context(base: dict[str, str], head: dict[str, str | None] | None = None, *, target: str,
                  earlier: dict[str, StageResult] | None = None, run_dir: Path | None = None,
                  launcher: RecordingLauncher | None = None, kind: str = "unknown", **options: Any) -> Context:
    """A Context for one stage over a worktree whose layout is of `kind` (Worktree.kind): the request's
    options as keywords (the flags' field names)."""
    worktree = MemoryWorktree(base, head, kind=kind)
    request = Request(repo=str(worktree.path), target=target, patch=worktree.patch, **options)
    return Context(request=request, worktree=worktree, run_dir=run_dir or worktree.path / "run",
                   earlier=dict(earlier or {}), launcher=launcher)
