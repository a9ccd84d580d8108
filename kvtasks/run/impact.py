"""The impact map, built once per base: base's tests run once under the map's probe with every function
of the checkout watched (kvtasks.sources.launchers), recording per item which it called and with
what shapes (kvtasks.harness.in_target.impact). It is base evidence keyed by base's OID: every PR on
that base reads it, and none runs base's tests for it again. A new base whose ancestor's map is
stored re-runs only the test files whose imports (kvtasks.sources.import_graph) changed since, and
keeps that map's items for the rest; a change every test depends on (a conftest.py, pytest's or the
build's configuration, a data file) re-runs them all.

The run is prepared as a validation's base run is (runner, runtime probe, GPU claim, CPU tier) and
launched through the run's executor; it writes no report. Each test function is sampled (a few items
evenly spread), so an operator library's suite is bounded by its number of test functions.
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path, PurePosixPath

from kvtasks import worktree
from kvtasks.errors import UsageError
from kvtasks.gpu import picker
from kvtasks.evidence.workspace import Workspace
from kvtasks.request import build_request
from kvtasks.run import executor
from kvtasks.run.pipeline import PIPELINE, run_row
from kvtasks.request.repo_config import needs_no_validation
from kvtasks.sources import import_graph, launchers
from kvtasks.sources.impact_map import ImpactMap, Item
from kvtasks.stages import Context, cpu_tier
from kvtasks.stages.launches import Launch
from kvtasks.stages.target_runs import gate
from kvtasks.system.files import write_atomic
from kvtasks.worktree import Worktree
from kvtasks.worktree.git_commands import run_git

MAP_VERSION = 3  # the map file's format, and what the probe records: a new one is a new key
# the caller's options that shape how base's tests run (the rest are about a PR's validation)
RUN_OPTIONS = ("python_path", "env", "runtime_module", "cpu_tier", "cpu_sparse_grid", "cpu_device_capability",
               "cpu_device_name", "no_network", "sandbox")
# what every test file depends on beside its imports: a change of one re-runs the whole suite
SUITE_WIDE = {"conftest.py", "pyproject.toml", "setup.cfg", "setup.py", "pytest.ini", "tox.ini"}


class MapUnavailable(UsageError):
    """Base's tests could not be run to map them (its runtime does not import, its tree is held)."""


def _run_options(given: dict) -> dict:
    return {name: given[name] for name in RUN_OPTIONS if given.get(name) not in (None, "", (), [])}


def map_file(workspace: Workspace, base_oid: str, given: dict) -> Path:
    """Where base's map is stored: by base OID and the options its run was made with (a map of a
    CPU-tier run is not a GPU run's), and by this map format."""
    options = hashlib.sha256(json.dumps(_run_options(given), sort_keys=True, default=str).encode()).hexdigest()[:16]
    return workspace.store.root / "impact" / f"{base_oid}.{options}.v{MAP_VERSION}.json"


def load_or_build(workspace: Workspace, tree: Path, base_oid: str, given: dict) -> tuple[ImpactMap, bool]:
    """Base's map (and whether it was stored already): read when a PR on this base built it, else built."""
    path = map_file(workspace, base_oid, given)
    if path.is_file():
        try:
            return ImpactMap.model_validate_json(path.read_text()), True
        except ValueError:
            path.unlink()  # unreadable (a disk filled mid-write before atomic writes): built again
    impact = build(workspace, tree, base_oid, given)
    # a run that reached nothing, or stopped short of its end but by TIMEOUT, is tried again next time
    if any(item.calls for item in impact.items.values()) and not impact.interrupted:
        write_atomic(path, impact.model_dump_json(indent=1).encode())
    return impact, False


def _earlier(workspace: Workspace, tree: Path, base_oid: str, suffix: str) -> tuple[ImpactMap, list[str]] | None:
    """The stored map (made with the same options: `suffix`) of base's nearest ancestor in the
    checkout's history (the fewest files changed since), and the files changed since; None when no
    stored map is of an ancestor."""
    nearest = None
    for stored in sorted((workspace.store.root / "impact").glob(f"*.{suffix}")):
        oid = stored.name.split(".")[0]
        if oid == base_oid or run_git(tree, "merge-base", "--is-ancestor", oid, base_oid).returncode != 0:
            continue
        diff = run_git(tree, "diff", "--name-only", "--no-renames", oid, base_oid)
        if diff.returncode == 0 and (nearest is None or len(diff.stdout.splitlines()) < len(nearest[1])):
            nearest = (stored, diff.stdout.splitlines())
    if nearest is None:
        return None
    try:
        return ImpactMap.model_validate_json(nearest[0].read_text()), nearest[1]
    except ValueError:
        return None


def _rerun(tree: Path, tests: list[str], changed: list[str]) -> list[str] | None:
    """The test files a change since an earlier base can reach through their imports (or that it
    changed); None when it can reach them all: a conftest.py, pytest's or the build's configuration,
    a data file."""
    if any(PurePosixPath(path).name in SUITE_WIDE or not (path.endswith(".py") or needs_no_validation(path))
           for path in changed):
        return None
    imports = import_graph.imports_of(tree, launchers.python_files(tree))
    return [test for test in tests if test in changed or imports.get(test, set()) & set(changed)]


