"""The sensitivity stage's cost on the demo: its one extra run against the head grid run.

Validates the demo's clean-fix PR (its grid passes, so the stage runs the same cells once more
with the route's output corrupted) three times in one workspace, and reads both runs' wall times
from the stored head evidence of each validation, so the two are measured side by side in the same
validation. Prints each round, and last `sensitivity cost: R.RRx head grid run` (the median ratio).
"""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kvtasks.workspace import Workspace

PROJECT = Path(__file__).resolve().parent.parent
ROUNDS = 3


def validate(home: Path) -> None:
    subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "validate", "demo=clean-fix"],
                   cwd=PROJECT, env={**os.environ, "KVTASKS_HOME": str(home)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def run_seconds(home: Path) -> dict[str, float]:
    """Wall seconds of each head-side run of the last validation, by run label."""
    store = Workspace(home).store
    record = store.label("demo-clean-fix")
    return {run.label: run.duration_s for result in store.read("head", record["head_key"]) for run in result.runs}


def main() -> None:
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        for round_number in range(1, ROUNDS + 1):
            validate(home)
            seconds = run_seconds(home)
            grid_s, corrupted_s = seconds["head-grid"], seconds["head-sensitivity-tail"]
            ratios.append(corrupted_s / grid_s)
            print(f"round {round_number}: head grid run {grid_s:.2f}s, sensitivity run {corrupted_s:.2f}s "
                  f"({ratios[-1]:.2f}x)")
    print(f"sensitivity cost: {statistics.median(ratios):.2f}x head grid run")


if __name__ == "__main__":
    main()
