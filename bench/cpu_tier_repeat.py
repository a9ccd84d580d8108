"""Does a Triton CPU tier validation come out the same way every time? The loop the test suite
replaced with one validation (tests/stages/test_cpu_tier.py).

Validates the unmasked-tail softmax PR on the CPU tier, on a host with no GPU, ROUNDS times per
clone with two clones side by side (so the machine's cores, never the verdict, are shared), each
validation in its own process, and counts the distinct outcomes (exit code, verdict, blockers'
stages and details) and the trees not handed back byte-identical. Prints one line per outcome with
how often it came out, then `cpu tier repeat: N validations, K distinct outcomes, trees changed T`.
Needs the triton-cpu extra. With --smoke, one validation (one round on one clone): a check that the
bench runs, not a measurement, and the run tests/stages/test_cpu_tier.py judges (--reports FOLDER
keeps each validation's report there as report-<clone>-<round>.json).

    python bench/cpu_tier_repeat.py --rounds 5
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import triton_repos  # noqa: E402
from tests.conftest import FAKES  # noqa: E402
from tests.kernel_repos import make_patch, snapshot  # noqa: E402

GRID = ["--shape-argnames", "M,N,dtype", "--grid", "4,100,f32;3,1000,f32;2,100,bf16",
        "--expected-route", "softmax:softmax", "--shape-vars", "M,N", "--target", "tests/test_softmax.py"]


def outcome(repo: Path, patch: Path, env: dict, out: Path) -> tuple:
    done = subprocess.run([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch), "--out",
                           str(out), "--quiet", "--cpu-tier", "triton", "--no-perf", *GRID],
                          env=env, capture_output=True, text=True)
    report = json.loads(out.read_text()) if out.exists() else {"verdict": None, "findings": []}
    return (done.returncode, report["verdict"],
            tuple((f["stage"], f["detail"]) for f in report["findings"] if f["severity"] == "blocker"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one round on one clone (overrides --rounds)")
    parser.add_argument("--reports", type=Path, help="keep each validation's report in this folder")
    args = parser.parse_args()
    rounds_per_clone, clone_names = (1, ("a",)) if args.smoke else (args.rounds, ("a", "b"))
    triton_repos.require_triton_cpu()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        fake = work / "amdsmi.json"
        fake.write_text(json.dumps({"devices": []}))  # this host reports no GPU
        (work / "locks").mkdir()
        base_env = {**os.environ, "KVTASKS_FAKE_AMDSMI": str(fake), "KVTASKS_LOCK_DIR": str(work / "locks"),
                    "KVTASKS_SCRATCH": str(work / "scratch"), "KVTASKS_IDLE_SAMPLES": "2",
                    "KVTASKS_IDLE_INTERVAL_S": "0", "PYTEST_ADDOPTS": "-p no:hypothesispytest",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")]))}
        clones = []
        for name in clone_names:
            repo = triton_repos.softmax_repo(work / f"softmax-{name}")
            patch = make_patch(repo, {"softmax.py": triton_repos.SOFTMAX_UNMASKED}, work / f"unmask-{name}.patch")
            clones.append((repo, patch, snapshot(repo), {**base_env, "KVTASKS_HOME": str(work / f"home-{name}")}))

        reports = args.reports or work
        reports.mkdir(parents=True, exist_ok=True)

        def rounds(index: int) -> list[tuple]:
            repo, patch, _, env = clones[index]
            return [outcome(repo, patch, env, reports / f"report-{index}-{n}.json") for n in range(rounds_per_clone)]

        with ThreadPoolExecutor(len(clones)) as pool:
            outcomes = Counter(result for batch in pool.map(rounds, range(len(clones))) for result in batch)
        changed = sum(snapshot(repo) != before for repo, _, before, _ in clones)
        for (code, verdict, blockers), count in outcomes.most_common():
            print(f"{count}x exit {code}, {verdict}, blockers {[stage for stage, _ in blockers]}")
        print(f"cpu tier repeat: {sum(outcomes.values())} validations, {len(outcomes)} distinct outcomes, "
              f"trees changed {changed}")


if __name__ == "__main__":
    main()
