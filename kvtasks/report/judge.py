"""The verdict, and the PASS gate: what a PASS must carry beyond every required stage passing.

Verdict rules: any blocker -> BLOCK; else any should-fix -> NEEDS_WORK; else a required stage
short of pass (or no runtime identity) -> INCONCLUSIVE; else PASS, and only if the PASS gate holds
too (else INCONCLUSIVE, the missing pieces named). Exit codes: PASS 0, BLOCK and NEEDS_WORK 1,
INCONCLUSIVE 2. The gate is the union of what each stage of the pipeline requires (its Layout).
"""
from __future__ import annotations

from kvtasks.records import RuntimeIdentity
from kvtasks.report.layout import Layout
from kvtasks.report.model import EXIT_CODES, Finding, Report, Stage, Verdict


def verdict(layout: Layout, stages: dict[str, Stage], findings: list[Finding],
            runtime_identity: RuntimeIdentity | None) -> Verdict:
    severities = {finding.severity for finding in findings}
    if "blocker" in severities:
        return "BLOCK"
    if "should-fix" in severities:
        return "NEEDS_WORK"
    complete = bool(runtime_identity and runtime_identity.module_path) and all(
        stages[name].status == "pass" for name in layout.required)
    return "PASS" if complete else "INCONCLUSIVE"


def pass_gate(layout: Layout, report: Report) -> list[str]:
    """What a PASS must additionally carry; each missing piece is named."""
    return [missing for _, requirement in layout.requirements for missing in requirement(report)]


def withhold_unproven_pass(layout: Layout, report: Report) -> None:
    """A PASS whose gate does not hold is INCONCLUSIVE, with what is missing said as a finding."""
    if report.verdict != "PASS":
        return
    violations = pass_gate(layout, report)
    if violations:
        report.findings.append(Finding(rule="report.pass-withheld", severity="note", stage="report",
                                       detail="PASS withheld: " + "; ".join(violations)))
        report.verdict = "INCONCLUSIVE"
        report.process_exit_code = EXIT_CODES["INCONCLUSIVE"]
