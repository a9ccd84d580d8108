"""Writing a report: validation_report.json, with summary.md, comment.md and perf.png beside it."""
from __future__ import annotations

import json
from pathlib import Path

from kvtasks.system import faults
from kvtasks.report import comment
from kvtasks.report.chart import perf_chart
from kvtasks.report.markdown import summary_markdown
from kvtasks.report.model import Report
from kvtasks.system.files import write_atomic


def _beside(path: Path, name: str) -> Path:
    """summary.md or comment.md beside a report; beside an --out of another name, <stem>.<name>."""
    return path.with_name(name) if path.name == "validation_report.json" else path.with_name(f"{path.stem}.{name}")


def publish(report: Report, destinations: list[Path]) -> None:
    """Write validation_report.json (+ summary.md and comment.md beside it) to each destination
    path."""
    body = json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"
    summary = summary_markdown(report)
    posted = comment.markdown(report.model_dump(mode="json"), report.required_stages(), comment.page_url(report.label))
    for path in destinations:
        faults.point("report")
        write_atomic(path, body.encode())
        write_atomic(_beside(path, "summary.md"), summary.encode())
        write_atomic(_beside(path, comment.COMMENT), posted.encode())
        perf_chart(report, path.with_name("perf.png"))
