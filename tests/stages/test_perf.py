import re

import numpy as np
import pytest

from kvtasks.stages.perf import best_of, column_kind, compare, median_interval, scrape
from tests.kernel_repos import make_patch, make_repo

KERNEL = "COST = 1.0\n\n\ndef op(n):\n    return n\n"
TEST = "from kernels.op import op\n\n\ndef test_op():\n    assert op(3) == 3\n"
# A bench whose printed times follow the kernel's COST, with small run-to-run jitter: the timing
# pipeline (rounds, scraping, statistics) is real; only the clock is synthetic, so tests are exact.
BENCH = '''import os
import random

from kernels.op import COST, op

ROWS = {rows}

if __name__ == "__main__":
    jitter = random.Random(os.getpid())
    print("| M | N | time (us) | ref (us) |")
    print("|---|---|---|---|")
    for m in range(ROWS):
        op(m)
        base = 10.0 * (m + 1)
        print(f"| {{m}} | 128 | {{base * COST * (1 + jitter.uniform(0, 0.01)):.3f}} | "
              f"{{base * (1 + jitter.uniform(0, 0.01)) * {control}:.3f}} |")
    {extra}
'''


def perf_repo(tmp_path, rows=6, extra="pass", control="1.0"):
    return make_repo(tmp_path / "perf-repo", {
        "kernels/__init__.py": "", "kernels/op.py": KERNEL, "tests/test_op.py": TEST,
        "bench/bench_op.py": BENCH.format(rows=rows, extra=extra, control=control),
    })


PERF = ["--target", "tests/test_op.py", "--perf-args", "bench/bench_op.py"]


