"""What a report's page shows, drawn from its published JSON: the finding counts, the per-arch
runs, the grid cell by cell on base and head, the CPU tier's sanitizer violations and the perf
chart's geometry. Pure functions of the report's dict: no files, no templates (`pages` renders).
"""
from __future__ import annotations

from typing import Any, Iterable

# worst first: the order a maintainer reads a night's verdicts in
VERDICTS = ("BLOCK", "NEEDS_WORK", "INCONCLUSIVE", "PASS")
SEVERITIES = ("blocker", "should-fix", "note")


def rank(order: tuple[str, ...], value: Any) -> int:
    return order.index(value) if value in order else len(order)


def finding_counts(report: dict) -> dict[str, int]:
    findings = report.get("findings") or []
    return {severity: sum(f.get("severity") == severity for f in findings) for severity in SEVERITIES}


def repo_fields(report: dict) -> list[tuple[str, Any]]:
    """The repo block as published, in its own order: OIDs, patch, and any refs a run recorded."""
    repo = dict(report.get("repo") or {})
    if "head" in repo and repo["head"] is None:
        repo["head"] = "null (not matched to a remote PR head)"
    if repo.get("kind") == "unknown":  # neither of the layouts kvtasks knows by name: no fault of the repository's
        repo["kind"] = "other (neither aiter nor FlyDSL)"
    return list(repo.items())


def arch_runs(report: dict) -> dict[str, dict]:
    """arch -> that arch's run, from the report's per-arch runs when a run had several; else empty."""
    runs = report.get("arch_runs") or {}
    if isinstance(runs, list):
        runs = {run.get("arch", "?"): run for run in runs if isinstance(run, dict)}
    return {str(arch): run if isinstance(run, dict) else {"verdict": run} for arch, run in runs.items()}


def arch_verdicts(report: dict) -> dict[str, str]:
    return {arch: str(run.get("verdict", "?")) for arch, run in arch_runs(report).items()}


def arch_rows(report: dict) -> list[dict]:
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
