"""A simulated fleet on this one machine (tests and bench): a Ray head and worker nodes started with
Ray's own cluster utilities, each node with its own resources and its own world, as separate GPU
hosts would have: a fake GPU per arch it offers (its own fake amdsmi file), its own GPU lock
directory, fleet home and scratch. The nodes share one hostname; kvtasks tells them apart by Ray
node id. Ray's workers inherit their raylet's environment, so a node's world is the environment
its raylet starts with.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from tests.conftest import FAKES, IDLE_AMD

# what every node and the driver share: fast idle sampling, no hypothesis plugin in the targets,
# a private cluster (no usage reports, no auth token to look for)
COMMON_ENV = {"KVTASKS_IDLE_SAMPLES": "2", "KVTASKS_IDLE_INTERVAL_S": "0", "PYTEST_ADDOPTS": "-p no:hypothesispytest",
              "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}

# How soon Ray's control store calls a silent node dead (its health checks, read from the
# environment it starts in): Ray's defaults wait 5 s before the first check and then 5 failed
# checks 3 s apart, so a lost node's tasks came back failed after about 15 s. Here a node is dead
# after 3 checks a second apart, each allowed 2 s: a loaded machine's node answers well within that.
LOSS_DETECTION = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
                  "RAY_health_check_timeout_ms": "2000", "RAY_health_check_failure_threshold": "3"}


def fakes_path() -> str:
    """PYTHONPATH with the fake GPU libraries first, for nodes, drivers and local validators."""
    return os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")]))


def fake_gpu(arch: str, index: int) -> dict:
    """One fake AMD GPU of `arch` at HIP index `index`: its model names the arch."""
    return {**IDLE_AMD, "hip_id": index, "bdf": f"0000:{0xa0 + index:02x}:00.0",
            "market_name": f"Fake MI-{arch}", "target_graphics_version": arch}


def fake_gpus(archs: list[str], every_arch: list[str]) -> list[dict]:
    """A host's fake GPUs, one per arch, each at the HIP index its arch has in `every_arch`: an
    arch's GPU has one index on every host, so a kernel that misbehaves on one index misbehaves
    on that arch wherever it runs (the sequential host with every arch included)."""
    return [fake_gpu(arch, sorted(every_arch).index(arch)) for arch in archs]


@dataclass
class SimulatedNode:
    name: str  # the folder of its world, for the test's eyes only
    archs: list[str]  # one fake GPU of each
    home: Path
    handle: object = None  # Ray's Node
    node_id: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {"KVTASKS_FAKE_AMDSMI": str(self.home / "amdsmi.json"), "KVTASKS_LOCK_DIR": str(self.home / "locks"),
                "KVTASKS_FLEET_HOME": str(self.home / "fleet"), "KVTASKS_SCRATCH": str(self.home / "scratch")}

    def resources(self) -> dict[str, float]:
        counts: dict[str, float] = {}
        for arch in self.archs:
            counts[f"kvtasks-arch:{arch}"] = counts.get(f"kvtasks-arch:{arch}", 0) + 1
        return counts

    def trees(self) -> list[Path]:
        """The base trees this node checked out in its private clones."""
        clones = self.home / "fleet" / "clones"
        return sorted(path.parent for path in clones.glob("*/*/.git") if path.is_file()) if clones.is_dir() else []


@dataclass
class SimulatedFleet:
    root: Path
    node_archs: list[list[str]]  # the head's archs first, then each worker's
    nodes: list[SimulatedNode] = field(default_factory=list)
    cluster: object = None

    @property
    def temp(self) -> Path:
        # Ray's socket paths must stay short: not under a test's tmp_path
        return Path("/tmp") / f"ray-kvfleet-{os.getpid()}"

    @property
    def address(self) -> str:
        return self.cluster.address

    def driver_env(self) -> dict[str, str]:
        """What a driver on this machine needs to reach the fleet (and fake modules on its path)."""
        return {**COMMON_ENV, "RAY_ADDRESS": self.address, "PYTHONPATH": fakes_path()}

    def start(self) -> "SimulatedFleet":
        from ray.cluster_utils import Cluster
        # Ray notes the newest cluster's address in its temp dir: this fleet's own, not the machine's
        (self.temp / "ray").mkdir(parents=True, exist_ok=True)
        os.environ["RAY_TMPDIR"] = str(self.temp)
        for position, archs in enumerate(self.node_archs):
            name = "head" if position == 0 else f"worker-{position}"
            self.nodes.append(SimulatedNode(name, archs, self.root / name))
        with mock.patch.dict(os.environ, LOSS_DETECTION):  # read by the control store as it starts: its own
            self.cluster = Cluster(initialize_head=True, shutdown_at_exit=False,
                                   head_node_args=self._node_args(self.nodes[0], temp_dir=str(self.temp),
                                                                  include_dashboard=False))
        self.nodes[0].handle = self.cluster.head_node
        for node in self.nodes[1:]:
            node.handle = self.cluster.add_node(**self._node_args(node))
        self.cluster.wait_for_nodes()
        for node in self.nodes:
            node.node_id = node.handle.node_id
        return self

    def _node_args(self, node: SimulatedNode, **extra) -> dict:
        (node.home / "locks").mkdir(parents=True, exist_ok=True)
        every_arch = sorted({arch for archs in self.node_archs for arch in archs})
        (node.home / "amdsmi.json").write_text(json.dumps({"devices": fake_gpus(node.archs, every_arch)}))
        env = {**os.environ, **COMMON_ENV, **node.env, "PYTHONPATH": fakes_path()}
        env.pop("RAY_ADDRESS", None)
        # no autoscaler (the nodes are fixed) and no log monitor (what workers print is not streamed
        # to the driver, whose own lines are all a test reads): they were half of a node's CPU at its
        # start and a second of the cluster's shutdown
        return {"num_cpus": len(node.archs), "num_gpus": len(node.archs), "resources": node.resources(),
                "env_vars": env, "no_monitor": True, "include_log_monitor": False, **extra}

    def lose(self, node: SimulatedNode) -> None:
        """The node's host goes away: every process of it killed at once, no goodbye."""
        self.cluster.remove_node(node.handle, allow_graceful=False)
        node.handle = None

    def rejoin(self, node: SimulatedNode) -> None:
        """A lost node's host comes back (a new Ray node, the same world on disk)."""
        node.handle = self.cluster.add_node(**self._node_args(node))
        self.cluster.wait_for_nodes()
        node.node_id = node.handle.node_id

    def shutdown(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
        stop_processes_of(self.temp)
        shutil.rmtree(self.temp, ignore_errors=True)


def stop_processes_of(temp: Path) -> None:
    """End the processes whose command lines name this fleet's temp dir (a Ray process that
    outlived the cluster's shutdown), never another's: SIGTERM, a second to go, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _processes_of(temp):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 1
        while _processes_of(temp) and time.monotonic() < deadline:
            time.sleep(0.05)


def _processes_of(temp: Path) -> list[int]:
    """The processes whose command line names the folder or a path under it, where the name ends
    (another fleet's folder may begin with this one's name: /tmp/ray-kvfleet-12, /tmp/ray-kvfleet-123)."""
    ours = re.compile(re.escape(str(temp).encode()) + rb"(?![\w.-])")
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
            and entry.name != str(os.getpid()) and ours.search(_cmdline(entry))]


def _cmdline(entry: Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""
