"""Does `doit -n 2` change anything? The eight-PR batch of the tests, on one (fake) GPU.

Runs the batch once sequentially, then five times with `-n 2`, each in a fresh workspace, and
counts per parallel run: reports whose verdict differs from the sequential one, reports carrying
`recovered_run` (a live worker mistaken for a dead one), base keys launched more than once, and
whether the tree came back byte-identical. Prints those counts, the total mismatch count, and
last the wall-time ratio of a parallel to the sequential batch, measured side by side in one run:
`wall time -n 2 / sequential: R.RR (sequential S.Ss)`. With --smoke, the five PRs of two base keys
(tests/batches.py's FIVE) once sequentially and once with `-n 2`: the run tests/test_concurrency.py
judges (--keep FOLDER keeps the repository and both workspaces there), not a measurement.
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.batches import FIVE, base_runs_per_key, doit, eight_prs, reports, write_manifest  # noqa: E402
from tests.conftest import FAKES, IDLE_AMD  # noqa: E402
from tests.kernel_repos import snapshot, tiled_repo  # noqa: E402

REPEATS = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="five PRs of two base keys, one parallel batch")
    parser.add_argument("--keep", type=Path, help="build and keep the repository and the workspaces here")
    args = parser.parse_args()
    repeats = 1 if args.smoke else REPEATS
    with tempfile.TemporaryDirectory() as folder:
        work = args.keep or Path(folder)
        fake = work / "amdsmi.json"
        fake.write_text(json.dumps({"devices": [IDLE_AMD]}))  # one GPU for two workers
        os.environ.update(KVTASKS_FAKE_AMDSMI=str(fake), KVTASKS_LOCK_DIR=str(work), KVTASKS_IDLE_SAMPLES="2",
                          KVTASKS_IDLE_INTERVAL_S="0", PYTEST_ADDOPTS="-p no:hypothesispytest",
                          PYTHONPATH=os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")])))
        tiled = tiled_repo(work / "tiled")
        prs = eight_prs(tiled, work / "patches")
        if args.smoke:
            prs = {label: pr for label, pr in prs.items() if label in FIVE}
        manifest = write_manifest(tiled, prs, work / "batch.json")
        supplied = snapshot(tiled)

        started = time.perf_counter()
        in_turn = doit(work / "sequential", "batch", f"manifest={manifest}")
        sequential_s = time.perf_counter() - started
        print(f"sequential: exit {in_turn.returncode}")
        expected = {label: report["verdict"] for label, report in reports(work / "sequential", prs).items()}

        mismatches, parallel_s = 0, []
        for repeat in range(1, repeats + 1):
            home = work / f"parallel-{repeat}"
            started = time.perf_counter()
            done = doit(home, "-n", "2", "batch", f"manifest={manifest}")
            parallel_s.append(time.perf_counter() - started)
            got = reports(home, prs)
            verdicts = sum(got[label]["verdict"] != verdict for label, verdict in expected.items())
            recovered = sum(report["recovered_run"] is not None for report in got.values())
            repeated = sum(count - 1 for count in base_runs_per_key(home).values())
            tree = snapshot(tiled) != supplied
            mismatches += verdicts + recovered + repeated + tree
            print(f"run {repeat}: exit {done.returncode}, verdict mismatches {verdicts}, recovered_run {recovered}, "
                  f"extra base runs {repeated}, tree changed {tree} ({parallel_s[-1]:.1f}s)")
        print(f"sequential verdicts: {expected}")
        print(f"mismatches over {repeats} parallel batches of {len(prs)} PRs: {mismatches}")
        print(f"wall time -n 2 / sequential: {sum(parallel_s) / len(parallel_s) / sequential_s:.2f} "
              f"(sequential {sequential_s:.1f}s)")


if __name__ == "__main__":
    main()
