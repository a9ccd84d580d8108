"""NaN from the route behind a NaN-blind test helper: the probe sees what the assertion cannot."""
from kvtasks.stages import Stage, StageResult, nonfinite
from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from tests.kernel_repos import make_patch, make_repo
from tests.receipts import receipt

KL = '''import numpy as np

CHUNK = 128


def kl_div(log_p, q):
    """Row-wise KL(q || p), summed over the vocabulary in chunks of CHUNK columns."""
    out = np.zeros(log_p.shape[0], dtype=np.float32)
    for start in range(0, log_p.shape[1], CHUNK):
        qs, lp = q[:, start:start + CHUNK], log_p[:, start:start + CHUNK]
        out += (qs * (np.log(qs) - lp)).sum(axis=1)
    return out
'''

# The "vectorised tail" a PR might make: pad the last chunk with zeros; 0 * log(0) is NaN.
KL_PADDED = KL.replace('''        qs, lp = q[:, start:start + CHUNK], log_p[:, start:start + CHUNK]
''', '''        qs = np.zeros((q.shape[0], CHUNK), dtype=q.dtype)
        lp = np.zeros((q.shape[0], CHUNK), dtype=q.dtype)
        width = min(CHUNK, q.shape[1] - start)
        qs[:, :width], lp[:, :width] = q[:, start:start + width], log_p[:, start:start + width]
''')

# Liger's assert_verbose_allclose in miniature: `diff > tol` is False for NaN, so NaN passes.
TEST = '''import numpy as np
import pytest

from kernels.kl import kl_div


def assert_verbose_allclose(actual, expected, atol=1e-5, rtol=1e-5):
    mismatched = np.abs(actual - expected) > atol + rtol * np.abs(expected)
    assert not mismatched.any(), f"{int(mismatched.sum())} elements differ"


@pytest.mark.parametrize("V", [256, 1271])
def test_kl_div(V):
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(V), size=4).astype(np.float32)
    log_p = np.log(rng.dirichlet(np.ones(V), size=4)).astype(np.float32)
    assert_verbose_allclose(kl_div(log_p, q), (q * (np.log(q) - log_p)).sum(axis=1), atol=1e-4, rtol=1e-4)
'''


def test_nan_behind_a_nan_blind_helper_blocks_naming_the_cell(tmp_path, validate):
    repo = make_repo(tmp_path / "kl", {"kernels/__init__.py": "", "kernels/kl.py": KL, "tests/test_kl.py": TEST})
    patch = make_patch(repo, {"kernels/kl.py": KL_PADDED}, tmp_path / "pad.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_kl.py", "--expected-route",
                      "kernels.kl:kl_div")
    head = result.stage("correctness_repo_tests")
    assert head["stats"]["failures"] == 0 and head["exit"] == 0  # the test itself passed
    assert head["status"] == "fail" and result.verdict == "BLOCK"
    assert [f["detail"] for f in result.findings("blocker")] == [
        "NaN/Inf on head where base returned only finite values, whatever the test asserted: kernels.kl:kl_div "
        "in tests/test_kl.py::test_kl_div[1271]: nan in return"]
    base = {entry["cell"]: entry for entry in result.stage("baseline_control")["repo_tests"]["route_outputs"]}
    assert base["tests/test_kl.py::test_kl_div[1271]"]["checked"] == 1
    assert base["tests/test_kl.py::test_kl_div[1271]"]["nonfinite"] == []


def _run(outputs):
    return TargetRun(label="head-repo", runner="pytest", command=[], exit=0, duration_s=0.0, log="",
                     stats=ExecutionStats(), receipt=receipt(route_outputs=outputs))


def test_only_a_cell_base_checked_and_saw_finite_counts():
    nan = {"route": "m:f", "cell": "t[1]", "checked": 1, "unchecked": 0, "nonfinite": ["nan in return"]}
    finite = {**nan, "nonfinite": []}
    assert nonfinite.appeared(_run([nan]), [finite]) == [nan]
    assert nonfinite.appeared(_run([nan]), [nan]) == []  # base had it too
    assert nonfinite.appeared(_run([nan]), [{**finite, "cell": "t[2]"}]) == []  # base never ran that cell
    assert nonfinite.appeared(_run([nan]), [{**finite, "checked": 0, "unchecked": 1}]) == []  # too large to scan
    assert nonfinite.appeared(_run([finite]), [finite]) == []
    stage = StageResult(name="correctness_repo_tests", stage=Stage(status="pass"))
    nonfinite.judge(stage, _run([nan, finite]), [finite])
    assert stage.stage.status == "fail" and [f.severity for f in stage.findings] == ["blocker"]
