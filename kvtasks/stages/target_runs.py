"""What the stages that run the repository's own target share: whether it can run at all (`gate`),
how one target run is written into a stage object, and whose a head failure is (`attribute`, from
what the same run did on base). Runs nothing itself.
"""
from __future__ import annotations

from kvtasks.stages import Context, Severity, cpu_tier, gpu_claim, nonfinite, runtime_compat
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages.launches import PytestCheck


def gate(ctx: Context) -> str | None:
    """Why correctness cannot run at all, or None when it can (the first reason that applies)."""
    claim = ctx.result_of(gpu_claim.GpuClaim)
    claimed = claim is not None and claim.stage.status == "pass"
    if not claimed and ctx.selection.gpu_requirement != "not-required" and not cpu_tier.active(ctx):
        return "no verified-idle GPU was claimed and the target was not shown to run without one"
    if not runtime_compat.established(ctx):
        return "runtime compatibility was not established"
    runner = ctx.selection.runner or "none"
    if runner == "none":
        return f"no runner: {ctx.selection.runner_reason or 'runner selection did not run'}"
    if runner == "pytest":
        return pytest_unavailable(ctx)
    return None


def pytest_unavailable(ctx: Context) -> str | None:
    """Why `python -m pytest` cannot run the target: from where runtime_compat's probe (the target's
    interpreter and path) found pytest, or, when it did not say, from `python -m pytest --version`."""
    found = ctx.facts.pytest_module
    if found is None:
        return ctx.launch(PytestCheck())
    if not found or found.startswith("unfindable"):
        why = found or "No module named pytest"
        return f"python -m pytest is not runnable with {ctx.request.host.python_bin}: {why}"
    return None


def state(run: TargetRun) -> str:
    if run.target_absent:
        return "target-absent"
    if run.usage_error:
        return "usage-error"
    return "all-skipped" if run.exit == 0 and run.stats.executed == 0 else "ran"


def attribute(ctx: Context, base: dict | None, what: str, verb: str, tail: str, run: TargetRun,
              detail: str = "") -> tuple[str, Severity, str]:
    """Whose a failing head run (`run`) is, from the same run on base (`base`: its state, exit,
    timed_out, tier evidence): nobody's (a note) when the CPU tier itself could not run what failed,
    on both sides (a tier limitation) or on head only (INCONCLUSIVE); the PR's (a blocker) when base
    passed, when the PR adds the target (base has no such file, or pytest finds no such test there) or
    when there is no patch to compare with; nobody's when base was red too or gave no result to compare.
    Returns the finding's rule (`what` is target or grid), severity and detail."""
    base = base or {}
    crashed = cpu_tier.tier_failure(run)
    if crashed:
        on_base = cpu_tier.crashes(base.get("cpu_tier"))
        if on_base:
            return f"{what}.tier-limitation", "note", (
                f"a CPU tier limitation: the tier could not run the {what} on either side (head: "
                f"{cpu_tier.crash_summary(crashed)}; base: {cpu_tier.crash_summary(on_base)}), so nothing "
                "is attributed to the PR")
        return f"{what}.tier-crash-on-head", "note", (
            f"the CPU tier crashed on head only ({cpu_tier.crash_summary(crashed)}): the {what} could not "
            "run there, so its failure is INCONCLUSIVE and not attributed to the PR")
    if not ctx.request.has_patch:
        return f"{what}.fails-on-checkout", "blocker", f"on the supplied checkout, the {what} {verb}: {tail}"
    if base.get("state") == "target-not-present":
        return f"{what}.fails-new-target", "blocker", f"the PR adds this target, and the {what} {verb} on head: {tail}"
    if base.get("state") == "target-absent":
        return f"{what}.fails-new-target", "blocker", (
            f"the target is absent on base (pytest found no such test there: exit 4), so the PR adds it, and the "
            f"{what} {verb} on head: {tail}")
    if base.get("state") == "ran" and base.get("exit") == 0:
        return f"{what}.regression", "blocker", f"the {what} passes on base and {verb} on head{detail}: {tail}"
    if base.get("timed_out"):
        return f"{what}.base-timed-out", "note", (
            f"the base run timed out (TIMEOUT {ctx.request.host.timeout}s), so there is no base result "
            f"to attribute this to; raise TIMEOUT to judge it: {tail}")
    said = "all skipped" if base.get("state") == "all-skipped" else \
        f"exit {base['exit']}" if base.get("exit") is not None else base.get("state", "not run")
    return f"{what}.red-on-both-sides", "note", (
        f"the {what} is red on both sides (base: {said}), so the failure is not attributed to the PR: {tail}")


def run_fields(run: TargetRun) -> dict:
    fields = {"exit": run.exit, "log": run.log, "log_bytes": run.log_bytes, "stats": run.stats.model_dump(),
              "timed_out": run.timed_out, **({"died": run.died} if run.died else {})}
    if run.addopts_dropped:
        fields["pytest_addopts_dropped"] = run.addopts_dropped
    if nonfinite.outputs(run):
        fields["route_outputs"] = nonfinite.outputs(run)
    tier = cpu_tier.run_evidence(run)
    return fields if tier is None else {**fields, "cpu_tier": tier}


def crashed(ctx: Context, base: dict | None, what: str, run: TargetRun) -> tuple[str, Severity, str] | None:
    """The PR's crash: a head run that died after reaching the route (a signal, an abort, an exit
    mid-session: a GPU memory fault looks exactly like this) where base's same run completed. None
    when it did not die, or base gave nothing to compare with (absent, timed out, died too)."""
    base = base or {}
    if not run.died or not ctx.request.has_patch or base.get("state") != "ran" or base.get("timed_out") \
            or base.get("died") or base.get("exit") is None:
        return None
    return f"{what}.crashed", "blocker", (f"the {what} run died on head, {run.died}, after reaching the route, where "
                                          f"base's same run completed (exit {base.get('exit')}): {run.log_tail()}")


def addopts_note(run: TargetRun) -> str:
    dropped = run.addopts_dropped
    return (f"pytest refused the repository's configuration ({dropped['error']}), so the target ran once more with "
            f"-o addopts=, which drops all of {dropped['file'] or 'its config file'}'s addopts: "
            f"{dropped['dropped'] or '(none found)'}")
