"""The replay's launches: which capture folders a side's runs left, and one replay of them in the
tree the caller holds lent."""
from __future__ import annotations

from pathlib import Path

from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import Context
from kvtasks.stages.launches import Replay
from kvtasks.stages.replay.compare import Produced

HEAD_RUNS, BASE_RUNS = ("head-repo", "head-grid"), ("base-repo", "base-grid")


def captures(runs: list[TargetRun], labels: tuple[str, ...]) -> list[Path]:
    """The capture folders of these runs (a merged session's parts share one)."""
    return list(dict.fromkeys(Path(run.captures) for run in runs
                              if run.label in labels and run.captures and Path(run.captures).is_dir()))


def calls(folders: list[Path]) -> list[tuple[int, str, Produced]]:
    """(folder's index, call's name, what it produced in the run) of every call kept under `folders`."""
    return [(index, call.name, produced) for index, folder in enumerate(folders) for call in sorted(folder.iterdir())
            if (produced := Produced.read(call, "call.json")) is not None]


def replayed(out: Path, index: int, name: str) -> Produced:
    """What the replay under `out` produced for one call."""
    return Produced.read(out / str(index) / name, "out.json") or \
        Produced(out, {"raised": "the replay produced nothing for this call"})


def launch(ctx: Context, side: str, folders: list[Path], out: Path) -> str:
    """Replay the calls under `folders` in the tree now lent (`side`'s); why it could not, or ""."""
    return ctx.launch(Replay(side=side, folders=tuple(folders), out=out))
