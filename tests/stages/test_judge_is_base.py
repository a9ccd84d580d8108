"""The judge is base's: a PR's kernel is tested by the test side as it was before the PR.

One repository, one base (its base run is shared by every PR below): a route whose tail tiles a PR
computes in half precision (wrong by about 1e-3 wherever N % 64 != 0), and a test that takes its
tolerance from a helper module of the package. Each hostile PR hides that tail bug by changing
something the test process loads; each must end BLOCK naming the file. The honest PRs keep theirs.
"""
import pytest

from tests.kernel_repos import SPLIT_TAIL, git, make_patch, make_repo

OPS = SPLIT_TAIL
OPS_TAIL_BUG = OPS.replace("    out[:, full:] = x[:, full:] * factor\n",
                           "    out[:, full:] = (x[:, full:].astype(np.float16) * np.float16(factor)).astype(x.dtype)\n")
OPS_CLEAN = OPS.replace("    out = np.empty_like(x)\n    full = N - N % TILE\n    out[:, :full] = x[:, :full] * factor\n"
                        "    out[:, full:] = x[:, full:] * factor\n", "    out = x * factor  # one pass: no tail tile\n")
TEST = '''import numpy as np
import pytest

from pkg.checks import ATOL
from pkg.ops import tiled_scale


@pytest.mark.parametrize("M,N", [(4, 64), (3, 100)])
def test_scale(M, N):
    x = np.random.default_rng(M * 1000 + N).standard_normal((M, N)).astype(np.float32)
    np.testing.assert_allclose(tiled_scale(x, 3.0), x * 3.0, atol=ATOL)
'''
FLAGS = ["--shape-argnames", "M,N", "--expected-route", "pkg.ops:tiled_scale", "--shape-vars", "M,N",
         "--grid", "64,2000;3,100", "--tol-table", "f32=5e-2"]
# numpy's comparison replaced, for every test of the process, by one with a wide atol
LENIENT_NUMPY = '''import functools

import numpy.testing

_strict = numpy.testing.assert_allclose


@functools.wraps(_strict)
def _lenient(actual, desired, rtol=1e-7, atol=0, **kwargs):
    return _strict(actual, desired, rtol=rtol, atol=max(atol, 5e-2), **kwargs)


numpy.testing.assert_allclose = _lenient
'''
# a plugin of the package that turns failed reports into passed ones
FLIPPING_PLUGIN = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.failed:
        report.outcome = "passed"
'''
SWALLOWING_TEST = TEST.replace("@pytest.mark.parametrize", '''class _Checked:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


@pytest.mark.parametrize''').replace("    np.testing.assert_allclose(", "    with _Checked():\n        np.testing.assert_allclose(")
# the kernel's own module rebinds numpy's comparison through an alias: no name a reader knows is written
KERNEL_REBINDS_NUMPY = OPS_TAIL_BUG + '''

_testing = np.testing
_strict = _testing.assert_allclose


def _close(actual, desired, *args, **kwargs):
    kwargs["a" + "tol"] = max(kwargs.get("a" + "tol", 0), 5e-2)
    return _strict(actual, desired, *args, **kwargs)


_testing.assert_allclose = _close
'''
# the kernel writes its wrong tail back into its input, so a reference computed from the input after the
# call agrees with it: nothing the test side does changes, and no judge is touched
KERNEL_WRITES_ITS_INPUT = OPS_TAIL_BUG.replace("    return out\n", "    x[:, full:] = out[:, full:] / factor\n    return out\n")
# a new regression test guarded as GPU tests are: nothing existed for its marks to weaken
GUARDED_REGRESSION_TEST = '''import numpy as np
import pytest

from pkg.ops import tiled_scale


@pytest.mark.skipif(not hasattr(np, "float16"), reason="needs half precision")
def test_tail_of_one_column():
    x = np.ones((2, 65), dtype=np.float32)
    np.testing.assert_allclose(tiled_scale(x, 2.0), x * 2.0, atol=1e-6)
