"""Static HTML views of published reports: reports/<label>/index.html and reports/index.html.

Rendering is publishing, separate from running: every page is a function of the JSON already
published under reports/ (validation_report.json, and batch.json for a batch's own table), so
`doit report` can redraw all of them from files alone. Every string on a page came from a pull
request or its runs (file names, test ids, log lines) and is escaped by Jinja2's autoescape. Pages
fetch nothing at view time: the CSS is inlined, the perf chart is inline SVG and the index's
sorting is a few lines of inline script; filtering by verdict needs no script at all, so a page
works from a file:// URL and from any static host. What a page shows is drawn from the JSON by
`page_views`; this module renders it, writes the pages and serves them.
"""
from __future__ import annotations

import functools
import http.server
import json
import signal
import threading
from urllib.parse import quote
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader

from kvtasks.system import faults
from kvtasks.report.page_views import (SEVERITIES, VERDICTS, arch_rows, arch_verdicts, finding_counts, grid_view,
                                perf_view, rank, repo_fields, sanitizer_violations)
from kvtasks.report import comment, tier_line
from kvtasks.system.files import write_atomic

REPORT = "validation_report.json"
PAGE = "index.html"
BATCH = "batch.json"
BATCH_PAGE = "batch.html"

# autoescape everywhere: the templates end in .j2, which select_autoescape would not recognise
_environment = Environment(loader=PackageLoader("kvtasks", "templates"), autoescape=True, trim_blocks=True,
                           lstrip_blocks=True)
_environment.globals["tier_line"] = tier_line


def _css() -> str:
    return (Path(__file__).parents[1] / "templates" / "pages.css").read_text()


def _render(template: str, path: Path, **context: Any) -> Path:
    html = _environment.get_template(template).render(css=_css(), verdicts=VERDICTS, **context)
    write_atomic(path, html.encode())
    return path


# -- one report ------------------------------------------------------------------------------------

def write_report_page(folder: Path, required: list[str]) -> Path:
    """folder/index.html from folder/validation_report.json (`required`: the stages its verdict
    needed passing, so the banner says what decided it, as the comment does)."""
    faults.point("page")
    report = json.loads((folder / REPORT).read_text())
    stages = report.get("stages") or {}
    return _render("report.html.j2", folder / PAGE, report=report,
                   decided=(report.get("decided_by") or comment.decided_by(report, required)).replace("`", ""),
                   stages=[(name, stage) for name, stage in stages.items() if stage is not None],
                   findings=sorted(report.get("findings") or [], key=lambda f: rank(SEVERITIES, f.get("severity"))),
                   counts=finding_counts(report), repo_fields=repo_fields(report),
                   arch_runs=arch_rows(report), grid=grid_view(report), violations=sanitizer_violations(report),
                   perf=perf_view(stages.get("perf")), has_summary=(folder / "summary.md").is_file(),
                   has_png=(folder / "perf.png").is_file(),
                   # each launch's log as the page links it: beside the page, under logs/
                   logs=[(label, path.split("/", 1)[-1]) for label, path in (report.get("logs") or {}).items()])


# -- the index and batch tables --------------------------------------------------------------------

def _row(folder: Path) -> dict:
    href = quote(folder.name)
    try:
        report = json.loads((folder / REPORT).read_text())
    except (OSError, ValueError) as exc:
        return {"label": folder.name, "href": href, "verdict": "UNREADABLE", "error": str(exc), "base": "",
                "head": "", "finished": "", "arch": {}, "perf": None, "perf_column": "", "counts": {},
                "findings_key": 0, "has_page": (folder / PAGE).is_file()}
    perf = (report.get("stages") or {}).get("perf") or {}
    repo = report.get("repo") or {}
    counts = finding_counts(report)
    return {"label": report.get("label", folder.name), "href": href, "verdict": report.get("verdict", "?"),
            "error": "", "base": repo.get("base") or "", "head": repo.get("head") or "",
            "finished": report.get("finished_utc", ""), "arch": arch_verdicts(report),
            "perf": perf.get("median_ratio"), "perf_column": perf.get("worst_column", ""), "counts": counts,
            "findings_key": counts["blocker"] * 10**6 + counts["should-fix"] * 10**3 + counts["note"],
            "has_page": (folder / PAGE).is_file()}


def _table(rows: list[dict]) -> dict:
    rows = sorted(rows, key=lambda row: (rank(VERDICTS, row["verdict"]), row["label"]))
    archs = sorted({arch for row in rows for arch in row["arch"]})
    totals = {verdict: sum(row["verdict"] == verdict for row in rows) for verdict in VERDICTS}
    return {"rows": rows, "archs": archs, "totals": totals, "verdict_rank": {v: i for i, v in enumerate(VERDICTS)}}


def _label_folders(reports: Path) -> list[Path]:
    return sorted(path.parent for path in reports.glob(f"*/{REPORT}"))


def _batches(reports: Path) -> list[dict]:
    batches = []
    for path in sorted(reports.glob(f"*/{BATCH}")):
        try:
            batch = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        batches.append({"name": batch.get("name", path.parent.name), "href": f"{path.parent.name}/{BATCH_PAGE}",
                        "labels": len(batch.get("labels") or []), "finished": batch.get("finished_utc", "")})
    return batches


def write_index(reports: Path) -> Path:
    """reports/index.html: every published label, worst first, and every batch's own table."""
    reports.mkdir(parents=True, exist_ok=True)
    rows = [_row(folder) for folder in _label_folders(reports)]
    return _render("index.html.j2", reports / PAGE, title="kvtasks reports", up=None, batches=_batches(reports),
                   table=_table(rows), prefix="")


def write_batch_page(reports: Path, name: str, labels: list[str], finished_utc: str) -> Path:
    """reports/<name>/batch.json (which labels the batch published) and its page, batch.html."""
    folder = reports / name
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / BATCH, (json.dumps({"name": name, "labels": labels, "finished_utc": finished_utc},
                                             indent=2) + "\n").encode())
    return _render_batch(reports, folder)


def _render_batch(reports: Path, folder: Path) -> Path:
    batch = json.loads((folder / BATCH).read_text())
    rows = [_row(reports / label) for label in batch["labels"]]
    return _render("index.html.j2", folder / BATCH_PAGE, title=f"kvtasks batch {batch['name']}", up="../index.html",
                   batches=[], table=_table(rows), prefix="../")


def rewrite_tables(reports: Path) -> None:
    """Redraw every batch page from its batch.json, then the index: what `doit report` ends with."""
    for path in sorted(reports.glob(f"*/{BATCH}")):
        _render_batch(reports, path.parent)
    write_index(reports)


# -- doit serve ------------------------------------------------------------------------------------

def _stop(signum, frame):
    raise KeyboardInterrupt


def serve(reports: Path, port: int) -> None:
    """Serve reports/ on localhost only, for people who prefer a URL to a file; Ctrl-C (SIGINT) or
    SIGTERM stops it, and it returns (exit 0). Both are handled here, in the main thread: a server
    started from a script's background job inherits SIGINT ignored, and Python then never turns it
    into KeyboardInterrupt."""
    rewrite_tables(reports)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(reports))
    handled = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
    before = {}
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        try:
            before.update({sig: signal.signal(sig, _stop) for sig in handled})
            print(f"serving {reports} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            for sig, disposition in before.items():
                signal.signal(sig, disposition)
