"""The fleet driver: a batch's (PR, arch) runs as Ray tasks, the evidence in the driver's store.

The driver joins (or starts) the cluster, hands the batch to its scheduler (scheduler.py), which
places every task on a node itself so it knows which node ran what, and stores every result the
nodes return under the same keys as a local batch (chains.py). Here each PR's arch runs are merged
into its report (arch_report.py) and the batch's index is published (batch.publish_index, the one
writer of a batch index, local or fleet).
"""
from __future__ import annotations

import os
import sys

from kvtasks import report
from kvtasks.report import pages
from kvtasks.run import batch
from kvtasks.fleet import arch_report
from kvtasks.fleet.resources import arch_label, arch_resources, require_ray
from kvtasks.fleet.scheduler import Scheduler
from kvtasks.request import Request
from kvtasks.evidence.workspace import Workspace


def connect():
    """Join the cluster RAY_ADDRESS names, or start a local Ray runtime on this machine that
    advertises this host's GPUs as fleet-node would."""
    require_ray()
    import ray

    if ray.is_initialized():
        return ray
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        return ray
    from kvtasks.fleet import join
    archs, _reason = join.host_archs()
    ray.init(num_gpus=sum(archs.values()), resources=arch_resources(archs), logging_level="WARNING",
             log_to_driver=False, include_dashboard=False)
    return ray


def run_batch(requests: list[Request], workspace: Workspace, name: str, archs: list[str] | None) -> int:
    """Validate every PR on every arch on the cluster; return the batch's exit code."""
    wanted = archs or [None]
    scheduler = Scheduler(connect(), workspace, requests, wanted)
    scheduler.run()
    return publish_batch(requests, workspace, name, wanted, scheduler.runs, scheduler.composed)


def publish_batch(requests: list[Request], workspace: Workspace, name: str, wanted: list,
                  runs: dict[str, dict[str, report.ArchRun]], composed: dict[str, dict[str, report.Report]]) -> int:
    """Each PR's report merged over its archs, and the batch's index with a column per arch; the
    batch's exit code."""
    archs = [arch or "any" for arch in wanted]
    rows, codes = [], []
    for request in requests:
        label = request.label
        runs[label] = {arch: runs[label][arch] for arch in archs}  # the manifest's order, not the finishing one
        verdicts = [runs[label][arch].verdict for arch in archs]
        try:
            merged = arch_report.merge(label, composed[label], runs[label])
        except ValueError as exc:
            print(f"fleet: {exc}", file=sys.stderr)
            codes.append(2)
            rows.append([label, "INCONCLUSIVE", *verdicts, ""])
            continue
        paths = workspace.report_paths(request)
        report.publish(merged, paths)
        pages.write_report_page(paths[0].parent, merged.required_stages())
        workspace.store.set_label(label, {"fleet": {
            "archs": {arch: arch_label(label, arch) if arch in composed[label] else None for arch in archs},
            "runs": {arch: run.model_dump(mode="json") for arch, run in runs[label].items()}}})
        codes.append(merged.process_exit_code)
        rows.append([label, merged.verdict, *verdicts, str(paths[0])])
    worst, _index = batch.publish_index(workspace, name, ["PR", "verdict", *archs, "report"], rows,
                                        [request.label for request in requests], codes)
    return worst
