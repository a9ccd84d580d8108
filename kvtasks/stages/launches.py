"""What a stage asks to have launched, and who launches it.

A stage decides; it never starts a process. It says what it wants run as a `Launch` (or a `Timing`,
or a `Replay`) through `ctx.launch(...)`, inside the side its lend holds, and judges the `TargetRun`
(or the replay's outcome) that comes back. The launcher behind `ctx.launch` is the run's executor
(kvtasks.run.executor: the GPU claim, the CPU tier and the scratch folders applied in one place), or in
unit tests a recording launcher (tests/kit.py) that hands back runs the test made.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, Union

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from kvtasks.harness.target_run import TargetRun
    from kvtasks.stages import Context


class Launch(BaseModel):
    """One run of the target, under the route probe, in the tree the caller's lend holds.

    The label says the side (its part before the first '-') and names the run's evidence; the
    process sees `seen_as` instead where a corrupted run must be the run it repeats."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    target: str | None = None  # None: the request's target
    runner: Literal["pytest", "script"] | None = None  # None: the runner the selection chose
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # added to the constructed environment (a grid's variable)
    # the grid through the probe's parametrize replacement, and the poisoned cell of a merged session
    grid_argnames: tuple[str, ...] = ()
    grid_rows: tuple[tuple[str, ...], ...] = ()
    poisoned_row: tuple[str, ...] = ()
    corruption: dict | None = None  # the sensitivity settings: what the probe does to the routes' outputs
    seen_as: str | None = None  # the label the process sees (default: the label)
    scratch: Path | None = None  # the phase caches it sees (default: the run's scratch folder)
    impact: Path | None = None  # the impact map's file: the probe maps which item called which route

    @property
    def side(self) -> str:
        return (self.seen_as or self.label).split("-", 1)[0]


class Timing(BaseModel):
    """One timing run of a bench file: no probe, the phase's caches shared with its correctness runs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    side: Literal["base", "head"]
    file: str
    argv: tuple[str, ...] = ()


class Replay(BaseModel):
    """The replay script over captured route calls in one side's tree; it writes its verdicts to `out`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    side: Literal["base", "head"]
    folders: tuple[Path, ...]
    out: Path


class ImportProbe(BaseModel):
    """Import `module` the way the target would, in the tree lent now (with `tier`, the CPU tier's
    settings: under its hooks); gives (what the probe saw, or None when it died, and its log)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    module: str
    roots: tuple[str, ...]
    folder: Path  # its scratch folder
    tier: dict | None = None


class PytestCheck(BaseModel):
    """Whether `python -m pytest` runs in the target's environment: None, or why not."""

    model_config = ConfigDict(frozen=True, extra="forbid")


Asked = Union[Launch, Timing, Replay, ImportProbe, PytestCheck]


class Launcher(Protocol):
    """Runs what a stage asks for: a Launch or a Timing gives a TargetRun; a Replay gives why it
    could not replay ("" when it did); an ImportProbe (what it saw, its log); a PytestCheck None or
    why pytest cannot run."""

    def __call__(self, ctx: "Context", asked: Asked) -> "TargetRun | str | tuple[dict | None, str] | None": ...