'''


@pytest.fixture
def judged_repo(tmp_path):
    return make_repo(tmp_path / "judged", {"pkg/__init__.py": "", "pkg/ops.py": OPS, "pkg/checks.py": "ATOL = 1e-5\n",
                                           "tests/test_scale.py": TEST})


def test_the_test_side_cannot_hide_a_tail_bug(judged_repo, validate, tmp_path):
    def pr(name: str, changes: dict, target: str = "tests/test_scale.py"):
        patch = make_patch(judged_repo, {"pkg/ops.py": OPS_TAIL_BUG, **changes}, tmp_path / f"{name}.patch")
        return validate(judged_repo, "--patch", str(patch), "--label", name, "--target", target, *FLAGS)

    def blocked_naming(result, *named: str) -> str:
        assert result.verdict == "BLOCK", result.report["findings"]
        said = " ".join(f["detail"] for f in result.findings("blocker"))
        assert all(name in said for name in named), said
        return said

    plain = pr("plain", {})
    assert plain.verdict == "BLOCK" and plain.stage("correctness_repo_tests")["status"] == "fail"

    # 1. the tolerance the test imports from a helper of the package: the helper is test side
    helper = pr("helper", {"pkg/checks.py": "ATOL = 5e-2\n"})
    assert helper.stage("correctness_repo_tests")["status"] == "pass"  # its own widened tolerance is green
    policy = helper.stage("test_policy")
    assert policy["test_side"] == ["pkg/checks.py"] and policy["route_side"] == ["pkg/ops.py"]
    assert policy["sides_basis"].startswith("observed: base-")
    assert {"path": "pkg/checks.py", "during": ""} in helper.report["test_selection"]["loaded_files"]
    assert [item["where"] for item in policy["loosened"]] == ["pkg/checks.py::ATOL"]
    assert helper.stage("correctness_base_oracle")["kept_at_base"] == ["pkg/checks.py"]
    blocked_naming(helper, "test_scale[3-100]", "pkg/checks.py")

    # 2. start-up code, and the same wrapper as the test package's __init__.py
    blocked_naming(pr("sitecustomize", {"sitecustomize.py": LENIENT_NUMPY}), "sitecustomize.py")
    package_init = pr("tests-init", {"tests/__init__.py": LENIENT_NUMPY})
    assert any("tests/__init__.py:13: changes a name of the modules that judge tests" in weakening
               for weakening in package_init.stage("test_policy")["weakened"])
    blocked_naming(package_init, "test_scale[3-100]", "tests/__init__.py")

    # 3. a plugin of the package that .pytest.ini loads, rewriting failed reports
    plugin = pr("plugin", {".pytest.ini": "[pytest]\naddopts = -p pkg._helpers\n", "pkg/_helpers.py": FLIPPING_PLUGIN})
    assert plugin.stage("test_policy")["config_changes"] == [".pytest.ini::addopts adds -p pkg._helpers"]
    blocked_naming(plugin, "pkg/_helpers.py:5: a pytest hook that can rewrite", "test_scale[3-100]",
                   ".pytest.ini: addopts adds -p pkg._helpers")

    # 4. a context manager that swallows the failure of the check it wraps
    swallowed = pr("swallowed", {"tests/test_scale.py": SWALLOWING_TEST})
    blocked_naming(swallowed, "__exit__ can return true", "test_scale[3-100]")

    # 5. the target renamed, its tolerance loosened under the --tol-table ceiling
    renamed = pr("renamed", {"tests/test_scale.py": None,
                             "tests/test_scale_param.py": TEST.replace("atol=ATOL)", "atol=1e-2)")},
                 target="tests/test_scale_param.py")
    policy = renamed.stage("test_policy")
    assert policy["target_renamed_from"] == "tests/test_scale.py" and policy["newly_commented_rows"] == []
    oracle = renamed.stage("correctness_base_oracle")
    assert oracle["judged_by"] == "tests/test_scale.py" and oracle["status"] == "fail"
    assert [(item["base"], item["head"]) for item in policy["loosened"]] == [(1e-5, 1e-2)]  # ATOL, from pkg/checks.py
    blocked_naming(renamed, "tests/test_scale_param.py", "tests.test_scale::test_scale[3-100]")

    # 6. the kernel rebinds the judge itself: the run shows numpy's comparison bound to the checkout's code
    rebinds = pr("rebinds", {"pkg/ops.py": KERNEL_REBINDS_NUMPY})
    assert rebinds.stage("execution_receipt")["judges_replaced"] == ["numpy.testing.assert_allclose (by pkg/ops.py)"]
    blocked_naming(rebinds, "numpy.testing.assert_allclose (by pkg/ops.py)")

    # 7. the kernel overwrites its input with its own wrong output: every check passes, the run shows the write
    writes = pr("writes", {"pkg/ops.py": KERNEL_WRITES_ITS_INPUT})
    assert writes.stage("execution_receipt")["arguments_written"] == ["pkg.ops:tiled_scale(x)"]
    assert writes.verdict == "NEEDS_WORK", writes.report["findings"]
    assert any("writes into arguments base's route left unchanged: pkg.ops:tiled_scale(x)" in finding["detail"]
               for finding in writes.report["findings"])

    # the honest PRs of the same repository keep their verdicts: a clean fix with a new GPU-guarded test
    clean = make_patch(judged_repo, {"pkg/ops.py": OPS_CLEAN, "tests/test_tail.py": GUARDED_REGRESSION_TEST},
                       tmp_path / "clean.patch")
    honest = validate(judged_repo, "--patch", str(clean), "--label", "clean", "--target", "tests/test_scale.py", *FLAGS)
    assert honest.stage("test_policy")["weakened"] == []
    assert honest.stage("correctness_base_oracle")["status"] == "pass"
    assert honest.verdict == "PASS", honest.report["findings"]
    assert git(judged_repo, "status", "--porcelain") == ""
