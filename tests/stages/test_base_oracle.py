"""correctness_base_oracle, with test_policy: a PR cannot weaken the oracle that judges it."""
import pytest

from tests.kernel_repos import (ARGNAMES_TEST, CLI_SCRIPT, ENV_TEST, TILED, TILED_TAIL_BUG, git, make_patch,
                                tiled_repo)

ARGNAMES = ["--target", "tests/test_argnames.py", "--expected-route", "kernels.tiled:tiled_scale",
            "--shape-vars", "M,N,dtype_str"]
# the last output column 20% wrong: a tolerance of 0.5 relative hides it
LAST_COLUMN_WRONG = TILED.replace("    return out\n", "    out[:, -1] *= 1.2\n    return out\n")


def test_a_tolerance_added_with_a_kernel_defect_blocks(tmp_path, validate):
    repo = tiled_repo(tmp_path / "tiled")
    patch = make_patch(repo, {"kernels/tiled.py": LAST_COLUMN_WRONG,
                              "tests/test_argnames.py": ARGNAMES_TEST.replace("atol=1e-3)", "atol=1e-3, rtol=0.5)")},
                       tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), *ARGNAMES)
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # its own loosened test is green
    policy = result.stage("test_policy")
    assert policy["loosened"] == [{"where": "tests/test_argnames.py::test_tiled:assert_allclose.rtol#1",
                                   "base": 1e-7,
                                   "head": 0.5, "basis": "added where base passed none; the callee's default: "
                                                         "numpy.testing.assert_allclose: rtol=1e-07, atol=0"}]
    oracle = result.stage("correctness_base_oracle")
    assert oracle["status"] == "fail" and oracle["kept_at_base"] == ["tests/test_argnames.py"]
    blockers = [f["detail"] for f in result.findings("blocker")]
    assert any("head fails the tests base had, and the PR weakened those tests" in d for d in blockers)
    assert any("needs numerical justification" in f["detail"] for f in result.findings("should-fix"))
    assert result.verdict == "BLOCK"
    # the control: the same kernel change under the unchanged test is what it was, a head-only failure
    control = validate(repo, "--patch", str(make_patch(repo, {"kernels/tiled.py": LAST_COLUMN_WRONG},
                                                          tmp_path / "control.patch")), *ARGNAMES)
    assert control.stage("correctness_base_oracle")["status"] == "skip"  # the target is not modified
    assert [f["stage"] for f in control.findings("blocker")] == ["correctness_repo_tests"]
    assert control.verdict == "BLOCK"


def _renamed(text: str) -> str:
    return text.replace("tiled_scale", "scale_tiles")


def test_legitimate_changes_to_the_target_are_not_blamed(tmp_path, validate):
    repo = tiled_repo(tmp_path / "tiled")
    tightened = ARGNAMES_TEST.replace("atol=1e-3)", "atol=1e-5)")
    with_a_row = tightened.replace('    (8, 128, "f16"),\n', '    (8, 128, "f16"),\n    (3, 100, "f32"),\n')
    tightened_with_a_row = make_patch(repo, {"tests/test_argnames.py": with_a_row}, tmp_path / "tighten.patch")
    renamed_api = make_patch(repo, {"kernels/tiled.py": _renamed(TILED), "tests/test_env.py": _renamed(ENV_TEST),
                                    "tests/test_argnames.py": _renamed(ARGNAMES_TEST),
                                    "bench/check_tiled.py": _renamed(CLI_SCRIPT)}, tmp_path / "rename.patch")
    tightened = validate(repo, "--patch", str(tightened_with_a_row), "--target", "tests/test_argnames.py")
    assert tightened.stage("test_policy")["weakened"] == []
    oracle = tightened.stage("correctness_base_oracle")
    # every change held at base is base's tree, which the baseline ran: nothing runs again
    assert oracle["status"] == "pass" and "base's tree" in oracle["note"] and not oracle.get("runs")
    renamed = validate(repo, "--patch", str(renamed_api), "--target", "tests/test_argnames.py")
    oracle = renamed.stage("correctness_base_oracle")
    # an API changed in kernel and tests together: base's tests cannot judge head, and PASS needs them to
    assert oracle["status"] == "fail" and "do not import, collect or run against head's code" in oracle["note"]
    assert [f["stage"] for f in renamed.findings("should-fix")] == ["correctness_base_oracle"]
    assert renamed.findings("blocker") == [] and renamed.verdict == "NEEDS_WORK"
    for result in (tightened, renamed):
        assert result.stage("correctness_repo_tests")["status"] == "pass"
        assert result.stage("test_policy")["status"] == "pass"
    assert tightened.findings("blocker") == [] and tightened.findings("should-fix") == []


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
