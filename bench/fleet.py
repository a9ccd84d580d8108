"""The fleet measured as a fleet: 12 PRs x 2 archs against one base on a simulated cluster of 4 Ray
nodes on this machine (2 per arch, each with its own fake GPU, GPU locks and fleet home), against
the same batch run sequentially on one host that has both GPUs (`doit batch` once per arch).

The kernel repository's target runs are sleep-bound: each sleeps at least three times its own CPU
time and at least --gpu-s seconds, standing for GPU work, so this machine's cores are not what is
measured (unless other work loads them: the load average per core is printed after each batch).
Ray's start (the cluster's nodes) is measured and reported apart and is not in the speed-up; the
driver's start and connection to the cluster are (every batch pays them). Prints both walls,
whether every verdict agrees, the base runs per arch, the node time the fleet added per task, and
last `fleet: S.SSx speed-up on 4 nodes (base runs: B per arch, ideal 4.00x)`. With --smoke, one PR
on one node of one arch, with no GPU work (its targets do not sleep): a check that the bench runs,
not a measurement.

    python bench/fleet.py [--gpu-s 5.0] [--timeline] [--smoke]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvtasks.evidence.store import Store  # noqa: E402
from tests.batches import PROJECT, doit  # noqa: E402
from tests.fleet_cluster import COMMON_ENV, SimulatedFleet, fake_gpus, fakes_path  # noqa: E402
from tests.kernel_repos import (KERNEL, KERNEL_ARCH_BUG, KERNEL_TAIL_BUG, make_patch,  # noqa: E402
                                sleep_bound_kernel_repo)

ARCHS = ["gfx-a", "gfx-b"]
NODES = [["gfx-a"], ["gfx-a"], ["gfx-b"], ["gfx-b"]]
# --smoke: the least that still runs both batches, Ray's start and the per-arch comparison
SMOKE_ARCHS, SMOKE_NODES, SMOKE_PR = ["gfx-a"], [["gfx-a"]], "tail-1"
TASK_STARTED = re.compile(r"fleet: \S+ \[\S+\]: (prepare|base|head) on \S+$")  # the driver's progress line


def twelve_prs() -> dict[str, dict[str, str]]:
    """label -> changed files: docs, comments, a tail bug, and a bug only gfx-b shows."""
    prs = {f"docs-{n}": {"README.md": f"docs {n}\n"} for n in range(1, 5)}
    prs |= {f"comment-{n}": {"kernels/scale.py": f"# scale kernels ({n})\n" + KERNEL} for n in range(1, 4)}
    prs |= {f"tail-{n}": {"kernels/scale.py": f"# tail ({n})\n" + KERNEL_TAIL_BUG} for n in range(1, 4)}
    prs |= {f"arch-bug-{n}": {"kernels/scale.py": f"# arch ({n})\n" + KERNEL_ARCH_BUG} for n in range(1, 3)}
    return prs


def base_runs_per_arch(home: Path) -> Counter:
    """How often each arch's base-repo target was launched (an arch's runs are stored as <PR>.<arch>)."""
    return Counter(row["label"].rsplit(".", 1)[-1] for row in Store(home / "cache").launches()
                   if row["kind"] == "base" and row["run"] == "base-repo")


def verdicts(home: Path, labels, arch: str | None) -> dict[str, str]:
    found = {}
    for label in labels:
        report = json.loads((home / "reports" / label / "validation_report.json").read_text())
        found[label] = report["arch_runs"][arch]["verdict"] if arch else report["verdict"]
    return found


def load() -> str:
    """The 1-minute load average over this machine's cores: the walls mean little when it is above 1."""
    return f"{os.getloadavg()[0] / os.cpu_count():.1f} per core"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu-s", type=float, default=5.0, help="the least GPU work (sleep) of one target run")
    parser.add_argument("--timeline", action="store_true", help="print the driver's progress lines with their times")
    parser.add_argument("--smoke", action="store_true",
                        help="one PR on one node of one arch, no GPU work (overrides --gpu-s)")
    args = parser.parse_args()
    archs, nodes = (SMOKE_ARCHS, SMOKE_NODES) if args.smoke else (ARCHS, NODES)
    gpu_s = 0.0 if args.smoke else args.gpu_s
    os.environ.update(COMMON_ENV, PYTHONPATH=fakes_path())
    os.environ.pop("RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="kvtasks-fleet-bench-") as folder:
        work = Path(folder)
        # a smoke run checks that the bench runs: its targets need not stand for GPU work at all
        repo = sleep_bound_kernel_repo(work / "repo", gpu_s, cpu_factor=0.0 if args.smoke else 3.0)
        (work / "patches").mkdir()
        prs = twelve_prs()
        if args.smoke:
            prs = {SMOKE_PR: prs[SMOKE_PR]}
        entries = [{"label": label, "patch": str(make_patch(repo, files, work / "patches" / f"{label}.patch"))}
                   for label, files in prs.items()]
        shared = {"repo": str(repo), "target": "tests/test_scale.py", "no_perf": True, "prs": entries}
        (work / "local.json").write_text(json.dumps(shared))
        (work / "fleet.json").write_text(json.dumps({**shared, "engine": "ray", "archs": archs}))

        # sequentially on one host with both GPUs: the batch once per arch
        host = work / "host"
        (host / "locks").mkdir(parents=True)
        (host / "amdsmi.json").write_text(json.dumps({"devices": fake_gpus(archs, archs)}))
        os.environ.update(KVTASKS_FAKE_AMDSMI=str(host / "amdsmi.json"), KVTASKS_LOCK_DIR=str(host / "locks"),
                          KVTASKS_SCRATCH=str(host / "scratch"))
        sequential, sequential_s = {}, {}
        for arch in archs:
            os.environ["KVTASKS_GPU_ARCH"] = arch
            started = time.perf_counter()
            done = doit(work / f"sequential-{arch}", "batch", f"manifest={work / 'local.json'}", timeout=3600)
            sequential_s[arch] = time.perf_counter() - started
            if done.returncode not in (0, 1, 2):
                sys.exit(f"the sequential batch on {arch} did not finish: {done.stderr[-2000:]}")
            sequential[arch] = verdicts(work / f"sequential-{arch}", prs, None)
            print(f"sequential on {arch}: {sequential_s[arch]:.1f}s (load average after: {load()})", flush=True)
        for name in ("KVTASKS_GPU_ARCH", "KVTASKS_FAKE_AMDSMI", "KVTASKS_LOCK_DIR", "KVTASKS_SCRATCH"):
            os.environ.pop(name)

        fleet = SimulatedFleet(work / "fleet", nodes)
        try:
            started = time.perf_counter()
            fleet.start()
            ray_start_s = time.perf_counter() - started
            print(f"ray start: {ray_start_s:.1f}s for {len(nodes)} nodes (not in the speed-up)", flush=True)
            started = time.perf_counter()
            driver = subprocess.Popen([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "batch",
                                       f"manifest={work / 'fleet.json'}"], cwd=PROJECT, text=True,
                                      env={**os.environ, **fleet.driver_env(), "KVTASKS_HOME": str(work / "driver")},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            lines = [(time.perf_counter() - started, line.rstrip("\n")) for line in driver.stderr]
            driver.wait()
            fleet_s = time.perf_counter() - started
            print(f"fleet batch: {fleet_s:.1f}s (load average after: {load()})", flush=True)
        finally:
            fleet.shutdown()
        if driver.returncode not in (0, 1, 2) or not (work / "driver" / "reports" / "fleet" / "index.md").exists():
            sys.exit("the fleet batch did not finish: " + "\n".join(line for _, line in lines[-30:]))
        if args.timeline:
            for at, line in lines:
                print(f"{at:7.1f}s {line}")
        got = {arch: verdicts(work / "driver", prs, arch) for arch in archs}
        base_runs = base_runs_per_arch(work / "driver")
        started_at = [at for at, line in lines if TASK_STARTED.match(line)]
        tasks = len(started_at)
        total_sequential_s = sum(sequential_s.values())
        speed_up = total_sequential_s / fleet_s
        # the node time the fleet spent beyond the sequential batch's, per task it ran
        overhead_s = (fleet_s * len(nodes) - total_sequential_s) / tasks
        print(f"sequential {total_sequential_s:.1f}s on one host, fleet {fleet_s:.1f}s on {len(nodes)} nodes "
              f"({tasks} tasks; the driver's start and connection included: its first task began at "
              f"{started_at[0]:.1f}s)")
        print(f"verdicts agree: {got == sequential}; base runs per arch: {dict(sorted(base_runs.items()))}")
        print(f"node time the fleet added per task: {overhead_s:.2f}s (target runs at least {gpu_s}s of GPU "
              f"work each)")
        print(f"fleet: {speed_up:.2f}x speed-up on {len(nodes)} nodes (base runs: "
              f"{max(base_runs.values(), default=0)} per arch, ideal {len(nodes):.2f}x)")


if __name__ == "__main__":
    main()
