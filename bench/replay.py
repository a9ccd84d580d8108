"""The replay's cost: the demo's clean-fix PR validated with the replay and with `no_replay=1`,
side by side in one run.

Each round validates the PR twice, each time cold in a fresh workspace (so base's replay is
included), alternating which goes first; the validation with the replay runs its two extra
launches (head's tree: head's and base's captured calls; base's tree: base's) and the runs capture
their calls. Prints each round, and last `replay cost: R.RRx validation without replay` (the median
ratio of the walls). With --smoke, one round: a check that the bench runs, not a measurement.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
ROUNDS = 5


def validate(home: Path, *extra: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "validate", "demo=clean-fix", *extra],
                   cwd=PROJECT, env={**os.environ, "KVTASKS_HOME": str(home)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one round")
    args = parser.parse_args()
    os.environ.setdefault("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="kvtasks-replay-bench-") as folder:
        for number in range(1 if args.smoke else ROUNDS):
            homes = {kind: Path(folder) / f"{kind}-{number}" for kind in ("with", "without")}
            order = ("with", "without") if number % 2 == 0 else ("without", "with")
            walls = {kind: validate(homes[kind], *(["no_replay=1"] if kind == "without" else [])) for kind in order}
            ratios.append(walls["with"] / walls["without"])
            print(f"round {number + 1}: with the replay {walls['with']:.1f}s, without {walls['without']:.1f}s "
                  f"({ratios[-1]:.2f}x)", flush=True)
    print(f"replay cost: {statistics.median(ratios):.2f}x validation without replay")


if __name__ == "__main__":
    main()
