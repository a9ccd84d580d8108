"""The sensitivity stage's cost on the demo: its one extra run against the head grid run.

Validates the demo's clean-fix PR (its grid passes, so the stage runs the same cells once more
with the route's output corrupted) three times in one workspace, and reads both runs' wall times
from the stored head evidence of each validation, so the two are measured side by side in the same
validation. Prints each round, and last `sensitivity cost: R.RRx head grid run` (the median ratio).
With --smoke, one round, its pytest without the hypothesis plugin: a check that the bench runs,
not a measurement. With --home DIR the validations are made in DIR's workspace, which is kept (its
report read after: tests/test_dodo.py runs the smoke whole that way) instead of a temporary one.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from kvtasks.evidence.workspace import Workspace

PROJECT = Path(__file__).resolve().parent.parent
ROUNDS = 3


def validate(home: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "validate", "demo=clean-fix"],
                   cwd=PROJECT, env={**env, "KVTASKS_HOME": str(home)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def run_seconds(home: Path) -> dict[str, float]:
    """Wall seconds of each head-side run of the last validation, by run label."""
    store = Workspace(home).store
    record = store.label("demo-clean-fix")
    return {run.label: run.duration_s for result in store.read("head", record["head_key"]) for run in result.runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one round, without the hypothesis pytest plugin")
    parser.add_argument("--home", type=Path, help="validate in this workspace and keep it")
    args = parser.parse_args()
    rounds = 1 if args.smoke else ROUNDS
    env = dict(os.environ)
    if args.smoke:
        # the demo never uses hypothesis, whose pytest plugin adds most of a second of imports to each of
        # the validation's nine target processes; a full run keeps whatever the caller's pytest loads
        env.setdefault("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    ratios = []
    with tempfile.TemporaryDirectory() as folder:
        home = args.home or Path(folder)
        for round_number in range(1, rounds + 1):
            validate(home, env)
            seconds = run_seconds(home)
            grid_s, corrupted_s = seconds["head-grid"], seconds["head-sensitivity-tail"]
            ratios.append(corrupted_s / grid_s)
            print(f"round {round_number}: head grid run {grid_s:.2f}s, sensitivity run {corrupted_s:.2f}s "
                  f"({ratios[-1]:.2f}x)")
    print(f"sensitivity cost: {statistics.median(ratios):.2f}x head grid run")


if __name__ == "__main__":
    main()
