"""correctness_grid: an independent shape grid, through a channel proven to reach the target.

Three channels, alternatives not a sequence: --shape-env (the source reads that variable),
--shape-arg (the source declares that flag with add_argument; script targets) and
--shape-argnames (a @pytest.mark.parametrize binds exactly those names, or stacked marks of one
test bind them between them; pytest targets). A cell may be a tuple: `(2049,2)`.
A channel is first proven by the AST, then at runtime: a deliberately invalid grid must make the
target fail, and only after the unpoisoned run passed. The grid runs on base too, so a head-only
failure with routed work observed is a blocker. Cells already in the target's own defaults earn
nothing; axes (--axis NAME=--flag:v1;v2) add script flags under the same burden of proof.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass, field

from kvtasks import sources, harness
from kvtasks.sources import argparse_flags, parametrize_marks, reads_env, row_text
from kvtasks.stages import Context, StageResult, cpu_tier, nonfinite, result
from kvtasks.request import grid_rows
from kvtasks.harness import probe as route_probe
from kvtasks.harness import triton_cpu
from kvtasks.harness.launch import TargetRun
from kvtasks.worktree import GitFailed

NAME = "correctness_grid"
CHANNEL = "grid_channel"
SENTINEL = "__VALIDATOR_INVALID_GRID__"
AXIS_SENTINEL = "__VALIDATOR_INVALID_AXIS__"
_CELL = re.compile(rf"\b{route_probe.CELL_ID}(\d+)=")
_TILE = 64
_LARGE_ELEMENTS = 2**31  # past this, 32-bit element offsets wrap
_M_NAMES = {"m", "batch", "b", "rows", "num_rows", "seq", "seq_len", "seqlen", "tokens", "num_tokens", "n_rows"}
_N_NAMES = {"n", "k", "cols", "num_cols", "hidden", "hidden_size", "dim", "d", "head_dim", "width", "n_cols"}
_DTYPE_NAMES = {"dtype", "dtype_str", "dt", "type", "precision"}


@dataclass
class Axis:
    name: str
    flag: str
    values: list[str]
    hook_proof: str = "not-evaluated"
    target_default: list[str] | None = None
    independence: str = "unknown"


def parse_grid(text: str) -> list[list[str]]:
    return grid_rows(text)


def stacked_marks(group: list[tuple[list[str], list[str] | None]], wanted: list[str]
                  ) -> tuple[list[str], list[str] | None] | None:
    """Stacked parametrize marks of one test that each bind only grid argnames and together bind all
    of them: (each mark's names, the defaults they multiply out to in the grid's order, None when
    one is computed); None when they do not cover the grid exactly."""
    inside = [(names, rows) for names, rows in group if set(names) < set(wanted)]
    covered = [name for names, _ in inside for name in names]
    if len(inside) < 2 or sorted(covered) != sorted(wanted):
        return None
    bound = [",".join(names) for names, _ in inside]
    if any(rows is None for _, rows in inside):
        return bound, None
    defaults = []
    for combination in itertools.product(*(rows for _, rows in inside)):
        cells = dict(zip(covered, (cell for row in combination for cell in grid_rows(row)[0])))
        defaults.append(row_text(cells[name] for name in wanted))
    return bound, defaults


def parse_axis(spec: str) -> Axis | None:
    name, _, rest = spec.partition("=")
    flag, _, values = rest.partition(":")
    cells = [value.strip() for value in values.split(";") if value.strip()]
    if not name.strip() or not flag.strip().startswith("-") or not cells:
        return None
    return Axis(name.strip(), flag.strip(), cells)


# -- the default grid ------------------------------------------------------------------------------

def default_grid(shape_vars: list[str], defaults: list[str] | None) -> tuple[list[list[str]], str]:
    """Cells for the seed's three classes when shape vars are named but no grid is: a non-toy
    shape, an odd N that is not a multiple of the tile, and an M large enough that M*N passes 2^31."""
    roles = []
    default_cells = [row.split(",") for row in defaults or [] if len(row.split(",")) == len(shape_vars)]
    for position, name in enumerate(shape_vars):
        lowered = name.lower()
        if lowered in _M_NAMES:
            roles.append("M")
        elif lowered in _N_NAMES:
            roles.append("N")
        elif lowered in _DTYPE_NAMES:
            seen = [cells[position] for cells in default_cells]
            roles.append(("dtype", seen[0] if seen else "f32"))
        else:
            return [], f"cannot generate a default grid: no role known for shape var {name!r}"
    if "M" not in roles or "N" not in roles:
        return [], "cannot generate a default grid: the shape vars name no M-like and N-like dimension"
    classes = {"non-toy": (256, 4096), "odd N, not a multiple of the tile": (67, 4099),
               "large M (32-bit offsets wrap)": (_LARGE_ELEMENTS // 4096 + 1, 4096)}
    rows = []
    for m, n in classes.values():
        rows.append([str(m) if role == "M" else str(n) if role == "N" else role[1] for role in roles])
    return rows, f"generated for {', '.join(classes)}"


# -- channel selection (prepare group: reads sources only) -------------------------------------

@dataclass
class Plan:
    channel: str = ""
    reason: str = ""
    rows: list[list[str]] = field(default_factory=list)
    defaults: list[str] | None = None
    axes: list[Axis] = field(default_factory=list)
    axis_state: str = "none"
    interpreter_skipped: list[str] = field(default_factory=list)


def channel(ctx: Context) -> StageResult:
    request = ctx.request
    runner = ctx.selected("runner", "none")
    source_tree = sources.parse(ctx.head_text(request.target_path))
    tried, chosen, defaults, evidence = [], "", None, ""

    if request.shape_arg:
        flags = argparse_flags(source_tree) if source_tree else {}
        if runner != "script":
            tried.append(f"--shape-arg {request.shape_arg}: argv reaches script targets only (runner is {runner})")
        elif request.shape_arg not in flags:
            tried.append(f"--shape-arg {request.shape_arg}: the target declares no add_argument for it "
                         f"(declared: {', '.join(sorted(flags)) or 'none'})")
        else:
            chosen, defaults, evidence = "cli", flags[request.shape_arg], f"add_argument({request.shape_arg!r})"
    if request.shape_env and not chosen:
        readers = [path for path in ctx.target_sources()
                   if (tree := sources.parse(ctx.head_text(path))) is not None and reads_env(tree, request.shape_env)]
        if readers:
            chosen, evidence = "env", f"{request.shape_env} read in {', '.join(readers)}"
        else:
            tried.append(f"--shape-env {request.shape_env}: neither the target, its conftest.py files nor the "
                         "checkout modules it imports read that variable")
    if request.shape_argnames and not chosen:
        wanted = request.argnames
        marks = parametrize_marks(source_tree) if source_tree else []
        exact = [rows for names, rows in marks if set(names) == set(wanted)]
        wider = [names for names, _ in marks if set(wanted) < set(names)]
        stacked = [match for group in (sources.parametrize_groups(source_tree) if source_tree else [])
                   if (match := stacked_marks(group, wanted)) is not None]
        if runner != "pytest":
            tried.append(f"--shape-argnames: parametrize cells reach pytest targets only (runner is {runner})")
        elif exact:
            chosen, defaults, evidence = "pytest", exact[0], f"@pytest.mark.parametrize binds {', '.join(wanted)}"
        elif stacked:
            bound, defaults = stacked[0]
            chosen, evidence = "pytest", f"stacked @pytest.mark.parametrize marks bind {' + '.join(bound)}"
        elif wider:
            tried.append(f"--shape-argnames {','.join(wanted)}: the parametrize mark binds more names "
                         f"({','.join(wider[0])}); its other cells cannot be filled, so it is refused")
        else:
            tried.append(f"--shape-argnames {','.join(wanted)}: no parametrize mark binds exactly those names "
                         f"(found: {'; '.join(','.join(n) for n, _ in marks) or 'none'})")
    if not (request.shape_arg or request.shape_env or request.shape_argnames):
        tried.append("no channel flag (--shape-env, --shape-arg, --shape-argnames) was given")

    rows, grid_basis = parse_grid(request.grid), "declared-by-caller"
    shape_vars = request.shape_var_names
    if not rows and shape_vars:
        rows, grid_basis = default_grid(shape_vars, defaults)
    selection = {"grid_channel": chosen, "grid_channel_basis": f"declared-by-caller; proven by source: {evidence}"
                 if chosen else "", "grid_channel_reason": "; ".join(tried), "grid_cells": [row_text(r) for r in rows],
                 "grid_cells_basis": grid_basis}
    independence, why = _independence([row_text(r) for r in rows], defaults, chosen)
    selection.update(grid_independence=independence, grid_independence_reason=why)

    axes, malformed = [], []
    for spec in request.axis:
        axis = parse_axis(spec)
        (axes.append(axis) if axis else malformed.append(spec))
    if malformed:
        state, state_reason = "malformed-spec", f"malformed --axis: {', '.join(malformed)}"
    elif not axes:
        state, state_reason = "none", "no --axis requested"
    elif runner != "script":
        state, state_reason = "unusable", f"axes ride argv, which reaches script targets only (runner is {runner})"
    else:
        flags = argparse_flags(source_tree) if source_tree else {}
        missing = [axis.flag for axis in axes if axis.flag not in flags]
        for axis in axes:
            axis.hook_proof = "flag-declared-in-add_argument" if axis.flag in flags else "flag-not-declared"
            axis.target_default = flags.get(axis.flag)
            axis.independence, _ = _independence(axis.values, axis.target_default, "cli")
        state, state_reason = ("hook-not-found", f"not declared with add_argument: {', '.join(missing)}") if missing \
            else ("declared", "every axis flag is declared; the runtime probe decides")
    selection.update(axes=[asdict(axis) for axis in axes], axis_state=state, axis_state_reason=state_reason)
    stage_result = StageResult(name=CHANNEL, selection=selection)
    stage_result.facts["grid_plan"] = asdict(Plan(chosen, "; ".join(tried), rows, defaults, axes, state))
    return stage_result


def _independence(cells: list[str], defaults: list[str] | None, chosen: str) -> tuple[str, str]:
    if not cells:
        return "unknown", "no grid cells"
    if defaults is None:
        kind = "an environment variable exposes no literal default" if chosen == "env" else \
            "the target's default is not a literal"
        return "unknown", kind
    squeezed = {cell.replace(" ", "") for cell in defaults}
    novel = [cell for cell in cells if cell.replace(" ", "") not in squeezed]
    if novel:
        return "adds-coverage", f"outside the target's defaults: {', '.join(novel)}"
    return "duplicates-target-defaults", "every cell is already one of the target's own defaults"


def _plan(ctx: Context) -> Plan | None:
    raw = ctx.fact("grid_plan")
    if raw is None:
        return None
    plan = Plan(**{**raw, "axes": [Axis(**axis) for axis in raw["axes"]]})
    if cpu_tier.active(ctx):
        # the interpreter's bf16 arithmetic is wrong: such a cell would prove nothing either way
        limited = [row for row in plan.rows if any(triton_cpu.is_bf16(cell) for cell in row)]
        plan.rows = [row for row in plan.rows if row not in limited]
        plan.interpreter_skipped = [row_text(row) for row in limited]
    return plan


# -- runs ------------------------------------------------------------------------------------------

def _run(ctx: Context, plan: Plan, label: str, rows: list[list[str]], axis_argv: list[str] = (),
         sensitivity: dict | None = None) -> TargetRun:
    request = ctx.request
    grid_text = ";".join(row_text(row) for row in rows)
    argv, env_extra, argnames = [], {}, []
    if plan.channel == "cli":
        argv = [request.shape_arg, *(row_text(row) for row in rows)]
    elif plan.channel == "env":
        env_extra = {request.shape_env: grid_text}
    elif plan.channel == "pytest":
        argnames = request.argnames
    ctx.say(f"{NAME}: running {label} ({len(rows)} cells)")
    return harness.run(request, runner=ctx.selected("runner"), run_dir=ctx.run_dir, label=label,
                      **cpu_tier.launch_options(ctx), argv=[*argv, *axis_argv],
                      env_extra=env_extra, grid_argnames=argnames, grid_rows=rows if argnames else [],
                      sensitivity=sensitivity)


def rerun(ctx: Context, label: str, axis_argv: list[str], sensitivity: dict) -> TargetRun:
    """The grid run once more, same channel, cells and axes, with the route's output corrupted
    (the sensitivity stage's run; the caller lends the tree)."""
    plan = _plan(ctx)
    return _run(ctx, plan, label, plan.rows, axis_argv, sensitivity=sensitivity)


def _poisoned(plan: Plan) -> list[list[str]]:
    width = len(plan.rows[0]) if plan.rows else 1
    return [[SENTINEL] * width]


def _state(run: TargetRun) -> str:
    return "all-skipped" if run.exit == 0 and run.stats.executed == 0 else "ran"


def base_runs(ctx: Context, repo_run: TargetRun | None) -> tuple[dict, list[TargetRun]]:
    """The base side of the grid (inside the baseline's handback): its state and runs."""
    plan = _plan(ctx)
    if plan is None or not plan.rows:
        return {"state": "not-configured"}, []
    if not plan.channel:
        return {"state": "no-channel-declared"}, []
    if repo_run is None:
        return {"state": "target-not-present"}, []
    probe = _run(ctx, plan, "base-grid-probe", _poisoned(plan))
    proven, why = proves_channel(plan, probe)
    fields = {"hook_probe_exit": probe.exit, "hook_probe_log": probe.log, "hook_proof": why}
    if not proven or not repo_run.passed:
        return {"state": "hook-not-consumed", **fields}, [probe]
    run = _run(ctx, plan, "base-grid", plan.rows)
    tier = cpu_tier.run_evidence(run)
    cells, basis = cell_outcomes(ctx, plan, run)
    return {"state": _state(run), "exit": run.exit, "log": run.log, "stats": run.stats.model_dump(), **fields,
            "cells": cells, "cells_basis": basis, **({"cpu_tier": tier} if tier else {}),
            **({"route_outputs": nonfinite.outputs(run)} if nonfinite.outputs(run) else {})}, [probe, run]


def _log_names(run: TargetRun, marker: str) -> bool:
    try:
        with open(run.log, errors="replace") as log:
            return any(marker in line for line in log)
    except OSError:
        return False


def proves_channel(plan: Plan, probe: TargetRun) -> tuple[bool, str]:
    """A poisoned run proves the channel only by failing in time over the invalid value: its output
    names the marker, or the parametrized test failed at the poisoned cell."""
    if probe.exit == 0:
        return False, f"the target passed with {SENTINEL} as its grid"
    if probe.timed_out:
        return False, "the poisoned run timed out: a timeout proves nothing about the channel"
    if _log_names(probe, SENTINEL):
        return True, f"failed, naming {SENTINEL}"
    if plan.channel == "pytest" and any(case.outcome in ("failed", "error") and _cell_index(case.name) == 0
                                        for case in probe.cases):
        return True, "the parametrized test failed at the poisoned cell"
    return False, (f"the poisoned run failed (exit {probe.exit}) without naming {SENTINEL}: an unrelated crash "
                   f"proves nothing about the channel ({probe.log_tail(2)})")


def _cell_index(name: str) -> int | None:
    found = _CELL.search(name)
    return int(found.group(1)) if found else None


def canonical_cell(text) -> str:
    """A cell as the route sees it: the probe's own coercion and normalisation, dtypes by one name."""
    value = route_probe._normalise(route_probe._coerce(str(text).strip()))
    return sources.canonical_dtype(value) or value.replace(" ", "")


def canonical_row(text: str) -> tuple[str, ...]:
    """A row of cells (grid text, or a receipt's captured shape) as the route sees it."""
    cells = grid_rows(text)
    return tuple(canonical_cell(cell) for cell in (cells[0] if cells else []))


def failing_cells(plan: Plan, run: TargetRun) -> str:
    """Which cells a failed grid run failed: named per cell where JUnit tells them apart (the pytest
    channel), else the cells the one process ran."""
    failed = {_cell_index(case.name) for case in run.cases if case.outcome in ("failed", "error")}
    named = [row_text(row) for index, row in enumerate(plan.rows) if index in failed]
    if plan.channel == "pytest" and named:
        return f"failing cells {', '.join(named)}"
    return f"grid cells {', '.join(row_text(row) for row in plan.rows)}, run as one"


def cell_outcomes(ctx: Context, plan: Plan, run: TargetRun) -> tuple[dict[str, str] | None, str]:
    """Each cell of one grid run: executed, skipped or absent; None (with why) when cells cannot be
    told apart in that run."""
    cells = [row_text(row) for row in plan.rows]
    if plan.channel == "pytest":
        seen: dict[int, list[str]] = {}
        for case in run.cases:
            index = _cell_index(case.name)
            if index is not None:
                seen.setdefault(index, []).append(case.outcome)
        outcomes = {}
        for index, cell in enumerate(cells):
            found = seen.get(index, [])
            outcomes[cell] = "absent" if not found else "skipped" if all(o == "skipped" for o in found) \
                else "executed"
        return outcomes, "per-cell JUnit items"
    names = ctx.request.shape_var_names
    if not names:
        return None, "no --shape-vars were named, so the cells (one process runs them all) were not individually " \
                     "evidenced"
    if any(len(row) != len(names) for row in plan.rows):
        return None, "the grid cells and --shape-vars differ in width, so the cells were not individually evidenced"
    captured = (run.receipt or {}).get("executed_shapes") or []
    if not captured:
        return None, "the route captured no shape in this run, so the cells were not individually evidenced"
    shapes = {canonical_row(shape) for shape in captured}
    return {cell: "executed" if tuple(canonical_cell(v) for v in row) in shapes else "absent"
            for cell, row in zip(cells, plan.rows)}, "the receipt's captured shape vars"


def oracle_run(ctx: Context) -> TargetRun | None:
    """The grid cells once more inside the base oracle's lend (base's target, head's code), when the
    grid ran on head and passed on base; None otherwise."""
    plan = _plan(ctx)
    head_grid = ctx.earlier.get(NAME)
    baseline = ctx.earlier.get("baseline_control")
    base = (baseline.stage.model_extra.get("s1_grid") if baseline else None) or {}
    if plan is None or not plan.rows or head_grid is None or head_grid.stage is None \
            or "exit" not in head_grid.stage.model_extra or base.get("state") != "ran" or base.get("exit") != 0:
        return None
    return _run(ctx, plan, "head-baseoracle-grid", plan.rows, head_grid.stage.model_extra.get("axis_argv") or [])


def _axis_probes(ctx: Context, plan: Plan) -> tuple[str, str, list[TargetRun]]:
    runs, accepted = [], []
    for axis in plan.axes:
        run = harness.run(ctx.request, runner="script", run_dir=ctx.run_dir, label=f"head-axisprobe-{axis.name}",
                         **cpu_tier.launch_options(ctx), argv=[axis.flag, AXIS_SENTINEL])
        runs.append(run)
        refused = run.exit not in (0, None) and not run.timed_out and _log_names(run, AXIS_SENTINEL)
        axis.hook_proof = "refused-invalid-value" if refused else "accepted-invalid-value"
        if axis.hook_proof == "accepted-invalid-value":
            accepted.append(axis.flag)
    if accepted:
        return "hook-not-consumed", f"dropped: {', '.join(accepted)} accepted {AXIS_SENTINEL}", runs
    return "proven", "every axis flag refused an invalid value; its values ride the grid run's argv", runs


def head(ctx: Context) -> StageResult:
    plan = _plan(ctx)
    repo_tests = ctx.earlier.get("correctness_repo_tests")
    head_repo = next((r for r in (repo_tests.runs if repo_tests else []) if r.label == "head-repo"), None)
    if plan is None:
        return result(NAME, "skip", "grid channel selection did not run")
    if not plan.channel:
        reason = plan.reason or "no channel"
        stage = result(NAME, "skip", f"{reason}; coverage is repo-default-only")
        return stage.finding("note", "coverage is limited to repository defaults: no grid channel was established")
    if not plan.rows and plan.interpreter_skipped:
        stage = result(NAME, "skip", f"every grid cell is an interpreter limitation ({triton_cpu.BF16_REASON}); "
                                     "coverage is repo-default-only", interpreter_skipped_cells=_limited(plan))
        return stage.finding("note", f"grid cells {', '.join(plan.interpreter_skipped)} were not run: "
                                     f"{triton_cpu.BF16_REASON}")
    if not plan.rows:
        stage = result(NAME, "skip", "no --grid was supplied and none could be generated; coverage is "
                                     "repo-default-only")
        return stage.finding("note", "coverage is limited to repository defaults: no grid cells")
    if head_repo is None:
        return result(NAME, "skip", f"head repo tests did not run ({repo_tests.stage.note if repo_tests else ''}); "
                                    "the grid was not attempted")
    if not head_repo.passed:
        return result(NAME, "skip", "grid not attempted because the unpoisoned head run failed: a poisoned run "
                                    "could not prove the channel")

    runs: list[TargetRun] = []
    with ctx.worktree.handback():
        if ctx.request.has_patch:
            try:
                ctx.worktree.apply(ctx.request.patch)
            except GitFailed as exc:
                return result(NAME, "skip", f"the patch could not be applied for the grid run: {exc}")
        probe = _run(ctx, plan, "head-grid-probe", _poisoned(plan))
        runs.append(probe)
        probe_fields = {"hook_probe_exit": probe.exit, "hook_probe_log": probe.log, "grid": ctx.request.grid,
                        "cells": [row_text(r) for r in plan.rows], "channel": plan.channel,
                        **({"interpreter_skipped_cells": _limited(plan)} if plan.interpreter_skipped else {})}
        proven, why = proves_channel(plan, probe)
        probe_fields["hook_proof"] = why
        if not proven:
            unproven = "consumed" if probe.exit == 0 else "proven"
            stage = result(NAME, "skip", f"the declared {plan.channel} channel was not {unproven}: {why}",
                           **probe_fields)
            stage.finding("note", f"the {plan.channel} channel was not shown to reach the target ({why}); the grid "
                                  "proves nothing")
            stage.runs = runs
            return stage
        axis_argv, axis_state, axis_reason = [], plan.axis_state, ""
        if plan.axis_state == "declared":
            axis_state, axis_reason, axis_runs = _axis_probes(ctx, plan)
            runs += axis_runs
            axis_argv = [token for axis in plan.axes if axis.hook_proof == "refused-invalid-value"
                         for token in (axis.flag, *axis.values)]
        run = _run(ctx, plan, "head-grid", plan.rows, axis_argv)
        runs.append(run)

    independence, independence_reason = _run_independence(ctx, plan)
    stage = _judge(ctx, plan, run, head_repo, probe_fields, axis_argv, independence)
    stage.selection.update(grid_independence=independence, grid_independence_reason=independence_reason)
    baseline = ctx.earlier.get("baseline_control")
    base_grid = baseline.stage.model_extra.get("s1_grid") if baseline else None
    cpu_tier.credit_fixes(stage, run, base_grid)
    cpu_tier.observe(stage, run)
    if ctx.request.has_patch and base_grid:
        nonfinite.judge(stage, run, base_grid.get("route_outputs"))
    if axis_state != plan.axis_state:
        stage.selection.update(axis_state=axis_state, axis_state_reason=axis_reason,
                               axes=[asdict(axis) for axis in plan.axes])
        if axis_state == "hook-not-consumed":
            stage.finding("note", f"axis {axis_reason}; those axes were not run")
    stage.runs = runs
    return stage


def _run_independence(ctx: Context, plan: Plan) -> tuple[str, str]:
    """test_selection.grid_independence, the one answer for the run that happened: the shape cells'
    answer from channel selection, raised when a proven axis asks for values outside its default."""
    independence = ctx.selected("grid_independence", "unknown")
    reason = ctx.selected("grid_independence_reason", "")
    novel = [axis.name for axis in plan.axes
             if axis.hook_proof == "refused-invalid-value" and axis.independence == "adds-coverage"]
    if novel and independence != "adds-coverage":
        return "adds-coverage", f"the proven axis {', '.join(novel)} asks for values outside its flag's default"
    return independence, reason


def _limited(plan: Plan) -> dict[str, str]:
    return {cell: triton_cpu.BF16_REASON for cell in plan.interpreter_skipped}


def _judge(ctx: Context, plan: Plan, run: TargetRun, head_repo: TargetRun, fields: dict,
           axis_argv: list[str], independence: str) -> StageResult:
    fields = {**fields, "exit": run.exit, "log": run.log, "stats": run.stats.model_dump(), "axis_argv": axis_argv}
    tier = cpu_tier.run_evidence(run)
    if tier:
        fields["cpu_tier"] = tier
    if nonfinite.outputs(run):
        fields["route_outputs"] = nonfinite.outputs(run)
    base = (ctx.earlier.get("baseline_control").stage.model_extra.get("s1_grid")
            if ctx.earlier.get("baseline_control") else None) or {}
    tiered = cpu_tier.blocker(ctx, NAME, run, base, fields) or cpu_tier.sparse_skip(NAME, run, fields)
    if tiered is not None:
        return tiered
    executed, observed = run.stats.executed, run.stats.observed_work
    cells, basis = cell_outcomes(ctx, plan, run)
    fields.update(cells=cells, cells_basis=basis)
    if run.passed and executed > 0 and cells is not None:
        unrun = [cell for cell, outcome in cells.items() if outcome != "executed"]
        on_base = [cell for cell in unrun if (base.get("cells") or {}).get(cell) == "executed"]
        if on_base:
            stage = result(NAME, "fail", f"{len(on_base)} cells ran on base and not on head: {', '.join(on_base)}",
                           cells_skipped=unrun, **fields)
            return stage.finding("blocker", "grid cells that ran on base are skipped or deselected on head, so the "
                                            f"PR hides them from its own grid: {', '.join(on_base)} "
                                            f"({', '.join(cells[c] for c in on_base)} on head; {basis})")
        if unrun:
            stage = result(NAME, "skip", f"{len(unrun)} of {len(cells)} cells did not run ({', '.join(unrun)}), on "
                                         "base either: the grid falls short of a pass", cells_skipped=unrun, **fields)
            return stage.finding("note", f"grid cells not executed on either side: {', '.join(unrun)} ({basis}); "
                                         "no correctness claim is made for them")
    if run.passed and executed > 0:
        if independence == "duplicates-target-defaults":
            stage = result(NAME, "skip", "the grid passed, but every cell is one of the target's own defaults: a "
                                         "duplicate proves only what the repo tests already said", **fields)
            return stage.finding("note", "grid duplicates the target defaults; it earns no pass")
        evidenced = f"every cell executed ({basis})" if cells is not None else basis
        return result(NAME, "pass", f"{executed} executed over {len(plan.rows)} cells via {plan.channel}; {evidenced}",
                      **fields)
    if run.passed:
        stage = result(NAME, "skip", "the grid run executed no test", **fields)
        return stage.finding("note", "the grid executed nothing; no correctness claim is made")

    stage = result(NAME, "fail", f"exit {run.exit} on the grid ({', '.join(row_text(r) for r in plan.rows)})",
                   **fields)
    tail = run.log_tail()
    if observed == 0 and head_repo.stats.observed_work != 0:
        return stage.finding("note", "the grid run failed without reaching routed work, so no defect is attributed "
                                     f"(a missing channel or a crash before the route look the same): {tail}")
    if not ctx.request.has_patch:
        return stage.finding("blocker", f"the supplied checkout fails the independent grid: {tail}")
    if base.get("state") == "target-not-present":
        return stage.finding("blocker", f"the PR adds this target and it fails the independent grid: {tail}")
    if base.get("state") == "ran" and base.get("exit") == 0:
        return stage.finding("blocker", f"the grid passes on base and fails on head ({failing_cells(plan, run)}): "
                                        f"{tail}")
    return stage.finding("note", f"the grid is red on both sides (base: {base.get('state', 'not run')}), so the "
                                 f"failure is not attributed to the PR: {tail}")
