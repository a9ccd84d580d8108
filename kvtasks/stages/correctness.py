"""The repository's own target on base and on head, and who is to blame when it is red.

baseline_control runs the target on the clean base tree (the patch is simply not applied: the
same tree `git apply -R` would give, and a base-side result that no patch can alter). The tree
must still be clean afterwards. correctness_repo_tests applies the patch and runs the target on
head. Both borrow the tree through `Worktree.lend`, which returns it clean on every path.
"""
from __future__ import annotations

from kvtasks import harness
from kvtasks.stages import Context, StageResult, cpu_tier, gpu_claim, grid, nonfinite, result, runtime_compat
from kvtasks.harness.launch import PYTEST_NOTHING_COLLECTED, TargetRun
from kvtasks.worktree import PatchRefused

BASELINE = "baseline_control"
REPO_TESTS = "correctness_repo_tests"


def gate(ctx: Context) -> str | None:
    """Why correctness cannot run at all, or None when it can (the first reason that applies)."""
    claim = ctx.earlier.get(gpu_claim.NAME)
    claimed = claim is not None and claim.stage.status == "pass"
    if not claimed and ctx.selected("gpu_requirement") != "not-required" and not cpu_tier.active(ctx):
        return "no verified-idle GPU was claimed and the target was not shown to run without one"
    if not runtime_compat.established(ctx):
        return "runtime compatibility was not established"
    runner = ctx.selected("runner", "none")
    if runner == "none":
        return f"no runner: {ctx.selected('runner_reason', 'runner selection did not run')}"
    if runner == "pytest":
        return harness.pytest_available(ctx.request, ctx.run_dir)
    return None


def _state(run: TargetRun) -> str:
    if run.usage_error:
        return "usage-error"
    return "all-skipped" if run.exit == 0 and run.stats.executed == 0 else "ran"


def _run_fields(run: TargetRun) -> dict:
    fields = {"exit": run.exit, "log": run.log, "log_bytes": run.log_bytes, "stats": run.stats.model_dump(),
              "timed_out": run.timed_out}
    if run.addopts_dropped:
        fields["pytest_addopts_dropped"] = run.addopts_dropped
    if nonfinite.outputs(run):
        fields["route_outputs"] = nonfinite.outputs(run)
    tier = cpu_tier.run_evidence(run)
    return fields if tier is None else {**fields, "cpu_tier": tier}


def addopts_note(run: TargetRun) -> str:
    dropped = run.addopts_dropped
    return (f"pytest refused the repository's configuration ({dropped['error']}), so the target ran once more with "
            f"-o addopts=, which drops all of {dropped['file'] or 'its config file'}'s addopts: "
            f"{dropped['dropped'] or '(none found)'}")


def _base_said(repo_tests: dict, s1_grid: dict) -> str:
    """What the base control saw, in words: its states, a red exit, and what the sanitizer raised."""
    said = f"repo tests: {repo_tests['state']}"
    if repo_tests.get("exit") not in (None, 0):
        said += f", exit {repo_tests['exit']}"
    said += f"; grid: {s1_grid['state']}"
    if s1_grid.get("exit") not in (None, 0):
        said += f", exit {s1_grid['exit']}"
    violations = [v for part in (repo_tests, s1_grid) for v in ((part.get("cpu_tier") or {}).get("violations") or [])]
    if violations:
        said += f"; the bounds sanitizer raised on base: {cpu_tier.describe(violations[0])}"
    return said


def baseline_control(ctx: Context) -> StageResult:
    request, worktree = ctx.request, ctx.worktree
    if not request.has_patch:
        return result(BASELINE, "skip", "no patch: failures cannot be attributed against a base control")
    blocked = gate(ctx)
    if blocked:
        return result(BASELINE, "skip", blocked)

    runs: list[TargetRun] = []
    with worktree.lend("base"):
        before = worktree.status()
        if before:
            return result(BASELINE, "skip", f"base tree is not clean ({len(before)} entries); nothing was run")
        if worktree.exists_on_base(request.target_path):
            ctx.say("baseline_control: running base-repo")
            runs.append(harness.run(request, runner=ctx.selected("runner"), run_dir=ctx.run_dir, label="base-repo",
                                   **cpu_tier.launch_options(ctx)))
            repo_tests = {"state": _state(runs[0]), **_run_fields(runs[0])}
        else:
            repo_tests = {"state": "target-not-present", "stats": None}
        s1_grid, grid_runs = grid.base_runs(ctx, runs[0] if runs else None)
        runs += grid_runs
        artifacts = [entry.path for entry in worktree.status()]

    if artifacts:
        stage = result(BASELINE, "skip", f"base run left {len(artifacts)} artifacts in the worktree "
                                         f"({', '.join(artifacts[:5])}); they were removed and head tests were not run",
                       repo_tests=repo_tests, s1_grid=s1_grid, artifacts=artifacts)
        stage.finding("note", "the base run did not leave a clean worktree, so head failures cannot be attributed")
    else:
        stage = result(BASELINE, "pass", f"base control ran and left the tree clean ({_base_said(repo_tests, s1_grid)})",
                       repo_tests=repo_tests, s1_grid=s1_grid)
    stage.runs = runs
    not_reusable = reusable(stage)
    if not_reusable:
        stage.stage.reuse = f"not a baseline for later PRs: {not_reusable}; the next PR with this key re-runs base"
    return stage


