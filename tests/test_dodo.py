"""The doit front door: `doit validate` on the embedded demo and with explicit variables."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernel_repos import KERNEL_TAIL_BUG, make_patch, snapshot

PROJECT = Path(__file__).resolve().parent.parent


def doit(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVTASKS_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), *args],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def demo_home(tmp_path_factory) -> Path:
    """One workspace for this module's demo validations, as a user validating the demo PRs in turn
    has: the demo repository is built once, and the PRs against its base reuse base's runs."""
    return tmp_path_factory.mktemp("demo-home")


def test_doit_validate_with_no_variables_validates_the_demo(demo_home):
    done = doit(demo_home, "validate")
    published = demo_home / "reports" / "demo" / "validation_report.json"
    report = json.loads(published.read_text())
    assert (demo_home / "reports" / "demo" / "summary.md").is_file()
    assert f"**{report['verdict']}**" in done.stdout
    assert done.returncode == report["process_exit_code"]
    # every line is kvtasks' own: the summary and the report's paths on stdout, progress on stderr; none
    # of doit's (".  task", "-- task", "TaskFailed - taskid:...")
    assert not [line for line in done.stdout.splitlines() if re.match(r"(\.  |-- |!! |Task\w+ - taskid|#{10})", line)]
    assert [line for line in done.stderr.splitlines() if not line.startswith("[kvtasks] ")] == []
    assert "[kvtasks] report demo: verdict BLOCK (exit 1): " in done.stderr
    assert report["repo"]["head"] is not None and report["stages"]["merge_sim"]["status"] == "pass"
    assert report["stages"]["baseline_control"]["status"] == "pass"
    # the hidden tail bug: its own tests pass, the independent grid does not
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"
    assert report["stages"]["correctness_grid"]["status"] == "fail"
    assert report["verdict"] == "BLOCK" and done.returncode == 1
    # and base's tests, with their non-aligned rows, fail head's code (the unstored tail may also hold
    # NaN/Inf, a second grid blocker when it does)
    assert list(dict.fromkeys(f["stage"] for f in report["findings"] if f["severity"] == "blocker")) == \
        ["correctness_grid", "correctness_base_oracle"]
    # one env-channel process ran every cell: the blocker says so instead of calling every cell failed
    grid_blocker = next(f["detail"] for f in report["findings"] if "passes on base and fails on head" in f["detail"])
    assert "(grid cells 64,2000,f32, 4096,192,f32, 7,4097,f16, run as one)" in grid_blocker
    demo_repo = Path(report["repo"]["worktree"])
    assert subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=demo_repo,
                          capture_output=True, text=True).stdout == ""


def demo_report(home: Path, name: str) -> dict:
    doit(home, "validate", f"demo={name}")
    return json.loads((home / "reports" / f"demo-{name}" / "validation_report.json").read_text())


def test_demo_tolerance_loosening_blocks_through_test_policy(demo_home):
    report = demo_report(demo_home, "loosen-tolerance")
    assert report["verdict"] == "BLOCK"
    blockers = [f for f in report["findings"] if f["severity"] == "blocker"]
    assert [f["stage"] for f in blockers] == ["test_policy"]
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"  # the suite itself stays green


def test_demo_weakened_oracle_blocks_naming_the_tolerance_and_the_skipped_cell(demo_home):
    report = demo_report(demo_home, "weakened-oracle")
    assert report["verdict"] == "BLOCK"
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"  # its own weakened suite is green
    blockers = {f["stage"]: f["detail"] for f in report["findings"] if f["severity"] == "blocker"}
    assert "7,4097,f16" in blockers["correctness_grid"]
    assert "assert_allclose.rtol#1 widened 1e-07 -> 0.05" in blockers["correctness_base_oracle"]
    assert "a new skip/xfail call (pytest.skip)" in blockers["correctness_base_oracle"]
    assert report["stages"]["correctness_base_oracle"]["kept_at_base"] == ["tests/test_softmax.py"]


