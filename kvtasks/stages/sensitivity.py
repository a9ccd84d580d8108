"""sensitivity: could the suite have gone red? One more head run with the route's output corrupted.

A green suite is evidence only if it could fail. After the head grid passed (or the repo tests,
when no grid ran), that run is launched once more while the probe corrupts what the route
produced: by default the last element of each floating output becomes 2*x + 1, --sensitivity-error
E applies a relative error E there instead, --sensitivity-mode nan makes the whole output NaN
(both: two runs), and --sensitivity-output NAME corrupts that argument after the call for routes
that write their output instead of returning it. A returned value that is an input, or shares its
memory, is never corrupted. The corrupted run is the ordinary run again as far as the process can
tell (its label, cells, files and scratch; a merged session is the whole session again, judged by
its grid or repository items), so the ordinary run is its control.

pass: every corrupted run failed (a test that saw a corrupted call failed, or the script exited
non-zero) and its receipt shows the corruption applied. fail: a corrupted run stayed green.
skip, with the reason and the flag that would help: no route, the route never reached, nothing
floating it produced to corrupt, or no green run to corrupt. These runs never count as evidence of
the kernel.

Blame: only when the PR changes the target or its test helpers does the suite also run corrupted
on base (base evidence: stored under its base sensitivity key and reused by every PR against that
base); sensitive on base and not on head is should-fix (a blocker when the PR changes no kernel
code), and a target the PR adds that cannot fail is should-fix. Otherwise a fail is a note about
the repository, not the PR.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from kvtasks import harness
from kvtasks.harness import session
from kvtasks.stages import Context, Report, Stage, StageResult, StageSpec, baseline_control, cpu_tier, grid, repo_tests, result
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat
from kvtasks.stages.sides import KERNEL_SUFFIXES, is_test_path
from kvtasks.harness.launch import TargetRun
from kvtasks.worktree import PatchRefused

NAME = "sensitivity"
# base's corrupted runs: the store's kind for them (under their base sensitivity keys) and their names
BASE_EVIDENCE = "base-sensitivity"


class Sensitivity(Stage):
    """Whether the suite fails when the route's output is corrupted."""

    model_config = ConfigDict(extra="forbid")

    route: str | None = None
    corrupted_run: str | None = None  # which run was repeated corrupted (head-repo or head-grid)
    modes_run: list[str] | None = None
    modes: dict[str, dict[str, Any]] | None = None  # mode -> status, reason and what the run saw
    test_changes: list[str] | None = None  # the suite files the PR changed, when it stays green
    base: dict[str, Any] | None = None  # the same corrupted run on base
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran
_HOW = {"tail": "its last element made 2*x + 1", "nan": "every element made NaN"}


def _describe(ctx: Context, mode: str) -> str:
    request = ctx.request
    where = f"argument {request.sensitivity_output}" if request.sensitivity_output else "output"
    how = f"a relative error of {request.sensitivity_error:g} at its last element" \
        if mode == "tail" and request.sensitivity_error is not None else _HOW[mode]
    return f"{where}: {how}"


def _settings(ctx: Context, mode: str) -> dict:
    request = ctx.request
    return {"mode": mode, "error": request.sensitivity_error if mode == "tail" else None,
            "output": request.sensitivity_output}


def _green_run(ctx: Context) -> tuple[str, TargetRun | None, str]:
    """What to corrupt: the head grid run when it passed with executed tests, else the head repo
    run; (kind, run, why not) with kind 'grid' or 'repo'."""
    grid_result = ctx.result_of(grid.CorrectnessGrid)
    grid_run = next((run for run in (grid_result.runs if grid_result else []) if run.label == "head-grid"), None)
    if grid_run is not None and not grid_run.passed:
        return "", None, "the head grid did not pass, so a corrupted run of it proves nothing"
    if grid_run is not None and grid_run.stats.executed > 0:
        return "grid", grid_run, ""
    repo = ctx.result_of(repo_tests.RepoTests)
    repo_run = next((run for run in (repo.runs if repo else []) if run.label == "head-repo"), None)
    if repo_run is None:
        return "", None, f"the head repo tests did not run ({repo.stage.note if repo else 'no result'})"
    if not repo_run.passed or repo_run.stats.executed == 0:
        return "", None, "the head repo tests did not pass with executed tests, so a corrupted run proves nothing"
    return "repo", repo_run, ""