def reusable(baseline: StageResult) -> str | None:
    """Why a base control must never stand for its key again (None when it may): a run that timed
    out or was killed by a signal says how long the host let it run, not what base does."""
    for run in baseline.runs:
        if run.timed_out:
            return f"{run.label} timed out"
        if run.exit is None or run.exit < 0:
            return f"{run.label} was killed (exit {run.exit})"
    return None


def repo_tests(ctx: Context) -> StageResult:
    request, worktree = ctx.request, ctx.worktree
    blocked = gate(ctx)
    if blocked:
        return result(REPO_TESTS, "skip", blocked)
    baseline = ctx.earlier.get(BASELINE)
    if request.has_patch and (baseline is None or baseline.stage.status != "pass"):
        reason = baseline.stage.note if baseline else "it did not run"
        return result(REPO_TESTS, "skip", f"baseline control did not pass ({reason}); head tests were not run")

    try:
        with worktree.lend("head"):
            expected = set(worktree.status())
            ctx.say("correctness_repo_tests: running head-repo")
            run = harness.run(request, runner=ctx.selected("runner"), run_dir=ctx.run_dir, label="head-repo",
                             **cpu_tier.launch_options(ctx))
            artifacts = sorted(entry.path for entry in set(worktree.status()) - expected)
    except PatchRefused as refused:
        stage = result(REPO_TESTS, "skip", str(refused))
        return stage.finding("note", "head was not tested: the patch did not apply after the base run")

    base = baseline.stage.model_extra.get("repo_tests") if baseline else None
    stage = _judge_head(ctx, run, base)
    cpu_tier.credit_fixes(stage, run, base)
    cpu_tier.observe(stage, run)
    if request.has_patch and base is not None:
        nonfinite.judge(stage, run, base.get("route_outputs"))
    if run.addopts_dropped:
        stage.finding("note", addopts_note(run))
    if artifacts:
        stage.stage.artifacts = artifacts
        stage.finding("note", f"the head run left {len(artifacts)} artifacts in the worktree "
                              f"({', '.join(artifacts[:5])}); they were removed")
    stage.runs = [run]
    return stage


def _judge_head(ctx: Context, run: TargetRun, base: dict | None) -> StageResult:
    fields = _run_fields(run)
    executed = run.stats.executed
    tiered = cpu_tier.blocker(ctx, REPO_TESTS, run, base, fields) or cpu_tier.sparse_skip(REPO_TESTS, run, fields)
    if tiered is not None:
        return tiered
    if run.usage_error:
        stage = result(REPO_TESTS, "skip", f"{run.stats.note}; nothing is attributed", **fields)
        return stage.finding("note", f"pytest refused its command line on head, so no test ran: {run.stats.note}")
    if run.timed_out:
        stage = result(REPO_TESTS, "fail", f"timed out after {ctx.request.host.timeout}s", **fields)
    elif run.exit == 0 and executed > 0:
        return result(REPO_TESTS, "pass", f"{executed} executed, all passed", **fields)
    elif run.exit == 0 or (run.runner == "pytest" and run.exit == PYTEST_NOTHING_COLLECTED):
        stage = result(REPO_TESTS, "skip", "target completed with no executed tests", **fields)
        return stage.finding("note", "the head target executed no test; no correctness claim is made")
    else:
        failed = run.stats.failures + run.stats.errors
        stage = result(REPO_TESTS, "fail", f"exit {run.exit}: {failed} failed or errored of {run.stats.tests}", **fields)

    what = "times out" if run.timed_out else "fails"
    tail = run.log_tail()
    if not ctx.request.has_patch:
        stage.finding("blocker", f"the supplied head checkout's target {what}: {tail}")
    elif base is not None and base["state"] == "target-not-present":
        stage.finding("blocker", f"the PR adds this target and it {what} on head: {tail}")
    elif base is not None and base["state"] == "ran" and base.get("exit") == 0:
        stage.finding("blocker", f"the target passes on base and {what} on head: {tail}")
    elif base is not None and base.get("timed_out"):
        stage.finding("note", f"the base run timed out (TIMEOUT {ctx.request.host.timeout}s), so there is no base "
                              f"result to attribute this to; raise TIMEOUT to judge it: {tail}")
    else:
        base_said = "all skipped" if base and base["state"] == "all-skipped" else \
            f"exit {base.get('exit') if base else 'unknown'}"
        stage.finding("note", f"red on both sides (base: {base_said}), so the failure is not attributed to the PR: {tail}")
    if executed == 0:
        stage.finding("note", f"the {run.runner} run executed nothing; the runner choice "
                              f"({ctx.selected('runner_reason', '')}) is a candidate cause, not the code")
    return stage
