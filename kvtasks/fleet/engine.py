"""The fleet driver: a batch's (PR, arch) runs as Ray tasks, the evidence in the driver's store.

Per (PR, arch): prepare runs on a node of the arch (resource `kvtasks-arch:<arch>`, or a GPU when the
manifest names no archs) and returns the content keys, which depend on that node's runtime; each base
key is scheduled once, on the node that prepared it, and the head tasks of that key take its object
reference (Ray starts them when it resolves: no polling). Every result comes back to the driver,
which stores it under the same keys as a local batch and composes the reports. A node lost mid-task is
Ray's to retry on another node of the arch; a task that still fails is INCONCLUSIVE for that arch,
said as an infrastructure failure, never a finding against the PR.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from kvtasks import pages, phases, report
from kvtasks.fleet import arch_report, node
from kvtasks.request import Request
from kvtasks.stages import StageResult
from kvtasks.workspace import Workspace, fail_usage
from kvtasks.worktree import Worktree

ARCH_RESOURCE = "kvtasks-arch:{}"
TASK_RETRIES = 3  # Ray's retries of a task whose worker or node died


def _ray():
    try:
        import ray
    except ModuleNotFoundError:
        fail_usage("engine=ray needs Ray: pip install 'kvtasks[fleet]'")
    return ray


def connect():
    """Join the cluster RAY_ADDRESS names, or start a local Ray runtime on this machine that
    advertises this host's GPUs as fleet-node would."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        return ray
    from kvtasks.fleet import join
    archs, _reason = join.host_archs()
    ray.init(num_gpus=sum(archs.values()), resources=join.arch_resources(archs), logging_level="WARNING",
             log_to_driver=False, include_dashboard=False)
    return ray


def _shipment(request: Request, arch: str | None, grid_secret: str) -> node.Shipment:
    """What a node gets for one (PR, arch): the driver's grid secret with it, so every node draws the
    same default grid and PRs against one base share its key whichever node prepared them."""
    source = request.source or request.repo
    base_oid = Worktree(request.repo, None).head_oid()
    label = _arch_label(request.label, arch)
    host = request.host.model_copy(update={"grid_secret": request.host.grid_secret or grid_secret})
    return node.Shipment(request=request.model_copy(update={"label": label, "host": host}), source=source,
                         base_oid=base_oid, patch=Path(request.patch).read_bytes() if request.patch else None)


def _store(workspace: Workspace, run: node.GroupRun, request: Request) -> list[StageResult]:
    """Store a group a node ran under its key, its logs beside it as a local run keeps them (and
    the base evidence a head group made under its own keys, as a local run does)."""
    label = request.label
    with tempfile.TemporaryDirectory(prefix="kvtasks-fleet-") as scratch:
        for name, data in run.logs.items():
            target = Path(scratch) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        results = [StageResult.model_validate_json(
            StageResult.model_validate(r).model_dump_json().replace(run.run_root + os.sep, scratch + os.sep))
            for r in run.results]
        workspace.store.write(run.kind, run.key, results, label=label, base_oid=run.record.get("base_oid"),
                              scratch=Path(scratch))
        if run.kind == "head":
            evidence_keys = phases.base_evidence_keys(request, run.record["base_key"])
            phases.keep_base_evidence(workspace.store, results, evidence_keys, label, run.record.get("base_oid"),
                                      Path(scratch))
    workspace.store.record_launches(run.kind, run.key, label, [launch.label for r in results for launch in r.runs])
    return results


