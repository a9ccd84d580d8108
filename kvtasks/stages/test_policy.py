"""test_policy: can this suite still fail? Compared head against base before any test runs.

The target and every test file the PR touches are read by kvtasks.sources on both sides. A
tolerance is compared with the same tolerance on base: a call's (calls paired by signature), a
named constant's or a table entry's; one head passes where base passed none is compared with the
callee's documented default, and a new table entry with the loosest entry base had and with
--tol-table. Parametrize tables' tolerance columns (atol, rtol, tol, eps, ...) are compared row by
row, a row named by its other cells (its dtype). A tolerance that stops being a literal is a
finding, never silence. Skips, skip marks (marks added at run time too), discarded comparisons,
early returns, deleted tests and parametrize rows, and newly commented-out shape rows are
weakenings (should-fix), and so is a PR that deletes the target test itself. A test-only widening
is a blocker, and so is a test-only change that both weakens and widens; with a kernel change a
widening needs numerical justification (should-fix). A PR that adds or changes interpreter
start-up code (a sitecustomize.py, usercustomize.py or .pth file) is a blocker: Python would run it
in a target before anything kvtasks controls, and targets never load a checkout's
(kvtasks.harness.startup). So is one that adds or changes a module at an import root named like a
standard-library module: the checkout is on the path ahead of the standard library, so it would
stand in for that module in every process, kvtasks' probe included.
"""
from __future__ import annotations

from kvtasks.harness import layout
from kvtasks.sources import compare, pytest_config, references, tampering
from kvtasks.stages import Context, Report, StageResult, StageSpec, result, sides
from kvtasks.stages.payloads import BaselineControl, TestPolicy
from kvtasks.stages.policy.criteria import (COMPILED_MODULES, drawn_dimensions, parse_tol_table, shadows_stdlib,
                                            weakens_nothing)
from kvtasks.stages.policy.files import read_followed, renamed_from, supplied_modules, target_deleted
from kvtasks.sources.trust_rules import TRUST_RULES
from kvtasks.stages.sides import KERNEL_SUFFIXES, is_startup_code, is_test_path

NAME = "test_policy"


