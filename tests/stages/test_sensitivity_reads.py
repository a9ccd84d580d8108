"""A corrupted run counts only where a test fails on a comparison of what the route produced. A suite
that checks only that its input is unchanged and that the output has the input's shape fails its
corrupted run for another reason (here: state its earlier runs left behind), and so cannot show a
tail bug; the honest suite's twin is tests/stages/test_sensitivity.py's tight suite, still PASS."""
import tempfile
from pathlib import Path

from tests.kernel_repos import make_patch, make_repo
from tests.sensitivity_repos import HEADER, HELPERS, INPUT, OPS

# the third run of a cell fails: base's grid, head's grid, then the corrupted one
SHAPE_ONLY = HEADER.replace("import os\n", "import os\nimport tempfile\n") + "def test_scale(M, N):\n" + INPUT + (
    "    before = x.copy()\n    out = scale(x, 2.0)\n    np.testing.assert_array_equal(x, before)\n"
    "    marker = os.path.join(tempfile.gettempdir(), 'seen' + os.getcwd().replace('/', '-') + f'-{M}-{N}')\n"
    "    with open(marker, 'a') as seen:\n        seen.write('.')\n"
    "    assert out.shape == x.shape and os.path.getsize(marker) < 3\n")
TAIL_BUG = OPS.replace("    return x * factor\n", "    out = x * factor\n    out[:, -1] = 0\n    return out\n")


def test_a_suite_failing_its_corrupted_run_on_no_output_value_is_not_sensitive(tmp_path, validate):
    repo = make_repo(tmp_path / "repo", {"kernels/__init__.py": "", "kernels/ops.py": OPS, "tests/helpers.py": HELPERS,
                                         "tests/test_shape.py": SHAPE_ONLY})
    try:
        result = validate(repo, "--patch", str(make_patch(repo, {"kernels/ops.py": TAIL_BUG}, tmp_path / "tail.patch")),
                          "--target", "tests/test_shape.py", "--expected-route", "kernels.ops:scale",
                          "--shape-vars", "M,N", "--shape-env", "SENS_SHAPES", "--grid", "3,5;16,33", "--no-perf")
    finally:
        for marker in Path(tempfile.gettempdir()).glob("seen" + str(repo).replace("/", "-") + "-*"):
            marker.unlink()
    tail = result.stage("sensitivity")["modes"]["tail"]
    assert tail["status"] == "fail" and tail["tests_failed_count"] == 0, tail
    assert tail["tests_failed_elsewhere_count"] == 2 and "none on a comparison of what it produced" in tail["reason"]
    assert result.verdict != "PASS"
