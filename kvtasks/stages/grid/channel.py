"""grid_channel, the prepare step: which channel the sources prove reaches the target, the cells
and axes to run, and the plan the grid stage reads back. Three channels, alternatives not a
sequence: --shape-arg (add_argument; script targets), --shape-env (the target, its conftest.py
files or the checkout modules it imports read it) and --shape-argnames (a parametrize mark binds
exactly those names, or stacked marks of one test bind them between them; pytest targets).

Reads sources through git objects only (kvtasks.sources); it must never launch the target.
"""
from __future__ import annotations

from kvtasks import sources
from kvtasks.sources import argparse_flags, parametrize_marks, reads_env, row_text
from kvtasks.stages import Context, StageResult, StageSpec
from kvtasks.records import Selection
from kvtasks.stages.grid.plan import (CHANNEL, GridSelection, Plan, default_grid, filled_mark, grid_seed, independence_of,
                                      parse_axis, parse_grid, stacked_marks)


def channel(ctx: Context) -> StageResult:
    request = ctx.request
    runner = ctx.selection.runner or "none"
    source_tree = sources.parse(ctx.target_text())
    tried, chosen, defaults, evidence, exact, fill = [], "", None, "", [], {}

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
        texts = {**ctx.head_texts(ctx.target_sources()), request.target_path: ctx.target_text()}
        readers = [path for path, text in texts.items()
                   if (tree := sources.parse(text)) is not None and reads_env(tree, request.shape_env)]
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
        elif wider and (filled := filled_mark(marks, wanted)) is not None:
            names, defaults, fill = filled
            chosen, evidence = "pytest", (f"@pytest.mark.parametrize binds {', '.join(names)}; the grid fills "
                                          f"{', '.join(wanted)} and keeps {row_text([f'{k}={v}' for k, v in fill.items()])}")
        elif wider:
            tried.append(f"--shape-argnames {','.join(wanted)}: the parametrize mark binds more names "
                         f"({','.join(wider[0])}) and its rows are computed, so its other cells cannot be filled")
        else:
            tried.append(f"--shape-argnames {','.join(wanted)}: no parametrize mark binds exactly those names "
                         f"(found: {'; '.join(','.join(n) for n, _ in marks) or 'none'})")
    if not (request.shape_arg or request.shape_env or request.shape_argnames):
        tried.append("no channel flag (--shape-env, --shape-arg, --shape-argnames) was given")

    rows, grid_basis = parse_grid(request.grid), "declared-by-caller"
    shape_vars = request.shape_var_names
    if not rows and shape_vars:
        seed = grid_seed(ctx.grid_secret, ctx.worktree.head_oid(), request.target_path)
        rows, grid_basis = default_grid(shape_vars, defaults, seed)
    cells = [row_text(r) for r in rows]
    independence, independence_reason = independence_of(cells, defaults, chosen)

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
            axis.independence, _ = independence_of(axis.values, axis.target_default, "cli")
        state, state_reason = ("hook-not-found", f"not declared with add_argument: {', '.join(missing)}") if missing \
            else ("declared", "every axis flag is declared; the runtime probe decides")
    selection = GridSelection(
        grid_channel=chosen, grid_channel_basis=f"declared-by-caller; proven by source: {evidence}" if chosen else "",
        grid_channel_reason="; ".join(tried), grid_cells=cells, grid_cells_basis=grid_basis,
        grid_independence=independence, grid_independence_reason=independence_reason, axes=axes, axis_state=state,
        axis_state_reason=state_reason)
    stage_result = StageResult(name=CHANNEL, selection=Selection(**dict(selection)))
    plan = Plan(channel=chosen, reason="; ".join(tried), rows=rows, defaults=defaults, axes=axes, axis_state=state,
                merged_session=chosen == "pytest" and bool(exact), fill=fill)
    stage_result.facts.grid_plan = plan
    return stage_result


STAGE = StageSpec(CHANNEL, channel, provides=(Plan,), sets=tuple(GridSelection.model_fields))
