"""The replay stage: what it replays on which side, and what each difference means."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from kvtasks.harness.in_target.capture import RETURNED
from kvtasks.harness.in_target.replay import ARRAY_LIKE_PREFIX
from kvtasks.harness.junit import junit_id
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import Context, Report, Stage, StageResult, StageSpec, cpu_tier, result, sides
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, GpuClaim, RepoTests
from kvtasks.stages.policy.criteria import parse_tol_table
from kvtasks.stages.replay.compare import DEFAULT_TABLE, NOISE_MULTIPLE, PLAIN, difference
from kvtasks.stages.replay.launches import BASE_RUNS, HEAD_RUNS, calls as _calls, captures as _captures, launch, \
    replayed as _replayed
from kvtasks.worktree import PatchRefused

NAME = "replay"
NOTHING_CAPTURED = "no route call could be captured"
LISTED = 5


class Replay(Stage):
    """The route called again outside any test, on what the runs captured, in each side's tree."""

    model_config = ConfigDict(extra="forbid")

    calls: dict[str, int] | None = None  # side -> captured calls replayed
    not_captured: dict[str, int] | None = None  # why sampled calls were not kept, and how often
    differs_under_test: list[str] | None = None  # head's calls whose replay differs from the run's
    changed_from_base: list[str] | None = None  # base's inputs on which head differs from base
    nondeterminism: float | None = None  # the largest difference between two replays of head, relative to the table
    required: bool | None = None  # False: nothing could be captured, so PASS does not wait on it


def _accounted(calls, runs: list[TargetRun], labels: tuple[str, ...]):
    """(the captured calls the runs account for, the tests named by the others): a capture is the
    PR's process's word, so a call kept in a test its run never ran (by JUnit), or past the number
    of calls its receipt says it kept, is set aside."""
    ran = {case.test_id for run in runs if run.label in labels for case in run.cases}
    kept = sum({run.captures: run.receipt.captured_calls for run in runs
                if run.label in labels and run.receipt and run.captures}.values())  # a session's parts share one
    accounted, strays = [], []
    for call in calls:
        test = call[2].record.get("test") or ""
        if (test and runs and junit_id(test) not in ran) or len(accounted) >= kept:
            strays.append(test or "no test")
        else:
            accounted.append(call)
    return accounted, strays


def _not_captured(runs: list[TargetRun]) -> dict[str, int]:
    found: dict[str, int] = {}
    for run in runs:
        for why, count in (run.receipt.not_captured if run.receipt else {}).items():
            found[why] = found.get(why, 0) + count
    return found


def _named(items: list[str]) -> str:
    return "; ".join(items[:LISTED]) + (f"; and {len(items) - LISTED} more" if len(items) > LISTED else "")


