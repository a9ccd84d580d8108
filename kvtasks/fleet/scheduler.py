"""The fleet driver's scheduler: where and when each task of a batch's (PR, arch) chains runs.

Per (PR, arch), a chain of tasks on one node of the arch (resource `kvtasks-arch:<arch>`, or a GPU
when the manifest names no archs): prepare returns the content keys, which depend on that node's
runtime; each base key runs once, on the node that prepared it first, and every head of that key
starts on its own node the moment that base is done. Nodes are told apart by Ray node id, as one
host may run several. A lost task runs again (on its node when only the worker died, else from
prepare on a surviving node of the arch) and `arch_runs` names every lost attempt; a (PR, arch)
with no node left, or out of attempts, is INCONCLUSIVE for that arch as an infrastructure failure,
never a finding against the PR.
"""
from __future__ import annotations

import sys
from collections import defaultdict, deque

from kvtasks import report
from kvtasks.run import phases
from kvtasks.fleet import arch_report, node
from kvtasks.fleet.chains import Base, Chain, FleetNode, fleet_nodes, shipment, store_run
from kvtasks.fleet.resources import arch_label
from kvtasks.report import Retry
from kvtasks.request import Request
from kvtasks.evidence.workspace import Workspace

ATTEMPTS = 3  # lost runs of one (PR, arch) before its arch is INCONCLUSIVE as an infrastructure failure


