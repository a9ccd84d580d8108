"""correctness_base_oracle, with test_policy: a PR cannot weaken the oracle that judges it."""
from pathlib import Path

import pytest

from kvtasks.harness.junit import CaseResult
from kvtasks.stages import StageResult, base_oracle, baseline_control, repo_tests, test_policy
from tests.kernel_repos import (ARGNAMES_TEST, CLI_SCRIPT, ENV_TEST, TILED, TILED_TAIL_BUG, git, make_patch,
                                tiled_repo)
from tests.kit import RecordingLauncher, stage_context, target_run
from tests.recorded import ready

ARGNAMES = ["--target", "tests/test_argnames.py", "--expected-route", "kernels.tiled:tiled_scale",
            "--shape-vars", "M,N,dtype_str"]
# the last output column 20% wrong: a tolerance of 0.5 relative hides it
LAST_COLUMN_WRONG = TILED.replace("    return out\n", "    out[:, -1] *= 1.2\n    return out\n")

TARGET = "tests/test_argnames.py"
# tiled_repo's files, for the stage kit (tests/kit.py)
TILED_FILES = {"kernels/__init__.py": "", "kernels/tiled.py": TILED, "tests/test_env.py": ENV_TEST,
               TARGET: ARGNAMES_TEST, "bench/check_tiled.py": CLI_SCRIPT}
ROWS = ("test_tiled[4-64-f32]", "test_tiled[8-128-f16]")
# ARGNAMES' request options
ROUTE = {"expected_route": "kernels.tiled:tiled_scale", "shape_vars": "M,N,dtype_str"}
# what base's test says of LAST_COLUMN_WRONG in a real run
WRONG = ("AssertionError: \nNot equal to tolerance rtol=1e-07, atol=0.001\n\nMismatched elements: 3 / 256 (1.17%)\n"
         "Max absolute difference among violations: 1.8000002")


def ran(folder: Path, label: str, *outcomes: str, rows: tuple[str, ...] = ROWS) -> object:
    """A pytest run of the target's rows with these outcomes, each failure a wrong value."""
    cases = [CaseResult(classname="tests.test_argnames", name=name, outcome=outcome,
                        message=WRONG if outcome == "failed" else "") for name, outcome in zip(rows, outcomes)]
    failed = outcomes.count("failed")
    return target_run(folder, label, exit=1 if failed else 0, executed=len(cases), failures=failed,
                      log=WRONG if failed else "", cases=cases)


def judged(tmp_path: Path, head: dict, runs: dict, **options) -> tuple[dict[str, StageResult], RecordingLauncher]:
    """test_policy, base's and head's runs of the target and the base oracle over an in-memory PR to the
    tiled repository, the runs recorded (tests/kit.py)."""
    launcher = RecordingLauncher(runs)
    ctx = stage_context(TILED_FILES, head, target=TARGET, earlier=ready(), launcher=launcher, **options)
    for stage in (test_policy, baseline_control, repo_tests, base_oracle):
        produced = stage.run(ctx)
        ctx.earlier[produced.name] = produced
    return ctx.earlier, launcher


def findings(stages: dict[str, StageResult], severity: str) -> list:
    """What the stages found at `severity`: a blocker makes the verdict BLOCK, else a should-fix NEEDS_WORK
    (tests/test_report.py)."""
    return [finding for stage in stages.values() for finding in stage.findings if finding.severity == severity]


def test_a_tolerance_added_with_a_kernel_defect_blocks(tmp_path):
    loosened = ARGNAMES_TEST.replace("atol=1e-3)", "atol=1e-3, rtol=0.5)")
    stages, launcher = judged(tmp_path, {"kernels/tiled.py": LAST_COLUMN_WRONG, TARGET: loosened},
                       {"base-repo": ran(tmp_path, "base-repo", "passed", "passed"),
                        "head-repo": ran(tmp_path, "head-repo", "passed", "passed"),
                        "head-baseoracle": ran(tmp_path, "head-baseoracle", "failed", "failed")}, **ROUTE)
    assert stages[repo_tests.NAME].stage.status == "pass"  # its own loosened test is green
    assert stages[test_policy.NAME].stage.loosened == [
        {"where": "tests/test_argnames.py::test_tiled:assert_allclose.rtol#1", "base": 1e-7, "head": 0.5,
         "basis": "added where base passed none; the callee's default: numpy.testing.assert_allclose: rtol=1e-07, "
                  "atol=0"}]
    oracle = stages[base_oracle.NAME].stage
    assert oracle.status == "fail" and oracle.kept_at_base == [TARGET]
    # the oracle's run is head's kernel under base's target: the tree lent on head, the target held at base
    assert launcher.launched("head-baseoracle")[0] == "head" and launcher.kept_at_base["head-baseoracle"] == (TARGET,)
    blockers = [finding.detail for finding in findings(stages, "blocker")]
    assert any("head fails the tests base had, and the PR weakened those tests" in d for d in blockers)
    assert any("needs numerical justification" in finding.detail for finding in findings(stages, "should-fix"))
    # the control: the same kernel change under the unchanged test is what it was, a head-only failure
    folder = tmp_path / "control"
    control, _ = judged(folder, {"kernels/tiled.py": LAST_COLUMN_WRONG},
                        {"base-repo": ran(folder, "base-repo", "passed", "passed"),
                         "head-repo": ran(folder, "head-repo", "failed", "failed")}, **ROUTE)
    assert control[base_oracle.NAME].stage.status == "skip"  # the target is not modified
    assert [finding.stage for finding in findings(control, "blocker")] == ["correctness_repo_tests"]


