import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from kvtasks.run import pipeline
from kvtasks.stages import StageResult, cpu_tier, result
from kvtasks.stages.perf import stage as perf_stage
from kvtasks.stages.perf.stage import Perf
from kvtasks.stages.perf.stats import compare
from tests.kernel_repos import make_patch
from tests.stages.perf.benches import BENCH, KERNEL, PERF, TEST, perf_repo, pr_added_bench, rounds
from tests.test_report import results
from tests.recorded import after_both_sides


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
    # and the rows as a chart beside the report, where the matplotlib extra is installed
    pytest.importorskip("matplotlib")
    assert (result.out.parent / "perf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bench_writing_into_the_tree_is_cleaned_and_changes_nothing(tmp_path, validate):
    repo = perf_repo(tmp_path, extra='open("tuned_op_bench.csv", "w").write("M,N,us\\n")')
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    result = validate(repo, "--patch", str(patch), *PERF)  # the fixture checks the tree is byte-identical
    perf = result.stage("perf")
    assert perf["status"] == "pass" and perf["bench_artifacts"] == ["tuned_op_bench.csv"]
    assert result.findings("should-fix") == []


def test_a_transplant_whose_control_reproduces_is_believed(tmp_path, validate):
    repo, patch = pr_added_bench(tmp_path, "1.0")
    perf = validate(repo, "--patch", str(patch), *PERF, "--perf-control-column", "ref").stage("perf")
    assert perf["status"] == "pass" and perf["baseline_method"] == "target-transplant"
    assert "reproduced" in perf["control_note"]


# perf's decisions over recorded rounds (tests/kit.py); the tests above time real benches, a PR's bench on a
# transplanted baseline included
PERF_FILES = {"kernels/__init__.py": "", "kernels/op.py": KERNEL, "tests/test_op.py": TEST}
BENCH_FILE = "bench/bench_op.py"
BENCH_SOURCE = BENCH.format(rows=6, extra="pass", control="1.0")  # as perf_repo and pr_added_bench write it


def timed(tmp_path: Path, runs: dict, head: dict, base: dict = PERF_FILES, **options) -> tuple[StageResult, list]:
    """perf over the recorded rounds once both sides' repository tests passed: its result, and what the
    rounds wrote into the tree (side lent, path, text)."""
    ctx, _ = after_both_sides(tmp_path, runs, base=base, head=head, target="tests/test_op.py", expected_route="",
                              perf_args=BENCH_FILE, **options)
    return perf_stage.run(ctx), ctx.worktree.written


def test_a_pr_added_bench_without_a_control_column_is_not_timed(tmp_path):
    stage, written = timed(tmp_path, {}, {BENCH_FILE: BENCH_SOURCE})  # a round launched would fail: none was made
    assert stage.stage.status == "skip" and "needs --perf-control-column" in stage.stage.note and written == []


def test_a_transplant_whose_control_drifts_is_not_believed(tmp_path):
    # the bench's control column follows a file only head has, so it differs across the two trees
    drifting = BENCH.format(rows=6, extra="pass", control="(1.3 if os.path.exists('bench/marker_head') else 1.0)")
    stage, written = timed(tmp_path, rounds(tmp_path, head_control=1.3),
                           {BENCH_FILE: drifting, "bench/marker_head": "head\n"}, perf_control_column="ref")
    assert written == [("base", BENCH_FILE, drifting)] * 3  # head's bench, timed in base's tree each round
    assert stage.stage.status == "skip" and "is not believed" in stage.stage.note
    assert stage.stage.median_ratio is None and stage.stage.regressed_rows is None


def test_no_perf_says_so(tmp_path):
    stage, _ = timed(tmp_path, {}, {"README.md": "docs\n"}, base={**PERF_FILES, BENCH_FILE: BENCH_SOURCE}, no_perf=True)
    assert stage.stage.status == "skip" and "disabled with --no-perf" in stage.stage.note


def test_perf_evidence_is_typed_reads_back_as_written_and_refuses_unknown_fields():
    compared = compare([{("t", f"r{row}"): {"us": ("latency", 10.0 + row)} for row in range(3)}] * 2,
                       [{("t", f"r{row}"): {"us": ("latency", 12.5 + row)} for row in range(3)}] * 2, 0.95, 3)
    written = result("perf", "pass", compared.reason, rows=compared.rows, columns=compared.columns,
                     median_ratio=compared.headline)
    stored = written.model_dump_json()
    read = StageResult.model_validate_json(stored)
    assert isinstance(read.stage, Perf) and read.stage.rows[0].kind == "latency"
    assert read.stage.columns["us"].interval == compared.columns["us"].interval
    assert read.model_dump_json() == stored  # the same keys and values, nothing added by the typing
    assert set(json.loads(stored)["stage"]) == {"status", "note", "rows", "columns", "median_ratio"}
    with pytest.raises(ValidationError, match="median_raito"):
        result("perf", "pass", "a misspelt field is refused", median_raito=0.8)
    schema = Perf.model_json_schema()
    assert {"rows", "columns", "median_ratio", "interval", "baseline_method"} <= set(schema["properties"])


def test_a_perf_skip_on_the_cpu_tier_says_which_tier_it_belongs_to():
    tier = {"evidence": cpu_tier.EVIDENCE}
    composed = pipeline.compose("x", results(result("perf", "skip", "not measured: the interpreter"), cpu_tier=tier))
    assert composed.stages.perf.evidence_tier == cpu_tier.EVIDENCE
    assert json.loads(composed.model_dump_json())["stages"]["perf"]["evidence_tier"] == cpu_tier.EVIDENCE
