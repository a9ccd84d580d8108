"""baseline_control: the repository's own target (and the grid's base cells) on the clean base tree.

The patch is simply not applied: the same tree `git apply -R` would give, and a base-side result
that no patch can alter. The tree must still be clean afterwards. It borrows the tree through
`Worktree.lend("base")`, which returns it clean on every path; it never applies the patch.
"""
from __future__ import annotations


from kvtasks.stages.launches import Launch
from kvtasks.stages import Context, StageResult, StageSpec, cpu_tier, grid, result
from kvtasks.stages.target_runs import gate, run_fields, state
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages.payloads import BaselineControl, GpuClaim, RuntimeCompat

NAME = "baseline_control"


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


def run(ctx: Context) -> StageResult:
    request, worktree = ctx.request, ctx.worktree
    if not request.has_patch:
        return result(NAME, "skip", "no patch: failures cannot be attributed against a base control")
    blocked = gate(ctx)
    if blocked:
        return result(NAME, "skip", blocked)

    runs: list[TargetRun] = []
    with worktree.lend("base"):
        before = worktree.status()
        if before:
            return result(NAME, "skip", f"base tree is not clean ({len(before)} entries); nothing was run")
        merged, repo_run = None, None
        if worktree.exists_on_base(request.target_path):
            merged = grid.merged_session(ctx, "base")
            runs += merged.runs if merged else []
            repo_run = merged.repo if merged else None
            if repo_run is None:
                ctx.say("baseline_control: running base-repo")
                repo_run = ctx.launch(Launch(label="base-repo"))
                runs.append(repo_run)
            repo_tests = {"state": state(repo_run), **run_fields(repo_run)}
        else:
            repo_tests = {"state": "target-not-present", "stats": None}
        s1_grid, grid_runs = grid.base_runs(ctx, repo_run, merged)
        runs += grid_runs
        artifacts = [entry.path for entry in worktree.status()]

    if artifacts:
        stage = result(NAME, "skip", f"base run left {len(artifacts)} artifacts in the worktree "
                                         f"({', '.join(artifacts[:5])}); they were removed and head tests were not run",
                       repo_tests=repo_tests, s1_grid=s1_grid, artifacts=artifacts)
        stage.finding("baseline.dirty-after-base", "note", "the base run did not leave a clean worktree, so head failures cannot be attributed")
    else:
        stage = result(NAME, "pass", f"base control ran and left the tree clean ({_base_said(repo_tests, s1_grid)})",
                       repo_tests=repo_tests, s1_grid=s1_grid)
    if merged is not None and merged.unusable:
        stage.finding("baseline.run-unusable", "note", merged.unusable)
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


STAGE = StageSpec(NAME, run, payload=BaselineControl, requires=(GpuClaim, RuntimeCompat))
