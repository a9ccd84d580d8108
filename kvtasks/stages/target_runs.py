"""What the stages that run the repository's own target share: whether it can run at all (`gate`),
and how one target run is written into a stage object. Runs nothing and judges nothing itself.
"""
from __future__ import annotations

from kvtasks import harness
from kvtasks.stages import Context, cpu_tier, gpu_claim, nonfinite, runtime_compat
from kvtasks.harness.launch import TargetRun


def gate(ctx: Context) -> str | None:
    """Why correctness cannot run at all, or None when it can (the first reason that applies)."""
    claim = ctx.earlier.get(gpu_claim.NAME)
    claimed = claim is not None and claim.stage.status == "pass"
    if not claimed and ctx.selection.gpu_requirement != "not-required" and not cpu_tier.active(ctx):
        return "no verified-idle GPU was claimed and the target was not shown to run without one"
    if not runtime_compat.established(ctx):
        return "runtime compatibility was not established"
    runner = ctx.selection.runner or "none"
    if runner == "none":
        return f"no runner: {ctx.selection.runner_reason or 'runner selection did not run'}"
    if runner == "pytest":
        return harness.pytest_available(ctx.request, ctx.run_dir)
    return None


def state(run: TargetRun) -> str:
    if run.usage_error:
        return "usage-error"
    return "all-skipped" if run.exit == 0 and run.stats.executed == 0 else "ran"


def run_fields(run: TargetRun) -> dict:
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
