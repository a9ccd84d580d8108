"""A fleet batch on a simulated cluster of two Ray nodes on this machine, each with its own fake
GPUs, GPU locks and fleet home: the head offers gfx-a, the worker gfx-a and gfx-b. PRs on both archs
and on one no node has, with targets that do not sleep: where each (PR, arch) ran, one base run per
arch, a Ray worker killed mid-task, the worker node lost mid-batch, Ctrl-C on the driver, reports
rebuilt from the driver's store, and the verdicts of the sequential local batch throughout. One
cluster serves every test: Ray's start is a tenth of the module's time."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from kvtasks.fleet.node import node_name
from kvtasks.records import ARTIFACT_FIELDS
from kvtasks.worktree import Worktree
from tests.batches import PROJECT, base_runs_per_key, doit
from tests.fleet_cluster import COMMON_ENV, SimulatedFleet, fake_gpus, fakes_path
from tests.kernel_repos import KERNEL_ARCH_BUG, KERNEL_TAIL_BUG, git, kernel_repo, make_patch, snapshot

ARCHS = ["gfx-a", "gfx-b"]
PRS = {"clean": {"README.md": "docs\n"}, "tail": {"kernels/scale.py": KERNEL_TAIL_BUG},
       "arch-bug": {"kernels/scale.py": KERNEL_ARCH_BUG}}
KERNEL_PRS = ("tail", "arch-bug")  # the batch the node-loss and Ctrl-C tests run


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    started = SimulatedFleet(tmp_path_factory.mktemp("fleet"), [["gfx-a"], ["gfx-a", "gfx-b"]]).start()
    yield started
    started.shutdown()


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """The repository (and its snapshot as supplied), the manifests of the fleet batches (every PR on
    both archs and gfx-z, which no node has; the kernel PRs on both archs) and of the sequential one,
    and the sequential batch's verdict per arch, run once for the module on one host with both GPUs."""
    root = tmp_path_factory.mktemp("batch")
    repo = kernel_repo(root / "repo")
    prs = [{"label": label, "patch": str(make_patch(repo, files, root / f"{label}.patch"))}
           for label, files in PRS.items()]
    supplied = snapshot(repo)
    shared = {"repo": str(repo), "target": "tests/test_scale.py", "no_perf": True, "prs": prs}
    every_pr, fleet_manifest, local_manifest = root / "fleet.json", root / "kernel-prs.json", root / "local.json"
    every_pr.write_text(json.dumps({**shared, "engine": "ray", "archs": [*ARCHS, "gfx-z"]}))
    fleet_manifest.write_text(json.dumps({**shared, "engine": "ray", "archs": ARCHS,
                                          "prs": [pr for pr in prs if pr["label"] in KERNEL_PRS]}))
    local_manifest.write_text(json.dumps(shared))
    host = root / "host"
    (host / "locks").mkdir(parents=True)
    (host / "amdsmi.json").write_text(json.dumps({"devices": fake_gpus(ARCHS, ARCHS)}))
    sequential = {}
    with pytest.MonkeyPatch.context() as env:
        for name, value in {**COMMON_ENV, "KVTASKS_FAKE_AMDSMI": str(host / "amdsmi.json"), "PYTHONPATH": fakes_path(),
                            "KVTASKS_LOCK_DIR": str(host / "locks"), "KVTASKS_SCRATCH": str(host / "scratch")}.items():
            env.setenv(name, value)
        for arch in ARCHS:
            env.setenv("KVTASKS_GPU_ARCH", arch)
            done = doit(root / f"sequential-{arch}", "batch", f"manifest={local_manifest}")
            assert done.returncode in (0, 1), done.stderr[-2000:]
            reports = {label: report_of(root / f"sequential-{arch}", label) for label in PRS}
            assert all(report["stages"]["gpu_claim"]["arch"] == arch for report in reports.values())
            sequential[arch] = {label: report["verdict"] for label, report in reports.items()}
    assert snapshot(repo) == supplied  # the sequential batches lent the tree and handed it back
    return {"repo": repo, "snapshot": supplied, "every_pr": every_pr, "manifest": fleet_manifest,
            "sequential": sequential}


def report_of(home: Path, label: str) -> dict:
    return json.loads((home / "reports" / label / "validation_report.json").read_text())


def fleet_reports(home: Path, labels=KERNEL_PRS) -> dict[str, dict]:
    return {label: report_of(home, label) for label in labels}


