"""correctness_base_oracle: head's code judged by the test side as it was before the PR.

What judges the kernel must be base's: the test files and their helpers wherever they live, their
data, pytest's configuration, conftest.py files and plugins (the test side, kvtasks.stages.sides,
decided from what base's own run loaded). So when the PR changes any test-side file, head's code
runs once more with every changed test-side file kept at base (`Worktree.lend("head", keep_base=...)`,
inside the same lend that hands the tree back clean); the grid cells run the same way when the grid
ran on both sides. A PR that changes nothing else leaves base's own tree, and the baseline's outcomes
are the oracle's. A target the PR renamed is judged by base's file at base's path (run on base too,
so each of its tests has a base outcome); a target the PR adds runs under base's version of the rest.

Judged per test and per grid cell: one that passed on base and fails on head by an assertion or a
wrong value is a blocker naming it (the PR's own test side passed it: what it changed there hid the
failure). One that no longer imports, collects or calls head's code (an API the PR changed in kernel
and test together) is should-fix, with the reason: base's tests cannot judge head, and PASS needs them
to (report.pass_gate holds a PR that changed its test side to a passing base oracle).
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict

from kvtasks.stages.launches import Launch
from kvtasks.stages import (Context, Report, Stage, StageResult, StageSpec, baseline_control, cpu_tier, grid, repo_tests, result,
                            sides, test_policy)
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat, TestPolicy
from kvtasks.stages.policy.files import renamed_from
from kvtasks.stages.target_runs import gate
from kvtasks.harness.target_run import TargetRun
from kvtasks.worktree import PatchRefused

NAME = "correctness_base_oracle"


class BaseOracle(Stage):
    """Head's code under base's version of what the PR changed in its suite."""

    model_config = ConfigDict(extra="forbid")

    kept_at_base: list[str] | None = None
    judged_by: str | None = None  # the target file that ran: base's path for a target the PR renamed
    runs: dict[str, Any] | None = None  # label -> exit, log, stats, outcome
    regressed: list[str] | None = None  # tests and cells that passed on base and fail on head's code
    api_changed: list[str] | None = None  # tests that no longer import, collect or call head's code
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran
# what a test fails with when head's code computed a wrong value: an assertion or a comparison's
# mismatch; any other error (an import, a changed call, a missing key) says base's test no longer fits
_WRONG_VALUE = re.compile(r"\bAssertionError\b|^assert |Mismatched elements|Not equal to|are not close|"
                          r"Tensor-likes are not")


def held_at_base(ctx: Context) -> tuple[list[str], str | None, bool]:
    """(the changed test-side files kept at base, the rename source of the target, whether the PR adds it)."""
    target = ctx.request.target_path
    renamed = renamed_from(ctx, target)
    added = ctx.head_view.changes.get(target) == "A" and renamed is None
    return sides.decide(ctx).test_side_changed(target, added), renamed, added


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if ctx.head_view is None:
        return result(NAME, "skip", "no patch: there is no base version of the target to judge head with")
    kept, renamed, added = held_at_base(ctx)
    if not kept:
        return result(NAME, "skip", "the PR changes nothing on the test side (tests, their helpers, data, conftest.py, "
                                    "pytest's configuration): head already ran the tests base had")
    blocked = gate(ctx)
    if blocked:
        return result(NAME, "skip", blocked)
    baseline = ctx.result_of(baseline_control.BaselineControl)
    base_repo = baseline.stage.repo_tests if baseline and baseline.stage.status == "pass" else None
    if not renamed and not added and (not base_repo or base_repo.get("state") != "ran"):
        return result(NAME, "skip", "the target did not run on base, so base's tests have no outcome to hold head to")

    if not renamed and not added and set(ctx.head_view.changes) <= set(kept):
        # holding every change at base leaves base's tree itself, which the baseline ran: running it
        # again in head's turn would only repeat base's outcomes
        return result(NAME, "pass", "the PR changes only its test side: head's code under base's test side is "
                                    "base's tree, whose outcomes are the baseline's own", kept_at_base=kept,
                      judged_by=request.target_path)
    judged_by = renamed or request.target_path
    # base's file where the PR renamed the target (None: the request's own)
    oracle_target = renamed + request.target[len(request.target_path):] if renamed else None
    oracle_request = request if not renamed else request.model_copy(update={"target": oracle_target})
    runs: list[TargetRun] = []
    reference: list[TargetRun] = list(baseline.runs) if baseline else []
    # the grid judges base's file too whenever base has outcomes for it: base's grid ran on the target
    # (whatever head's grid did: an xfail the PR added skips head's cells, not base's), or base's
    # renamed file runs its cells on base here
    with_grid = not added and (renamed or grid.base_side(ctx).get("state") == "ran")
    try:
        if renamed:  # base's own outcome of the file the PR renamed: the baseline ran head's path
            with ctx.worktree.lend("base"):
                ctx.say(f"{NAME}: running base's {renamed} on base")
                reference = [ctx.launch(Launch(label="base-baseoracle", target=oracle_target))]
                base_grid = grid.oracle_run(ctx, "base-baseoracle-grid", oracle_request)
                reference += [base_grid] if base_grid is not None else []
        with ctx.worktree.lend("head", keep_base=kept):
            ctx.say(f"{NAME}: running head's code under base's {', '.join(kept)}")
            runs.append(ctx.launch(Launch(label="head-baseoracle", target=oracle_target)))
            grid_run = grid.oracle_run(ctx, "head-baseoracle-grid", oracle_request) if with_grid else None
            if grid_run is not None:
                runs.append(grid_run)
    except PatchRefused as refused:
        return result(NAME, "skip", f"{refused} (with base's {', '.join(kept)} kept)")
    stage = _judge(ctx, runs, reference, kept, judged_by, added)
    stage.runs = [*runs, *(reference if renamed else [])]
    return stage


# the base runs whose outcomes stand for each oracle run's tests, in order of preference: base's own
# run of a target the PR renamed (and its grid), else base's repository run and base's grid. Never a
# probe: its poisoned cell fails base's tests on purpose, and on an environment or command-line
# channel it shares their test ids, so reading it as base's outcome makes every test "fail on base"
COUNTERPARTS = {"head-baseoracle": ("base-baseoracle", "base-repo"),
                "head-baseoracle-grid": ("base-baseoracle-grid", "base-grid")}


def counterparts(label: str, reference: list[TargetRun]) -> list[TargetRun]:
    """The base runs that stand for the oracle run `label`'s tests (none: base has no outcome for them)."""
    for wanted in COUNTERPARTS.get(label, ()):
        found = [run for run in reference if run.label == wanted]
        if found:
            return found
    return []


