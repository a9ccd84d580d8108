import pytest

from kvtasks.sources import compare, read_policy
from kvtasks.stages import test_policy
from tests.kernel_repos import KERNEL, make_patch, make_repo
from tests.kit import stage_context

POLICY_TEST = '''import numpy as np
import pytest
import torch

from kernels.scale import scale_rows

ATOL = 1e-5
tol = {"f16": 2e-3, "bf16": 1e-2}

SHAPES = [
    (4, 64, "f32"),
    # (3, 100, "bf16"),
    (8, 128, "f16"),
]


@pytest.mark.parametrize("M,N,dtype", SHAPES)
def test_scale(M, N, dtype):
    x = np.ones((M, N), dtype=np.float32)
    np.testing.assert_allclose(scale_rows(x, 2.0), x * 2.0, atol=ATOL, rtol=1e-6)


def test_torch_path():
    a = torch.ones(3)
    torch.testing.assert_close(a, a, atol=1e-5, rtol=1.3e-6)
'''


def test_every_common_tolerance_form_is_found():
    policy = read_policy(POLICY_TEST)
    assert policy.tolerances == {
        "ATOL": 1e-5, "tol[f16]": 2e-3, "tol[bf16]": 1e-2,
        "test_scale:assert_allclose.rtol#1": 1e-6,
        "test_torch_path:assert_close.atol#1": 1e-5, "test_torch_path:assert_close.rtol#1": 1.3e-6,
    }
    assert policy.by_name == ["test_scale:assert_allclose.atol=ATOL"]
    assert list(policy.commented_rows) == ["3, 100, 'bf16'"]


@pytest.mark.parametrize("line", ['    # (64, 2000, "f32"),', "#[64, 2000, torch.float32]", "# (1, 7, 'fp8_e4m3', True),",
                                  '    # pytest.param(64, 2000, "bf16"),'])
def test_commented_rows_in_any_dtype_spelling(line):
    assert sum(read_policy(line + "\n").commented_rows.values()) == 1


@pytest.mark.parametrize("line", ["# see (issue 12)", "# (a, b)", "# TODO: (64 rows)", "# ('f32', 'f16')"])
def test_prose_comments_are_not_rows(line):
    assert not read_policy(line + "\n").commented_rows


def test_unparseable_files_fall_back_to_text():
    policy = read_policy("def broken(:\n    atol = 1e-3\n")
    assert not policy.parsed and list(policy.tolerances.values()) == [1e-3]


POLICY_BASE = {"kernels/__init__.py": "", "kernels/scale.py": KERNEL, "tests/test_policy.py": POLICY_TEST}


def policy(head: dict | None, base: dict = POLICY_BASE, target: str = "tests/test_policy.py", **options):
    """test_policy's decision on an in-memory PR (tests/kit.py): no git, no target run."""
    return test_policy.run(stage_context(base, head, target=target, **options))


def details(stage, severity: str) -> list[str]:
    return [f.detail for f in stage.findings if f.severity == severity]


def test_test_only_widening_blocks():
    stage = policy({"tests/test_policy.py": POLICY_TEST.replace("ATOL = 1e-5", "ATOL = 1e-2")})
    assert stage.stage.status == "fail" and not stage.stage.kernel_files_changed
    assert stage.stage.loosened == [{"where": "tests/test_policy.py::ATOL", "base": 1e-5, "head": 1e-2}]
    # a blocker is what makes the verdict BLOCK (tests/test_report.py)
    assert any("test-only change widens" in d for d in details(stage, "blocker"))


def test_widening_with_a_kernel_change_needs_work():
    stage = policy({"tests/test_policy.py": POLICY_TEST.replace('"f16": 2e-3', '"f16": 5e-3'),
                    "kernels/scale.py": KERNEL.replace("out = np.zeros_like(x)", "out = np.zeros_like(x)  # reuse")})
    assert stage.stage.kernel_files_changed
    assert details(stage, "blocker") == []
    assert any("numerical justification" in d for d in details(stage, "should-fix"))


def test_tolerance_above_the_reference_table_needs_work():
    stage = policy({"README.md": "docs\n"}, tol_table="f32=1e-5,f16=1e-3")
    assert stage.stage.status == "pass" and stage.stage.exceeds_reference == [2e-3, 1e-2]
    assert details(stage, "blocker") == [] and any("--tol-table" in d for d in details(stage, "should-fix"))


def test_unchanged_tolerances_pass():
    stage = policy({"README.md": "docs\n"}, tol_table="f32=1e-5,f16=2e-3,bf16=1e-2")
    assert stage.stage.status == "pass" and stage.stage.loosened == [] and stage.stage.weakened == []
    assert stage.stage.commented_out_shape_rows_base == 1 and stage.stage.commented_out_shape_rows_added == 0
    assert details(stage, "should-fix") == [] and details(stage, "blocker") == []


def test_newly_commented_row_needs_work_and_the_old_one_is_context():
    stage = policy({"tests/test_policy.py": POLICY_TEST.replace(
        '    (8, 128, "f16"),\n', '    (8, 128, "f16"),\n    # (64, 2000, "f32"),\n')})
    assert stage.stage.commented_out_shape_rows_base == 1 and stage.stage.commented_out_shape_rows == 2
    assert stage.stage.newly_commented_rows == ["tests/test_policy.py: (64, 2000, 'f32')"]
    assert details(stage, "blocker") == [] and any("shape rows commented out" in d for d in details(stage, "should-fix"))


