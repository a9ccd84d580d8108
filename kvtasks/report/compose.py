"""A report composed from stored stage results and judged; runs nothing and reads nothing else."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Protocol

from kvtasks.records import Facts, Selection, merged
from kvtasks.report import comment, judge
from kvtasks.report.containment import Launch, contain
from kvtasks.report.layout import Layout
from kvtasks.report.model import EXIT_CODES, Finding, Report, Stage, TestSelection


class Result(Protocol):
    """What the report reads of a stage's stored result (kvtasks.stages.StageResult)."""

    name: str
    stage: Stage | None
    findings: list[Finding]
    facts: Facts
    selection: Selection
    runs: list[Launch]


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def compose(layout: Layout, label: str, results: list[Result], finished_utc: str | None = None) -> Report:
    """Build and judge the report from stored stage results; a later result of a stage replaces an earlier one."""
    stages: dict[str, Stage] = {}
    findings: list[Finding] = []
    latest = {stage_result.name: stage_result for stage_result in results}
    for stage_result in latest.values():
        if stage_result.stage is not None:
            stages[stage_result.name] = stage_result.stage
        findings.extend(stage_result.findings)
    facts = merged(Facts, (stage_result.facts for stage_result in latest.values()))
    selection = merged(Selection, (stage_result.selection for stage_result in latest.values())).model_dump(mode="json")

    for name in layout.names:
        if name in stages:
            continue
        payload = layout.payload(name)
        if facts.halt:
            stages[name] = payload(status="skip", note=f"not run: {facts.halt}")
        else:
            stages[name] = payload(status="skip", note="validator internal error: stage did not record a result")
            findings.append(Finding(rule="report.stage-missing", severity="note", stage=name,
                                    detail="stage result was missing; validation is inconclusive"))

    tier = facts.cpu_tier
    if tier:
        for name in layout.tiered:
            if name in stages and stages[name].evidence_tier is None:
                stages[name].evidence_tier = tier.evidence
    # each launch once: a merged session's parts and a run adopted from another stage are that launch
    launches = {run.label: (run, stage_result.name) for stage_result in latest.values() for run in stage_result.runs
                if run.session is None and not run.adopted_from}
    contained, contained_findings = contain([run for run, _ in launches.values()],
                                            {label: stage for label, (_, stage) in launches.items()})
    findings.extend(contained_findings)
    decided = judge.verdict(layout, stages, findings, facts.runtime_identity)
    coverage, coverage_basis = ({}, {}) if tier else layout.coverage(stages)
    report = layout.model(
        started_utc=facts.started_utc or utc_now(),
        finished_utc=finished_utc or utc_now(),
        label=label,
        isolation=facts.isolation or {"level": "git-worktree + private caches", "container": False},
        arch_coverage=coverage,
        arch_coverage_basis=coverage_basis,
        degraded_mode=facts.degraded_mode,
        cpu_tier=tier,
        repo=facts.repo.model_dump(),
        runtime_identity=facts.runtime_identity,
        recovered_run=facts.recovered_run,
        containment=contained,
        test_selection=TestSelection(target=selection.pop("target", ""), **selection),
        stages=layout.stages_model(**stages),
        findings=findings,
        verdict=decided,
        process_exit_code=EXIT_CODES[decided],
    )
    judge.withhold_unproven_pass(layout, report)
    report.decided_by = comment.decided_by(report.model_dump(mode="json"), layout.required)
    # where each launch's log is kept now; publishing copies them beside the report (kvtasks.report.write)
    report.logs = {label: run.log for label, (run, _) in sorted(launches.items())}
    return report