def test_a_target_tightened_with_a_new_row_is_not_blamed_and_base_s_tree_is_not_run_again(tmp_path):
    tightened = ARGNAMES_TEST.replace("atol=1e-3)", "atol=1e-5)")
    with_a_row = tightened.replace('    (8, 128, "f16"),\n', '    (8, 128, "f16"),\n    (3, 100, "f32"),\n')
    stages, launcher = judged(tmp_path, {TARGET: with_a_row},
                              {"base-repo": ran(tmp_path, "base-repo", "passed", "passed"),
                               "head-repo": ran(tmp_path, "head-repo", "passed", "passed", "passed",
                                                rows=(*ROWS, "test_tiled[3-100-f32]"))})
    policy = stages[test_policy.NAME].stage
    assert policy.status == "pass" and policy.weakened == []
    oracle = stages[base_oracle.NAME].stage
    # every change held at base is base's tree, which the baseline ran: nothing runs again
    assert oracle.status == "pass" and "base's tree" in oracle.note and not oracle.runs
    assert launcher.labels == ["base-repo", "head-repo"]
    assert stages[repo_tests.NAME].stage.status == "pass"
    assert findings(stages, "blocker") == [] and findings(stages, "should-fix") == []


def _renamed(text: str) -> str:
    return text.replace("tiled_scale", "scale_tiles")


def test_an_api_renamed_in_kernel_and_tests_together_needs_work_and_is_not_blocked(tmp_path, validate):
    repo = tiled_repo(tmp_path / "tiled")
    renamed_api = make_patch(repo, {"kernels/tiled.py": _renamed(TILED), "tests/test_env.py": _renamed(ENV_TEST),
                                    "tests/test_argnames.py": _renamed(ARGNAMES_TEST),
                                    "bench/check_tiled.py": _renamed(CLI_SCRIPT)}, tmp_path / "rename.patch")
    renamed = validate(repo, "--patch", str(renamed_api), "--target", "tests/test_argnames.py")
    oracle = renamed.stage("correctness_base_oracle")
    # an API changed in kernel and tests together: base's tests cannot judge head, and PASS needs them to
    assert oracle["status"] == "fail" and "do not import, collect or run against head's code" in oracle["note"]
    assert [f["stage"] for f in renamed.findings("should-fix")] == ["correctness_base_oracle"]
    assert renamed.findings("blocker") == [] and renamed.verdict == "NEEDS_WORK"
    assert renamed.stage("correctness_repo_tests")["status"] == "pass"
    assert renamed.stage("test_policy")["status"] == "pass"


# a conftest.py the PR adds that turns the failures of one test into passes
OUTCOME_FLIPPING_CONFTEST = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if item.name.startswith("test_tiled") and report.failed:
        report.outcome = "passed"