class Scheduler:
    """The driver's scheduler. It places every task on a node itself (Ray's hard node affinity)
    so that no node idles while a task of its arch waits, a base key runs once, a head starts the
    moment its base is done, and a lost task is run again knowing the node it was lost on.
    Per node: a queue of the base and head tasks pinned to it (bases first: heads wait on them);
    per arch: the chains waiting to be prepared, taken by whichever node of the arch is free."""

    def __init__(self, ray, workspace: Workspace, requests: list[Request], wanted: list):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        self.ray, self.workspace, self.requests, self.wanted = ray, workspace, requests, wanted
        self.affinity = NodeAffinitySchedulingStrategy
        self.tasks = {"prepare": ray.remote(max_retries=0, num_cpus=1)(node.run_prepare),
                      "side": ray.remote(max_retries=0, num_cpus=1)(node.run_side)}
        self.nodes = fleet_nodes(ray)
        self.runs: dict[str, dict[str, report.ArchRun]] = {r.label: {} for r in requests}
        self.composed: dict[str, dict[str, report.Report]] = {r.label: {} for r in requests}
        self.to_prepare: dict[str, deque[Chain]] = defaultdict(deque)
        self.pinned: dict[str, deque[tuple[str, Chain]]] = defaultdict(deque)  # node id -> (kind, chain)
        self.bases: dict[str, Base] = {}
        self.running: dict = {}  # object ref -> (kind, chain, node)
        self.total = len(requests) * len(wanted)

    def run(self) -> None:
        """Run every (PR, arch) to its ArchRun (`runs`) and, where one was composed, its report (`composed`)."""
        for request in self.requests:
            for arch in self.wanted:
                chain = Chain(request, arch, shipment(request, arch, self.workspace.store))
                if not self._live(chain.resource):
                    what = "this architecture" if arch else "a GPU"
                    self._finish(chain, arch_report.not_run(arch or "any", f"no node in the cluster has {what}"))
                    continue
                self.to_prepare[chain.resource].append(chain)
        try:
            self._dispatch()
            while self.running:
                self.ray.wait(list(self.running), num_returns=1)
                done, _ = self.ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
                settled = []
                for ref in done:
                    kind, chain, fleet_node = self.running.pop(ref)
                    fleet_node.busy[chain.resource] -= 1
                    run = self._settle(ref, kind, chain, fleet_node)
                    if run is not None:
                        settled.append((kind, chain, run))
                # the freed nodes get their next tasks before the driver stores and composes
                self._dispatch()
                for kind, chain, run in settled:
                    self._record(kind, chain, run)
        except KeyboardInterrupt:
            for ref in self.running:
                self.ray.cancel(ref, force=True)  # each node's guardian hands its tree back
            raise

    def _live(self, resource: str) -> list[FleetNode]:
        return [n for n in self.nodes.values() if n.alive and n.slots.get(resource, 0) > 0]

    def _dispatch(self) -> None:
        """Fill every free slot: a node's pinned base and head tasks first, then a chain to prepare;
        a slot still free then takes over a head another node of its arch has queued behind others."""
        for fleet_node in self._live_nodes():
            for resource, count in fleet_node.slots.items():
                queue = self.pinned[fleet_node.node_id]
                while fleet_node.busy[resource] < count:
                    mine = next((item for item in queue if item[1].resource == resource), None)
                    if mine is not None:
                        queue.remove(mine)
                        self._submit(*mine, fleet_node)
                    elif self.to_prepare[resource]:
                        chain = self.to_prepare[resource].popleft()
                        chain.node = fleet_node
                        self._submit("prepare", chain, fleet_node)
                    else:
                        break
        for fleet_node in self._live_nodes():
            for resource, count in fleet_node.slots.items():
                while fleet_node.busy[resource] < count and self._take_over(fleet_node, resource):
                    pass

    def _live_nodes(self) -> list[FleetNode]:
        return [n for n in self.nodes.values() if n.alive]

    def _take_over(self, idle: FleetNode, resource: str) -> bool:
        """The last of the heads queued on the busiest node of the arch, when it queues two or more:
        it would start after a whole head and the rest of the running task, so it is prepared again
        on the idle node (its GPU claim is its prepare node's) and runs there."""
        queued = {n.node_id: [item for item in self.pinned[n.node_id] if item[0] == "head"
                              and item[1].resource == resource] for n in self._live_nodes() if n is not idle}
        busiest = max(queued, key=lambda node_id: len(queued[node_id]), default=None)
        if busiest is None or len(queued[busiest]) < 2:
            return False
        item = queued[busiest][-1]
        self.pinned[busiest].remove(item)
        chain = item[1]
        print(f"fleet: {chain.shown}: moves from {chain.node.name}, where its head waits, to idle {idle.name}",
              file=sys.stderr, flush=True)
        chain.node, chain.prepared = idle, None
        self._submit("prepare", chain, idle)
        return True

    def _submit(self, kind: str, chain: Chain, fleet_node: FleetNode) -> None:
        placed = self.affinity(node_id=fleet_node.node_id, soft=False)
        options = {"resources": {chain.resource: 1}} if chain.arch else {"num_gpus": 1}
        if kind == "prepare":
            ref = self.tasks["prepare"].options(**options, scheduling_strategy=placed).remote(chain.shipment,
                                                                                             chain.arch)
        else:
            base = self.bases[chain.prepared.record["base_key"]].result if kind == "head" else None
            ref = self.tasks["side"].options(**options, scheduling_strategy=placed).remote(
                chain.shipment, chain.arch, kind, chain.prepared, base)
        fleet_node.busy[chain.resource] += 1
        self.running[ref] = (kind, chain, fleet_node)
        print(f"fleet: {chain.shown}: {kind} on {fleet_node.name}", file=sys.stderr, flush=True)

    def _settle(self, ref, kind: str, chain: Chain, fleet_node: FleetNode) -> node.GroupRun | None:
        """What a finished task means for the schedule: the next tasks of its chain (and for a base,
        of every chain waiting on it) pinned to their nodes; a lost task run again. Returns its run
        to record, None when it failed."""
        ray = self.ray
        try:
            run = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # kvtasks itself raised on the node: no retry
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            self._failed(kind, chain, f"kvtasks' {kind} task raised on {fleet_node.name}: "
                                      f"{type(cause).__name__}: {cause}")
            return None
        except (ray.exceptions.RayError, OSError) as exc:
            if isinstance(exc, (ray.exceptions.NodeDiedError, ray.exceptions.TaskUnschedulableError)):
                self._lose_node(fleet_node)
            said = str(exc).splitlines()[0] if str(exc) else ""
            self._retry(kind, chain, fleet_node, f"{type(exc).__name__}: {said}")
            return None
        if kind == "prepare":
            chain.prepared = run
            if not run.record.get("halted"):
                self._after_prepare(chain)
        elif kind == "base":
            base = self.bases[run.key]
            base.result, base.runner = ref, None
            for waiting in [chain, *base.waiting]:
                self.pinned[waiting.node.node_id].append(("head", waiting))
            base.waiting.clear()
        return run

    def _record(self, kind: str, chain: Chain, run: node.GroupRun) -> None:
        """Store a task's run in the driver's store; a chain that ended gets its report."""
        request = chain.shipment.request
        store_run(self.workspace, run, request)
        if kind == "prepare":
            self.workspace.store.set_label(request.label, run.record)
        if kind == "head" or run.record.get("halted"):
            self._compose(chain)

    def _after_prepare(self, chain: Chain) -> None:
        key = chain.prepared.record["base_key"]
        base = self.bases.get(key)
        if base is None and phases.base_done(self.workspace, key):  # an earlier batch ran it
            stored = [r.model_dump(mode="json") for r in self.workspace.store.read("base", key)]
            base = self.bases[key] = Base(result=self.ray.put(node.GroupRun(
                "base", key, stored, chain.prepared.record, {}, "", chain.node.name, chain.prepared.runtime_hash)))
        if base is None:
            self.bases[key] = Base(runner=chain)
            self.pinned[chain.node.node_id].appendleft(("base", chain))
        elif base.failed:
            self._finish(chain, arch_report.not_run(chain.arch or "any", base.failed, chain.retried))
        elif base.result is not None:
            self.pinned[chain.node.node_id].append(("head", chain))
        else:
            base.waiting.append(chain)

    def _failed(self, kind: str, chain: Chain, why: str) -> None:
        """A task kvtasks raised in: its chain, and for a base every chain waiting on it, is
        INCONCLUSIVE for that arch with the reason."""
        chains = [chain]
        if kind == "base":
            base = self.bases[chain.prepared.record["base_key"]]
            base.failed, base.runner = why, None
            chains += base.waiting
            base.waiting.clear()
        for each in chains:
            self._finish(each, arch_report.not_run(each.arch or "any", why, each.retried))

    def _lose_node(self, fleet_node: FleetNode) -> None:
        """Ray said the node is gone: every chain waiting on it starts again elsewhere (the ones
        running there come back failed, one by one)."""
        if not fleet_node.alive:
            return
        fleet_node.alive = False
        print(f"fleet: node {fleet_node.name} was lost", file=sys.stderr, flush=True)
        queued = self.pinned.pop(fleet_node.node_id, deque())
        waiting = [(chain, "head") for base in self.bases.values() for chain in base.waiting
                   if chain.node is fleet_node]
        for base in self.bases.values():
            base.waiting = [chain for chain in base.waiting if chain.node is not fleet_node]
        for kind, chain in [*queued, *((kind, chain) for chain, kind in waiting)]:
            self._retry(kind, chain, fleet_node, f"its node was lost before its {kind} task began")
        for resource in fleet_node.slots:
            while not self._live(resource) and self.to_prepare[resource]:
                chain = self.to_prepare[resource].popleft()
                self._finish(chain, arch_report.not_run(chain.arch or "any", f"the last node of this architecture "
                                                        f"({fleet_node.name}) was lost", chain.retried))

    def _retry(self, kind: str, chain: Chain, fleet_node: FleetNode, why: str) -> None:
        """Run a lost task again: on its node while that node lives (a worker died), else the whole
        chain from prepare on a surviving node of the arch; INCONCLUSIVE when it has run out of
        attempts or no node of the arch is left."""
        chain.retried.append(Retry(node=fleet_node.name, task=kind, why=why))
        print(f"fleet: {chain.shown}: {kind} lost on {fleet_node.name} ({why})", file=sys.stderr, flush=True)
        key = chain.prepared.record["base_key"] if chain.prepared else None
        if kind == "base" and not fleet_node.alive:
            self._hand_over_base(key)
        if len(chain.retried) >= ATTEMPTS:
            self._give_up(chain, key, f"ran {ATTEMPTS} times for infrastructure reasons and was lost each time "
                                      f"(last: {why})")
        elif fleet_node.alive:
            self.pinned[fleet_node.node_id].appendleft((kind, chain))
        elif not self._live(chain.resource):
            self._give_up(chain, key, f"its node {fleet_node.name} was lost and no surviving node has this "
                                      "architecture")
        else:
            chain.node, chain.prepared = None, None
            self.to_prepare[chain.resource].appendleft(chain)

    def _hand_over_base(self, key: str) -> None:
        """A base's node was lost: a chain waiting on it on a live node runs it now, else the next
        chain prepared with this key does."""
        base = self.bases[key]
        heir = next((chain for chain in base.waiting if chain.node.alive), None)
        if heir is None:  # a lost node's waiting chains already left: none waits
            del self.bases[key]
            return
        base.waiting.remove(heir)
        base.runner = heir
        self.pinned[heir.node.node_id].appendleft(("base", heir))

    def _give_up(self, chain: Chain, key: str | None, why: str) -> None:
        base = self.bases.get(key) if key else None
        if base is not None and base.runner is chain:
            self._hand_over_base(key)
        self._finish(chain, arch_report.not_run(chain.arch or "any", why, chain.retried))

    def _compose(self, chain: Chain) -> None:
        label = arch_label(chain.request.label, chain.arch)
        arch_request = chain.request.model_copy(update={"label": label, "out": None})
        done = phases.publish(arch_request, self.workspace, draw_index=False)
        path = str(self.workspace.report_paths(arch_request)[0])
        self._finish(chain, arch_report.arch_run(done, chain.node.name, chain.prepared.runtime_hash, path,
                                                 chain.retried), done)

    def _finish(self, chain: Chain, run: report.ArchRun, done: report.Report | None = None) -> None:
        key = chain.arch or "any"
        self.runs[chain.request.label][key] = run
        if done is not None:
            self.composed[chain.request.label][key] = done
        finished = sum(len(v) for v in self.runs.values())
        where = f" on {run.node}" if run.node else f" ({run.findings[0].detail})" if done is None else ""
        again = f", after {len(run.retried)} lost" if run.retried else ""
        print(f"fleet: {chain.request.label} [{key}]: {run.verdict}{where}{again} ({finished}/{self.total})",
              file=sys.stderr, flush=True)