def test_assert_close_replaced_by_a_weaker_check_is_a_finding():
    weaker = POLICY_TEST.replace("torch.testing.assert_close(a, a, atol=1e-5, rtol=1.3e-6)",
                                 "assert torch.allclose(a, a, atol=1e-5, rtol=1.3e-6)")
    stage = policy({"tests/test_policy.py": weaker})
    assert any("test_torch_path: 1 strict comparisons on base, 0 on head" in d for d in details(stage, "should-fix"))
    assert details(stage, "blocker") == []


def test_a_dropped_rtol_is_a_finding():
    stage = policy({"tests/test_policy.py": POLICY_TEST.replace("atol=ATOL, rtol=1e-6)", "atol=ATOL)")})
    assert any("assert_allclose.rtol#1: tolerance no longer given" in d for d in details(stage, "should-fix"))


def test_touched_test_files_beyond_the_target_are_analysed():
    other = "import numpy as np\n\n\ndef test_other():\n    np.testing.assert_allclose(1.0, 1.0, atol=1e-6)\n"
    stage = policy({"tests/test_other.py": other.replace("atol=1e-6", "atol=1e-1")},
                   base={**POLICY_BASE, "tests/test_other.py": other})
    assert stage.stage.files == ["tests/test_policy.py", "tests/test_other.py"]
    assert any("test-only change widens" in d for d in details(stage, "blocker"))


def test_without_a_patch_policy_is_skipped():
    assert policy(None).stage.status == "skip"


# Liger #1309 in miniature: tolerances in a parametrize table, raised by a test-only PR that also
# xfails one "weird" shape at run time.
TABLE_TEST = '''import numpy as np
import pytest

from kernels.scale import scale_rows


@pytest.mark.parametrize("M, N", [(2, 64), (3, 100)])
@pytest.mark.parametrize("dtype, atol, rtol", [(np.float32, 1e-4, 1e-6), (np.float16, 0.2, 0.02)])
def test_scale_table(M, N, dtype, atol, rtol, request):
    x = np.ones((M, N), dtype=dtype)
    np.testing.assert_allclose(scale_rows(x, 2.0), x * 2.0, atol=atol, rtol=rtol)
'''
TABLE_LOOSENED = TABLE_TEST.replace("(np.float32, 1e-4, 1e-6), (np.float16, 0.2, 0.02)",
                                    "(np.float32, 3e-4, 1e-6), (np.float16, 1.0, 0.02)").replace(
    "    x = np.ones", "    if N == 100:\n        request.node.add_marker(pytest.mark.xfail(reason=\"weird shape\"))\n"
                      "    x = np.ones")


def test_a_parametrize_tolerance_table_and_a_run_time_xfail_are_seen():
    table_repo = {"kernels/__init__.py": "", "kernels/scale.py": KERNEL, "tests/test_table.py": TABLE_TEST}
    stage = policy({"tests/test_table.py": TABLE_LOOSENED}, base=table_repo, target="tests/test_table.py")
    table = "tests/test_table.py::test_scale_table:parametrize(dtype,atol,rtol)"
    assert stage.stage.loosened == [{"where": f"{table}[np.float32].atol", "base": 1e-4, "head": 3e-4},
                                    {"where": f"{table}[np.float16].atol", "base": 0.2, "head": 1.0}]
    assert stage.stage.weakened == ["tests/test_table.py::test_scale_table: a new skip/skipif/xfail mark "
                                    "(add_marker(pytest.mark.xfail))"]
    assert any("test-only change widens tolerances" in d for d in details(stage, "blocker"))


def test_a_new_table_row_is_held_to_the_loosest_its_column_had():
    base = read_policy(TABLE_TEST)
    head = read_policy(TABLE_TEST.replace("(np.float16, 0.2, 0.02)", "(np.float16, 0.2, 0.02), (np.float64, 0.5, 0)"))
    found = compare(base, head, "t.py")
    assert [(item["where"].rsplit("]", 1)[0].rsplit("[", 1)[1], item["base"], item["head"]) for item in found.loosened] \
        == [("np.float64", 0.2, 0.5)]
    assert compare(base, read_policy(TABLE_TEST.replace("1e-4, 1e-6", "1e-5, 1e-6")), "t.py").loosened == []


TWO_TESTS = '''import numpy as np

from kernels.scale import scale_rows


def test_a():
    np.testing.assert_allclose(scale_rows(np.ones((2, 8)), 2.0), np.full((2, 8), 2.0))


def test_b():
    np.testing.assert_allclose(scale_rows(np.ones((3, 13)), 2.0), np.full((3, 13), 2.0))
'''


def test_a_pr_deleting_the_target_test_is_told_so(tmp_path, validate):
    repo = make_repo(tmp_path / "two", {"kernels/__init__.py": "", "kernels/scale.py": KERNEL,
                                        "tests/test_two.py": TWO_TESTS})
    patch = make_patch(repo, {"tests/test_two.py": TWO_TESTS.split("\n\ndef test_b")[0] + "\n"}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_two.py::test_b")
    assert result.stage("test_policy")["target_deleted"] == "tests/test_two.py::test_b is deleted from the file"
    assert any(f["detail"].startswith("the PR deletes the target test: tests/test_two.py::test_b")
               for f in result.findings("should-fix"))
    head = result.stage("correctness_repo_tests")
    assert head["status"] == "skip" and "not found" in head["note"]  # a usage error, never a failure
    assert result.verdict == "NEEDS_WORK"