def _base_outcomes(runs: list[TargetRun]) -> dict[str, str]:
    """Each test's outcome on base: passed only when no base run failed it."""
    outcomes: dict[str, str] = {}
    for run in runs:
        for case in run.cases:
            if outcomes.get(case.test_id) not in ("failed", "error"):
                outcomes[case.test_id] = case.outcome
    return outcomes


def _outcome_of(outcomes: dict[str, str], test_id: str) -> str | None:
    """A test's outcome under its id, or under the ids pytest made unique by a counter (`[3-100]` twice
    in base's merged session, a row and a grid cell of the same values: `[3-1000]`, `[3-1001]`)."""
    if test_id in outcomes or not test_id.endswith("]"):
        return outcomes.get(test_id)
    counted = re.compile(re.escape(test_id[:-1]) + r"_?\d+\]")
    found = [outcome for other, outcome in outcomes.items() if counted.fullmatch(other)]
    if not found:
        return None
    return "passed" if all(outcome == "passed" for outcome in found) else "failed"


def _judge(ctx: Context, runs: list[TargetRun], reference: list[TargetRun], kept: list[str], judged_by: str,
           added: bool) -> StageResult:
    fields: dict[str, Any] = {"kept_at_base": kept, "judged_by": judged_by,
                              "runs": {run.label: {"exit": run.exit, "log": run.log, "stats": run.stats.model_dump()}
                                       for run in runs}}
    for run in runs:
        sparse = cpu_tier.sparse_skip(NAME, run, fields)
        if sparse is not None:
            return sparse
    head_repo = ctx.result_of(repo_tests.RepoTests)
    head_own = _base_outcomes(head_repo.runs) if added and head_repo is not None else {}
    regressed, api_changed, unproven = [], [], []
    said: dict[str, str] = {}  # test id -> what it failed with
    for run in runs:
        base_runs = counterparts(run.label, reference)
        found = _failures(run, _base_outcomes(base_runs), head_own, base_runs, added, said)
        fields["runs"][run.label]["outcome"] = "fail" if found[0] or found[2] else "api-change" if found[1] else \
            "pass" if run.stats.executed else "executed-nothing"
        for failing, more in zip((regressed, api_changed, unproven), found):
            failing += more
    regressed, api_changed, unproven = (list(dict.fromkeys(found)) for found in (regressed, api_changed, unproven))
    fields.update(regressed=regressed, api_changed=api_changed)
    executed = sum(run.stats.executed for run in runs)
    if regressed or unproven:
        return _blame(ctx, regressed, unproven, said, fields)
    if api_changed:
        stage = result(NAME, "fail", "base's tests do not import, collect or run against head's code", **fields)
        weakened = _weakened(ctx, kept)
        if weakened:  # a changed call must not be the way a weakened test escapes being judged
            return stage.finding("oracle.cannot-judge-weakened", "blocker", f"base's tests cannot judge head's code ({_named(api_changed, said)}) and "
                                            f"the PR weakened the tests that judge it instead in "
                                            f"{', '.join(weakened)}: {_weakenings_in(ctx, weakened)}")
        return stage.finding("oracle.api-changed", "should-fix", f"base's tests no longer fit head's code (an API the PR changed in its "
                                           f"kernel and tests together, or an error other than a wrong value), so "
                                           f"they cannot judge it, and a PR that changes its test side needs them to: "
                                           f"{_named(api_changed, said)}")
    if not executed:
        return result(NAME, "skip", "head's code under base's test side executed no test", **fields)
    what = " and its grid cells" if len(runs) > 1 else ""
    return result(NAME, "pass", f"head's code passes base's test side for {judged_by}{what} wherever base passed",
                  **fields)


