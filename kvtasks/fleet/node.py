"""What a fleet task does on its node: it gets the repository (a URL or path), the base commit, the
PR's patch bytes and the request, checks the base out in the node's own workspace, runs one
pipeline group there (phases.py, as a local validation does) and returns the group's stage results
and the logs its runs kept, capped. It never holds the driver's evidence store: the driver stores
what it returns under the same keys.

A node has one workspace (private clones, a node-side store) at one path for every worker. The
content keys name the runtime module's path relative to the checked-out tree, so nodes built alike
agree on them wherever their workspaces lie: their base evidence is shared. Tasks on one node take
turns with a tree as a local parallel batch's workers do. The GPU is claimed through the
same picker and locks as a local validation, restricted to the task's architecture.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kvtasks.run import phases
from kvtasks.worktree import clones
from kvtasks.errors import InfrastructureError
from kvtasks.gpu import picker
from kvtasks.request import Request
from kvtasks.stages import StageResult, gpu_claim
from kvtasks.evidence.workspace import Workspace

# a run log larger than this comes back cut to it, and the cut is recorded beside it
LOG_CAP_BYTES = 1 << 20
TRUNCATED_SUFFIX = ".truncated"
# how often a base or head task asks again for the GPU its prepare claimed
RECLAIM_POLL_S = 0.5


@dataclass(frozen=True)
class Shipment:
    """What a node gets for one PR: never a worktree, a repository and what to put on it."""

    request: Request
    source: str  # a git URL or a path the node can clone from
    base_oid: str
    patch: bytes | None


@dataclass(frozen=True)
class GroupRun:
    """A group's outcome on a node, as it travels back to the driver."""

    kind: str
    key: str
    results: list[dict]
    record: dict  # the node's label record after prepare (keys, halt); empty for base/head
    logs: dict[str, bytes]  # artifact path under the run folder -> bytes (cut at LOG_CAP_BYTES)
    run_root: str  # where the node kept them: results name paths under it
    node: str  # node_name()
    runtime_hash: str | None


def node_name(hostname: str, node_id: str) -> str:
    """How reports and progress lines name a node: its host and its Ray node id (several nodes may
    share a host: containers, a simulated cluster)."""
    return f"{hostname}:{node_id[:8]}"


def _this_node() -> str:
    import ray  # only ever on a node, inside a Ray worker: the fleet extra is there
    return node_name(socket.gethostname(), ray.get_runtime_context().get_node_id())


def workspace() -> Workspace:
    """The node's workspace (KVTASKS_FLEET_HOME, else one in the temp dir)."""
    configured = os.environ.get("KVTASKS_FLEET_HOME", "").strip()
    return Workspace(Path(configured) if configured else Path(tempfile.gettempdir()) / f"kvtasks-fleet-{os.getuid()}")


def _request_here(shipment: Shipment, arch: str | None, space: Workspace) -> Request:
    tree = clones.checkout(shipment.source, shipment.base_oid, space.clones)
    update: dict = {"repo": str(tree), "out": None, "host": shipment.request.host.model_copy(update={"gpu_arch": arch})}
    if shipment.patch is not None:
        patch = space.root / "patches" / f"{shipment.request.label}.patch"
        patch.parent.mkdir(parents=True, exist_ok=True)
        patch.write_bytes(shipment.patch)
        update["patch"] = str(patch)
    return shipment.request.model_copy(update=update)


def _logs(folder: Path) -> dict[str, bytes]:
    kept: dict[str, bytes] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []:
        name = str(path.relative_to(folder))
        data = path.read_bytes()
        kept[name] = data[:LOG_CAP_BYTES]
        if len(data) > LOG_CAP_BYTES:
            kept[name + TRUNCATED_SUFFIX] = f"cut at {LOG_CAP_BYTES} of {len(data)} bytes\n".encode()
    return kept


def _returned(space: Workspace, kind: str, key: str, record: dict) -> GroupRun:
    store = space.store
    return GroupRun(kind=kind, key=key, results=[r.model_dump(mode="json") for r in store.read(kind, key)],
                    record=record, logs=_logs(store.run_dir(kind, key)), run_root=str(store.run_dir(kind, key)),
                    node=_this_node(), runtime_hash=record.get("runtime_hash"))


def claim_again(prepare: GroupRun, deadline_s: float, clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> None:
    """A base or head task runs on the GPU prepare claimed (its key says which model): lock it for
    the task, waiting while another validator on the node holds it, for `deadline_s` at most (the
    host's KVTASKS_GPU_RECLAIM_S); past it the task fails as an infrastructure failure, which the
    driver reports as INCONCLUSIVE for that arch."""
    claim = next((r for r in prepare.results if r["name"] == gpu_claim.NAME), None)
    stage = (claim or {}).get("stage") or {}
    index = stage.get("hip_index", stage.get("cuda_index"))
    if stage.get("status") != "pass" or index is None:
        return
    given_up_at = clock() + deadline_s
    while picker.try_lock(index) is None:
        if clock() >= given_up_at:
            raise InfrastructureError(f"GPU {index}, which prepare claimed on this node, stayed held by another "
                                      f"validator for {deadline_s:g} s (KVTASKS_GPU_RECLAIM_S); the task gave up")
        sleep(RECLAIM_POLL_S)


def run_prepare(shipment: Shipment, arch: str | None) -> GroupRun:
    space = workspace()
    request = _request_here(shipment, arch, space)
    try:
        phases.run_prepare(request, space)
    finally:
        picker.release_all()
    record = space.store.label(request.label) or {}
    return _returned(space, "prepare", request.label, record)


def run_side(shipment: Shipment, arch: str | None, kind: str, prepare: GroupRun, base: GroupRun | None) -> GroupRun:
    """Run the base or head group with the earlier groups' results the driver sent."""
    space = workspace()
    request = _request_here(shipment, arch, space)
    store = space.store
    label = request.label
    store.write("prepare", label, [StageResult.model_validate(r) for r in prepare.results], label=label,
                base_oid=prepare.record.get("base_oid"))
    store.set_label(label, prepare.record)
    if base is not None:
        store.write("base", base.key, [StageResult.model_validate(r) for r in base.results], label=label,
                    base_oid=prepare.record.get("base_oid"))
    claim_again(prepare, request.host.gpu_reclaim_s)
    try:
        phases.run_side(request, space, kind)
    finally:
        picker.release_all()
    return _returned(space, kind, prepare.record[f"{kind}_key"], prepare.record)
