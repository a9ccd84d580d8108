"""summary.md: the report as a Markdown summary for a terminal or a CI job's page."""
from __future__ import annotations

from kvtasks.report import comment
from kvtasks.report.model import Report

SEVERITIES = ("blocker", "should-fix", "note")


def summary_markdown(report: Report) -> str:
    """In the comment's order: the verdict, what decided it, the findings (blockers first, each by its
    rule id), then what was validated, the stages and the timings."""
    # a composed report says it; one made otherwise (an older one read back) is asked as the comment asks
    decided = report.decided_by or comment.decided_by(report.model_dump(mode="json"), report.required_stages())
    lines = [f"## kvtasks validation: **{report.verdict}** (exit {report.process_exit_code})", "",
             f"**Decided by:** {decided}", "", "### Findings", ""]
    ordered = [f for severity in SEVERITIES for f in report.findings if f.severity == severity]
    lines += [f"- **{f.severity}** `{f.rule}` ({f.stage}): {_cell(f.detail)}" for f in ordered] or ["- none"]
    lines += [
        "",
        f"- label: `{report.label}`",
        f"- base: `{report.repo.base}`",
        f"- head: `{report.repo.head or 'null (not matched to a remote PR head)'}`",
        f"- patch sha256: `{report.repo.patch_sha256 or 'none'}`",
        f"- target: `{report.test_selection.target}` (runner: {report.test_selection.runner})",
        f"- degraded mode: {report.degraded_mode or 'none'}",
        f"- evidence tier: {tier_line(report.cpu_tier.model_dump() if report.cpu_tier else None)}",
        "",
        "| stage | status | reason |",
        "| --- | --- | --- |",
    ]
    for name, stage in report.stages:
        if stage is not None:
            lines.append(f"| {name} | {stage.status} | {_cell(stage.note)} |")
    perf = report.stages.perf.model_dump() if report.stages.perf is not None else {}
    if perf.get("rows"):
        lines += ["", f"### Perf: head/base per row (> 1 is better for head; {perf.get('repeats', {}).get('order', '')})",
                  *(["", f"Statistics: {perf['statistics']}."] if perf.get("statistics") else []),
                  "", "| column | row | base rounds | head rounds | head/base (best of n) | round-pair range | "
                      "base spread |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in perf["rows"]:
            lines.append(f"| {_cell(row['column'])} | {_cell(row['row'])} | {_rounds(row['base'])} | "
                         f"{_rounds(row['head'])} | {row['ratio']:.3f} | {_span(row.get('round_range'))} | "
                         f"{row['base_spread']:.3f} |")
        lines += ["", "| column | median head/base | bounds on the median | confidence of each bound | noise floor | "
                      "rows | eligible |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, column in perf.get("columns", {}).items():
            confidence = column.get("interval_confidence")
            lines.append(f"| {_cell(name)} | {column['median_ratio']:.3f} | {_span(column['interval'])} | "
                         f"{'-' if confidence is None else f'{confidence:.1%}'} | {column['noise_floor']:.3f} | "
                         f"{column['samples']} | {column['eligible']} |")
    return "\n".join(lines) + "\n"


def tier_line(tier: dict | None) -> str:
    if not tier:
        return "none (targets ran on their own runtime, not the Triton interpreter)"
    return (f"{tier['evidence']}: triton {tier['triton']}, torch {tier['torch']}, sanitizer {tier['sanitizer']}; "
            "no architecture is credited and PASS needs a claimed GPU")


def _span(bounds: list[float] | None) -> str:
    """low-high; evidence stored before a field existed shows a dash, never a made-up number."""
    return f"{bounds[0]:.3f}-{bounds[1]:.3f}" if bounds else "-"


def _rounds(values: list[float]) -> str:
    return ", ".join(f"{value:g}" for value in values)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