def _launch(ctx: Context, kind: str, ordinary: TargetRun, label: str, mode: str, axis_argv: list[str]
            ) -> tuple[TargetRun, list[TargetRun], str]:
    """`ordinary` once more with the route's output corrupted, launched as it was and seen by the
    process as it was (its label, channel, cells, files): (the run to judge, the launches, why a
    corrupted session stands for nothing). A part of a merged session is its whole session again,
    judged by that part."""
    ctx.say(f"{NAME}: running {label} ({_describe(ctx, mode)})")
    settings, scratch = _settings(ctx, mode), Path(ordinary.scratch) if ordinary.scratch else None
    if ordinary.session:
        launched = grid.rerun_session(ctx, f"{label}-session", settings, seen_as=ordinary.session, scratch=scratch)
        why = session.unusable(launched)
        if why:
            return launched, [launched], f"the corrupted session stands for nothing ({why})"
        part = session.part(launched, kind, label)
        return part, [launched, part], ""
    if kind == "grid":
        run = grid.rerun(ctx, label, axis_argv, settings, seen_as=ordinary.label, scratch=scratch)
    else:
        run = harness.run(ctx.request, runner=ctx.selection.runner, run_dir=ctx.run_dir, label=label,
                          **cpu_tier.launch_options(ctx), sensitivity=settings, seen_as=ordinary.label,
                          scratch=scratch)
    return run, [run], ""


def judge_run(ctx: Context, mode: str, run: TargetRun, unusable: str = "") -> tuple[str, str, dict]:
    """(pass | fail | skip, reason, fields) for one corrupted run."""
    receipt = run.receipt or {}
    seen = receipt.get("sensitivity") or {}
    fields = {"label": run.label, "exit": run.exit, "timed_out": run.timed_out, "log": run.log,
              "stats": run.stats.model_dump(), "receipt_sha256": run.receipt_sha256, "corruption": _describe(ctx, mode),
              **({"session": run.session} if run.session else {}),
              **{key: seen.get(key) for key in ("corrupted_calls", "max_relative_error", "nan_elements",
                                                "not_corrupted", "outputs_corrupted", "outputs_left_alone",
                                                "tests_failed", "tests_failed_count", "tests_green",
                                                "tests_green_count")}}
    tier = cpu_tier.run_evidence(run)
    if tier:
        fields["cpu_tier"] = tier
    output = ctx.request.sensitivity_output
    if unusable:
        return "skip", f"{unusable}: no conclusion either way", fields
    if run.timed_out:
        return "skip", f"the corrupted run timed out after {ctx.request.host.timeout}s: no conclusion either way", fields
    if not seen:
        return "skip", f"the corrupted run left no usable receipt ({run.receipt_note or 'no sensitivity record'})", \
            fields
    if not sum((receipt.get("route_calls") or {}).values()):
        unresolved = receipt.get("unresolved_routes") or []
        why = f" (unresolvable: {', '.join(unresolved)})" if unresolved else ""
        return "skip", f"the route was never reached in the corrupted run{why}; check --expected-route", fields
    if not seen.get("corrupted_calls"):
        reasons = ", ".join(f"{reason} x{count}" for reason, count in (seen.get("not_corrupted") or {}).items())
        if output:
            return "skip", f"--sensitivity-output {output} could not be corrupted ({reasons})", fields
        if any(reason.startswith(("returned nothing", "returned an input"))
               for reason in seen.get("not_corrupted") or {}):
            return "skip", (f"the route returns nothing it produced ({reasons}); name the argument it writes its "
                            "output into with --sensitivity-output NAME"), fields
        return "skip", f"the route's output is not floating ({reasons}): there is nothing to corrupt", fields
    if mode == "tail" and not seen.get("max_relative_error"):
        return "skip", ("the injected error rounds away in the output's dtype (max relative error injected 0); "
                        "raise --sensitivity-error"), fields
    calls = seen["corrupted_calls"]
    if run.runner == "script":
        if run.exit == 0:
            return "fail", f"the script exited 0 after {calls} corrupted calls", fields
        return "pass", f"the script exited {run.exit} after {calls} corrupted calls", fields
    failed, green = seen.get("tests_failed_count") or 0, seen.get("tests_green_count") or 0
    if failed or (run.exit not in (0, None) and seen.get("corrupted_outside_tests")):  # a red collection counts
        return "pass", f"{failed} tests that saw a corrupted call failed ({calls} corrupted calls)", fields
    outside = seen.get("corrupted_outside_tests") or 0
    if run.exit == 0 and (green or outside):
        where = f", {outside} of them outside any test (at collection)" if outside else ""
        return "fail", f"{green} tests passed with {calls} corrupted calls{where}", fields
    if run.exit == 0:
        return "skip", "every test that saw a corrupted call was skipped", fields
    return "skip", (f"the corrupted run exited {run.exit}, but no test that saw a corrupted call failed: the "
                    "failure is not the corruption's"), fields


