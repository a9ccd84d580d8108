"""run_facts: what this run is before any stage looks at the PR: when it started, how targets are
isolated, and the host facts that are inputs of the base key (GPU driver versions, the values of
the host variables passed through to targets). It reads the host only; it never launches a target.
"""
from __future__ import annotations

from datetime import datetime, timezone

from kvtasks import gpu, harness
from kvtasks.stages import Context, StageResult
from kvtasks.stages.records import Facts

NAME = "run"


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(ctx: Context) -> StageResult:
    return StageResult(name=NAME, facts=Facts(started_utc=utc_now(), isolation=harness.isolation_facts(ctx.request),
                                              # inputs of the base key that describe the host, as this run saw them
                                              gpu_driver=gpu.driver_versions(),
                                              target_environment_values=harness.passed_through_values()))
