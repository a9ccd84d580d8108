"""correctness_repo_tests: head's run of the target and who is blamed when it is red."""
import subprocess
import sys
from types import SimpleNamespace

from kvtasks.stages import baseline_control, repo_tests
from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from tests.kernel_repos import KERNEL_TAIL_BUG, git, make_patch
from tests.kit import target_run
from tests.recorded import after_both_sides, failing, passing

FAILING_TEST = '''import numpy as np

from kernels.scale import scale_rows


def test_tail_columns_scaled():
    x = np.ones((2, 13), dtype=np.float32)
    np.testing.assert_allclose(scale_rows(x, 3.0), x * 3.0)
'''


def test_head_fails_where_base_passes_is_a_blocker(tmp_path):
    ctx, _ = after_both_sides(tmp_path, {"base-repo": passing(tmp_path / "base", "base-repo"),
                                         "head-repo": failing(tmp_path / "head", "head-repo")})
    base = ctx.earlier[baseline_control.NAME].stage.repo_tests
    assert base["state"] == "ran" and base["exit"] == 0 and base["stats"]["executed"] == 2
    head = ctx.earlier[repo_tests.NAME]
    assert head.stage.status == "fail" and head.stage.stats.failures == 1 and head.stage.stats.executed == 2
    assert any("passes on base and fails on head" in f.detail for f in head.findings if f.severity == "blocker")


def test_pr_added_failing_test_is_target_not_present_on_base(repo, validate, tmp_path):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG, "tests/test_tail.py": FAILING_TEST},
                       tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_tail.py")
    assert result.stage("baseline_control")["repo_tests"]["state"] == "target-not-present"
    assert result.report["test_selection"]["test_provenance"] == "pr-added"
    assert any("the PR adds this target" in f["detail"] for f in result.findings("blocker"))
    assert result.verdict == "BLOCK"
    assert not (repo / "tests/test_tail.py").exists()


def test_zero_executed_is_skip_never_pass(tmp_path):
    runs = {label: target_run(tmp_path / label, label, executed=0, skipped=2) for label in ("base-repo", "head-repo")}
    ctx, _ = after_both_sides(tmp_path, runs)
    head = ctx.earlier[repo_tests.NAME]
    assert head.stage.status == "skip" and head.stage.stats.executed == 0 and head.stage.stats.skipped == 2
    assert [(f.rule, f.severity) for f in head.findings] == [("tests.executed-nothing", "note")]
    assert ctx.earlier[baseline_control.NAME].stage.repo_tests["state"] == "all-skipped"


def test_nothing_collected_is_skip(repo, validate, tmp_path):
    (repo / "tests/test_empty.py").write_text("import numpy\n\n\ndef helper():\n    pass\n\n\nclass TestNothing:\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "empty test file")
    result = validate(repo, "--target", "tests/test_empty.py")
    head = result.stage("correctness_repo_tests")
    assert head["status"] == "skip" and head["exit"] == 5 and head["stats"]["executed"] == 0


def test_crash_without_junit_is_recorded_as_such(repo, validate, tmp_path):
    crashing = "import os\nos._exit(3)\n\n\ndef test_never():\n    pass\n"
    patch = make_patch(repo, {"tests/test_crash.py": crashing}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_crash.py")
    head = result.stage("correctness_repo_tests")
    assert head["status"] == "fail" and head["exit"] == 3
    assert head["stats"]["errors"] == 1 and "JUnit XML missing" in head["stats"]["note"]
    assert any("executed nothing" in f["detail"] for f in result.findings("note"))


def test_script_target_runs_as_a_script(repo, validate, tmp_path):
    script = ("import numpy as np\nfrom kernels.scale import scale_rows\n\n"
              "if __name__ == '__main__':\n    x = np.ones((2, 13), dtype=np.float32)\n"
              "    assert (scale_rows(x, 2.0) == 2.0).all(), 'tail not scaled'\n    print('ok')\n")
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG, "bench/check_scale.py": script},
                       tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "bench/check_scale.py")
    selection = result.report["test_selection"]
    assert selection["runner"] == "script" and selection["runner_basis"] == "structural"
    head = result.stage("correctness_repo_tests")
    assert head["status"] == "fail" and head["stats"]["executed"] == 1
    assert "liveness" in head["stats"]["basis"]
    assert result.verdict == "BLOCK"


def test_a_pytest_usage_error_on_head_is_a_skip_never_a_failure():
    run = TargetRun(label="head-repo", runner="pytest", command=[], exit=4, duration_s=0.0, log="",
                    stats=ExecutionStats(note="pytest usage error (exit 4), no test ran: error: unrecognized "
                                              "arguments: --cov"))
    ctx = SimpleNamespace(request=SimpleNamespace(has_patch=True, host=SimpleNamespace(timeout=60)))
    stage = repo_tests._judge_head(ctx, run, {"state": "ran", "exit": 0})
    assert stage.stage.status == "skip" and [f.severity for f in stage.findings] == ["note"]
    assert "unrecognized arguments: --cov" in stage.findings[0].detail


def test_an_interpreter_without_pytest_skips_the_runs_and_says_why(repo, validate, tmp_path, monkeypatch):
    # runtime_compat's probe (the target's own interpreter and path) finds no pytest: no run is made
    # to learn that, and none of the target's
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    monkeypatch.setenv("PYTHON_BIN", str(tmp_path / "bare" / "bin" / "python"))
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py")
    assert result.stage("runtime_compat")["status"] == "pass", result.stage("runtime_compat")["note"]
    for stage in ("baseline_control", "correctness_repo_tests"):
        assert result.stage(stage)["status"] == "skip"
        assert "python -m pytest is not runnable" in result.stage(stage)["note"]
        assert "No module named pytest" in result.stage(stage)["note"]
    assert result.verdict == "INCONCLUSIVE"
