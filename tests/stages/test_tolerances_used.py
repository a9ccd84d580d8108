"""A tolerance widened where no test file spells it: the kernel's package switches the dtype its test
tolerance is derived from (`finfo(ACC).eps * 84`, f32 to f16) together with a tail defect that
tolerance now lets through. The probe reads the tolerance each judging call received, so head's
looser one is named with base's; the honest twin changes the kernel and keeps the tolerance."""
from tests.kernel_repos import make_patch, make_repo

KERNEL = '''import numpy as np

ACC = np.float32
TOL = float(np.finfo(ACC).eps * 84)
TILE = 64


def tiled_scale(x, factor):
    M, N = x.shape
    out = np.empty_like(x)
    for start in range(0, N, TILE):
        out[:, start:start + TILE] = (x[:, start:start + TILE] * factor).astype(ACC if start + TILE > N else x.dtype)
    return out
'''
TEST = '''import numpy as np
import pytest

from kernels.tiled import TOL, tiled_scale


@pytest.mark.parametrize("M,N", [(4, 64), (8, 128)])
def test_tiled(M, N):
    x = np.random.default_rng(M * N).random((M, N), dtype=np.float32) * 4
    np.testing.assert_allclose(tiled_scale(x, 3.0), x * 3.0, rtol=0, atol=TOL)
'''
ARGS = ["--target", "tests/test_tiled.py", "--expected-route", "kernels.tiled:tiled_scale", "--shape-vars", "M,N",
        "--shape-argnames", "M,N", "--grid", "64,2001", "--no-perf"]


def test_a_tolerance_widened_in_the_kernel_s_package_is_named_with_base_s(tmp_path, validate):
    repo = make_repo(tmp_path / "repo", {"kernels/__init__.py": "", "kernels/tiled.py": KERNEL,
                                         "tests/test_tiled.py": TEST})
    # the tail tile rounded through f16, and the tolerance derived from f16 too
    widened = validate(repo, "--patch", str(make_patch(repo, {"kernels/tiled.py": KERNEL.replace(
        "ACC = np.float32", "ACC = np.float16")}, tmp_path / "widened.patch")), *ARGS)
    looser = [f for f in widened.report["findings"] if f["rule"] == "policy.effective-tolerance-looser"]
    assert looser and looser[0]["severity"] == "should-fix", widened.report["findings"]
    assert "tests/test_tiled.py:10" in looser[0]["detail"] and "atol=1.00136e-05" in looser[0]["detail"]
    assert "atol=0.0820312" in looser[0]["detail"] and widened.verdict == "NEEDS_WORK"
    # the honest twin: the kernel changes, the tolerance it is judged by does not
    twin = validate(repo, "--patch", str(make_patch(repo, {"kernels/tiled.py": "# tiles\n" + KERNEL},
                                                    tmp_path / "twin.patch")), *ARGS)
    assert not [f for f in twin.report["findings"] if f["rule"].startswith("policy.")], twin.report["findings"]
    assert twin.verdict == "PASS", twin.report["findings"]
