"""The driver's records of a fleet batch: the nodes it schedules on, a (PR, arch) chain of tasks, a
base key's one run; what it ships a node for one (PR, arch), and how it stores what a node returns.
It places no task (scheduler.py does).
"""
from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kvtasks.run import phases
from kvtasks.fleet import node
from kvtasks.fleet.resources import ARCH_RESOURCE, arch_label
from kvtasks.report import Retry
from kvtasks.request import Request
from kvtasks.stages import StageResult
from kvtasks.evidence.store import Store, artifacts_moved
from kvtasks.evidence.workspace import Workspace
from kvtasks.worktree import Worktree


def shipment(request: Request, arch: str | None, store: Store) -> node.Shipment:
    """What a node gets for one (PR, arch): the driver's grid secret with it, so every node draws the
    same default grid and PRs against one base share its key whichever node prepared them."""
    source = request.source or request.repo
    base_oid = Worktree(request.repo, None).head_oid()
    label = arch_label(request.label, arch)
    host = request.host.model_copy(update={"grid_secret": store.grid_secret(request.host.grid_secret)})
    return node.Shipment(request=request.model_copy(update={"label": label, "host": host}), source=source,
                         base_oid=base_oid, patch=Path(request.patch).read_bytes() if request.patch else None)


def store_run(workspace: Workspace, run: node.GroupRun, request: Request) -> list[StageResult]:
    """Store a group a node ran under its key, its logs beside it as a local run keeps them (and
    the base evidence a head group made under its own keys, as a local run does)."""
    label = request.label
    with tempfile.TemporaryDirectory(prefix="kvtasks-fleet-") as scratch:
        for name, data in run.logs.items():
            target = Path(scratch) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        results = [StageResult.model_validate(artifacts_moved(r, run.run_root, scratch)) for r in run.results]
        workspace.store.write(run.kind, run.key, results, label=label, base_oid=run.record.get("base_oid"),
                              scratch=Path(scratch))
        if run.kind == "head":
            evidence_keys = phases.base_evidence_keys(request, run.record["base_key"])
            phases.keep_base_evidence(workspace.store, results, evidence_keys, label, run.record.get("base_oid"),
                                      Path(scratch))
    workspace.store.record_launches(run.kind, run.key, label, [launch.label for r in results for launch in r.runs])
    return results



@dataclass
class FleetNode:
    """A node as the driver schedules it: how many tasks of each arch it runs at once (its units of
    that arch's resource, or its GPUs when the manifest names no archs) and how many it runs now."""

    node_id: str
    name: str
    slots: dict[str, int]
    busy: Counter = field(default_factory=Counter)
    alive: bool = True


@dataclass
class Chain:
    """One (PR, arch): prepare, then base when its key has none, then head, all on the node that
    prepared it (its keys name that node's runtime, and its base and head use the GPU prepare
    claimed there). A chain whose node is lost starts again from prepare on a surviving node."""

    request: Request
    arch: str | None
    shipment: node.Shipment
    node: FleetNode | None = None
    prepared: node.GroupRun | None = None
    retried: list[Retry] = field(default_factory=list)

    @property
    def resource(self) -> str:
        return ARCH_RESOURCE.format(self.arch) if self.arch else "GPU"

    @property
    def shown(self) -> str:
        return f"{self.request.label} [{self.arch or 'any'}]"


@dataclass
class Base:
    """A base key's one run: who runs it, the chains whose heads wait for it, and its result."""

    runner: Chain | None = None
    waiting: list[Chain] = field(default_factory=list)
    result: object = None  # the object reference of its GroupRun once it ran
    failed: str | None = None


def fleet_nodes(ray) -> dict[str, FleetNode]:
    nodes = {}
    for entry in ray.nodes():
        slots = {name: int(count) for name, count in entry.get("Resources", {}).items()
                 if name.startswith(ARCH_RESOURCE.format("")) or name == "GPU"}
        if entry.get("Alive") and slots:
            nodes[entry["NodeID"]] = FleetNode(entry["NodeID"], node.node_name(entry["NodeManagerHostname"],
                                                                               entry["NodeID"]), slots)
    return nodes