def _base_passed(ctx: Context, base_runs: list[TargetRun]) -> tuple[set[str], dict[str, float]]:
    """Base's tests that passed, and per test the loosest tolerance its judging calls received (issue 49)."""
    passed, loosest = set(), {}
    for run in base_runs:
        passed |= {case.test_id for case in run.cases if case.outcome == "passed"}
        for call in run.receipt.judgments if run.receipt else []:
            test = junit_id(call.test)
            loosest[test] = max(loosest.get(test, 0.0), call.atol or 0.0, call.rtol or 0.0)
    return passed, loosest


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if not request.routes:
        return result(NAME, "skip", "--expected-route was not supplied: there is no route to replay", required=False)
    if request.no_replay:
        return result(NAME, "skip", "--no-replay: the route was not replayed outside the test")
    if cpu_tier.active(ctx):
        return result(NAME, "skip", "the replay does not run under the Triton CPU tier yet", required=False)
    if ctx.head_view is not None and not sides.decide(ctx).route:
        # what the PR changes judges the route or is no code (the base oracle holds the test side at base)
        return result(NAME, "skip", "the PR changes no route-side file: head's route is base's", required=False)
    baseline, head, grid = ctx.result_of(BaselineControl), ctx.result_of(RepoTests), ctx.result_of(CorrectnessGrid)
    head_runs = [*(head.runs if head else []), *(grid.runs if grid else [])]
    base_runs = list(baseline.runs) if baseline else []
    head_folders, base_folders = _captures(head_runs, HEAD_RUNS), _captures(base_runs, BASE_RUNS)
    head_calls, head_strays = _accounted(_calls(head_folders), head_runs, HEAD_RUNS)
    base_calls, base_strays = _accounted(_calls(base_folders), base_runs, BASE_RUNS)
    not_captured = _not_captured([run for run in head_runs + base_runs if run.label in HEAD_RUNS + BASE_RUNS])
    not_captured_on_base = _not_captured([run for run in base_runs if run.label in BASE_RUNS])
    if head_strays or base_strays:  # the PR's process wrote them: calls its runs' tests do not account for
        not_captured[f"a test the run did not run ({', '.join((head_strays + base_strays)[:3])})"] = \
            len(head_strays) + len(base_strays)
    fields: dict[str, Any] = {"calls": {"head": len(head_calls), "base": len(base_calls)},
                              "not_captured": not_captured or None, "required": True}
    if not head_calls and not base_calls:
        why = f" ({_named([f'{reason} x{count}' for reason, count in not_captured.items()])})" if not_captured else ""
        return result(NAME, "skip", f"{NOTHING_CAPTURED}{why}: the replay is no requirement here",
                      **{**fields, "required": False})
    out, table = ctx.run_dir / "runs" / "replay", parse_tol_table(request.tol_table) or DEFAULT_TABLE
    try:
        with ctx.worktree.lend("head"):
            failed = launch(ctx, "head", head_folders + base_folders, out / "head")
            under_test, noise, failed = _under_test(ctx, head_calls, head_folders, out, table) if not failed \
                else ([], 0.0, failed)
        if failed:
            return result(NAME, "skip", failed, **fields)
        # base's route is base's code: what it produced in base's run stands for it until head differs
        # from it, and then base's calls are replayed in base's tree too, to judge head by that
        changed, notes = _against_base(ctx, base_calls, base_runs, len(head_folders), out / "head", None, table)
        if base_calls and (changed or notes or under_test):
            with ctx.worktree.lend("base"):
                failed = launch(ctx, "base", base_folders, out / "base")
            if failed:
                return result(NAME, "skip", failed, **fields)
            changed, notes = _against_base(ctx, base_calls, base_runs, len(head_folders), out / "head", out / "base",
                                           table)
    except PatchRefused as refused:
        return result(NAME, "skip", str(refused), **fields)
    on_base = {where for where, _ in _base_differs(base_calls, out / "base", table, noise)} \
        if under_test and base_calls else set()
    # a call that differs outside its test on base too is the test's setup at work there, not the PR
    excused = [f"{where}: {said}" for where, said in under_test if where in on_base]
    under_test = [f"{where}: {said}" for where, said in under_test if where not in on_base]
    fields.update(differs_under_test=under_test or None, changed_from_base=changed or None,
                  nondeterminism=noise or None)
    if excused and not under_test:
        stage = result(NAME, "skip", "the route gives other results outside the test than in it on base too, so the "
                                     "replay cannot judge head here", **{**fields, "required": False,
                                                                         "differs_under_test": excused})
        return stage.finding("replay.differs-on-both-sides", "note", "outside the test the route differs from what "
                                                                     "it gave in it, on base's calls of the same tests "
                                                                     f"as on head's: {_named(excused)}: the test's "
                                                                     "setup changes it, so the replay is no evidence "
                                                                     "here")
    own_types = _own_types(head_calls, base_calls) + sorted(
        why.removeprefix(RETURNED + ARRAY_LIKE_PREFIX) for why in _not_captured([run for run in head_runs
                                                                                 if run.label in HEAD_RUNS])
        if why.startswith(RETURNED + ARRAY_LIKE_PREFIX) and why not in not_captured_on_base)
    agreed = not (under_test or own_types or changed or (base_calls and not head_calls))
    stage = result(NAME, "pass" if agreed else "fail",
                   f"{len(head_calls)} of head's calls replayed outside the test as they ran in it; {len(base_calls)} "
                   "of base's calls give head's route base's results" if agreed else
                   "the route replayed outside the test does not give what the runs showed", **fields)
    if under_test:
        stage.finding("replay.differs-under-test", "blocker", "the route gives other results outside the test than "
                                                              f"in it, on the same inputs: {_named(under_test)}")
    if own_types:
        stage.finding("replay.output-type", "blocker", "the route returns an array type of its own, which base's "
                                                       f"did not: {_named(own_types)}")
    if base_calls and not head_calls:
        stage.finding("replay.capture-lost-on-head", "should-fix", "base's calls of the route could be captured and "
                                                                   "head's cannot")
    if changed:
        stage.finding("replay.changed-where-base-passed", "should-fix", "on inputs of base's passing tests, which "
                                                                        f"the PR leaves alone, head's route differs "
                                                                        f"from base's: {_named(changed)}")
    if notes:
        stage.finding("replay.changed", "note", f"head's route differs from base's on base's inputs (a fix, a new "
                                                f"test's inputs, an intended change): {_named(notes)}")
    if noise:
        stage.finding("replay.nondeterministic", "note", f"two replays of head differ by up to {noise:.3g}x the "
                                                         "tolerance table: the comparison was widened by that, at "
                                                         f"most {NOISE_MULTIPLE:g}x")
    return stage