def test_head_25_percent_slower_needs_work_with_the_rows(tmp_path, validate, monkeypatch):
    monkeypatch.setenv("PERF_REPEAT", "3")
    repo = perf_repo(tmp_path)
    patch = make_patch(repo, {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")}, tmp_path / "slow.patch")
    result = validate(repo, "--patch", str(patch), *PERF)
    perf = result.stage("perf")
    assert perf["status"] == "fail" and perf["worst_column"] == "time (us)"
    assert perf["median_ratio"] == pytest.approx(0.8, abs=0.02)
    assert perf["interval"][1] < 1 - perf["noise_floor"]
    assert perf["matched_rows"] == 6 and len(perf["regressed_rows"]) == 5
    assert perf["columns"]["ref (us)"]["median_ratio"] == pytest.approx(1.0, abs=0.02)
    assert perf["repeats"]["base"] == 3 and perf["baseline_method"] == "patch-reversed-same-worktree"
    assert [f["stage"] for f in result.findings("should-fix")] == ["perf"]
    assert result.verdict == "NEEDS_WORK"
    summary = (result.out.parent / "summary.md").read_text()
    assert "| time (us) | 0 / 128 |" in summary
    assert re.search(r"\| time \(us\) \| 0\.[78]\d\d \| 0\.\d+-0\.\d+ \|", summary)
    assert "Statistics: per row: best of n rounds per side" in summary and "bootstrap" not in summary


# aiter's perftest convention: one [perf] line per shape; `torch` is both a metric and part of the dtype
AITER_BENCH = '''import os
import random

from kernels.op import COST, op

if __name__ == "__main__":
    jitter = random.Random(os.getpid())
    for m in range(6):
        op(m)
        base = 10.0 * (m + 1)
        print(f"[perf] dim: ({64 * (m + 1)}, 1024), dtype: torch.bfloat16, "
              f"torch avg: {base * (1 + jitter.uniform(0, 0.01)):.2f} us, "
              f"ck avg: {base * COST * (1 + jitter.uniform(0, 0.01)):.2f} us")
'''
# a measured error column beside the timing: its value differs on every run, base or head
ERROR_COLUMN_BENCH = '''import os
import random

from kernels.op import COST, op

if __name__ == "__main__":
    jitter = random.Random(os.getpid())
    print("| M | N | kernel us | rel err |")
    print("|---|---|---|---|")
    for m in range(6):
        op(m)
        print(f"| {m} | 128 | {10.0 * (m + 1) * COST * (1 + jitter.uniform(0, 0.01)):.3f} | "
              f"{jitter.uniform(1e-4, 9e-4):.2e} |")
'''


def slower_head(tmp_path, bench):
    repo = make_repo(tmp_path / "perf-repo", {"kernels/__init__.py": "", "kernels/op.py": KERNEL,
                                              "tests/test_op.py": TEST, "bench/bench_op.py": bench})
    return repo, make_patch(repo, {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")},
                            tmp_path / "slow.patch")


def test_aiter_perf_lines_are_rows_of_one_table(tmp_path, validate):
    repo, patch = slower_head(tmp_path, AITER_BENCH)
    perf = validate(repo, "--patch", str(patch), *PERF).stage("perf")
    assert perf["status"] == "fail" and perf["matched_rows"] == 6, perf["note"]
    assert perf["worst_column"] == "ck us" and perf["median_ratio"] == pytest.approx(0.8, abs=0.02)
    assert perf["columns"]["torch us"]["median_ratio"] == pytest.approx(1.0, abs=0.02)
    assert {row["row"] for row in perf["rows"]} == {f"dim: ({64 * m}, 1024), dtype: torch.bfloat16"
                                                    for m in range(1, 7)}


def test_a_measured_error_column_never_breaks_row_identity(tmp_path, validate):
    repo, patch = slower_head(tmp_path, ERROR_COLUMN_BENCH)
    perf = validate(repo, "--patch", str(patch), *PERF).stage("perf")
    assert perf["status"] == "fail" and perf["matched_rows"] == 6, perf["note"]
    assert perf["worst_column"] == "kernel us" and {row["row"] for row in perf["rows"]} == {
        f"{m} / 128" for m in range(6)}


def test_head_unchanged_passes(tmp_path, validate):
    repo = perf_repo(tmp_path)
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    perf = validate(repo, "--patch", str(patch), *PERF).stage("perf")
    assert perf["status"] == "pass" and perf["median_ratio"] == pytest.approx(1.0, abs=0.03)


def test_two_rows_only_is_a_skip(tmp_path, validate):
    repo = perf_repo(tmp_path, rows=2)
    patch = make_patch(repo, {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")}, tmp_path / "slow.patch")
    result = validate(repo, "--patch", str(patch), *PERF)
    perf = result.stage("perf")
    assert perf["status"] == "skip" and "2 matched rows; PERF_MIN_ROWS is 3" in perf["note"]
    assert result.findings("should-fix") == []


def test_a_bench_writing_into_the_tree_is_cleaned_and_changes_nothing(tmp_path, validate):
    repo = perf_repo(tmp_path, extra='open("tuned_op_bench.csv", "w").write("M,N,us\\n")')
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    result = validate(repo, "--patch", str(patch), *PERF)  # the fixture checks the tree is byte-identical
    perf = result.stage("perf")
    assert perf["status"] == "pass" and perf["bench_artifacts"] == ["tuned_op_bench.csv"]
    assert result.findings("should-fix") == []


def pr_added_bench(tmp_path, control):
    repo = make_repo(tmp_path / "perf-repo", {"kernels/__init__.py": "", "kernels/op.py": KERNEL,
                                              "tests/test_op.py": TEST})
    bench = BENCH.format(rows=6, extra="pass", control=control)
    return repo, make_patch(repo, {"bench/bench_op.py": bench}, tmp_path / "bench.patch")


def test_a_pr_added_bench_without_a_control_column_is_not_timed(tmp_path, validate):
    repo, patch = pr_added_bench(tmp_path, "1.0")
    perf = validate(repo, "--patch", str(patch), *PERF).stage("perf")
    assert perf["status"] == "skip" and "needs --perf-control-column" in perf["note"]


def test_a_transplant_whose_control_reproduces_is_believed(tmp_path, validate):
    repo, patch = pr_added_bench(tmp_path, "1.0")
    perf = validate(repo, "--patch", str(patch), *PERF, "--perf-control-column", "ref").stage("perf")
    assert perf["status"] == "pass" and perf["baseline_method"] == "target-transplant"
    assert "reproduced" in perf["control_note"]


def test_a_transplant_whose_control_drifts_is_not_believed(tmp_path, validate):
    # the bench's control column follows a file only head has, so it differs across the two trees
    repo, _ = pr_added_bench(tmp_path, "1.0")
    drifting = BENCH.format(rows=6, extra="pass", control="(1.3 if os.path.exists('bench/marker_head') else 1.0)")
    patch = make_patch(repo, {"bench/bench_op.py": drifting, "bench/marker_head": "head\n"}, tmp_path / "bench.patch")
    perf = validate(repo, "--patch", str(patch), *PERF, "--perf-control-column", "ref").stage("perf")
    assert perf["status"] == "skip" and "is not believed" in perf["note"]
    assert "median_ratio" not in perf and "regressed_rows" not in perf


def test_no_perf_says_so(tmp_path, validate):
    repo = perf_repo(tmp_path)
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    perf = validate(repo, "--patch", str(patch), *PERF, "--no-perf").stage("perf")
    assert perf["status"] == "skip" and "disabled with --no-perf" in perf["note"]


def test_scrapers_read_every_format():
    markdown = "| shape | dtype | latency (us) |\n|---|---|---|\n| 64x64 | f16 | 12.5 |\n| 128x64 | f16 | 20 |\n"
    perf_lines = "[perf] dim: (128, 8192) , dtype: torch.bfloat16 ck avg: 12.5 us triton avg: 14 us\n"
    csv = "M,N,time_ms\n64,128,0.5\n128,128,0.9\n"
    triton = ("softmax-performance:\n        N  Triton (GB/s)  Torch (GB/s)\n0   256.0  100.5  90.0\n"
              "1   512.0  120.0  95.5\n")
    assert scrape(markdown)[("shape|dtype", "64x64 / f16")] == {"latency (us)": ("latency", 12.5)}
    assert scrape(perf_lines)[("[perf]", "dim: (128, 8192) , dtype: torch.bfloat16")] == {
        "ck us": ("latency", 12.5), "triton us": ("latency", 14.0)}
    assert scrape(csv)[("m|n", "128 / 128")] == {"time_ms": ("latency", 0.9)}
    assert scrape(triton)[("n", "512.0")] == {"Triton (GB/s)": ("throughput", 120.0),
                                              "Torch (GB/s)": ("throughput", 95.5)}
    assert column_kind("TFLOPS") == "throughput" and column_kind("us") == "latency" and column_kind("dtype") == "key"


def test_row_identity_rests_on_shape_cells_never_on_measured_values():
    unlabelled = ("| M | dtype | flydsl | us |\n|---|---|---|---|\n| 64 | bf16 | 3.1e-04 | 12.5 |\n"
                  "| 128 | bf16 | 0.002 | 20 |\n")
    assert set(scrape(unlabelled)) == {("m|dtype", "64 / bf16"), ("m|dtype", "128 / bf16")}
    ratio = "| N | speedup | ms |\n|---|---|---|\n| 256.0 | 1 | 0.5 |\n| 512.0 | 2 | 0.9 |\n"
    assert set(scrape(ratio)) == {("n", "256.0"), ("n", "512.0")}  # a header naming a ratio, integral or not
    # fractions that alone tell the rows apart are a setting (a dropout p), not a measurement
    setting = "| M | p | us |\n|---|---|---|\n| 64 | 0.0 | 12.5 |\n| 64 | 0.1 | 20 |\n"
    assert set(scrape(setting)) == {("m|p", "64 / 0.0"), ("m|p", "64 / 0.1")}
    assert column_kind("max abs diff") == column_kind("rel_err") == column_kind("mem (MB)") == "measured"


def test_three_rounds_report_best_of_n_and_exact_bounds_not_a_bootstrap():
    rounds = [[1.0, 1.02, 1.05], [2.0, 2.1, 2.01], [3.0, 3.3, 3.03], [4.0, 4.1, 4.2], [5.0, 5.5, 5.05], [6, 6.1, 6.3]]
    slower = [1.25, 1.2, 1.3, 1.1, 1.22, 1.28]

    def logs(scale):
        return [{("t", f"r{row}"): {"us": ("latency", values[n] * scale[row])} for row, values in enumerate(rounds)}
                for n in range(3)]

    result = compare(logs([1] * 6), logs(slower), 0.95, 3)
    first = next(row for row in result.rows if row["row"] == "r0")
    assert "interval" not in first and first["ratio"] == pytest.approx(1 / 1.25)
    # every base round against every head round: best 1.0 against worst 1.05 * 1.25, and the reverse
    assert first["round_range"] == pytest.approx([1.0 / (1.05 * 1.25), 1.05 / 1.25], abs=1e-4)
    ratios = sorted(1 / s for s in slower)
    column = result.columns["us"]
    # six rows: the smallest and largest ratio bound the median, each at exactly 1 - 1/64
    assert column["interval"] == pytest.approx([ratios[0], ratios[-1]], abs=1e-4)
    assert column["interval_confidence"] == pytest.approx(1 - 1 / 64, abs=1e-4)
    assert result.status == "regression" and "each end exact at 98.4%" in result.reason
    assert median_interval(range(20))[:2] == (5, 14) and median_interval([1, 2, 3])[2] == pytest.approx(0.875)


def test_statistics_do_not_call_noise_a_regression():
    rng = np.random.default_rng(1)
    base = [{("t", f"r{i}"): {"us": ("latency", 10 * (1 + rng.normal(0, 0.05)))} for i in range(6)} for _ in range(3)]
    head = [{("t", f"r{i}"): {"us": ("latency", 10 * 1.03 * (1 + rng.normal(0, 0.05)))} for i in range(6)}
            for _ in range(3)]
    assert compare(base, head, 0.99, 3).status != "regression"
    assert best_of([10, 11], [12, 13], "latency") == pytest.approx(10 / 12)


def test_a_chart_is_written_beside_the_report(tmp_path, validate):
    pytest.importorskip("matplotlib")
    repo = perf_repo(tmp_path)
    patch = make_patch(repo, {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")}, tmp_path / "slow.patch")
    result = validate(repo, "--patch", str(patch), *PERF)
    chart = result.out.parent / "perf.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_one_bench_importing_a_changed_module_is_discovered(tmp_path, validate):
    harnessed = BENCH.replace("import random\n", "import random  # a perftest-style harness\n")
    repo = make_repo(tmp_path / "perf-repo", {
        "kernels/__init__.py": "", "kernels/op.py": KERNEL, "tests/test_op.py": TEST,
        "bench/bench_op.py": harnessed.format(rows=6, extra="pass", control="1.0"),
        "bench/bench_other.py": "# perftest harness for something else\nimport json\n",
    })
    patch = make_patch(repo, {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")}, tmp_path / "slow.patch")
    perf = validate(repo, "--patch", str(patch), "--target", "tests/test_op.py").stage("perf")
    assert perf["target"] == "bench/bench_op.py" and perf["target_basis"] == "discovered-bench"
    assert perf["status"] == "fail"
