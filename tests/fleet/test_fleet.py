"""A fleet batch on a real local Ray runtime: one head on this machine whose custom resources stand
for two architectures (gfx-a, gfx-b), each task claiming a fake GPU of its arch from the fake amdsmi."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray  # noqa: F401  (the test extra installs it: a fleet test never skips)

from tests.batches import PROJECT, base_runs_per_key, doit
from tests.conftest import FAKES, IDLE_AMD
from tests.fleet_cluster import stop_processes_of
from tests.kernel_repos import KERNEL_ARCH_BUG, KERNEL_TAIL_BUG, kernel_repo, make_patch, snapshot

RAY = str(Path(sys.executable).with_name("ray"))
GPUS = [{**IDLE_AMD, "hip_id": 0, "bdf": "0000:a0:00.0", "market_name": "Fake MI-A", "target_graphics_version": "gfx-a"},
        {**IDLE_AMD, "hip_id": 1, "bdf": "0000:b0:00.0", "market_name": "Fake MI-B", "target_graphics_version": "gfx-b"}]
PRS = {"clean": {"README.md": "docs\n"}, "tail": {"kernels/scale.py": KERNEL_TAIL_BUG},
       "arch-bug": {"kernels/scale.py": KERNEL_ARCH_BUG}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One Ray head for the module: 2 CPUs, one unit of each arch's resource, the fake GPUs."""
    root = tmp_path_factory.mktemp("ray")
    amdsmi = root / "amdsmi.json"
    amdsmi.write_text(json.dumps({"devices": GPUS}))
    (root / "locks").mkdir()
    env = {**os.environ, "KVTASKS_FAKE_AMDSMI": str(amdsmi), "KVTASKS_LOCK_DIR": str(root / "locks"),
           "KVTASKS_IDLE_SAMPLES": "2", "KVTASKS_IDLE_INTERVAL_S": "0", "KVTASKS_FLEET_HOME": str(root / "nodes"),
           "KVTASKS_SCRATCH": str(root / "scratch"), "PYTEST_ADDOPTS": "-p no:hypothesispytest",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")])),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}  # a private test cluster
    temp = Path("/tmp") / f"ray-kvtasks-{os.getpid()}"  # Ray's socket paths must stay short
    started = subprocess.run([RAY, "start", "--head", "--port=0", "--num-cpus=2", "--num-gpus=2",
                              "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats",
                              '--resources={"kvtasks-arch:gfx-a": 1, "kvtasks-arch:gfx-b": 1}'],
                             env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    address = next(line.split("address='")[1].split("'")[0] for line in started.stdout.splitlines()
                   if "ray start --address=" in line)
    yield {"address": address, "env": env}
    stop_processes_of(temp)
    shutil.rmtree(temp, ignore_errors=True)


def kill_one_worker_running(task: str, within_s: float) -> int | None:
    """SIGKILL the first Ray worker process seen running `task` (Ray titles it ray::<task>), as a
    host losing a worker mid-task would."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if entry.name.isdigit() and title.startswith(f"ray::{task}"):
                os.kill(int(entry.name), signal.SIGKILL)
                return int(entry.name)
        time.sleep(0.2)
    return None


def test_three_prs_on_two_archs_and_one_arch_no_node_has(cluster, tmp_path, monkeypatch, gpu_host):
    repo = kernel_repo(tmp_path / "repo")
    before = snapshot(repo)
    patches = {label: make_patch(repo, files, tmp_path / f"{label}.patch") for label, files in PRS.items()}
    prs = [{"label": label, "patch": str(patch)} for label, patch in patches.items()]
    shared = {"repo": str(repo), "target": "tests/test_scale.py", "no_perf": True}
    fleet_manifest = tmp_path / "fleet.json"
    fleet_manifest.write_text(json.dumps({**shared, "engine": "ray", "archs": ["gfx-a", "gfx-b", "gfx-z"],
                                          "prs": prs}))
    for name, value in cluster["env"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RAY_ADDRESS", cluster["address"])
    home = tmp_path / "fleet-home"
    driver = subprocess.Popen([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "batch",
                               f"manifest={fleet_manifest}"], cwd=PROJECT, env={**os.environ, "KVTASKS_HOME": str(home)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = kill_one_worker_running("run_side", within_s=120)
    stdout, stderr = driver.communicate(timeout=600)
    assert driver.returncode == 1, stderr[-3000:]
    assert killed, "no worker was caught running a base or head task"
    fleet = {label: json.loads((home / "reports" / label / "validation_report.json").read_text()) for label in PRS}

    # engine=local on each arch's GPU: the same verdict per arch
    local_manifest = tmp_path / "local.json"
    local_manifest.write_text(json.dumps({**shared, "prs": prs}))
    for arch in ("gfx-a", "gfx-b"):
        monkeypatch.setenv("KVTASKS_GPU_ARCH", arch)
        local_home = tmp_path / f"local-{arch}"
        doit(local_home, "batch", f"manifest={local_manifest}")
        local = {label: json.loads((local_home / "reports" / label / "validation_report.json").read_text())
                 for label in PRS}
        assert {label: fleet[label]["arch_runs"][arch]["verdict"] for label in PRS} == \
            {label: local[label]["verdict"] for label in PRS}
        assert all(local[label]["stages"]["gpu_claim"]["arch"] == arch for label in PRS)

    assert fleet["arch-bug"]["arch_runs"]["gfx-a"]["verdict"] != "BLOCK"
    assert fleet["arch-bug"]["arch_runs"]["gfx-b"]["verdict"] == "BLOCK"
    assert fleet["arch-bug"]["verdict"] == "BLOCK"
    assert any(f["severity"] == "blocker" and f["detail"].startswith("[gfx-b]") for f in fleet["arch-bug"]["findings"])
    assert not any(f["severity"] == "blocker" and f["detail"].startswith("[gfx-a]")
                   for f in fleet["arch-bug"]["findings"])
    for label in PRS:  # an arch no node has is INCONCLUSIVE, named, never dropped: no PR passes
        run = fleet[label]["arch_runs"]["gfx-z"]
        assert run["verdict"] == "INCONCLUSIVE" and "gfx-z" in run["findings"][0]["detail"] and run["node"] is None
        assert fleet[label]["arch_coverage"]["gfx-z"] == "not-covered"
        assert fleet[label]["verdict"] != "PASS"
        assert fleet[label]["arch_runs"]["gfx-b"]["gpu_model"] == "Fake MI-B"
        assert fleet[label]["arch_runs"]["gfx-a"]["node"]
    assert fleet["tail"]["verdict"] == "BLOCK"
    assert fleet["clean"]["verdict"] == "INCONCLUSIVE"  # PASS on both archs that ran, gfx-z never ran
    assert not [f for arch in ("gfx-a", "gfx-b") for f in fleet["clean"]["arch_runs"][arch]["findings"]
                if f["severity"] in ("blocker", "should-fix")]
    # one base run per (key, arch): the three PRs share each arch's base
    assert sorted(base_runs_per_key(home).values()) == [1, 1]
    index = (home / "reports" / "fleet" / "index.md").read_text()
    assert "| PR | verdict | gfx-a | gfx-b | gfx-z |" in index and "| arch-bug | BLOCK | " in index
    assert "fleet: arch-bug [gfx-b]: BLOCK" in stderr and "(9/9)" in stderr
    assert snapshot(repo) == before

    # doit report rebuilds the fleet reports from the driver's store alone
    shutil.rmtree(home / "reports" / "arch-bug")
    monkeypatch.delenv("RAY_ADDRESS")
    rebuilt = doit(home, "report")
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    again = json.loads((home / "reports" / "arch-bug" / "validation_report.json").read_text())
    assert (again["verdict"], again["arch_runs"], again["findings"]) == \
        (fleet["arch-bug"]["verdict"], fleet["arch-bug"]["arch_runs"], fleet["arch-bug"]["findings"])