def _combine(outcomes: dict[str, tuple[str, str, dict]]) -> tuple[str, str]:
    for status in ("fail", "skip"):
        hit = [f"{mode}: {reason}" for mode, (state, reason, _) in outcomes.items() if state == status]
        if hit:
            return status, "; ".join(hit)
    return "pass", "; ".join(f"{mode}: {reason}" for mode, (_, reason, _) in outcomes.items())


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if not request.routes:
        return result(NAME, "skip", "--expected-route was not supplied: there is no route whose output to corrupt")
    kind, green, why_not = _green_run(ctx)
    if green is None:
        return result(NAME, "skip", why_not)
    grid_stage = ctx.result_of(grid.CorrectnessGrid)
    axis_argv = (grid_stage.stage.axis_argv or []) if kind == "grid" and grid_stage else []
    runs, outcomes = [], {}
    try:
        with ctx.worktree.lend("head"):
            for mode in request.sensitivity_modes:
                judged, launched, unusable = _launch(ctx, kind, green, f"head-sensitivity-{mode}", mode, axis_argv)
                runs += launched
                outcomes[mode] = judge_run(ctx, mode, judged, unusable)
    except PatchRefused as refused:
        return result(NAME, "skip", str(refused))
    status, reason = _combine(outcomes)
    route = request.expected_route
    fields = {"route": route, "corrupted_run": f"head-{kind}", "modes_run": list(outcomes),
              "modes": {mode: {"status": state, "reason": why, **detail} for mode, (state, why, detail)
                        in outcomes.items()}}
    if status == "pass":
        stage = result(NAME, "pass", f"the suite fails when {route}'s output is corrupted ({reason})", **fields)
    elif status == "skip":
        stage = result(NAME, "skip", reason, **fields)
    else:
        failed = [mode for mode, (state, _, _) in outcomes.items() if state == "fail"]
        detail = (f"the tests pass with {route}'s output corrupted: they cannot detect a wrong kernel here "
                  f"({'; '.join(_describe(ctx, mode) for mode in failed)})")
        stage = result(NAME, "fail", f"the tests pass with {route}'s output corrupted: they cannot detect a wrong "
                                     f"kernel here ({reason})", **fields)
        stage.runs = runs
        return _blame(ctx, stage, failed, detail)
    stage.runs = runs
    return stage


# -- blame -------------------------------------------------------------------------------------------