def build(workspace: Workspace, tree: Path, base_oid: str, given: dict) -> ImpactMap:
    """Run base's tests once under the map's probe, every function of the checkout watched; where an
    ancestor's map is stored, only the test files whose imports changed since, its items kept for the rest."""
    functions = launchers.functions(tree)
    tests = launchers.test_files(tree)
    watched = [function.route for function in functions if not function.kernel]  # kernels are not wrapped
    if not watched or not tests:
        missing = "no module functions" if not watched else "no pytest files (test_*.py)"
        return ImpactMap(base_oid=base_oid, functions=functions, items={}, tests=tests,
                         note=f"the checkout has {missing}: nothing was run")
    kept, run_tests, kept_note = {}, tests, ""
    earlier = _earlier(workspace, tree, base_oid, map_file(workspace, base_oid, given).name.split(".", 1)[1])
    rerun = _rerun(tree, tests, earlier[1]) if earlier is not None else None
    if earlier is not None and rerun is not None:
        kept = {nodeid: item for nodeid, item in earlier[0].items.items()
                if nodeid.split("::")[0] in tests and nodeid.split("::")[0] not in rerun}
        run_tests = rerun
        kept_note = (f"; {len(tests) - len(rerun)} of {len(tests)} test files kept from "
                     f"{earlier[0].base_oid[:12]}'s map, whose imports did not change")
    if not run_tests:
        return ImpactMap(base_oid=base_oid, functions=functions, items=kept, tests=tests, ran=[],
                         note=f"nothing was run{kept_note}", cpu_tier=earlier[0].cpu_tier)
    request = build_request({**_run_options(given), "repo": str(tree), "target": run_tests[0], "runner": "pytest",
                             "expected_route": ",".join(watched)}, clones_root=workspace.clones)
    print(f"kvtasks: mapping which of base's tests reach which of its {len(watched)} functions "
          f"({len(run_tests)} of {len(tests)} test files)", file=sys.stderr)
    worktree.forget_callers_repository()
    held_before = worktree.held_by_a_validator(tree)  # by this process too: a lock is per open file
    try:  # held as a validation holds it, so no validator lends it mid-run
        worktree.hold_exclusively(tree)
    except (worktree.WorktreeBusy, worktree.GitFailed) as exc:
        raise MapUnavailable(f"base's tests cannot be mapped: {exc}") from None
    claimed_before = {claim.index for claim in picker.held()}
    try:
        run, items, on_tier, interrupted = _mapped_run(workspace, request, run_tests)
    finally:  # the tree and the GPU the map's run held are the PR's validations' to take next
        for claim in picker.held():
            if claim.index not in claimed_before:
                picker.release(claim)
        if not held_before:
            worktree.release_exclusive(tree)
    note = (f"exit {run.exit}{' (timed out)' if run.timed_out else ''}, {len(items)} items mapped, "
            f"{sum(1 for item in items.values() if item.calls)} called a function of the checkout{kept_note}"
            + (f"; stopped short: {interrupted}" if interrupted else ""))
    return ImpactMap(base_oid=base_oid, functions=functions, items={**kept, **items}, tests=tests, ran=run_tests,
                     note=note, cpu_tier=on_tier, interrupted=interrupted)


def _mapped_run(workspace: Workspace, request, tests: list[str]):
    """Prepare base's checkout as a validation does and run its tests once under the map's probe:
    the items it mapped, and whether they ran on the CPU tier."""
    with tempfile.TemporaryDirectory(prefix="kvtasks-impact-") as scratch:
        ctx = Context(request=request, worktree=Worktree(request.repo, None), run_dir=Path(scratch),
                      grid_secret="", launcher=executor.launch)
        ctx.worktree.recover()
        for row in PIPELINE["prepare"]:
            produced = run_row(ctx, row)
            if produced is not None and produced.facts.halt:
                note = produced.stage.note if produced.stage else produced.name
                raise MapUnavailable(f"base's tests cannot be mapped: {produced.name} halted: {note}")
        blocked = gate(ctx)
        if blocked:
            raise MapUnavailable(f"base's tests cannot be mapped: {blocked}")
        written = Path(scratch) / "impact.json"
        with ctx.worktree.lend("base"):
            # one test file that fails to collect (an optional dependency) must not leave the others unmapped
            run = ctx.launch(Launch(label="base-map", runner="pytest", impact=written,
                                    argv=(*tests[1:], "--continue-on-collection-errors")))
        items = _items(written)
        return run, items, cpu_tier.active(ctx), _interrupted(run)


def _interrupted(run) -> str:
    """Why the map's run stopped short of its end other than by its TIMEOUT (pytest's internal error,
    a signal), by its log's last line; "" when it ran to its end."""
    if run.timed_out or run.exit in (0, 1, 5):
        return ""
    lines = [line for line in Path(run.log).read_text(errors="replace").splitlines() if line.strip()] \
        if Path(run.log).is_file() else []
    said = next((line for line in reversed(lines) if line.startswith("INTERNALERROR>") and "Error" in line),
                lines[-1] if lines else "")
    return f"exit {run.exit}: {said.strip()[:200]}"


def _items(written: Path) -> dict[str, Item]:
    """What the map's probe wrote, a line per finished item (a line cut by a kill is left out)."""
    items = {}
    for line in written.read_text().splitlines() if written.is_file() else []:
        try:
            finished = json.loads(line)
        except ValueError:
            continue
        items[finished["test"]] = Item(params=finished["params"], calls=finished["calls"],
                                       seconds=finished.get("seconds"), stopped=finished.get("stopped", False))
    return items