class Driver:
    """`doit batch engine=ray` in a process of its own, its progress lines read as they come."""

    def __init__(self, fleet: SimulatedFleet, home: Path, manifest: Path):
        self.lines: list[str] = []
        self.seen = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "batch", f"manifest={manifest}"],
            cwd=PROJECT, env={**os.environ, **fleet.driver_env(), "KVTASKS_HOME": str(home)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            with self.seen:
                self.lines.append(line.rstrip("\n"))
                self.seen.notify_all()

    def wait_for(self, wanted, within_s: float = 120) -> str:
        """The first progress line `wanted` accepts (waiting for it)."""
        with self.seen:
            found = self.seen.wait_for(lambda: next((line for line in self.lines if wanted(line)), None)
                                       or self.process.poll() is not None, timeout=within_s)
            line = next((line for line in self.lines if wanted(line)), None)
        assert line, f"no such progress line (driver ended: {self.process.poll()}, found {found}):\n" + \
            "\n".join(self.lines[-40:])
        return line

    def finish(self, within_s: float = 300) -> int:
        self.process.wait(timeout=within_s)
        self.reader.join(timeout=10)
        return self.process.returncode

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


def name_of(node) -> str:
    return node_name(socket.gethostname(), node.node_id)


def trees_handed_back(fleet: SimulatedFleet, nodes, within_s: float = 60) -> list[str]:
    """The trees of these nodes still lent or dirty once their guardians have had `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        dirty = [str(tree) for node in nodes for tree in node.trees()
                 if Worktree(tree, None).journal.pending() is not None or git(tree, "status", "--porcelain").strip()]
        if not dirty or time.monotonic() > deadline:
            return dirty
        time.sleep(0.5)


def artifact_paths(value, field: str = "") -> list[tuple[str, str]]:
    """(field, path) of each artifact path stored results hold, at any depth (records.ARTIFACT_FIELDS)."""
    if isinstance(value, dict):
        return [found for name, item in value.items() for found in artifact_paths(item, name)]
    if isinstance(value, list):
        return [found for item in value for found in artifact_paths(item, field)]
    return [(field, value)] if field in ARTIFACT_FIELDS and isinstance(value, str) and value else []


def kill_one_worker_running(fleet: SimulatedFleet, task: str, within_s: float) -> int | None:
    """SIGKILL the first of this fleet's Ray workers seen running `task` (Ray titles it
    ray::<task>), as a host losing a worker process mid-task would."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for pid in fleet_workers(fleet, f"ray::{task}"):
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.2)
    return None


def test_each_arch_runs_on_its_nodes_with_one_base_run_each_and_the_sequential_verdicts(fleet, batch, tmp_path):
    home = tmp_path / "driver"
    driver = Driver(fleet, home, batch["every_pr"])
    killed = kill_one_worker_running(fleet, "run_side", within_s=120)
    assert driver.finish(within_s=600) == 1, driver.stderr[-3000:]
    assert killed, "no worker was caught running a base or head task"
    reports = fleet_reports(home, PRS)
    head, worker = fleet.nodes
    of_arch = {"gfx-a": {name_of(head), name_of(worker)}, "gfx-b": {name_of(worker)}}
    retried = []
    for label, report in reports.items():
        for arch in ARCHS:
            run = report["arch_runs"][arch]
            assert run["node"] in of_arch[arch] and run["gpu_model"] == f"Fake MI-{arch}"
            assert f"fleet: {label} [{arch}]: prepare on {run['node']}" in driver.lines
            assert f"fleet: {label} [{arch}]: head on {run['node']}" in driver.lines
            retried += [(arch, attempt, run["node"]) for attempt in run["retried"]]
        # an arch no node has is INCONCLUSIVE, named, never dropped: no PR passes
        missing = report["arch_runs"]["gfx-z"]
        assert missing["verdict"] == "INCONCLUSIVE" and "gfx-z" in missing["findings"][0]["detail"]
        assert missing["node"] is None and report["arch_coverage"]["gfx-z"] == "not-covered"
        assert report["verdict"] != "PASS"
    # the killed worker's task ran again on its node, which lived on (a kill that lands as the task
    # returns loses nothing); every other task ran once
    assert len(retried) <= 1, retried
    for _arch, attempt, node in retried:
        assert attempt["node"] == node and attempt["task"] in ("base", "head"), attempt
    rerun_bases = Counter(arch for arch, attempt, _node in retried if attempt["task"] == "base")
    assert {arch: {label: reports[label]["arch_runs"][arch]["verdict"] for label in PRS} for arch in ARCHS} == \
        batch["sequential"]
    assert reports["arch-bug"]["arch_runs"]["gfx-b"]["verdict"] == "BLOCK" != \
        reports["arch-bug"]["arch_runs"]["gfx-a"]["verdict"]
    assert reports["arch-bug"]["verdict"] == reports["tail"]["verdict"] == "BLOCK"
    blockers = [f["detail"] for f in reports["arch-bug"]["findings"] if f["severity"] == "blocker"]
    assert any(detail.startswith("[gfx-b]") for detail in blockers)
    assert not any(detail.startswith("[gfx-a]") for detail in blockers)
    assert reports["clean"]["verdict"] == "INCONCLUSIVE"  # PASS on both archs that ran, gfx-z never ran
    assert not [f for arch in ARCHS for f in reports["clean"]["arch_runs"][arch]["findings"]
                if f["severity"] in ("blocker", "should-fix")]
    assert sorted(base_runs_per_key(home).values()) == [1, 1]  # one base run per arch for all three PRs
    for arch in ARCHS:
        assert sum(f"[{arch}]: base on " in line for line in driver.lines) == 1 + rerun_bases[arch]
    index = (home / "reports" / "fleet" / "index.md").read_text()
    assert "| PR | verdict | gfx-a | gfx-b | gfx-z |" in index and "| arch-bug | BLOCK | " in index
    assert "fleet: arch-bug [gfx-b]: BLOCK" in driver.stderr and "(9/9)" in driver.stderr
    assert trees_handed_back(fleet, fleet.nodes, within_s=10) == []
    assert snapshot(batch["repo"]) == batch["snapshot"]
    # the driver's store holds the nodes' artifacts, and its evidence points at those copies alone
    stored = [found for document in (home / "cache" / "evidence").rglob("*.json")
              for found in artifact_paths(json.loads(document.read_text()))]
    assert stored and all(Path(path).is_relative_to(home / "cache") for _field, path in stored), stored
    assert all(Path(path).is_file() for field, path in stored if field == "log")

    # doit report rebuilds the fleet's reports from the driver's store alone, with no cluster
    shutil.rmtree(home / "reports" / "arch-bug")
    rebuilt = doit(home, "report")
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    again = json.loads((home / "reports" / "arch-bug" / "validation_report.json").read_text())
    assert (again["verdict"], again["arch_runs"], again["findings"]) == \
        (reports["arch-bug"]["verdict"], reports["arch-bug"]["arch_runs"], reports["arch-bug"]["findings"])


