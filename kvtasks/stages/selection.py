"""Runner selection and test provenance: structural, read from the merged head's target file.

pytest when the target is an explicit `path::node` or the file defines a collectable test*/Test*;
otherwise script when it has an `if __name__ == "__main__"` guard; otherwise none (a skip, never
a failure). `--runner` overrides, and the report keeps what the structure said next to it.
"""
from __future__ import annotations

from kvtasks import sources
from kvtasks.request import repo_config
from kvtasks.sources.structure import argv_parsed_at_import, has_main_guard, test_definitions
from kvtasks.stages import Context, Report, StageResult, StageSpec
from kvtasks.records import Selection

NAME = "selection"


def classify(source: str, explicit_node: bool) -> tuple[str, str]:
    """Return (runner, reason) from the structure of the target's source."""
    if explicit_node:
        return "pytest", "explicit path::node selector"
    tree = sources.parse(source)
    if tree is None:
        return "none", f"target does not parse (line {sources.error_line(source)}): neither runner can use it"
    tests, workers = test_definitions(tree)
    if tests:
        return "pytest", f"defines collectable tests: {', '.join(tests[:5])}"
    if has_main_guard(tree):
        extra = f"; test* functions with required arguments are workers, not tests: {', '.join(workers[:5])}" \
            if workers else ""
        return "script", f'has an if __name__ == "__main__" guard and no collectable tests{extra}'
    return "none", "defines no collectable test*/Test* and has no __main__ guard: nothing to run"


def runner_risk(source: str) -> str:
    """argv parsed at import time: pytest imports the module with its own argv and argparse exits."""
    tree = sources.parse(source)
    parsed = argv_parsed_at_import(tree) if tree is not None else None
    if parsed is None:
        return ""
    line, parser = parsed
    return (f"argv parsed in module body (line {line}, {parser}): pytest imports the module with its own argv and "
            "argparse exits during collection")


def _provenance(ctx: Context) -> tuple[str, str]:
    request = ctx.request
    if ctx.head_view is None:
        return "unknown", "no patch: whether the PR touched the target cannot be told"
    change = ctx.head_view.changes.get(request.target_path)
    if change == "A":
        return "pr-added", "the patch adds the target; its evidence is not independent of the change"
    if change is not None:
        return "pr-modified", "the patch modifies the target; its evidence is not independent of the change"
    return "pre-existing", "the patch does not touch the target"


def _configuration_changes(ctx: Context) -> list[str]:
    if ctx.head_view is None:
        return []

    def base_text(name: str) -> str | None:
        path = ctx.worktree.path / name
        return path.read_text(errors="replace") if path.is_file() else None
    return repo_config.changed_by(ctx.head_view.changes, base_text, ctx.head_view.read)


def run(ctx: Context) -> StageResult:
    request = ctx.request
    stage_result = StageResult(name=NAME)
    selection = {
        "target": request.target,
        "shape_env": request.shape_env,
        "shape_arg": request.shape_arg,
        "shape_argnames": request.shape_argnames,
        "grid": request.grid,
        "expected_route": request.expected_route,
        "shape_vars": request.shape_vars,
        "axes_requested": list(request.axis),
    }
    provenance, provenance_reason = _provenance(ctx)
    selection.update(test_provenance=provenance, test_provenance_reason=provenance_reason)
    if provenance in ("pr-added", "pr-modified"):
        stage_result.finding("selection.provenance", "note", f"target is {provenance}: {provenance_reason}")

    if request.unvalidated_changes:
        selection["unvalidated_changes"] = list(request.unvalidated_changes)
        stage_result.finding("config.not-validated", "note",
                             f"the PR also changes {_named(request.unvalidated_changes)}, which no target of base's "
                             "map validates: no run here tests them")

    if request.inferred is not None:
        selection["inferred"] = request.inferred
        stage_result.finding("config.inferred", "note",
                             f"no target was configured; base's impact map chose {request.inferred.target} for "
                             f"{request.inferred.route} ({request.inferred.why})")

    configuration = _configuration_changes(ctx)
    if configuration:
        stage_result.finding("config.changed-by-pr", "note",
                             f"the PR changes kvtasks' configuration ({', '.join(configuration)}); it was validated "
                             "with base's, and its own applies once it is merged")

    source = ctx.target_text()  # base's file where the PR deletes it: the base run and the base oracle run it
    explicit_node = "::" in request.target
    if source is None:
        runner, reason, basis = "none", f"target {request.target_path} does not exist on head", "target-missing"
    else:
        runner, reason = classify(source, explicit_node)
        basis = "explicit-node-selector" if explicit_node else "structural"
        if ctx.target_deleted():
            reason = f"the PR deletes the target; base's file: {reason}"
        if request.runner is not None:
            selection.update(runner_selected_by_structure=runner, runner_structure_reason=reason)
            reason = f"forced by --runner {request.runner}; structure said {runner}: {reason}"
            runner, basis = request.runner, "declared-by-caller"
        risk = runner_risk(source) if runner == "pytest" else ""
        if risk:
            selection["runner_risk"] = risk
    selection.update(runner=runner, runner_reason=reason, runner_basis=basis)
    stage_result.selection = Selection(**selection)
    return stage_result


def _named(files) -> str:
    return ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")


def passes(report: Report) -> list[str]:
    """PASS names the route it watched and the shapes it covered, and ran the target somehow."""
    selection, missing = report.test_selection, []
    if not selection.expected_route or not selection.shape_vars:
        missing.append("--expected-route and --shape-vars are required for PASS")
    if selection.runner not in ("pytest", "script"):
        missing.append("no runner")
    if selection.unvalidated_changes:
        missing.append(f"the PR changes {_named(selection.unvalidated_changes)}, which no target validates")
    return missing


STAGE = StageSpec(NAME, run, passes=passes, sets=(
    "target", "shape_env", "shape_arg", "shape_argnames", "grid", "expected_route", "shape_vars", "axes_requested",
    "test_provenance", "test_provenance_reason", "runner", "runner_reason", "runner_basis", "runner_selected_by_structure",
    "runner_structure_reason", "runner_risk", "unvalidated_changes", "inferred"))
