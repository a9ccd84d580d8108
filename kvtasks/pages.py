"""Static HTML views of published reports: reports/<label>/index.html and reports/index.html.

Rendering is publishing, separate from running: every page is a function of the JSON already
published under reports/ (validation_report.json, and batch.json for a batch's own table), so
`doit report` can redraw all of them from files alone. Every string on a page came from a pull
request or its runs (file names, test ids, log lines) and is escaped by Jinja2's autoescape. Pages
fetch nothing at view time: the CSS is inlined, the perf chart is inline SVG and the index's
sorting is a few lines of inline script; filtering by verdict needs no script at all, so a page
works from a file:// URL and from any static host.
"""
from __future__ import annotations

import functools
import http.server
import json
from urllib.parse import quote
from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, PackageLoader

from kvtasks import faults
from kvtasks.report import tier_line
from kvtasks.files import write_atomic

REPORT = "validation_report.json"
PAGE = "index.html"
BATCH = "batch.json"
BATCH_PAGE = "batch.html"
# worst first: the order a maintainer reads a night's verdicts in
VERDICTS = ("BLOCK", "NEEDS_WORK", "INCONCLUSIVE", "PASS")
SEVERITIES = ("blocker", "should-fix", "note")

# autoescape everywhere: the templates end in .j2, which select_autoescape would not recognise
_environment = Environment(loader=PackageLoader("kvtasks", "templates"), autoescape=True, trim_blocks=True,
                           lstrip_blocks=True)
_environment.globals["tier_line"] = tier_line


def _css() -> str:
    return (Path(__file__).parent / "templates" / "pages.css").read_text()


def _render(template: str, path: Path, **context: Any) -> Path:
    html = _environment.get_template(template).render(css=_css(), verdicts=VERDICTS, **context)
    write_atomic(path, html.encode())
    return path


# -- one report ------------------------------------------------------------------------------------

def write_report_page(folder: Path) -> Path:
    """folder/index.html from folder/validation_report.json."""
    faults.point("page")
    report = json.loads((folder / REPORT).read_text())
    stages = report.get("stages") or {}
    return _render("report.html.j2", folder / PAGE, report=report,
                   stages=[(name, stage) for name, stage in stages.items() if stage is not None],
                   findings=sorted(report.get("findings") or [], key=lambda f: _rank(SEVERITIES, f.get("severity"))),
                   counts=finding_counts(report), repo_fields=_repo_fields(report),
                   arch_runs=_arch_rows(report), grid=grid_view(report), violations=sanitizer_violations(report),
                   perf=perf_view(stages.get("perf")), has_summary=(folder / "summary.md").is_file(),
                   has_png=(folder / "perf.png").is_file())


def _rank(order: tuple[str, ...], value: Any) -> int:
    return order.index(value) if value in order else len(order)


def finding_counts(report: dict) -> dict[str, int]:
    findings = report.get("findings") or []
    return {severity: sum(f.get("severity") == severity for f in findings) for severity in SEVERITIES}


def _repo_fields(report: dict) -> list[tuple[str, Any]]:
    """The repo block as published, in its own order: OIDs, patch, and any refs a run recorded."""
    repo = dict(report.get("repo") or {})
    if "head" in repo and repo["head"] is None:
        repo["head"] = "null (not matched to a remote PR head)"
    return list(repo.items())


def arch_runs(report: dict) -> dict[str, dict]:
    """arch -> that arch's run, from the report's per-arch runs when a run had several; else empty."""
    runs = report.get("arch_runs") or {}
    if isinstance(runs, list):
        runs = {run.get("arch", "?"): run for run in runs if isinstance(run, dict)}
    return {str(arch): run if isinstance(run, dict) else {"verdict": run} for arch, run in runs.items()}


def arch_verdicts(report: dict) -> dict[str, str]:
    return {arch: str(run.get("verdict", "?")) for arch, run in arch_runs(report).items()}


def _arch_rows(report: dict) -> list[dict]:
    """Per arch: its verdict, and the run's plain facts (node, GPU model, ...) as one line."""
    return [{"arch": arch, "verdict": str(run.get("verdict", "?")),
             "facts": "; ".join(f"{key}: {value}" for key, value in run.items()
                                if key not in ("arch", "verdict") and isinstance(value, (str, int, float)))}
            for arch, run in arch_runs(report).items()]


def _cell_tokens(cell: str) -> list[str]:
    return [token.strip() for token in str(cell).split(",")]


def _names_cell(test_id: str, tokens: list[str]) -> bool:
    """pytest ids a parametrized cell as its values joined by '-': test[64-2000-f32] names 64,2000,f32."""
    if "[" not in test_id:
        return False
    params = test_id.partition("[")[2].removesuffix("]").split("-")
    return any(params[start:start + len(tokens)] == tokens for start in range(len(params) - len(tokens) + 1))


