"""Which architecture a validation's runs credit with runtime coverage (the report's arch_coverage).

Only a passing gpu_claim credits anything. A run credits only when it executed at least one test; a
script also needs output, and observed_work 0 (a route watched for and never reached) credits
nothing. Coverage is about exercise, not success: a failing run that executed counts. The grid's
run is asked first, then the repository tests'.
"""
from __future__ import annotations

from kvtasks.report.model import Stage
from kvtasks.stages.payloads import CorrectnessGrid, GpuClaim, RepoTests


def arch_coverage(stages: dict[str, Stage]) -> tuple[dict[str, str], dict[str, str]]:
    by_kind = {type(stage): (name, stage) for name, stage in stages.items()}
    _, claim = by_kind.get(GpuClaim, (None, None))
    arch = claim.arch if claim is not None and claim.status == "pass" else None
    if not arch or arch == "unknown":
        return {}, {}
    for kind in (CorrectnessGrid, RepoTests):
        name, stage = by_kind.get(kind, (None, None))
        stats = stage.stats if stage is not None else None
        if stats is None:
            continue
        observed = stats.observed_work
        if not stats.executed or observed == 0:  # 0: a route was watched for and never reached
            continue
        if stats.basis.startswith("script"):
            if not stage.log_bytes:
                continue
            outcome = "script-observed-work" if stage.exit == 0 else "script-nonzero-with-output"
            return {arch: "runtime"}, {arch: f"{outcome}:{observed} ({name}; observed_work from the run's receipt)"}
        return {arch: "runtime"}, {arch: f"pytest-junit-executed:{stats.executed} observed_work:{observed} ({name})"}
    return {}, {}
