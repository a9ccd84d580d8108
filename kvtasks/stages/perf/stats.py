"""perf statistics: base against head over matched rows, honest at PERF_REPEAT=3.

Owns the comparison of scraped rounds and nothing else: never reads a log, never runs a bench,
never builds a stage result. At PERF_REPEAT=3 a bootstrap over three rounds has only ten distinct
resamples, so: per matched row and column the oriented ratio (> 1: head is better) of each side's
best round (best of n: noise only ever adds time), shown with the range of the ratio over every
pairing of a base round with a head round; a noise floor from the spread between base rounds
(second best against best: an A/A test); a column's ratio is the median over its rows, with exact
distribution-free bounds on that median (order statistics of the row ratios: each end a one-sided
bound at 95% or more from five rows on; fewer rows state the lower confidence they have); the
headline is the worst eligible column. A regression is claimed only when the headline is below
PERF_THRESHOLD and the column's upper bound is below 1 by more than the noise floor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    import numpy as np

CONFIDENCE = 0.95
METHOD = ("per row: best of n rounds per side, with the range over every base/head round pairing and the base "
          "rounds' spread (the A/A noise floor); per column: the median over rows, with exact distribution-free "
          "bounds on it (order statistics; each end's one-sided confidence is stated)")


class Row(BaseModel):
    """One matched row and column: every round of each side and the oriented ratio of their best."""

    row: str
    column: str
    kind: Literal["latency", "throughput"]
    base: list[float]
    head: list[float]
    ratio: float  # > 1: head is better
    round_range: list[float]  # the ratio over every pairing of a base round with a head round
    base_spread: float  # second-best base round against the best: the row's A/A noise


class Column(BaseModel):
    """A column over its rows: the median ratio, with exact bounds on it."""

    median_ratio: float
    samples: int
    eligible: bool  # enough rows (PERF_MIN_ROWS) to be judged
    interval: list[float]  # exact distribution-free bounds on the median ratio
    interval_confidence: float  # each bound's one-sided confidence
    noise_floor: float


@dataclass
class Comparison:
    status: str  # ok | regression | insufficient
    reason: str
    rows: list[Row] = field(default_factory=list)
    columns: dict[str, Column] = field(default_factory=dict)
    worst_column: str | None = None
    headline: float | None = None
    interval: tuple[float, float] | None = None
    noise_floor: float | None = None
    matched_rows: int = 0


def best_round(values: np.ndarray, kind: str, axis=-1) -> np.ndarray:
    """Contention, clock ramps and neighbours only ever add time: the best round is the kernel."""
    import numpy as np  # only perf needs it: every validation imports this module
    values = np.asarray(values)
    return values.min(axis=axis) if kind == "latency" else values.max(axis=axis)


def _oriented(base, head, kind: str):
    return base / head if kind == "latency" else head / base


def _spread(base: np.ndarray, kind: str) -> float:
    """How far base rounds disagree: the second-best base round against the best (an A/A test)."""
    import numpy as np  # only perf needs it: every validation imports this module
    if len(base) < 2:
        return 0.0
    ordered = np.sort(base) if kind == "latency" else np.sort(base)[::-1]
    return float(abs(ordered[1] / ordered[0] - 1))


def median_interval(values, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Exact bounds on the median over rows: (low, high, the confidence of each bound).

    Of n values, the k-th smallest lies below the median of the population they come from with
    probability 1 - P(Binomial(n, 1/2) < k), whatever its distribution; the k-th largest lies above
    it with the same probability. k is the largest whose confidence still reaches `confidence`;
    with fewer than five rows even (min, max) falls short, and the confidence says how far.
    Each bound is one-sided because each decision is: a regression needs the upper bound below 1.
    """
    ordered = sorted(float(value) for value in values)
    count = len(ordered)

    def bound_confidence(k: int) -> float:
        return 1 - sum(math.comb(count, below) for below in range(k)) / 2 ** count

    k = 1
    while k < (count + 1) // 2 and bound_confidence(k + 1) >= confidence:
        k += 1
    return ordered[k - 1], ordered[count - k], bound_confidence(k)


