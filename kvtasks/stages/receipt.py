"""execution_receipt: proof, from inside the target process, that the named route really ran.

Pass only when the receipt exists, came from this run's probe, names exactly the expected
route(s) and holds at least one executed shape; otherwise skip with the first failing check.
It never fails: a missing receipt is missing evidence, not a defect of the PR. What it does
report as a defect: a head run in which a function tests judge with (numpy's and torch's
comparisons, pytest's, unittest's, builtins) ended up bound to the checkout's code where base's
runs had it untouched: whatever patched it, at import or in a route call, the tests judged nothing.
"""
from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from kvtasks.stages import Context, Report, Stage, StageResult, StageSpec, baseline_control, grid, repo_tests, result
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, RepoTests
from kvtasks.harness.target_run import TargetRun
from kvtasks.harness.in_target.receipt import SCHEMA_VERSION
from kvtasks.harness.receipts import PRODUCER

NAME = "execution_receipt"


class ExecutionReceipt(Stage):
    """What the validator's in-target probe saw the route execute."""

    model_config = ConfigDict(extra="forbid")

    receipt: Any = None  # where the receipt is stored
    receipt_sha256: str | None = None
    receipt_scope: str | None = None
    route: str | None = None
    producer: str | None = None
    kernel_symbols: list[str] | None = None
    route_calls: dict[str, Any] | None = None
    mechanism: Any = None
    required_shapes: list[Any] | None = None
    executed_shapes: list[str] | None = None
    shape_capture: dict[str, Any] | None = None
    shape_namespace: str | None = None
    judges_replaced: list[str] | None = None  # judging functions head's runs had bound to the checkout's code
    arguments_written: list[str] | None = None  # route(argument) head's calls wrote into and base's did not
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran


def _head_runs(ctx: Context) -> list[tuple[str, TargetRun]]:
    """Runs whose receipt may stand for head, best first: the grid's own, then the repo run's."""
    found = []
    for payload, label, scope in ((grid.CorrectnessGrid, "head-grid", "the head-grid run only; the head-repo run "
                                                                        "has its own receipt"),
                                     (repo_tests.RepoTests, "head-repo", "the head-repo run only; no grid run "
                                                                             "took place")):
        stage_result = ctx.result_of(payload)
        for run in (stage_result.runs if stage_result else []):
            if run.label == label:
                found.append((f"the {label} items of the merged session {run.session} only" if run.session else scope,
                              run))
    return found


def _skip(note: str, **fields) -> StageResult:
    stage = result(NAME, "skip", note, **fields)
    return stage.finding("receipt.not-established", "note", f"execution receipt not established ({note}); PASS is not permitted")


def run(ctx: Context) -> StageResult:
    stage = _read(ctx)
    baseline = ctx.result_of(baseline_control.BaselineControl)
    on_base = _replaced(baseline.runs if baseline else [])
    replaced = sorted(_replaced([run for _, run in _head_runs(ctx)]) - on_base)
    if replaced:
        stage.stage.judges_replaced = replaced
        stage.finding("receipt.judged-by-checkout", "blocker", f"head's run judged with functions bound to the checkout's code, which base's runs "
                                 f"had untouched: {', '.join(replaced)}; its tests compared nothing")
    base_runs = [run for run in (baseline.runs if baseline else []) if run.receipt is not None]
    written = sorted(_written([run for _, run in _head_runs(ctx)]) - _written(base_runs)) if base_runs else []
    if written:
        stage.stage.arguments_written = written
        stage.finding("receipt.arguments-written", "should-fix", f"head's route writes into arguments base's route left unchanged: "
                                    f"{', '.join(written)}; callers' inputs are overwritten, and a test that computes "
                                    "its expected values from them after the call compares the route with itself")
    return stage


def _written(runs: list[TargetRun]) -> set[str]:
    """route(argument) for every argument a run's route calls wrote into."""
    return {f"{route}({name})" for run in runs
            for route, names in (run.receipt.written_arguments if run.receipt else {}).items() for name in names}