def run(ctx: Context) -> StageResult:
    """The policy read against base, with the sides the evidence at hand decides (sides.decide): in
    prepare, before any run, the route's own modules; in the head group, what base's run loaded."""
    request = ctx.request
    if ctx.head_view is None:
        return result(NAME, "skip", "no patch: head and base tests cannot be compared")
    changes = ctx.head_view.changes
    split = sides.decide(ctx)
    python = [path for path in changes if path.endswith(".py")]
    renamed = renamed_from(ctx, request.target_path)
    files = list(dict.fromkeys([request.target_path, *(p for p in split.test if p in python and p != renamed)]))
    route_python = [path for path in split.route if path in python and path != request.target_path]
    kernel_changed = any(p.endswith(KERNEL_SUFFIXES) and not is_test_path(p) for p in changes)
    reference = parse_tol_table(request.tol_table)
    ceiling = max(reference.values()) if reference else None

    fields = {"files": files, "kernel_files_changed": kernel_changed, "reference_tolerances": reference,
              "tolerances_base": {}, "tolerances_head": {}, "tolerances_base_by_name": [],
              "tolerances_head_by_name": [], "loosened": [], "exceeds_reference": [], "not_literal": [],
              "commented_out_shape_rows_base": 0, "commented_out_shape_rows": 0,
              "commented_out_shape_rows_added": 0, "newly_commented_rows": [], "weakened": [],
              "added_with_unknown_default": [], "weakened_files": [], "route_side": split.route,
              "test_side": split.test, "sides_basis": split.basis, "target_renamed_from": renamed,
              "tampering": [], "config_changes": [],
              "oracle_required": split.test_side_changed(request.target_path,
                                                         changes.get(request.target_path) == "A" and not renamed)}
    unparsed = []
    for path in [*files, *route_python]:
        base_path = renamed if path == request.target_path and renamed else path
        base_text = ctx.worktree.read_base(base_path)
        base = read_followed(base_text, ctx.worktree.read_base)
        head = read_followed(ctx.head_text(path), ctx.head_text)
        if not (base.parsed and head.parsed):
            unparsed.append(path)
        found = compare(base, head, path, reference)
        fields["tolerances_base"].update({f"{path}::{k}": v for k, v in base.tolerances.items()})
        fields["tolerances_head"].update({f"{path}::{k}": v for k, v in head.tolerances.items()})
        fields["loosened"] += found.loosened
        fields["not_literal"] += found.uncomparable
        if path in route_python:  # the code under test: its tolerances count, its control flow is its own
            if found.loosened or found.uncomparable:
                fields["weakened_files"].append(path)
            continue
        fields["tolerances_base_by_name"] += [f"{path}::{k}" for k in base.by_name]
        fields["tolerances_head_by_name"] += [f"{path}::{k}" for k in head.by_name]
        had = {test.rsplit(".", 1)[-1] for test in base.tests} if base_text is not None else None
        weakened = [text for text in found.weakened if not weakens_nothing(text, path, had)]
        weakened += [item.describe(path) for item in tampering.added(base_text, ctx.head_text(path))
                     if item.patches_a_comparison or item.kind == "exit-swallows"]
        fields["weakened"] += weakened
        fields["added_with_unknown_default"] += found.unknown_defaults
        newly = head.commented_rows - base.commented_rows
        fields["newly_commented_rows"] += [f"{path}: ({row})" for row in newly.elements()]
        fields["commented_out_shape_rows_base"] += sum(base.commented_rows.values())
        fields["commented_out_shape_rows"] += sum(head.commented_rows.values())
        if found.loosened or found.uncomparable or weakened or newly:
            fields["weakened_files"].append(path)
    for path in split.test:
        said = pytest_config.changed(path, ctx.worktree.read_base(path), ctx.head_text(path))
        fields["config_changes"] += said
        fields["weakened"] += said
        if said:
            fields["weakened_files"].append(path)
    state_names, drawn = (request.shape_env,), drawn_dimensions(ctx.selection)
    for path in python:  # code outside the tests, on either side: none of it may reach into the judges
        if not sides.judges(path) and path != request.target_path:
            fields["tampering"] += [item.describe(path) for item in tampering.added(
                ctx.worktree.read_base(path), ctx.head_text(path), state_names, drawn)]
    if changes.get(request.target_path) == "A" and not renamed:
        fields["reference_from_pr"] = references.from_supplied(ctx.head_text(request.target_path),
                                                               supplied_modules(ctx, layout.checkout_roots(request)))
    fields["commented_out_shape_rows_added"] = len(fields["newly_commented_rows"])
    fields["target_deleted"] = target_deleted(ctx)
    fields["startup_files"] = sorted(path for path in changes if is_startup_code(path))
    fields["compiled_modules"] = sorted(path for path, change in changes.items()
                                        if change != "D" and path.endswith(COMPILED_MODULES))
    roots = layout.checkout_roots(request)
    fields["stdlib_shadows"] = sorted(path for path in changes if shadows_stdlib(path, roots))
    if ceiling is not None:
        fields["exceeds_reference"] = sorted({v for v in fields["tolerances_head"].values() if v > ceiling})

    loosened = fields["loosened"]
    note = f"{len(files)} files compared; {len(loosened)} tolerances loosened, " \
           f"{fields['commented_out_shape_rows_added']} shape rows newly commented out, " \
           f"{len(fields['weakened'])} other weakenings"
    if unparsed:
        note += f"; read as text (did not parse): {', '.join(unparsed)}"
    if fields["startup_files"]:
        note += f"; interpreter start-up code changed: {', '.join(fields['startup_files'])}"
    if fields["stdlib_shadows"]:
        note += f"; standard-library names shadowed: {', '.join(fields['stdlib_shadows'])}"
    if fields["compiled_modules"]:
        note += f"; compiled modules changed: {', '.join(fields['compiled_modules'])}"
    failed = loosened or fields["not_literal"] or fields["startup_files"] or fields["stdlib_shadows"] \
        or fields["tampering"] or fields["compiled_modules"]
    stage = result(NAME, "fail" if failed else "pass", note, **fields)
    stage.selection.set(loaded_files=split.loaded, route_side=split.route, test_side=split.test,
                        sides_basis=split.basis)
    for rule in TRUST_RULES:
        for detail in rule.finds(stage.stage):
            stage.finding(rule.id, rule.severity, detail)
    return stage


def passes(report: Report) -> list[str]:
    """A target the PR adds cannot PASS on expected values the PR itself supplies."""
    policy = getattr(report.stages, NAME)
    if policy.reference_from_pr:
        return ["the PR adds the target and takes its expected values from code it supplies: "
                + "; ".join(policy.reference_from_pr[:3])]
    return []


# the policy read from sources in prepare, and read again once base's run said what it loads (the
# route and test sides observed), replacing the first reading
SIDES_FIELDS = ("loaded_files", "route_side", "test_side", "sides_basis")
STAGE = StageSpec(NAME, run, payload=TestPolicy, reads_if_present=(BaselineControl,), sets=SIDES_FIELDS, passes=passes)
SIDES = StageSpec("test_sides", run, payload=TestPolicy, requires=(BaselineControl,), sets=SIDES_FIELDS)