def test_demo_hostile_helper_blocks_naming_the_helpers_constant_and_the_base_oracle_cell(demo_home):
    report = demo_report(demo_home, "hostile-helper")
    assert report["test_selection"]["target"] == "tests/test_softmax_rows.py"
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"  # the widened helper keeps it green
    assert report["test_selection"]["test_side"] == ["kernels/checks.py"]
    assert report["stages"]["correctness_base_oracle"]["kept_at_base"] == ["kernels/checks.py"]
    blocker = next(f["detail"] for f in report["findings"] if f["stage"] == "correctness_base_oracle")
    assert "kernels/checks.py: TOL[f32] widened 1e-05 -> 0.05" in blocker and "test_rows_sum_to_one[64-2000-f32]" in blocker
    assert report["verdict"] == "BLOCK"


def test_demo_clean_fix_has_nothing_to_fix(demo_home):
    # bench/sensitivity.py's smoke run makes this validation (so the bench is checked by this test)
    done = subprocess.run([sys.executable, str(PROJECT / "bench" / "sensitivity.py"), "--smoke", "--home", str(demo_home)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and re.fullmatch(r"sensitivity cost: \d+\.\d+x head grid run",
                                                 done.stdout.strip().splitlines()[-1]), done.stdout + done.stderr
    report = json.loads((demo_home / "reports" / "demo-clean-fix" / "validation_report.json").read_text())
    assert not [f for f in report["findings"] if f["severity"] in ("blocker", "should-fix")]
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"
    # its suite goes red when the route's output is wrong, and the summary says so
    assert report["stages"]["sensitivity"]["status"] == "pass"
    summary = (demo_home / "reports" / "demo-clean-fix" / "summary.md").read_text()
    assert "| sensitivity | pass | the suite fails when kernels.tiled_softmax:softmax_rows's output is corrupted" in summary


def test_doit_validate_with_variables(repo, tmp_path, idle_gpu):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    before = snapshot(repo)
    done = doit(tmp_path / "home", "validate", f"repo={repo}", f"patch={patch}", "head_sha=" + "f" * 40,
                "target=tests/test_scale.py", "label=pr-9")
    report = json.loads((tmp_path / "home" / "reports" / "pr-9" / "validation_report.json").read_text())
    assert report["verdict"] == "BLOCK" and done.returncode == 1
    assert report["repo"]["head"] == "f" * 40
    assert snapshot(repo) == before


def test_doits_own_commands_build_no_demo_and_take_no_worktree(repo, tmp_path):
    from kvtasks import worktree

    worktree.hold_exclusively(repo)  # a validator is busy with this worktree
    try:
        listing = doit(tmp_path, "list")
        answers = [doit(tmp_path, *command) for command in (
            ["help", "validate"], ["forget", "validate"],
            ["forget", "validate", f"repo={repo}", "target=tests/test_scale.py"])]
    finally:
        worktree.release_exclusive(repo)
    assert [done.returncode for done in [listing, *answers]] == [0] * 4, [done.stderr for done in answers]
    assert [line.split()[0] for line in listing.stdout.splitlines()] == ["batch", "cache", "cache-gc", "check", "report",
                                                                          "validate"]
    assert not (tmp_path / "cache" / "demo").exists() and not (tmp_path / "reports").exists()


def test_doit_usage_error_is_one_line_exit_64(repo, tmp_path):
    done = doit(tmp_path, "validate", f"repo={repo}", "target=tests/test_scale.py", "head_sha=nothex")
    assert done.returncode == 64
    assert done.stderr.strip().splitlines()[-1].startswith("validate-kernel-pr: error: --head-sha")
    assert not (tmp_path / "reports").exists()


def test_a_misspelt_doit_variable_is_a_usage_error(repo, tmp_path):
    # dropped without a word, no_netwrok=1 would run the targets with the network on
    done = doit(tmp_path, "validate", f"repo={repo}", "target=tests/test_scale.py", "no_netwrok=1")
    assert done.returncode == 64
    assert done.stderr.strip().splitlines()[-1].startswith("validate-kernel-pr: error: 'no_netwrok' is no variable")
    done = doit(tmp_path, "batch", f"manifest={tmp_path / 'none.toml'}", "no_network=1")
    assert done.returncode == 64 and "'no_network' is no variable of `batch`" in done.stderr
    assert not (tmp_path / "reports").exists()