def compare(base_logs: list[dict], head_logs: list[dict], threshold: float, min_rows: int) -> Comparison:
    """Match rows across sides and judge the worst eligible column (see the module docstring)."""
    import numpy as np  # only perf needs it: every validation imports this module
    base_cells, head_cells = _samples(base_logs), _samples(head_logs)
    if not base_cells or not head_cells:
        return Comparison("insufficient", "a side printed no parseable timing table")
    shared = sorted(set(base_cells) & set(head_cells))
    if not shared:
        return Comparison("insufficient", "the two sides measured different rows")
    columns: dict[str, list] = {}
    rows = []
    for cell in shared:
        (_, row, column), kind = cell, base_cells[cell][0]
        if head_cells[cell][0] != kind:
            continue
        base, head = np.array(base_cells[cell][1]), np.array(head_cells[cell][1])
        ratio = float(_oriented(best_round(base, kind), best_round(head, kind), kind))
        pairings = _oriented(base[:, None], head[None, :], kind)
        rows.append(Row(row=row, column=column, kind=kind, base=base.tolist(), head=head.tolist(), ratio=round(ratio, 4),
                        round_range=[round(float(pairings.min()), 4), round(float(pairings.max()), 4)],
                        base_spread=round(_spread(base, kind), 4)))
        columns.setdefault(column, []).append((ratio, _spread(base, kind)))
    matched = len({r.row for r in rows})
    if matched < min_rows:
        return Comparison("insufficient", f"{matched} matched rows; PERF_MIN_ROWS is {min_rows}", rows,
                          matched_rows=matched)
    summary = {}
    for column, cells in columns.items():
        ratios = [ratio for ratio, _ in cells]
        low, high, confidence = median_interval(ratios)
        summary[column] = Column(median_ratio=round(float(np.median(ratios)), 4), samples=len(cells),
                                 eligible=len(cells) >= min_rows, interval=[round(low, 4), round(high, 4)],
                                 interval_confidence=round(confidence, 4),
                                 noise_floor=round(float(np.median([spread for _, spread in cells])), 4))
    eligible = {name: col for name, col in summary.items() if col.eligible}
    if not eligible:
        return Comparison("insufficient", f"no column has {min_rows} matched rows", rows, summary, matched_rows=matched)
    worst = min(eligible, key=lambda name: eligible[name].median_ratio)
    column = eligible[worst]
    low, high = column.interval
    interval = f"interval {low:.3f}-{high:.3f}, each end exact at {column.interval_confidence:.1%}"
    verdict = Comparison("ok", "", rows, summary, worst, column.median_ratio, (low, high), column.noise_floor,
                         matched)
    if column.median_ratio < threshold and high < 1 - column.noise_floor:
        verdict.status = "regression"
        verdict.reason = (f"{worst}: head/base {column.median_ratio:.3f} ({interval}, noise floor "
                          f"{column.noise_floor:.3f}) is below {threshold} over {matched} rows")
    elif column.median_ratio < threshold:
        verdict.reason = (f"{worst}: head/base {column.median_ratio:.3f} is below {threshold}, but the "
                          f"{interval} does not clear the noise floor {column.noise_floor:.3f}")
    else:
        verdict.reason = f"worst column {worst}: head/base {column.median_ratio:.3f} over {matched} rows"
    return verdict


def _samples(logs: list[dict]) -> dict:
    """{(signature, row, column): (kind, [one value per log])}"""
    cells: dict = {}
    for tables in logs:
        for (signature, row), values in tables.items():
            for column, (kind, value) in values.items():
                cells.setdefault((signature, row, column), (kind, []))[1].append(value)
    return cells


def best_of(base: list[float], head: list[float], kind: str) -> float:
    """The reference executor's rule: best sample per side (min latency, max throughput)."""
    if kind == "latency":
        return min(base) / min(head)
    return max(head) / max(base)
