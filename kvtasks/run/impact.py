"""The impact map, built once per base: base's tests run once under the map's probe with every function
of the checkout watched (kvtasks.sources.launchers), recording per item which it called and with
what shapes (kvtasks.harness.in_target.impact). It is base evidence keyed by base's OID: every PR on
that base reads it, and none runs base's tests for it again.

The run is prepared as a validation's base run is (runner, runtime probe, GPU claim, CPU tier) and
launched through the run's executor; it writes no report. Each test function is sampled (a few items
evenly spread), so an operator library's suite is bounded by its number of test functions.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from kvtasks import worktree
from kvtasks.errors import UsageError
from kvtasks.gpu import picker
from kvtasks.evidence.workspace import Workspace
from kvtasks.request import build_request
from kvtasks.run import executor
from kvtasks.run.pipeline import PIPELINE, run_row
from kvtasks.sources import launchers
from kvtasks.sources.impact_map import ImpactMap, Item
from kvtasks.stages import Context
from kvtasks.stages.launches import Launch
from kvtasks.stages.target_runs import gate
from kvtasks.system.files import write_atomic
from kvtasks.worktree import Worktree

MAP_VERSION = 1  # the map file's format, and what the probe records: a new one is a new key
# the caller's options that shape how base's tests run (the rest are about a PR's validation)
RUN_OPTIONS = ("python_path", "env", "runtime_module", "cpu_tier", "cpu_sparse_grid", "cpu_device_capability",
               "cpu_device_name", "no_network", "sandbox")


def map_file(workspace: Workspace, base_oid: str) -> Path:
    return workspace.store.root / "impact" / f"{base_oid}.v{MAP_VERSION}.json"


def load_or_build(workspace: Workspace, tree: Path, base_oid: str, given: dict) -> tuple[ImpactMap, bool]:
    """Base's map (and whether it was stored already): read when a PR on this base built it, else built."""
    path = map_file(workspace, base_oid)
    if path.is_file():
        try:
            return ImpactMap.model_validate_json(path.read_text()), True
        except ValueError:
            path.unlink()  # unreadable (a disk filled mid-write before atomic writes): built again
    impact = build(workspace, tree, base_oid, given)
    write_atomic(path, impact.model_dump_json(indent=1).encode())
    return impact, False


def build(workspace: Workspace, tree: Path, base_oid: str, given: dict) -> ImpactMap:
    """Run base's tests once under the map's probe, every function of the checkout watched."""
    functions = launchers.functions(tree)
    tests = launchers.test_files(tree)
    if not functions or not tests:
        missing = "no module functions" if not functions else "no pytest files (test_*.py)"
        return ImpactMap(base_oid=base_oid, functions=functions, items={}, tests=tests,
                         note=f"the checkout has {missing}: nothing was run")
    options = {name: given[name] for name in RUN_OPTIONS if given.get(name) not in (None, "", (), [])}
    request = build_request({**options, "repo": str(tree), "target": tests[0], "runner": "pytest",
                             "expected_route": ",".join(function.route for function in functions)},
                            clones_root=workspace.clones)
    print(f"kvtasks: mapping which of base's tests reach which of its {len(functions)} functions "
          f"({len(tests)} test files)", file=sys.stderr)
    worktree.forget_callers_repository()
    claimed_before = {claim.index for claim in picker.held()}
    try:
        run, items = _mapped_run(workspace, request, tests)
    finally:  # the GPU the map's run claimed is the PR's validations' to claim next
        for claim in picker.held():
            if claim.index not in claimed_before:
                picker.release(claim)
    note = (f"exit {run.exit}{' (timed out)' if run.timed_out else ''}, {len(items)} items mapped, "
            f"{sum(1 for item in items.values() if item.calls)} called a function of the checkout")
    return ImpactMap(base_oid=base_oid, functions=functions, items=items, tests=tests, note=note)


def _mapped_run(workspace: Workspace, request, tests: list[str]):
    """Prepare base's checkout as a validation does and run its tests once under the map's probe."""
    with tempfile.TemporaryDirectory(prefix="kvtasks-impact-") as scratch:
        ctx = Context(request=request, worktree=Worktree(request.repo, None), run_dir=Path(scratch),
                      grid_secret="", launcher=executor.launch)
        ctx.worktree.recover()
        for row in PIPELINE["prepare"]:
            produced = run_row(ctx, row)
            if produced is not None and produced.facts.halt:
                note = produced.stage.note if produced.stage else produced.name
                raise UsageError(f"base's tests cannot be mapped: {produced.name} halted: {note}")
        blocked = gate(ctx)
        if blocked:
            raise UsageError(f"base's tests cannot be mapped: {blocked}")
        written = Path(scratch) / "impact.json"
        with ctx.worktree.lend("base"):
            run = ctx.launch(Launch(label="base-map", runner="pytest", argv=tuple(tests[1:]), impact=written))
        items = _items(written)
    return run, items


def _items(written: Path) -> dict[str, Item]:
    """What the map's probe wrote, a line per finished item (a line cut by a kill is left out)."""
    items = {}
    for line in written.read_text().splitlines() if written.is_file() else []:
        try:
            finished = json.loads(line)
        except ValueError:
            continue
        items[finished["test"]] = Item(params=finished["params"], calls=finished["calls"])
    return items
