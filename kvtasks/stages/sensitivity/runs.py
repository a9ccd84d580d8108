"""One corrupted run of the sensitivity stage: launched as the ordinary run it repeats, and judged."""
from __future__ import annotations

from pathlib import Path

from kvtasks.harness import session
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages.launches import Launch
from kvtasks.stages import Context, cpu_tier, grid, repo_tests

NAME = "sensitivity"


HOW = {"tail": "its last element made 2*x + 1", "nan": "every element made NaN"}


def describe(ctx: Context, mode: str) -> str:
    request = ctx.request
    where = f"argument {request.sensitivity_output}" if request.sensitivity_output else "output"
    how = f"a relative error of {request.sensitivity_error:g} at its last element" \
        if mode == "tail" and request.sensitivity_error is not None else HOW[mode]
    return f"{where}: {how}"


def corruption_settings(ctx: Context, mode: str) -> dict:
    request = ctx.request
    return {"mode": mode, "error": request.sensitivity_error if mode == "tail" else None,
            "output": request.sensitivity_output}


def green_run(ctx: Context) -> tuple[str, TargetRun | None, str]:
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


def launch(ctx: Context, kind: str, ordinary: TargetRun, label: str, mode: str, axis_argv: list[str]
            ) -> tuple[TargetRun, list[TargetRun], str]:
    """`ordinary` once more with the route's output corrupted, launched as it was and seen by the
    process as it was (its label, channel, cells, files): (the run to judge, the launches, why a
    corrupted session stands for nothing). A part of a merged session is its whole session again,
    judged by that part."""
    ctx.say(f"{NAME}: running {label} ({describe(ctx, mode)})")
    settings, scratch = corruption_settings(ctx, mode), Path(ordinary.scratch) if ordinary.scratch else None
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
        run = ctx.launch(Launch(label=label, corruption=settings, seen_as=ordinary.label, scratch=scratch))
    return run, [run], ""


def judge_run(ctx: Context, mode: str, run: TargetRun, unusable: str = "") -> tuple[str, str, dict]:
    """(pass | fail | skip, reason, fields) for one corrupted run."""
    seen = run.receipt.sensitivity if run.receipt else None
    fields = {"label": run.label, "exit": run.exit, "timed_out": run.timed_out, "log": run.log,
              "stats": run.stats.model_dump(), "receipt_sha256": run.receipt_sha256, "corruption": describe(ctx, mode),
              **({"session": run.session} if run.session else {}),
              **{key: getattr(seen, key) if seen else None for key in ("corrupted_calls", "max_relative_error", "nan_elements",
                                                "not_corrupted", "outputs_corrupted", "outputs_left_alone",
                                                "tests_failed", "tests_failed_count", "tests_green",
                                                "tests_green_count", "tests_failed_elsewhere",
                                                "tests_failed_elsewhere_count")}}
    tier = cpu_tier.run_evidence(run)
    if tier:
        fields["cpu_tier"] = tier
    output = ctx.request.sensitivity_output
    if unusable:
        return "skip", f"{unusable}: no conclusion either way", fields
    if run.timed_out:
        return "skip", f"the corrupted run timed out after {ctx.request.host.timeout}s: no conclusion either way", fields
    if seen is None:
        return "skip", f"the corrupted run left no usable receipt ({run.receipt_note or 'no sensitivity record'})", \
            fields
    if not sum(run.receipt.route_calls.values()):
        unresolved = run.receipt.unresolved_routes
        why = f" (unresolvable: {', '.join(unresolved)})" if unresolved else ""
        return "skip", f"the route was never reached in the corrupted run{why}; check --expected-route", fields
    if not seen.corrupted_calls:
        reasons = ", ".join(f"{reason} x{count}" for reason, count in seen.not_corrupted.items())
        if output:
            return "skip", f"--sensitivity-output {output} could not be corrupted ({reasons})", fields
        if any(reason.startswith(("returned nothing", "returned an input"))
               for reason in seen.not_corrupted):
            return "skip", (f"the route returns nothing it produced ({reasons}); name the argument it writes its "
                            "output into with --sensitivity-output NAME"), fields
        return "skip", f"the route's output is not floating ({reasons}): there is nothing to corrupt", fields
    if mode == "tail" and not seen.max_relative_error:
        return "skip", ("the injected error rounds away in the output's dtype (max relative error injected 0); "
                        "raise --sensitivity-error"), fields
    calls = seen.corrupted_calls
    if run.runner == "script":
        if run.exit == 0:
            return "fail", f"the script exited 0 after {calls} corrupted calls", fields
        return "pass", f"the script exited {run.exit} after {calls} corrupted calls", fields
    failed, green, elsewhere = seen.tests_failed_count, seen.tests_green_count, seen.tests_failed_elsewhere_count
    if failed or (run.exit not in (0, None) and seen.corrupted_outside_tests and not elsewhere):  # a red collection
        return "pass", f"{failed} tests that saw a corrupted call failed on a comparison of what it produced " \
                       f"({calls} corrupted calls)", fields
    if elsewhere:
        return "fail", (f"{elsewhere} tests that saw a corrupted call failed, none on a comparison of what it "
                        f"produced ({', '.join(seen.tests_failed_elsewhere)}); {green} passed"), fields
    outside = seen.corrupted_outside_tests
    if run.exit == 0 and (green or outside):
        where = f", {outside} of them outside any test (at collection)" if outside else ""
        return "fail", f"{green} tests passed with {calls} corrupted calls{where}", fields
    if run.exit == 0:
        return "skip", "every test that saw a corrupted call was skipped", fields
    return "skip", (f"the corrupted run exited {run.exit}, but no test that saw a corrupted call failed: the "
                    "failure is not the corruption's"), fields


def combine(outcomes: dict[str, tuple[str, str, dict]]) -> tuple[str, str]:
    for status in ("fail", "skip"):
        hit = [f"{mode}: {reason}" for mode, (state, reason, _) in outcomes.items() if state == status]
        if hit:
            return status, "; ".join(hit)
    return "pass", "; ".join(f"{mode}: {reason}" for mode, (_, reason, _) in outcomes.items())