'''


def test_a_conftest_that_rewrites_outcomes_is_judged_at_base_and_blocks(tmp_path, validate):
    repo = tiled_repo(tmp_path / "tiled")
    patch = make_patch(repo, {"kernels/tiled.py": LAST_COLUMN_WRONG, "conftest.py": OUTCOME_FLIPPING_CONFTEST},
                       tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), *ARGNAMES)
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # the hook turned its failures green
    policy = result.stage("test_policy")
    assert any("conftest.py::pytest_runtest_makereport: a pytest hook that can rewrite" in w for w in policy["weakened"])
    oracle = result.stage("correctness_base_oracle")  # the target is untouched, its surroundings are not
    assert oracle["status"] == "fail" and oracle["kept_at_base"] == ["conftest.py"]
    assert any("the PR weakened those tests in conftest.py" in f["detail"] for f in result.findings("blocker"))
    assert result.verdict == "BLOCK"


ENV = ["--target", "tests/test_env.py", "--shape-env", "TILED_SHAPES", "--grid", "64,2000,f32",
       "--expected-route", "kernels.tiled:tiled_scale", "--shape-vars", "M,N,dtype_str", "--no-perf"]
# one test runs every shape the environment names: the repository's run, each grid run and the poisoned
# probe all report the same test id
ENV_LOOP_TEST = ENV_TEST.replace(
    '@pytest.mark.parametrize("M,N,dtype_str", shapes())\ndef test_tiled(M, N, dtype_str):\n',
    'def test_tiled():\n    for M, N, dtype_str in shapes():\n').replace("    x = np", "        x = np").replace(
    "    np.testing", "        np.testing")
# the test's reference is the kernel itself: head's own suite cannot fail
SELF_JUDGED = ENV_LOOP_TEST.replace(", x * 3.0, atol", ", tiled_scale(x, 3.0), atol")


def test_on_an_environment_channel_base_s_outcomes_are_its_tests_never_its_poisoned_probe(tmp_path, validate):
    repo = tiled_repo(tmp_path / "tiled")
    (repo / "tests" / "test_env.py").write_text(ENV_LOOP_TEST)
    git(repo, "commit", "-qam", "one test for every shape")
    bug = make_patch(repo, {"kernels/tiled.py": TILED_TAIL_BUG, "tests/test_env.py": SELF_JUDGED}, tmp_path / "bug.patch")
    result = validate(repo, "--patch", str(bug), *ENV)
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # judged by itself, it cannot fail
    oracle = result.stage("correctness_base_oracle")
    assert oracle["status"] == "fail" and oracle["regressed"], oracle
    assert {f["rule"] for f in result.findings("blocker")} & {"oracle.regression", "oracle.fails-weakened"}
    assert result.verdict == "BLOCK"
    # the honest twin: the same test change over a correct kernel passes base's tests and cells
    twin = validate(repo, "--patch", str(make_patch(repo, {"tests/test_env.py": SELF_JUDGED}, tmp_path / "twin.patch")),
                    *ENV)
    assert twin.stage("correctness_base_oracle")["status"] == "pass", twin.stage("correctness_base_oracle")
    assert not [f for f in twin.findings("blocker") if f["rule"].startswith("oracle.")]


ARGNAMES_GRID = [*ARGNAMES, "--shape-argnames", "M,N,dtype_str", "--grid", "64,2000,f32", "--no-perf"]
# what the PR does to its target: base's file, with the grid, still judges head's code
HIDINGS = {
    "deletion": ({"tests/test_argnames.py": None}, "tests/test_argnames.py"),
    "rename-loosened": ({"tests/test_argnames.py": None,
                         "tests/test_renamed.py": ARGNAMES_TEST.replace("atol=1e-3", "atol=1e3")}, "tests/test_renamed.py"),
}


def _validate_hiding(tmp_path, validate, hiding: str, kernel: str):
    repo = tiled_repo(tmp_path / "tiled")
    changes, target = HIDINGS[hiding]
    flags = [*ARGNAMES_GRID[:1], target, *ARGNAMES_GRID[2:]]
    return validate(repo, "--patch", str(make_patch(repo, {"kernels/tiled.py": kernel, **changes},
                                                    tmp_path / "pr.patch")), *flags)


# each hiding's launches and blame over recorded runs: tests/unit/test_launching_stages_more.py; here the
# renaming end to end, and the deletion's honest twin below
@pytest.mark.parametrize("hiding", ["rename-loosened"])
def test_a_tail_bug_hidden_by_xfail_deletion_or_renaming_fails_base_s_target_with_the_grid(tmp_path, validate, hiding):
    bug = _validate_hiding(tmp_path, validate, hiding, TILED_TAIL_BUG)
    oracle = bug.stage("correctness_base_oracle")
    assert oracle["status"] == "fail" and "head-baseoracle-grid" in oracle["runs"], oracle
    assert {f["rule"] for f in bug.findings("blocker")} & {"oracle.regression", "oracle.fails-weakened"}
    assert bug.verdict == "BLOCK"


def test_a_deleted_target_s_base_file_passes_head_s_correct_kernel_with_the_grid(tmp_path, validate):
    # the honest twin: the same deletion over a kernel that only gained a comment
    twin = _validate_hiding(tmp_path, validate, "deletion", "# tiles\n" + TILED)
    oracle = twin.stage("correctness_base_oracle")
    assert oracle["status"] == "pass" and "head-baseoracle-grid" in oracle["runs"], oracle
    assert not [f for f in twin.findings("blocker") if f["rule"].startswith("oracle.")]
