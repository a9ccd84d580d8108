"""gpu_requirement: without a claimed GPU, ask the head target whether it needs one.

It runs the head target once with no visible device: `not-required` only when it passes and
executes at least one test. That run is the head run correctness_repo_tests would make on such a
host (a merged session on the argnames channel), so it adopts it (`head_runs`) instead. Such a target still runs its correctness stages, but earns no
architecture and no PASS. It amends gpu_claim's result (the pipeline table says so); it never claims.
"""
from __future__ import annotations

from kvtasks import harness
from kvtasks.harness.launch import TargetRun
from kvtasks.stages import Context, StageResult, cpu_tier, gpu_claim, grid, runtime_compat
from kvtasks.worktree import PatchRefused

NAME = "gpu_requirement"


def run(ctx: Context) -> StageResult | None:
    """The claim amended with the answer; None when a GPU was claimed, the runtime was not
    established, or the CPU tier runs the target (without a GPU by construction: nothing to ask)."""
    claim = ctx.earlier.get(gpu_claim.NAME)
    if claim is None or claim.stage.status == "pass" or not runtime_compat.established(ctx) or cpu_tier.active(ctx):
        return None
    updated = claim.model_copy(deep=True)
    runner = ctx.selection.runner or "none"
    if runner == "none":
        updated.selection.set(gpu_requirement="required",
                                 gpu_requirement_basis="not probed: no runner was selected; conservative default")
        return updated
    try:
        with ctx.worktree.lend("head"):
            expected = set(ctx.worktree.status())
            # exactly the head run correctness_repo_tests would make on this host (no device, no tier),
            # merged with the grid where the plan merges: it adopts these runs instead of repeating them
            merged = grid.merged_session(ctx, "head")
            launched = merged.runs if merged is not None else []
            run = merged.repo if merged is not None else None
            if run is None:
                ctx.say(f"{NAME}: running head-repo with no visible device")
                run = harness.run(ctx.request, runner=runner, run_dir=ctx.run_dir, label="head-repo")
                launched.append(run)
            left = sorted(entry.path for entry in set(ctx.worktree.status()) - expected)
    except PatchRefused as refused:
        updated.selection.set(gpu_requirement="required", gpu_requirement_basis=f"not probed: {refused}")
        return updated
    executed, observed = run.stats.executed, run.stats.observed_work
    if run.passed and executed >= 1 and observed != 0:
        basis = f"passed with no visible device, {executed} executed ({run.runner})"
        updated.selection.set(gpu_requirement="not-required", gpu_requirement_basis=basis)
        updated.stage.requirement_note = f"target does not need a GPU: {basis}; correctness runs, no arch is credited"
        updated.finding("note", f"the target ran without a GPU ({basis}); its correctness evidence is CPU-only "
                                "and PASS stays unreachable without a claimed GPU")
    else:
        updated.selection.set(gpu_requirement="required",
                                 gpu_requirement_basis=f"with no visible device: exit {run.exit}, {executed} executed, "
                                                       f"observed_work {observed}")
    if merged is not None and merged.unusable:
        updated.finding("note", merged.unusable)
    if left:
        updated.stage.head_run_artifacts = left
    updated.runs += launched
    return updated


def head_runs(ctx: Context) -> tuple[list[TargetRun], list[str]]:
    """The head runs this step made with no visible device, for correctness_repo_tests to adopt
    (copied into its own runs folder), and what they left in the tree: none when a device was
    claimed or the CPU tier runs the target, where the head run is launched differently."""
    claim = ctx.earlier.get(gpu_claim.NAME)
    if claim is None or claim.stage.status == "pass" or cpu_tier.active(ctx):
        return [], []
    made = [run for run in claim.runs if run.label.startswith("head-")]
    if not any(run.label == "head-repo" for run in made):
        return [], []
    return harness.adopt(made, ctx.run_dir / "runs", NAME), claim.stage.head_run_artifacts or []
