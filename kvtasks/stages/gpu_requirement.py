"""gpu_requirement: without a claimed GPU, ask the head target whether it needs one.

It runs the head target once with no visible device: `not-required` when it passes and executes
at least one test, or when pytest collects no test at all (then nothing says a GPU is needed, and
correctness_repo_tests says what it is: no tests collected). That run is the head run correctness_repo_tests would make on such a
host (`repo_tests.launch_head`: a merged session on the argnames channel), which adopts it instead
of repeating it. Such a target still runs its correctness stages, but earns no architecture and no
PASS. It amends gpu_claim's result (the pipeline table says so); it never claims.
"""
from __future__ import annotations

from kvtasks.harness.junit import PYTEST_NOTHING_COLLECTED
from kvtasks.stages import Context, StageResult, StageSpec, cpu_tier, gpu_claim, repo_tests, runtime_compat
from kvtasks.stages.payloads import GpuClaim, RuntimeCompat
from kvtasks.worktree import PatchRefused

NAME = "gpu_requirement"


def run(ctx: Context) -> StageResult | None:
    """The claim amended with the answer; None when a GPU was claimed, the runtime was not
    established, or the CPU tier runs the target (without a GPU by construction: nothing to ask)."""
    claim = ctx.result_of(gpu_claim.GpuClaim)
    if claim is None or claim.stage.status == "pass" or not runtime_compat.established(ctx) or cpu_tier.active(ctx):
        return None
    updated = claim.model_copy(deep=True)
    runner = ctx.selection.runner or "none"
    if runner == "none":
        updated.selection.set(gpu_requirement="required",
                                 gpu_requirement_basis="not probed: no runner was selected; conservative default")
        return updated
    try:
        # exactly the head run correctness_repo_tests would make on this host (no device, no tier), merged
        # with the grid where the plan merges: it adopts these runs instead of repeating them
        launched, left, unusable = repo_tests.launch_head(ctx, NAME)
    except PatchRefused as refused:
        updated.selection.set(gpu_requirement="required", gpu_requirement_basis=f"not probed: {refused}")
        return updated
    run = next(made for made in launched if made.label == "head-repo")
    executed, observed = run.stats.executed, run.stats.observed_work
    if run.passed and executed >= 1 and observed != 0:
        basis = f"passed with no visible device, {executed} executed ({run.runner})"
        updated.selection.set(gpu_requirement="not-required", gpu_requirement_basis=basis)
        updated.stage.requirement_note = f"target does not need a GPU: {basis}; correctness runs, no arch is credited"
        updated.finding("gpu.ran-without-gpu", "note", f"the target ran without a GPU ({basis}); its correctness evidence is CPU-only "
                                "and PASS stays unreachable without a claimed GPU")
    elif run.runner == "pytest" and run.exit == PYTEST_NOTHING_COLLECTED:
        # no test to run says nothing of a GPU: correctness_repo_tests says what it is (no tests collected)
        updated.selection.set(gpu_requirement="not-required", gpu_requirement_basis=(
            "not asked: pytest collected no tests from the target (exit 5), so no run says it needs a GPU"))
    else:
        updated.selection.set(gpu_requirement="required",
                                 gpu_requirement_basis=f"with no visible device: exit {run.exit}, {executed} executed, "
                                                       f"observed_work {observed}")
    if unusable:
        updated.finding("gpu.probe-unusable", "note", unusable)
    if left:
        updated.stage.head_run_artifacts = left
    updated.runs += launched
    return updated


# a later look at gpu_claim: its result replaces the claim's
STAGE = StageSpec(NAME, run, requires=(GpuClaim, RuntimeCompat), sets=("gpu_requirement", "gpu_requirement_basis"))