def _base_outcome(ctx: Context, modes: list[str]) -> tuple[str, str, dict, list[TargetRun], list[StageResult]]:
    """The suite's sensitivity on base, for the modes head failed: (status, reason, fields, runs,
    the new base evidence). A mode another PR against this base already ran corrupted on base is
    that stored evidence, reused and said so."""
    baseline = ctx.result_of(baseline_control.BaselineControl)
    base_grid = (baseline.stage.s1_grid if baseline else None) or {}
    base_repo = (baseline.stage.repo_tests if baseline else None) or {}
    if base_grid.get("state") == "ran" and base_grid.get("exit") == 0:
        kind = "grid"
    elif base_repo.get("state") == "ran" and base_repo.get("exit") == 0:
        kind = "repo"
    else:
        return "skip", "base's own run of the target did not pass", {}, [], []
    ordinary = next((run for run in baseline.runs if run.label == f"base-{kind}"), None)
    if ordinary is None:
        return "skip", f"base's {kind} run is not among the baseline's runs", {}, [], []
    runs, outcomes, made, reused = [], {}, [], {}
    for mode in modes:
        stored = ctx.base_evidence.get(base_evidence_name(mode))
        if stored is not None and stored.stage is not None:
            outcomes[mode] = (stored.stage.status, stored.stage.note, dict(stored.stage.model_extra or {}))
            if stored.stage.reused_from is not None:
                reused[mode] = stored.stage.reused_from.model_dump()
    pending = [mode for mode in modes if mode not in outcomes]
    if pending:
        with ctx.worktree.lend("base"):
            for mode in pending:
                judged, launched, unusable = _launch(ctx, kind, ordinary, f"base-sensitivity-{mode}", mode, [])
                runs += launched
                outcomes[mode] = judge_run(ctx, mode, judged, unusable)
                state, why, detail = outcomes[mode]
                if state in ("pass", "fail"):  # a conclusion about base; a skip (a timeout) is no evidence
                    kept = StageResult(name=base_evidence_name(mode), stage=Stage(status=state, note=why, **detail))
                    kept.runs = launched
                    made.append(kept)
    status, reason = _combine(outcomes)
    fields = {"corrupted_run": f"base-{kind}", "status": status, "reason": reason,
              "modes": {mode: {"status": state, "reason": why, **detail,
                               **({"reused_from": reused[mode]} if mode in reused else {})}
                        for mode, (state, why, detail) in outcomes.items()}}
    return status, reason, fields, runs, made


def base_evidence_name(mode: str) -> str:
    """What base's corrupted run in `mode` is stored and read back as (under its base sensitivity key)."""
    return f"{BASE_EVIDENCE}:{mode}"


def _blame(ctx: Context, stage: StageResult, modes: list[str], detail: str) -> StageResult:
    request = ctx.request
    if ctx.head_view is None:
        return stage.finding("sensitivity.insensitive-no-patch", "note", f"{detail}; there is no patch, so this is about the supplied checkout")
    suite_files = ctx.suite_sources()
    kernel_files = ctx.route_files()
    changes = ctx.head_view.changes
    changed = [path for path in suite_files if path in changes and path not in kernel_files]
    if not changed:
        return stage.finding("sensitivity.insensitive-untouched", "note", f"{detail}; the PR changes neither the target nor its test helpers, so this "
                                     "is about the repository, not the PR")
    stage.stage.test_changes = changed
    if not ctx.worktree.exists_on_base(request.target_path):
        return stage.finding("sensitivity.insensitive-new-target", "should-fix", f"the PR adds this target and {detail}")
    status, reason, fields, runs, made = _base_outcome(ctx, modes)
    stage.stage.base = fields or {"status": status, "reason": reason}
    stage.runs += runs
    stage.base_evidence = made
    if status == "pass":
        # test_policy's rule (a code file outside the tests), and the route's own module whatever its name
        kernel_changed = any(path in kernel_files or (path.endswith(KERNEL_SUFFIXES) and not is_test_path(path))
                             for path in changes)
        severity = "should-fix" if kernel_changed else "blocker"
        scope = "" if kernel_changed else " in a PR that changes no kernel code"
        return stage.finding("sensitivity.lost-on-head", severity, f"the suite detects a corrupted {request.expected_route} on base and not on "
                                       f"head{scope}: the PR's changes to {', '.join(changed)} made it insensitive; "
                                       f"{detail}")
    if status == "fail":
        return stage.finding("sensitivity.insensitive-on-base-too", "note", f"{detail}; base's suite cannot detect it either ({reason}), so this is not "
                                     "attributed to the PR")
    return stage.finding("sensitivity.base-unknown", "note", f"{detail}; base's sensitivity could not be established ({reason}), so this is "
                                 "not attributed to the PR")


def passes(report: Report) -> list[str]:
    """PASS needs the suite shown to fail, in every mode, with the route's output corrupted."""
    sensitivity = report.stage_of(Sensitivity)
    modes = sensitivity.modes or {}
    if sensitivity.status != "pass" or not modes or not all(
            mode.get("status") == "pass" and mode.get("corrupted_calls") for mode in modes.values()):
        return ["sensitivity: the suite was not shown to fail with the route's output corrupted"]
    return []


STAGE = StageSpec(NAME, run, payload=Sensitivity, passes=passes,
                  requires=(BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat))
