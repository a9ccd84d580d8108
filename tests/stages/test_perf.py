import re

import numpy as np
import pytest

from kvtasks.stages.perf import best_of, column_kind, compare, scrape
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
