import random

import numpy as np
import pytest

from kvtasks.stages.perf.scrape import scrape
from kvtasks.stages.perf.stats import best_of, compare, median_interval


def test_three_rounds_report_best_of_n_and_exact_bounds_not_a_bootstrap():
    rounds = [[1.0, 1.02, 1.05], [2.0, 2.1, 2.01], [3.0, 3.3, 3.03], [4.0, 4.1, 4.2], [5.0, 5.5, 5.05], [6, 6.1, 6.3]]
    slower = [1.25, 1.2, 1.3, 1.1, 1.22, 1.28]

    def logs(scale):
        return [{("t", f"r{row}"): {"us": ("latency", values[n] * scale[row])} for row, values in enumerate(rounds)}
                for n in range(3)]

    result = compare(logs([1] * 6), logs(slower), 0.95, 3)
    first = next(row for row in result.rows if row.row == "r0")
    assert "interval" not in first.model_dump() and first.ratio == pytest.approx(1 / 1.25)
    # every base round against every head round: best 1.0 against worst 1.05 * 1.25, and the reverse
    assert first.round_range == pytest.approx([1.0 / (1.05 * 1.25), 1.05 / 1.25], abs=1e-4)
    ratios = sorted(1 / s for s in slower)
    column = result.columns["us"]
    # six rows: the smallest and largest ratio bound the median, each at exactly 1 - 1/64
    assert column.interval == pytest.approx([ratios[0], ratios[-1]], abs=1e-4)
    assert column.interval_confidence == pytest.approx(1 - 1 / 64, abs=1e-4)
    assert result.status == "regression" and "each end exact at 98.4%" in result.reason
    assert median_interval(range(20))[:2] == (5, 14) and median_interval([1, 2, 3])[2] == pytest.approx(0.875)


def test_statistics_do_not_call_noise_a_regression():
    rng = np.random.default_rng(1)
    base = [{("t", f"r{i}"): {"us": ("latency", 10 * (1 + rng.normal(0, 0.05)))} for i in range(6)} for _ in range(3)]
    head = [{("t", f"r{i}"): {"us": ("latency", 10 * 1.03 * (1 + rng.normal(0, 0.05)))} for i in range(6)}
            for _ in range(3)]
    assert compare(base, head, 0.99, 3).status != "regression"
    assert best_of([10, 11], [12, 13], "latency") == pytest.approx(10 / 12)


# -- logs as benches print them, scraped and compared (the stage runs the bench: test_stage.py) ----

def _rounds(print_log):
    """Three rounds a side, head's kernel 25% slower, each value with up to 1% jitter."""
    rng = random.Random(7)
    return [scrape(print_log(1.0, rng)) for _ in range(3)], [scrape(print_log(1.25, rng)) for _ in range(3)]


def _aiter_log(cost, rng):
    # aiter's perftest convention: one [perf] line per shape; `torch` is both a metric and part of the dtype
    return "\n".join(f"[perf] dim: ({64 * (m + 1)}, 1024), dtype: torch.bfloat16, "
                     f"torch avg: {10.0 * (m + 1) * (1 + rng.uniform(0, 0.01)):.2f} us, "
                     f"ck avg: {10.0 * (m + 1) * cost * (1 + rng.uniform(0, 0.01)):.2f} us" for m in range(6))


def _error_column_log(cost, rng):
    # a measured error column beside the timing: its value differs on every run, base or head
    return "\n".join(["| M | N | kernel us | rel err |", "|---|---|---|---|"] + [
        f"| {m} | 128 | {10.0 * (m + 1) * cost * (1 + rng.uniform(0, 0.01)):.3f} | {rng.uniform(1e-4, 9e-4):.2e} |"
        for m in range(6)])


def test_aiter_perf_lines_are_rows_of_one_table():
    compared = compare(*_rounds(_aiter_log), 0.95, 3)
    assert compared.status == "regression" and compared.matched_rows == 6, compared.reason
    assert compared.worst_column == "ck us" and compared.headline == pytest.approx(0.8, abs=0.02)
    assert compared.columns["torch us"].median_ratio == pytest.approx(1.0, abs=0.02)
    assert {row.row for row in compared.rows} == {f"dim: ({64 * m}, 1024), dtype: torch.bfloat16" for m in range(1, 7)}


def test_a_measured_error_column_never_breaks_row_identity():
    compared = compare(*_rounds(_error_column_log), 0.95, 3)
    assert compared.status == "regression" and compared.matched_rows == 6, compared.reason
    assert compared.worst_column == "kernel us" and set(compared.columns) == {"kernel us"}
    assert {row.row for row in compared.rows} == {f"{m} / 128" for m in range(6)}
