"""run_facts: what this run is before any stage looks at the PR: when it started, how targets are
isolated, and the host facts that are inputs of the base key (GPU driver versions, the values of
the host variables passed through to targets). It reads the host only; it never launches a target.
"""
from __future__ import annotations

from kvtasks import gpu
from kvtasks.harness import isolation
from kvtasks.report.compose import utc_now
from kvtasks.stages import Context, StageResult, StageSpec
from kvtasks.records import Facts

NAME = "run"


def run(ctx: Context) -> StageResult:
    return StageResult(name=NAME, facts=Facts(started_utc=utc_now(), isolation=isolation.isolation_facts(ctx.request),
                                              # inputs of the base key that describe the host, as this run saw them
                                              gpu_driver=gpu.driver_versions(),
                                              target_environment_values=isolation.passed_through_values()))


STAGE = StageSpec(NAME, run, sets=("started_utc", "isolation", "gpu_driver", "target_environment_values"))
