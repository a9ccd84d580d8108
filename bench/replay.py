"""The replay's cost: the demo's clean-fix PR validated with the replay and with `no_replay=1`,
side by side in one run.

Each round validates the PR twice, each time cold in a fresh workspace (so base's replay is
included), alternating which goes first; the validation with the replay runs its two extra
launches (head's tree: head's and base's captured calls; base's tree: base's) and the runs capture
their calls. Prints each round, and last `replay cost: R.RRx validation without replay` (the median
ratio of the walls). With --smoke, one round on a small built repository (tests/kernel_repos.py's
tiled kernel, a refactor PR): a check that the bench runs, not a measurement.
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
sys.path.insert(0, str(PROJECT))
ROUNDS = 5

from tests.kernel_repos import ARGNAMES_TEST, TILED, make_patch, make_repo  # noqa: E402


def validate(home: Path, command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, *command],
                   cwd=PROJECT, env={**os.environ, "KVTASKS_HOME": str(home)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def small_pr(folder: Path) -> tuple[list[str], str]:
    """The tiled kernel with a route-side change, validated through the CLI on its argnames grid; and
    the flag that turns the replay off there."""
    repo = make_repo(folder / "tiled", {"kernels/__init__.py": "", "kernels/tiled.py": TILED,
                                        "tests/test_argnames.py": ARGNAMES_TEST})
    refactor = TILED.replace("    for tile in range(n_tiles):\n", "    for tile in range(n_tiles):  # tiles\n")
    patch = make_patch(repo, {"kernels/tiled.py": refactor}, folder / "refactor.patch")
    return ["-m", "kvtasks", "--repo", str(repo), "--patch", str(patch), "--target", "tests/test_argnames.py",
            "--expected-route", "kernels.tiled:tiled_scale", "--shape-vars", "M,N,dtype_str", "--shape-argnames",
            "M,N,dtype_str", "--grid", "64,2001,f32", "--no-perf", "--quiet", "--out", str(folder / "report.json")], \
        "--no-replay"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one round, on a small built repository")
    args = parser.parse_args()
    os.environ.setdefault("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="kvtasks-replay-bench-") as folder:
        command, without = small_pr(Path(folder)) if args.smoke else \
            (["-m", "doit", "-f", str(PROJECT / "dodo.py"), "validate", "demo=clean-fix"], "no_replay=1")
        for number in range(1 if args.smoke else ROUNDS):
            homes = {kind: Path(folder) / f"{kind}-{number}" for kind in ("with", "without")}
            order = ("with", "without") if number % 2 == 0 else ("without", "with")
            walls = {kind: validate(homes[kind], command + ([without] if kind == "without" else [])) for kind in order}
            ratios.append(walls["with"] / walls["without"])
            print(f"round {number + 1}: with the replay {walls['with']:.1f}s, without {walls['without']:.1f}s "
                  f"({ratios[-1]:.2f}x)", flush=True)
    print(f"replay cost: {statistics.median(ratios):.2f}x validation without replay")


if __name__ == "__main__":
    main()
