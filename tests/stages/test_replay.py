"""The replay: a tail bug the kernel hides only under its test, behind a reference the PR changed
beside it, or behind an array type whose own arithmetic lies, is found by calling the route again
outside any test; honest changes keep PASS. One repository and one base for every PR."""
from tests.kernel_repos import SPLIT_TAIL, make_patch, make_repo

OPS = SPLIT_TAIL.replace("\n\ndef tiled_scale", "\n\ndef reference(x, factor):\n    return x * factor\n\n\ndef tiled_scale")
TEST = '''import numpy as np
import pytest

from pkg.ops import reference, tiled_scale


@pytest.mark.parametrize("M,N", [(4, 64), (3, 100)])
def test_scale(M, N):
    x = np.random.default_rng(M * 1000 + N).standard_normal((M, N)).astype(np.float32)
    np.testing.assert_allclose(tiled_scale(x, 3.0), reference(x, 3.0), rtol=1e-6)
'''
TAIL = "    out[:, full:] = x[:, full:] * factor\n"


def tail_right_only_when(condition: str) -> str:
    return OPS.replace(TAIL, f"    out[:, full:] = x[:, full:] * factor if {condition} else 0\n")


# the run-state tells: a kernel right only under its test
TELLS = {
    "env": '"PYTEST_VERSION" in __import__("os").environ',
    "faulthandler": '__import__("faulthandler").is_enabled()',
    "stdout": 'type(__import__("sys").stdout).__module__.startswith("_pytest")',
    "session": '__import__("os").getsid(0) == __import__("os").getpid()',  # no code of kvtasks names it
}
# the reference moved beside the kernel, and wrong with it
ROUTE_SIDE_REFERENCE = OPS.replace(TAIL, "    out[:, full:] = 0\n").replace(
    "    return x * factor\n", "    out = x * factor\n    out[:, x.shape[1] - x.shape[1] % TILE:] = 0\n    return out\n")
MOVED_HELPER = {"pkg/refs.py": "from pkg.ops_base import TILE\n\n\ndef reference(x, factor):\n    out = x * factor\n"
                               "    out[:, x.shape[1] - x.shape[1] % TILE:] = 0\n    return out\n",
                "pkg/ops_base.py": "TILE = 64\n",
                "pkg/ops.py": OPS.replace(TAIL, "    out[:, full:] = 0\n").replace(
                    "def reference(x, factor):\n    return x * factor\n", "from pkg.refs import reference  # noqa: E402\n")}
# an output whose subtraction always says zero: assert_allclose passes whatever its data holds
LYING = OPS.replace(TAIL, "    out[:, full:] = 0\n    return out.view(_Result)\n").replace("def reference", '''class _Result(np.ndarray):
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [item.view(np.ndarray) if isinstance(item, np.ndarray) else item for item in inputs]
        answer = getattr(ufunc, method)(*plain, **kwargs)
        return np.zeros_like(answer) if ufunc is np.subtract else answer


def reference''')
HONEST = {
    "refactor": OPS.replace("    out = np.empty_like(x)\n    full = N - N % TILE\n    out[:, :full] = x[:, :full] * factor\n"
                            + TAIL, "    out = x * factor  # one pass\n"),
    # within the tolerance table: computed in float64
    "wider-accumulator": OPS.replace(TAIL, "    out[:, full:] = (x[:, full:].astype(np.float64) * factor).astype(x.dtype)\n"),
    # order-dependent accumulation: a little different on every call
    "atomics": OPS.replace(TAIL, TAIL + "    out *= 1 + np.random.default_rng().uniform(-1e-7, 1e-7, out.shape).astype(out.dtype)\n"),
}
FLAGS = ["--target", "tests/test_scale.py", "--shape-argnames", "M,N", "--expected-route", "pkg.ops:tiled_scale",
         "--shape-vars", "M,N", "--grid", "64,2000;3,100", "--no-perf"]


def test_what_only_a_test_passes_is_found_outside_it_and_honest_changes_keep_pass(tmp_path, validate):
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/ops.py": OPS, "tests/test_scale.py": TEST})

    def validated(name, changes):
        return validate(repo, "--patch", str(make_patch(repo, changes, tmp_path / f"{name}.patch")), *FLAGS)

    def rules(result):
        return {(f["rule"], f["severity"]) for f in result.report["findings"]}

    for name, condition in TELLS.items():
        result = validated(name, {"pkg/ops.py": tail_right_only_when(condition)})
        assert ("replay.differs-under-test", "blocker") in rules(result), (name, result.report["findings"])
        assert result.verdict == "BLOCK", name
    for name, changes in (("route-side-reference", {"pkg/ops.py": ROUTE_SIDE_REFERENCE}), ("moved-helper", MOVED_HELPER)):
        result = validated(name, changes)
        assert ("replay.changed-where-base-passed", "should-fix") in rules(result), (name, result.report["findings"])
        assert result.verdict != "PASS", name
    lying = validated("lying", {"pkg/ops.py": LYING})
    assert ("replay.output-type", "blocker") in rules(lying), lying.report["findings"]
    assert lying.stage("correctness_repo_tests")["status"] == "pass"  # the lie holds under the test
    assert "pkg.ops._Result" in str(lying.report["findings"]) and lying.verdict == "BLOCK"
    for name, kernel in HONEST.items():
        result = validated(name, {"pkg/ops.py": kernel})
        assert result.verdict == "PASS", (name, result.report["findings"], result.stage("replay"))
        assert result.stage("replay")["status"] == "pass" and result.stage("replay")["calls"]["head"] > 0


# the repository's own test setup changes the kernel's results (a mode its conftest sets): outside the
# test the route differs on base as on head, so the replay is no evidence there and blames no one
SETUP_DEPENDENT = OPS.replace("    return out\n", "    if __import__('os').environ.get('SCALE_MODE') != 'exact':\n"
                                              "        out = out.astype(np.float16).astype(x.dtype)\n    return out\n", 1)


def test_a_route_the_tests_own_setup_changes_is_not_blamed(tmp_path, validate):
    repo = make_repo(tmp_path / "repo", {"pkg/__init__.py": "", "pkg/ops.py": SETUP_DEPENDENT, "tests/test_scale.py": TEST,
                                         "tests/conftest.py": "import os\n\nos.environ['SCALE_MODE'] = 'exact'\n"})
    result = validate(repo, "--patch", str(make_patch(repo, {"pkg/ops.py": "# scale\n" + SETUP_DEPENDENT},
                                                      tmp_path / "comment.patch")), *FLAGS)
    replay = result.stage("replay")
    assert replay["status"] == "skip" and replay["required"] is False and replay["differs_under_test"], replay
    assert [f["rule"] for f in result.report["findings"]] == ["replay.differs-on-both-sides"]
    assert result.verdict == "PASS"