def _side_outcomes(cells: list[str], run: dict | None, runner: str) -> list[str]:
    """What one side's grid run says about each cell, never more than the run recorded."""
    if not run:
        return ["not run"] * len(cells)
    stats = run.get("stats") or {}
    if run.get("timed_out"):
        return ["timed out"] * len(cells)
    if run.get("exit") == 0:
        return ["passed" if stats.get("executed") else "nothing executed"] * len(cells)
    failed = stats.get("failed_tests") or []
    if runner != "pytest" or not failed:
        return [f"run failed (exit {run.get('exit')}); not attributable to one cell"] * len(cells)
    outcomes = []
    for cell in cells:
        naming = [test for test in failed if _names_cell(test, _cell_tokens(cell))]
        outcomes.append("failed: " + ", ".join(naming) if naming else "no failing test names it")
    return outcomes


def grid_view(report: dict) -> dict | None:
    """The independent grid, cell by cell, on base and on head."""
    stages = report.get("stages") or {}
    stage = stages.get("correctness_grid") or {}
    selection = report.get("test_selection") or {}
    cells = stage.get("cells") or selection.get("grid_cells") or []
    if not cells:
        return None
    runner = selection.get("runner", "")
    base = (stages.get("baseline_control") or {}).get("s1_grid")
    skipped = stage.get("interpreter_skipped_cells") or {}
    head = _side_outcomes(cells, stage if "exit" in stage else None, runner)
    base_outcomes = _side_outcomes(cells, base if base and "exit" in base else None, runner)
    rows = [{"cell": cell, "base": f"not run: {skipped[cell]}" if cell in skipped else base_outcomes[i],
             "head": f"not run: {skipped[cell]}" if cell in skipped else head[i]} for i, cell in enumerate(cells)]
    return {"status": stage.get("status", "skip"), "note": stage.get("note", ""),
            "channel": stage.get("channel") or selection.get("grid_channel", ""), "rows": rows,
            "failed_tests": (stage.get("stats") or {}).get("failed_tests") or []}


def _tier_evidence(value: Any, where: str) -> Iterable[tuple[str, dict]]:
    """Every CPU-tier evidence block inside a stage, with where it sits (stage, or stage.run)."""
    if isinstance(value, dict):
        tier = value.get("cpu_tier")
        if isinstance(tier, dict) and "violations" in tier:
            yield where, tier
        for key, inner in value.items():
            if key != "cpu_tier" and isinstance(inner, dict):
                yield from _tier_evidence(inner, f"{where}.{key}")


def sanitizer_violations(report: dict) -> list[dict] | None:
    """Bounds-sanitizer violations from every run that ran under the CPU tier; None when none did."""
    found, ran = [], False
    for name, stage in (report.get("stages") or {}).items():
        for where, tier in _tier_evidence(stage or {}, name):
            ran = True
            found += [{"where": where, **violation} for violation in tier.get("violations") or []]
    return found if ran else None


# -- perf ------------------------------------------------------------------------------------------

_CHART_WIDTH, _LABEL_WIDTH, _ROW_HEIGHT, _MARGIN = 720, 260, 22, 30


def perf_view(perf: dict | None) -> dict | None:
    """The perf rows and an inline SVG chart's geometry: head/base per row (best of n) with the range
    over its base/head round pairs, the line at 1, PERF_THRESHOLD dashed and the noise band shaded."""
    rows = (perf or {}).get("rows") or []
    if not rows:
        return None
    threshold = perf.get("threshold")
    noise = perf.get("noise_floor") or 0.0
    values = [v for row in rows for v in (row["ratio"], *(row.get("round_range") or []))] + [1 - noise, 1 + noise]
    if threshold is not None:
        values.append(threshold)
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or 0.05
    low, high = low - pad, high + pad
    plot = _CHART_WIDTH - _LABEL_WIDTH - _MARGIN

    def x(value: float) -> float:
        return round(_LABEL_WIDTH + (value - low) / (high - low) * plot, 1)

    points = []
    for position, row in enumerate(rows):
        interval = row.get("round_range") or [row["ratio"], row["ratio"]]
        points.append({"label": f"{row.get('column', '')}: {row.get('row', '')}", "ratio": row["ratio"],
                       "x": x(row["ratio"]), "low": x(interval[0]), "high": x(interval[1]),
                       "y": _MARGIN + position * _ROW_HEIGHT + _ROW_HEIGHT // 2,
                       "below": threshold is not None and row["ratio"] < threshold})
    height = _MARGIN * 2 + len(rows) * _ROW_HEIGHT
    ticks = [round(low + (high - low) * step / 4, 3) for step in range(5)]
    return {"rows": rows, "columns": perf.get("columns") or {}, "headline": perf.get("median_ratio"),
            "statistics": perf.get("statistics"),
            "worst_column": perf.get("worst_column"), "threshold": threshold, "noise_floor": noise,
            "chart": {"width": _CHART_WIDTH, "height": height, "points": points, "one": x(1.0),
                      "threshold": x(threshold) if threshold is not None else None,
                      "band": (x(1 - noise), x(1 + noise)), "top": _MARGIN // 2, "bottom": height - _MARGIN,
                      "ticks": [(tick, x(tick)) for tick in ticks], "left": _LABEL_WIDTH}}


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
    rows = sorted(rows, key=lambda row: (_rank(VERDICTS, row["verdict"]), row["label"]))
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

def serve(reports: Path, port: int) -> None:
    """Serve reports/ on localhost only, for people who prefer a URL to a file; Ctrl-C stops it."""
    rewrite_tables(reports)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(reports))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving {reports} at http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
