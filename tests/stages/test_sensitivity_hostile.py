"""PRs that try to tell the validator's runs apart, end to end on one built repository: a kernel that
reads the grid cells' ids, a conftest that treats the items kvtasks added apart, a suite that turns
strict only in the corrupted run, and one that checks only the input the route echoes back. None
reaches PASS; an honest tight suite still does, with the outputs the corruption touched named."""
import pytest

from tests.kernel_repos import ARGNAMES_TEST, TILED, TILED_TAIL_BUG, git, make_patch, tiled_repo

ARGNAMES = ["--target", "tests/test_argnames.py", "--shape-argnames", "M,N,dtype_str", "--expected-route",
            "kernels.tiled:tiled_scale", "--shape-vars", "M,N,dtype_str", "--grid", "64,2000,f32;3,100,f16"]
ECHO = ["--shape-argnames", "M,N", "--expected-route", "kernels.echo:scale_echo", "--shape-vars", "M,N",
        "--grid", "64,2000;3,100"]

# base: a route that hands its input back beside what it computed, and two suites over it
ECHO_KERNEL = '''import numpy as np


def scale_echo(x, factor):
    M, N = x.shape
    return x * factor, x
'''
ECHO_TAIL_BUG = ECHO_KERNEL.replace("    return x * factor, x\n",
                                    "    out = x * factor\n    out[:, N - N % 64:] = 0\n    return out, x\n")
ECHO_TEST = '''import numpy as np
import pytest

from kernels.echo import scale_echo


def make_input(M, N):
    return np.arange(M * N, dtype=np.float32).reshape(M, N) % 7


@pytest.mark.parametrize("M,N", [(4, 64), (8, 128)])
def test_scale_echo(M, N):
    out, echoed = scale_echo(make_input(M, N), 3.0)
'''
TIGHT = ECHO_TEST + "    np.testing.assert_allclose(out, make_input(M, N) * 3.0, rtol=1e-6)\n"
# checks the output's shape and the echoed input's values, never the output's values
WEAK = ECHO_TEST + "    assert out.shape == (M, N)\n    np.testing.assert_array_equal(echoed, make_input(M, N))\n"

# the tail bug where the test ids look like the validator's cells, the right values elsewhere
KERNEL_READS_IDS = TILED_TAIL_BUG.replace("import numpy as np\n", "import os\n\nimport numpy as np\n").replace(
    "    n_tiles = N // TILE\n",
    "    current = os.environ.get('PYTEST_CURRENT_TEST', '')\n"
    "    n_tiles = (N + TILE - 1) // TILE if 'kvcell' in current or 'kvpoison' in current else N // TILE\n")
# an autouse fixture that swaps in exact values for the items kvtasks added, by their mark or id
CONFTEST_READS_ITEMS = '''import pytest


@pytest.fixture(autouse=True)
def exact_for_added_items(request, monkeypatch):
    marks = [mark.name for mark in request.node.iter_markers()]
    if any(name.startswith("kvtasks_added") for name in marks) or "kvcell" in request.node.nodeid:
        monkeypatch.setattr(request.module, "tiled_scale", lambda x, factor, num_heads=1: x * factor)
'''
# a comparison that is strict only when the run can be told to be the corrupted one
STRICT_WHEN_CORRUPTED = ARGNAMES_TEST.replace("import os\n", "import os\nimport sys\n").replace(
    "\n\n@pytest.mark.parametrize", '''


def corrupted_run():
    if "sensitivity" in os.environ.get("VALIDATION_PHASE", ""):
        return True
    for module in list(sys.modules.values()):
        for name in ("CONFIG", "_config", "_sealed"):
            found = getattr(module, name, None)
            if isinstance(found, dict) and found.get("sensitivity"):
                return True
    return False


@pytest.mark.parametrize''').replace("    np.testing.assert_allclose(tiled_scale(x, 3.0), x * 3.0, atol=1e-3)\n",
                            "    got = tiled_scale(x, 3.0)\n"
                            "    if corrupted_run():\n"
                            "        np.testing.assert_allclose(got, x * 3.0, atol=1e-3)\n")


@pytest.fixture
def hostile_repo(tmp_path):
    repo = tiled_repo(tmp_path / "tiled")
    (repo / "kernels/echo.py").write_text(ECHO_KERNEL)
    (repo / "tests/test_echo_tight.py").write_text(TIGHT)
    (repo / "tests/test_echo_weak.py").write_text(WEAK)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a route that echoes its input")
    return repo


def test_no_run_can_be_told_apart_and_pass_stays_reachable(hostile_repo, validate, tmp_path):
    def pr(name: str, changes: dict, *flags: str):
        patch = make_patch(hostile_repo, changes, tmp_path / f"{name}.patch")
        return validate(hostile_repo, "--patch", str(patch), "--label", name, *flags)

    honest = pr("honest", {"README.md": "docs\n"}, "--target", "tests/test_echo_tight.py", *ECHO)
    assert honest.verdict == "PASS", honest.report["findings"]
    tail = honest.stage("sensitivity")["modes"]["tail"]
    assert tail["outputs_corrupted"]["return[0]"] > 0
    assert tail["outputs_left_alone"] == {"return[1]": "an input (argument x, or memory shared with it)"}

    # the echoed input is never corrupted, so a suite that checks only it cannot pass the proof
    echo = pr("echo", {"kernels/echo.py": ECHO_TAIL_BUG}, "--target", "tests/test_echo_weak.py", *ECHO)
    assert echo.verdict != "PASS" and echo.stage("sensitivity")["status"] == "fail"
    assert "cannot detect a wrong kernel here" in echo.stage("sensitivity")["note"]

    for name, changes in (("kernel-ids", {"kernels/tiled.py": KERNEL_READS_IDS}),
                          ("conftest-items", {"kernels/tiled.py": TILED_TAIL_BUG,
                                              "tests/conftest.py": CONFTEST_READS_ITEMS})):
        told = pr(name, changes, *ARGNAMES)
        assert told.verdict == "BLOCK", (name, told.report["findings"])
        assert told.stage("correctness_grid")["status"] == "fail", name

    strict = pr("strict-when-corrupted", {"kernels/tiled.py": TILED_TAIL_BUG,
                                          "tests/test_argnames.py": STRICT_WHEN_CORRUPTED}, *ARGNAMES)
    assert strict.verdict != "PASS" and strict.stage("sensitivity")["status"] == "fail"
    assert KERNEL_READS_IDS != TILED and STRICT_WHEN_CORRUPTED != ARGNAMES_TEST