def _replaced(runs: list[TargetRun]) -> set[str]:
    return {judge for run in runs for judge in (run.receipt.judges_replaced if run.receipt else [])}


def _read(ctx: Context) -> StageResult:
    request = ctx.request
    expected = sorted(set(request.routes))
    if not expected:
        return _skip("--expected-route was not supplied, so no route was watched")
    runs = _head_runs(ctx)
    with_route = [(scope, run) for scope, run in runs if run.receipt and run.receipt.route]
    if not runs:
        return _skip("no head run took place, so there is no receipt to read")
    scope, chosen = (with_route or runs)[0]
    receipt = chosen.receipt
    # every grid row must show up among the route's shapes, on every channel (parametrize cells too)
    required_shapes = (ctx.selection.grid_cells or []) if chosen.label == "head-grid" else []
    check_required = chosen.label == "head-grid"
    fields = {"receipt": chosen.receipt_path, "receipt_sha256": chosen.receipt_sha256, "receipt_scope": scope}
    if receipt is None:
        return _skip(f"{chosen.label}: {chosen.receipt_note}", **fields)
    if receipt.schema_version != SCHEMA_VERSION:
        return _skip(f"receipt schema_version {receipt.schema_version!r} is not {SCHEMA_VERSION}", **fields)
    if receipt.producer != PRODUCER:
        return _skip("the receipt was not produced by validator instrumentation", **fields)
    observed = sorted(set(receipt.kernel_symbols))
    if observed != expected:
        unresolved = receipt.unresolved_routes
        why = f"; unresolvable in the target: {', '.join(unresolved)}" if unresolved else ""
        return _skip(f"expected route {','.join(expected)}, observed {','.join(observed) or 'nothing'}{why}", **fields)
    shapes = receipt.executed_shapes
    if not all(shapes):
        return _skip("the receipt holds no executed_shapes list", **fields)
    requested = request.shape_var_names
    unique_shapes = list(dict.fromkeys(shapes))
    fields.update(route=",".join(observed), producer=PRODUCER, kernel_symbols=observed,
                  route_calls=receipt.route_calls, mechanism=receipt.mechanism,
                  required_shapes=list(required_shapes), executed_shapes=unique_shapes,
                  shape_capture={"requested": requested, "observed": len(shapes),
                                 "note": "" if shapes else "no route call bound every shape var"})
    if not shapes:
        why = "no --shape-vars were named" if not requested else \
            f"no route call bound all of {', '.join(requested)} (captured at call and at return)"
        return _skip(f"the route ran but no executed shape was captured: {why}", **fields)
    if ctx.selection.grid_channel == "pytest" and chosen.label == "head-grid":
        fields["shape_namespace"] = "pytest parametrize cells, compared with the route's shapes after the probe's " \
                                    "coercion"
    if check_required:
        observed_rows = {grid.canonical_row(shape) for shape in unique_shapes}
        missing = [shape for shape in required_shapes if grid.canonical_row(shape) not in observed_rows]
        if missing:
            return _skip(f"missing required shapes: {missing}", **fields)
    calls = sum(receipt.route_calls.values())
    return result(NAME, "pass", f"{','.join(observed)} ran {calls} times over {len(unique_shapes)} distinct shapes "
                                f"({chosen.label})", **fields)


def passes(report: Report) -> list[str]:
    """PASS needs a receipt of this validation's own probe naming the route, its kernels and shapes."""
    receipt = report.stage_of(ExecutionReceipt)
    if receipt.producer != PRODUCER or not receipt.route or not receipt.kernel_symbols \
            or not receipt.executed_shapes or not receipt.receipt_sha256:
        return ["execution_receipt lacks producer, route, kernel_symbols, executed_shapes or receipt_sha256"]
    return []


STAGE = StageSpec(NAME, run, payload=ExecutionReceipt, requires=(BaselineControl, CorrectnessGrid, RepoTests),
                  passes=passes)
