"""correctness_repo_tests: the repository's own target on head, and who is to blame when it is red.

It runs head inside `Worktree.lend("head")`, which returns the tree clean on every path, and
judges head against what baseline_control saw; it never reruns base.
"""
from __future__ import annotations


from kvtasks.stages.launches import Launch
from kvtasks.stages import (Context, Report, StageResult, StageSpec, baseline_control, cpu_tier, gpu_claim, grid, nonfinite, result)
from kvtasks.stages.runtime_compat import collection_errors, incomplete
from kvtasks.stages.target_runs import addopts_note, attribute, crashed, gate, run_fields
from kvtasks.harness.junit import PYTEST_NOTHING_COLLECTED
from kvtasks.harness.target_run import TargetRun, adopt
from kvtasks.worktree import PatchRefused
from kvtasks.stages.payloads import BaselineControl, GpuClaim, RepoTests, RuntimeCompat
NAME = "correctness_repo_tests"


def run(ctx: Context) -> StageResult:
    request = ctx.request
    blocked = gate(ctx)
    if blocked:
        return result(NAME, "skip", blocked)
    baseline = ctx.result_of(baseline_control.BaselineControl)
    if request.has_patch and (baseline is None or baseline.stage.status != "pass"):
        reason = baseline.stage.note if baseline else "it did not run"
        return result(NAME, "skip", f"baseline control did not pass ({reason}); head tests were not run")

    # on a host with no device claimed, gpu_requirement already made exactly this run: adopted, not repeated
    launched, artifacts = _adopted(ctx)
    unusable = ""
    if not launched:
        try:
            launched, artifacts, unusable = launch_head(ctx, NAME)
        except PatchRefused as refused:
            stage = result(NAME, "skip", str(refused))
            return stage.finding("tests.head-not-applied", "note", "head was not tested: the patch did not apply after the base run")
    run = next(made for made in launched if made.label == "head-repo")

    base = baseline.stage.repo_tests if baseline else None
    stage = _judge_head(ctx, run, base)
    cpu_tier.credit_fixes(stage, run, base)
    cpu_tier.observe(stage, run)
    if request.has_patch and base is not None:
        nonfinite.judge(stage, run, base.get("route_outputs"))
    if run.addopts_dropped:
        stage.finding("tests.addopts-dropped", "note", addopts_note(run))
    if artifacts:
        stage.stage.artifacts = artifacts
        stage.finding("tests.head-left-artifacts", "note", f"the head run left {len(artifacts)} artifacts in the worktree "
                              f"({', '.join(artifacts[:5])}); they were removed")
    if unusable:
        stage.finding("tests.run-unusable", "note", unusable)
    stage.runs = launched  # with a merged session's parts, which the grid stage reads its proof and cells from
    return stage


def _said_incomplete(ctx: Context, stage: StageResult, run: TargetRun) -> StageResult:
    """environment.incomplete, when head's run could not import its test modules or conftest for a
    library the interpreter lacks."""
    errors = collection_errors(run.log_text())
    if not errors:
        return stage
    identity = ctx.facts.runtime_identity
    said = incomplete(ctx, identity.module if identity else "", errors, f"head's run of {ctx.request.target}")
    if said:
        stage.finding("environment.incomplete", "note", said)
    return stage


def launch_head(ctx: Context, by: str) -> tuple[list[TargetRun], list[str], str]:
    """The target's head run in a head lend (one merged session where the plan merges), the paths it
    left in the tree, and why a merged session could not stand for its parts ("" when it could or
    none ran). Raises PatchRefused when the patch does not apply."""
    with ctx.worktree.lend("head"):
        expected = set(ctx.worktree.status())
        merged = grid.merged_session(ctx, "head")
        launched = merged.runs if merged is not None else []
        if merged is None or merged.repo is None:
            ctx.say(f"{by}: running head-repo")
            launched.append(ctx.launch(Launch(label="head-repo")))
        left = sorted(entry.path for entry in set(ctx.worktree.status()) - expected)
    return launched, left, merged.unusable if merged is not None else ""


def _adopted(ctx: Context) -> tuple[list[TargetRun], list[str]]:
    """The head runs gpu_requirement made with no visible device (copied into this group's runs
    folder) and what they left in the tree: none when a device was claimed or the CPU tier runs the
    target, where the head run is launched differently."""
    claim = ctx.result_of(gpu_claim.GpuClaim)
    if claim is None or claim.stage.status == "pass" or cpu_tier.active(ctx):
        return [], []
    made = [run for run in claim.runs if run.label.startswith("head-")]
    if not any(run.label == "head-repo" for run in made):
        return [], []
    return adopt(made, ctx.run_dir / "runs", "gpu_requirement"), claim.stage.head_run_artifacts or []


def _judge_head(ctx: Context, run: TargetRun, base: dict | None) -> StageResult:
    fields = run_fields(run)
    executed = run.stats.executed
    tiered = cpu_tier.blocker(ctx, NAME, run, base, fields) or cpu_tier.sparse_skip(NAME, run, fields)
    if tiered is not None:
        return tiered
    if run.usage_error:  # a conftest that cannot import a library ends pytest so too
        stage = result(NAME, "skip", f"{run.stats.note}; nothing is attributed", **fields)
        stage.finding("tests.pytest-refused", "note", f"pytest refused its command line on head, so no test ran: {run.stats.note}")
        return _said_incomplete(ctx, stage, run)
    if run.timed_out:
        stage = result(NAME, "fail", f"timed out after {ctx.request.host.timeout}s", **fields)
    elif run.died:
        stage = result(NAME, "fail", f"the run died: {run.died}", **fields)
    elif run.exit == 0 and executed > 0:
        return result(NAME, "pass", f"{executed} executed, all passed", **fields)
    elif run.runner == "pytest" and run.exit == PYTEST_NOTHING_COLLECTED:
        stage = result(NAME, "skip", "no tests collected: pytest found no test in the target (exit 5)", **fields)
        return stage.finding("tests.executed-nothing", "note", f"no tests collected: pytest found no test in "
                             f"{ctx.request.target} on head (exit 5); no correctness claim is made")
    elif run.exit == 0:
        stage = result(NAME, "skip", "target completed with no executed tests", **fields)
        return stage.finding("tests.executed-nothing", "note", "the head target executed no test; no correctness claim is made")
    else:
        failed = run.stats.failures + run.stats.errors
        stage = result(NAME, "fail", f"exit {run.exit}: {failed} failed or errored of {run.stats.tests}", **fields)

    verb = "times out" if run.timed_out else "fails"
    stage.finding(*(crashed(ctx, base, "target", run) or attribute(ctx, base, "target", verb, run.log_tail(), run)))
    _said_incomplete(ctx, stage, run)
    if executed == 0:
        stage.finding("tests.runner-executed-nothing", "note", f"the {run.runner} run executed nothing; the runner choice "
                              f"({ctx.selection.runner_reason or ''}) is a candidate cause, not the code")
    return stage


def passes(report: Report) -> list[str]:
    """PASS needs head's own tests run and passing, with tests executed."""
    repo_tests = report.stage_of(RepoTests)
    stats = repo_tests.stats
    if repo_tests.exit != 0 or stats is None or stats.failures or stats.errors or not stats.executed:
        return ["correctness_repo_tests is not a passing run with executed tests"]
    return []


STAGE = StageSpec(NAME, run, payload=RepoTests, requires=(BaselineControl, GpuClaim, RuntimeCompat), passes=passes)