def run_batch(requests: list[Request], workspace: Workspace, name: str, archs: list[str] | None, quiet: bool) -> int:
    """Validate every PR on every arch on the cluster; return the batch's exit code."""
    ray = connect()
    prepare_task = ray.remote(max_retries=TASK_RETRIES, num_cpus=1)(node.run_prepare)
    side_task = ray.remote(max_retries=TASK_RETRIES, num_cpus=1)(node.run_side)
    available = ray.cluster_resources()
    wanted = archs or [None]
    runs: dict[str, dict[str, report.ArchRun]] = {r.label: {} for r in requests}
    composed: dict[str, dict[str, report.Report]] = {r.label: {} for r in requests}
    pending: dict = {}  # object ref -> (request, arch, kind, shipment, prepare run)
    bases: dict[str, object] = {}  # base key -> its object ref (or its stored run)
    total = len(requests) * len(wanted)

    def resources(arch):
        return {"resources": {ARCH_RESOURCE.format(arch): 1}} if arch else {"num_gpus": 1}

    def finish(request: Request, arch, run: report.ArchRun, done: report.Report | None):
        key = arch or "any"
        runs[request.label][key] = run
        if done is not None:
            composed[request.label][key] = done
        finished = sum(len(v) for v in runs.values())
        where = f" on {run.node}" if run.node else f" ({run.findings[0].detail})" if done is None else ""
        print(f"fleet: {request.label} [{key}]: {run.verdict}{where} ({finished}/{total})", file=sys.stderr, flush=True)

    for request in requests:
        for arch in wanted:
            if arch and available.get(ARCH_RESOURCE.format(arch), 0) < 1:
                finish(request, arch, arch_report.not_run(arch, "no node in the cluster has this architecture"),
                       None)
                continue
            if not arch and available.get("GPU", 0) < 1:
                finish(request, arch, arch_report.not_run("any", "no node in the cluster has a GPU"), None)
                continue
            shipment = _shipment(request, arch, workspace.store.grid_secret())
            ref = prepare_task.options(**resources(arch)).remote(shipment, arch)
            pending[ref] = (request, arch, "prepare", shipment, None)
    try:
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            request, arch, kind, shipment, prepared = pending.pop(ref)
            label = shipment.request.label
            try:
                run = ray.get(ref)
            except (ray.exceptions.RayError, OSError) as exc:
                if kind == "base":  # its head tasks fail with it, and say so
                    continue
                if isinstance(exc, ray.exceptions.RayTaskError):  # kvtasks itself raised on the node
                    cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                    why = f"kvtasks' {kind} task raised on its node: {type(cause).__name__}: {cause}"
                else:
                    why = f"the {kind} task failed for infrastructure reasons after {TASK_RETRIES} retries: " \
                          f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                finish(request, arch, arch_report.not_run(arch or "any", why), None)
                continue
            _store(workspace, run, shipment.request)
            if kind == "prepare":
                workspace.store.set_label(label, run.record)
                if run.record.get("halted"):
                    _compose(workspace, request, arch, run, finish)
                    continue
                base_key = run.record["base_key"]
                if base_key not in bases:
                    if phases.base_done(workspace, base_key):
                        bases[base_key] = node.GroupRun("base", base_key, [r.model_dump(mode="json") for r in
                                                                           workspace.store.read("base", base_key)],
                                                        run.record, {}, "", run.node, run.runtime_hash)
                    else:
                        bases[base_key] = side_task.options(**resources(arch), scheduling_strategy=_on_node(
                            ray, run.node)).remote(shipment, arch, "base", run, None)
                        pending[bases[base_key]] = (request, arch, "base", shipment, run)
                head = side_task.options(**resources(arch), scheduling_strategy=_on_node(ray, run.node)).remote(
                    shipment, arch, "head", run, bases[base_key])
                pending[head] = (request, arch, "head", shipment, run)
            elif kind == "head":
                _compose(workspace, request, arch, prepared, finish, node_name=run.node)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return _publish_batch(requests, workspace, name, wanted, runs, composed)


def _on_node(ray, hostname: str):
    """The node that ran prepare: its runtime is the one the keys name."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    for entry in ray.nodes():
        if entry.get("Alive") and entry.get("NodeManagerHostname") == hostname:
            return NodeAffinitySchedulingStrategy(node_id=entry["NodeID"], soft=True)
    return "DEFAULT"


def _arch_label(label: str, arch: str | None) -> str:
    """The label one arch's run is stored and published under: the PR's own when the manifest
    names no archs (its one run is "any")."""
    return f"{label}.{arch}" if arch and arch != "any" else label


def _compose(workspace: Workspace, request: Request, arch, prepared: node.GroupRun, finish, node_name=None) -> None:
    label = _arch_label(request.label, arch)
    arch_request = request.model_copy(update={"label": label, "out": None})
    done = phases.publish(arch_request, workspace, quiet=True, draw_index=False)
    path = str(workspace.report_paths(arch_request)[0])
    finish(request, arch, arch_report.arch_run(done, node_name or prepared.node, prepared.runtime_hash, path), done)


def _publish_batch(requests, workspace: Workspace, name: str, wanted, runs, composed) -> int:
    archs = [arch or "any" for arch in wanted]
    rows = ["| PR | verdict | " + " | ".join(archs) + " | report |", "| --- | --- | " + " | ".join("---" for _ in archs)
            + " | --- |"]
    codes = []
    for request in requests:
        label = request.label
        runs[label] = {arch: runs[label][arch] for arch in archs}  # the manifest's order, not the finishing one
        try:
            merged = arch_report.merge(label, composed[label], runs[label])
        except ValueError as exc:
            print(f"fleet: {exc}", file=sys.stderr)
            codes.append(2)
            rows.append(f"| {label} | INCONCLUSIVE | " + " | ".join(runs[label][a].verdict for a in archs) + " | |")
            continue
        paths = workspace.report_paths(request)
        report.publish(merged, paths)
        pages.write_report_page(paths[0].parent)
        workspace.store.set_label(label, {"fleet": {
            "archs": {arch: _arch_label(label, arch) if arch in composed[label] else None for arch in archs},
            "runs": {arch: run.model_dump(mode="json") for arch, run in runs[label].items()}}})
        codes.append(merged.process_exit_code)
        rows.append(f"| {label} | {merged.verdict} | " + " | ".join(runs[label][a].verdict for a in archs)
                    + f" | {paths[0]} |")
    index = workspace.reports / name / "index.md"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(f"# kvtasks batch: {name}\n\n" + "\n".join(rows) + "\n")
    print(index.read_text())
    worst = 1 if 1 in codes else 2 if 2 in codes else 0
    return worst