def _under_test(ctx: Context, calls, folders: list[Path], out: Path, table
                ) -> tuple[list[tuple[str, str]], float, str]:
    """Head's calls whose replay differs from what they produced in the run (the call, how); the nondeterminism
    measured by a second replay (in the head tree the caller holds lent) when any does; why the
    second replay could not run."""
    def differing(widen: float) -> list[tuple[str, str]]:
        found = []
        for index, name, produced in calls:
            said, _ = difference(produced, _replayed(out / "head", index, name), table, widen)
            if said:
                found.append((f"{produced.record['route']} in {produced.record.get('test') or 'no test'}", said))
        return found

    found = differing(0.0)
    if not found:
        return [], 0.0, ""
    failed = launch(ctx, "head", folders, out / "head-again")
    if failed:
        return [], 0.0, failed
    noise = max((difference(_replayed(out / "head", index, name), _replayed(out / "head-again", index, name),
                            table)[1] for index, name, _ in calls), default=0.0)
    if noise == float("inf"):
        noise = 0.0  # two replays that differ in kind or shape: nothing a tolerance stands for
    return list(dict.fromkeys(differing(min(noise, NOISE_MULTIPLE)))), noise, ""


def _base_differs(calls, base_out: Path, table, noise: float) -> list[tuple[str, str]]:
    """Base's calls whose replay in base's tree differs from what base's run produced (the call, how)."""
    return [(f"{produced.record['route']} in {produced.record.get('test') or 'no test'}", said)
            for index, name, produced in calls
            if (said := difference(produced, _replayed(base_out, index, name), table, min(noise, NOISE_MULTIPLE))[0])]


def _against_base(ctx: Context, calls, base_runs: list[TargetRun], offset: int, head_out: Path, base_out: Path | None,
                  table) -> tuple[list[str], list[str]]:
    """On base's inputs: (should-fix differences, note differences) of head's route, replayed under
    `head_out`, against base's: replayed under `base_out`, or (None) as base's run produced them."""
    passed, loosest = _base_passed(ctx, base_runs)
    changed_files = set(ctx.head_view.changes) if ctx.head_view is not None else set()
    should_fix, notes = [], []
    for index, name, produced in calls:
        head = _replayed(head_out, offset + index, name)
        base = _replayed(base_out, index, name) if base_out is not None else produced
        test = produced.record.get("test") or ""
        item = junit_id(test) if test else ""
        said, _ = difference(head, base, {**table, **{key: max(value, loosest.get(item, 0.0))
                                                      for key, value in table.items()}})
        if not said:
            continue
        where = f"{produced.record['route']} in {test or 'no test'}: {said}"
        unchanged = test and test.split("::", 1)[0] not in changed_files
        (should_fix if item in passed and unchanged else notes).append(where)
    return list(dict.fromkeys(should_fix)), list(dict.fromkeys(notes))  # a test's call kept by two runs is one


def _own_types(head_calls, base_calls) -> list[str]:
    base_types = {kind for _, _, produced in base_calls for kind in produced.types()}
    return sorted({kind for _, _, produced in head_calls for kind in produced.types()
                   if kind not in PLAIN and kind not in base_types})


def passes(report: Report) -> list[str]:
    """PASS needs the replay run and agreed, wherever a call could be captured."""
    replay = report.stage_of(Replay)
    if replay is None or (replay.status == "skip" and replay.required is False) or replay.status == "pass":
        return []
    return [f"replay: the route was not shown to give outside the test what it gave in it ({replay.note})"]


STAGE = StageSpec(NAME, run, payload=Replay, passes=passes, requires=(BaselineControl, GpuClaim, RepoTests),
                  reads_if_present=(CorrectnessGrid,))