def test_a_node_lost_mid_batch_reruns_its_tasks_on_a_survivor_of_the_arch(fleet, batch, tmp_path):
    head, worker = fleet.nodes
    lost_name = name_of(worker)
    home = tmp_path / "driver"
    driver = Driver(fleet, home, batch["manifest"])
    try:
        # the first gfx-a task the worker runs: no (PR, arch) of the worker has finished yet
        driver.wait_for(lambda line: "[gfx-a]: " in line and line.endswith(f" on {lost_name}"))
        fleet.lose(worker)
        assert driver.finish() == 1, driver.stderr[-3000:]  # tail BLOCKs on gfx-a
    finally:
        if worker.handle is None:
            fleet.rejoin(worker)  # the next test has its two nodes again
    reports = fleet_reports(home)
    assert f"fleet: node {lost_name} was lost" in driver.lines
    retried = [(label, report["arch_runs"]["gfx-a"]) for label, report in reports.items()
               if report["arch_runs"]["gfx-a"]["retried"]]
    assert retried, driver.stderr[-3000:]
    for _label, run in retried:  # each lost attempt names its node; the run that counted is the survivor's
        assert {attempt["node"] for attempt in run["retried"]} == {lost_name} and run["node"] == name_of(head)
    assert {label: report["arch_runs"]["gfx-a"]["verdict"] for label, report in reports.items()} == \
        {label: batch["sequential"]["gfx-a"][label] for label in KERNEL_PRS}
    for report in reports.values():
        gfx_b = report["arch_runs"]["gfx-b"]
        assert gfx_b["verdict"] == "INCONCLUSIVE" and gfx_b["node"] is None
        assert "no surviving node has this architecture" in gfx_b["findings"][0]["detail"] \
            or f"the last node of this architecture ({lost_name}) was lost" in gfx_b["findings"][0]["detail"]
        assert report["verdict"] in ("BLOCK", "INCONCLUSIVE")  # never PASS with an arch not run
    # gfx-a's base once, on whichever node; gfx-b's base may have run on the worker before it was lost
    # (a loaded host starts the worker's gfx-b chain first), once at most
    assert set(base_runs_per_key(home).values()) == {1} and len(base_runs_per_key(home)) <= 2
    assert trees_handed_back(fleet, [head]) == []


def test_ctrl_c_on_the_driver_cancels_the_tasks_and_every_node_hands_its_tree_back(fleet, batch, tmp_path):
    driver = Driver(fleet, tmp_path / "driver", batch["manifest"])
    driver.wait_for(lambda line: ": base on " in line)
    time.sleep(0.5)  # the base's target is running
    driver.process.send_signal(signal.SIGINT)
    assert driver.finish(within_s=60) != 0
    assert not any(line.startswith("| tail |") for line in driver.lines)  # no batch index: it was stopped
    assert trees_handed_back(fleet, fleet.nodes) == []
    deadline = time.monotonic() + 30
    while running_tasks(fleet) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running_tasks(fleet) == []


def running_tasks(fleet: SimulatedFleet) -> list[int]:
    """The fleet's Ray workers still running a kvtasks task."""
    return fleet_workers(fleet, "ray::run_")


def fleet_workers(fleet: SimulatedFleet, title: str) -> list[int]:
    """This fleet's Ray workers whose title starts with `title` (Ray titles a busy worker
    ray::<task>): its nodes' environment names the fleet's folder, another fleet's does not."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        ours = (str(fleet.root) + os.sep).encode() in environ
        if entry.name.isdigit() and argv[0].startswith(title.encode()) and ours:
            found.append(int(entry.name))
    return found
