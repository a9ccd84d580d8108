"""A fleet batch against the sequential local batch: six PRs of the tests' eight-PR batch, on a
local Ray runtime the driver starts itself (2 CPUs, two fake GPUs: two workers at a time) and
through `doit batch` as today, each in a fresh workspace, side by side in one run. Prints both walls,
whether every verdict agrees, how many base runs the fleet launched, and last
`fleet: R.RRx sequential wall (base runs: B)`.
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.batches import base_runs_per_key, doit, eight_prs, reports, write_manifest  # noqa: E402
from tests.conftest import FAKES, IDLE_AMD  # noqa: E402
from tests.kernel_repos import tiled_repo  # noqa: E402

SIX = ("docs-1", "docs-2", "tail", "loose", "comment", "added-test")


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        fake = work / "amdsmi.json"
        second = {**IDLE_AMD, "hip_id": 58, "bdf": "0000:c2:00.0"}
        fake.write_text(json.dumps({"devices": [IDLE_AMD, second]}))
        os.environ.update(KVTASKS_FAKE_AMDSMI=str(fake), KVTASKS_LOCK_DIR=str(work), KVTASKS_IDLE_SAMPLES="2",
                          KVTASKS_IDLE_INTERVAL_S="0", PYTEST_ADDOPTS="-p no:hypothesispytest",
                          KVTASKS_FLEET_HOME=str(work / "nodes"), RAY_USAGE_STATS_ENABLED="0",
                          RAY_AUTH_MODE="disabled",  # a private runtime on this machine, gone with the driver
                          PYTHONPATH=os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")])))
        os.environ.pop("RAY_ADDRESS", None)  # the driver starts its own local runtime
        tiled = tiled_repo(work / "tiled")
        prs = {label: pr for label, pr in eight_prs(tiled, work / "patches").items() if label in SIX}
        manifest = write_manifest(tiled, prs, work / "six.json")

        started = time.perf_counter()
        doit(work / "sequential", "batch", f"manifest={manifest}")
        sequential_s = time.perf_counter() - started
        started = time.perf_counter()
        fleet = doit(work / "fleet", "batch", f"manifest={manifest}", "engine=ray")
        fleet_s = time.perf_counter() - started
        if fleet.returncode not in (0, 1, 2) or not (work / "fleet" / "reports" / "six" / "index.md").exists():
            sys.exit(f"the fleet batch did not finish: {fleet.stderr[-2000:]}")
        expected = {label: report["verdict"] for label, report in reports(work / "sequential", prs).items()}
        got = {label: report["verdict"] for label, report in reports(work / "fleet", prs).items()}
        base_runs = sum(base_runs_per_key(work / "fleet").values())
        print(f"sequential {sequential_s:.1f}s, fleet {fleet_s:.1f}s (Ray's start included)")
        print(f"verdicts agree: {got == expected} ({got})")
        print(f"fleet: {fleet_s / sequential_s:.2f}x sequential wall (base runs: {base_runs})")


if __name__ == "__main__":
    main()
