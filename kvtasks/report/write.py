"""Writing a report: validation_report.json, with summary.md, comment.md and perf.png beside it."""
from __future__ import annotations

import json
import shutil
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


def kept_logs(report: Report, folder: Path) -> Report:
    """The report with its launches' logs copied into folder/logs/ (the report's folder under
    reports/) and named relative to reports/, so they travel with it. A log the store no longer
    keeps stays linked where an earlier publication copied it; a copy of a launch this report no
    longer has is removed, so the folder holds this report's logs alone."""
    kept = folder / "logs"
    logs = {}
    for label, source in report.logs.items():
        copy = kept / f"{label}.log"
        if Path(source).is_file() and Path(source).resolve() != copy.resolve():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
        if copy.is_file():
            logs[label] = f"{folder.name}/logs/{label}.log"
    for stale in (kept.glob("*.log") if kept.is_dir() else []):
        if stale.stem not in logs:
            stale.unlink()
    return report.model_copy(update={"logs": logs})


def publish(report: Report, destinations: list[Path]) -> None:
    """Write validation_report.json (+ summary.md and comment.md beside it) to each destination
    path; the first is the workspace's reports/<label>/, which the launches' logs are copied into."""
    report = kept_logs(report, destinations[0].parent)
    body = json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"
    summary = summary_markdown(report)
    posted = comment.markdown(report.model_dump(mode="json"), report.required_stages(), comment.page_url(report.label))
    for path in destinations:
        faults.point("report")
        write_atomic(path, body.encode())
        write_atomic(_beside(path, "summary.md"), summary.encode())
        write_atomic(_beside(path, comment.COMMENT), posted.encode())
        perf_chart(report, path.with_name("perf.png"))
