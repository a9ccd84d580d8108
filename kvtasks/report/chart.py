"""perf.png: head/base per row with its spread and the noise band (the matplotlib extra)."""
from __future__ import annotations

from pathlib import Path

from kvtasks.report.model import Report


def perf_chart(report: Report, path: Path) -> bool:
    """head/base per row with its side's spread and the noise band, as a PNG (matplotlib extra)."""
    perf = report.stages.perf.model_dump() if report.stages.perf is not None else {}
    if not perf.get("rows"):
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return False
    rows = perf["rows"]
    figure, axes = pyplot.subplots(figsize=(max(6, len(rows) * 0.5), 4))
    ratios = [row["ratio"] for row in rows]
    spreads = [row["base_spread"] for row in rows]
    axes.errorbar(range(len(rows)), ratios, yerr=spreads, fmt="o", capsize=3, label="head/base (base spread)")
    noise = perf.get("noise_floor") or 0.0
    axes.axhspan(1 - noise, 1 + noise, alpha=0.2, label="noise band")
    axes.axhline(perf.get("threshold", 0.95), linestyle="--", label="PERF_THRESHOLD")
    axes.set_xticks(range(len(rows)), [f"{row['column']}: {row['row']}" for row in rows], rotation=60, ha="right",
                    fontsize=7)
    axes.set_ylabel("head/base (> 1: head better)")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return True