def _failures(run: TargetRun, on_base: dict[str, str], head_own: dict[str, str], reference: list[TargetRun],
              added: bool, said: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """One oracle run's (regressed, API-changed, unproven) tests; `said` learns what each failed with."""
    regressed, api_changed, unproven = [], [], []
    if not run.cases and not run.passed:  # a script, or a pytest run that collected nothing
        failure = f"{run.label} (exit {run.exit})"
        said[failure] = run.log_tail()
        if run.runner == "pytest" or not _WRONG_VALUE.search(run.log_tail(6, 1200)):
            api_changed.append(failure)
        elif added or (reference and all(base.passed for base in reference)):
            regressed.append(failure)
        return regressed, api_changed, unproven
    for case in run.cases:
        if case.outcome not in ("failed", "error"):
            continue
        said[case.test_id] = " ".join(case.message.split())[:200]
        base_outcome = _outcome_of(on_base, case.test_id)
        if base_outcome == "passed" or (added and _outcome_of(head_own, case.test_id) == "passed"):
            wrong = _WRONG_VALUE.search(case.message.strip())  # pytest's own: "assert got == want"
            (api_changed if not wrong else unproven if added else regressed).append(case.test_id)
        elif base_outcome is None and not added:  # base never had it: a module that no longer collects
            api_changed.append(case.test_id)
    return regressed, api_changed, unproven


def _named(failing: list[str], said: dict[str, str]) -> str:
    """The failing tests and cells by name (at most eight), then what the first one failed with."""
    more = f" and {len(failing) - 8} more" if len(failing) > 8 else ""
    return f"{', '.join(failing[:8])}{more} (first: {said.get(failing[0], '')})"


def _blame(ctx: Context, regressed: list[str], unproven: list[str], said: dict[str, str], fields: dict) -> StageResult:
    kept = fields["kept_at_base"]
    failing = regressed or unproven
    stage = result(NAME, "fail", f"head's code fails {len(failing)} tests or cells under base's test side", **fields)
    weakened = _weakened(ctx, kept)
    named = _named(failing, said)
    if regressed and weakened:
        return stage.finding("oracle.fails-weakened", "blocker", f"head fails the tests base had, and the PR weakened those tests in "
                                        f"{', '.join(weakened)}: {_weakenings_in(ctx, weakened)} — base's version "
                                        f"fails: {named}")
    if regressed:
        return stage.finding("oracle.regression", "blocker", f"head's code fails tests and cells that pass on base once the PR's test-side "
                                        f"changes ({', '.join(kept)}) are held at base: what the PR changed there hid "
                                        f"the failure: {named}")
    return stage.finding("oracle.new-target-own-answer", "should-fix", f"the new target's tests pass with the PR's test side and fail with base's "
                                       f"({', '.join(kept)}): the PR's other test-side changes decide its outcome: "
                                       f"{named}")


def _weakened(ctx: Context, kept: list[str]) -> list[str]:
    """The files held at base in which test_policy found the PR weakened or widened something."""
    policy = ctx.get(test_policy.TestPolicy)
    found = policy.weakened_files or [] if policy else []
    return [file for file in kept if file in found]


def _weakenings_in(ctx: Context, files: list[str]) -> str:
    policy = ctx.get(test_policy.TestPolicy)
    return "; ".join(item for file in files for item in _weakenings(policy, file))


def _weakenings(policy: Stage, path: str) -> list[str]:
    """What test_policy found in one file, as the blocker names it (at most five)."""
    prefix = f"{path}::"
    named = [f"{item['where'][len(prefix):]} widened {item['base']:g} -> {item['head']:g}"
             for item in policy.loosened or [] if item["where"].startswith(prefix)]
    # a weakening names its place as path::where, a construct read by line as path:line
    named += [text[len(path) + 1:].removeprefix(":") for text in [*(policy.not_literal or []), *(policy.weakened or [])]
              if text.startswith(f"{path}:")]
    named += [row[len(path) + 2:] + " commented out" for row in policy.newly_commented_rows or []
              if row.startswith(f"{path}: ")]
    return named[:5]


def passes(report: Report) -> list[str]:
    """When the PR changes the test side, PASS needs head's code shown to pass base's tests."""
    changed = report.stage_of(TestPolicy).oracle_required
    oracle = report.stage_of(BaseOracle)
    if changed and (oracle is None or oracle.status != "pass"):
        return [f"the PR changes the test side ({', '.join(changed[:5])}) and head's code was not shown to pass "
                f"base's ({oracle.note if oracle is not None else 'the base oracle did not run'})"]
    return []


STAGE = StageSpec(NAME, run, payload=BaseOracle, passes=passes,
                  requires=(BaselineControl, CorrectnessGrid, GpuClaim, RepoTests, RuntimeCompat, TestPolicy))
