"""A validator killed at random moments, then run again: the loop the test suite replaced with one
kill at each kind of fault point (tests/reliability/test_faults.py).

Validates a tail-bug PR of the small kernel repository once to learn how long a whole run takes,
then POINTS times: starts it again, sends SIGKILL, SIGTERM or SIGINT after a random delay within
that duration, and runs it once more. After each pair it checks what the test checks: a report the
killed run left is a whole one; after SIGTERM or SIGINT the tree is byte-identical at once; after
the rerun the tree is byte-identical, the journal is clear and the rerun's verdict is BLOCK (exit
1) with merge_sim passing (the kill is never blamed on the caller). Prints one line per point and
last `killed anywhere: N points, handed back N/N, reruns blocked N/N, whole reports left W` with the
counts it measured. With --smoke, one point drawn within SMOKE_DURATION_S instead of a whole run's
measured duration: a check that the bench runs, not a measurement.

    python bench/killed_anywhere.py --points 21 --seed 20261202 [--smoke]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtasks.worktree import Worktree  # noqa: E402
from tests.conftest import FAKES, IDLE_AMD  # noqa: E402
from tests.kernel_repos import KERNEL_TAIL_BUG, kernel_repo, make_patch, snapshot  # noqa: E402

SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]
RUN_BOUND_S = 120
# --smoke: a kill point within the first seconds of a run (a whole run here takes about 5 s), so no run is
# spent measuring the duration
SMOKE_DURATION_S = 3.0


def validator(env: dict, repo: Path, patch: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch),
                             "--target", "tests/test_scale.py", "--out", str(out), "--quiet", "--no-perf"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=21)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--smoke", action="store_true", help="one point (overrides --points)")
    args = parser.parse_args()
    point_count = 1 if args.smoke else args.points
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        fake = work / "amdsmi.json"
        fake.write_text(json.dumps({"devices": [IDLE_AMD]}))
        (work / "locks").mkdir()
        env = {**os.environ, "KVTASKS_HOME": str(work / "home"), "KVTASKS_FAKE_AMDSMI": str(fake),
               "KVTASKS_LOCK_DIR": str(work / "locks"), "KVTASKS_SCRATCH": str(work / "scratch"),
               "KVTASKS_IDLE_SAMPLES": "2", "KVTASKS_IDLE_INTERVAL_S": "0",
               "PYTEST_ADDOPTS": "-p no:hypothesispytest",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")]))}
        repo = kernel_repo(work / "kernels")
        patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG,
                                  "tests/test_added.py": "def test_added():\n    pass\n"}, work / "pr.patch")
        supplied = snapshot(repo)
        if args.smoke:
            duration = SMOKE_DURATION_S
        else:
            started = time.monotonic()
            validator(env, repo, patch, work / "full.json").wait(timeout=RUN_BOUND_S)
            duration = time.monotonic() - started
        rng = random.Random(args.seed)
        points = [(rng.choice(SIGNALS), rng.uniform(0.05, duration)) for _ in range(point_count)]
        handed_back = blocked = whole_reports = 0
        for number, (sig, delay) in enumerate(points):
            out = work / f"killed-{number}.json"
            killed = validator(env, repo, patch, out)
            time.sleep(delay)
            killed.send_signal(sig)
            killed.wait(timeout=RUN_BOUND_S)
            left = "none"
            if out.exists():
                report = json.loads(out.read_text())
                left = "whole" if report["verdict"] in ("PASS", "NEEDS_WORK", "BLOCK", "INCONCLUSIVE") else "partial"
                whole_reports += left == "whole"
            at_once = "-" if sig == signal.SIGKILL or out.exists() else str(snapshot(repo) == supplied)
            rerun = work / f"rerun-{number}.json"
            code = validator(env, repo, patch, rerun).wait(timeout=RUN_BOUND_S)
            back = snapshot(repo) == supplied and Worktree(repo, None).journal.pending() is None
            report = json.loads(rerun.read_text()) if rerun.exists() else {}
            blocks = (code == 1 and report.get("verdict") == "BLOCK"
                      and report["stages"]["merge_sim"]["status"] == "pass")
            handed_back += back
            blocked += blocks
            print(f"point {number}: {sig.name} after {delay:.2f}s; report left {left}; tree at once {at_once}; "
                  f"rerun handed back {back}, blocked {blocks}", flush=True)
        print(f"killed anywhere: {len(points)} points, handed back {handed_back}/{len(points)}, "
              f"reruns blocked {blocked}/{len(points)}, whole reports left {whole_reports}")


if __name__ == "__main__":
    main()
