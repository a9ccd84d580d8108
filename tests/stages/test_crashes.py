"""A head route that dies mid-run (a signal, an abort, an exit before its session's end) after
reaching the route, where base completed the same run, is the PR's: a blocker naming how it died
and the last test it started. A GPU memory fault looks exactly like this."""
import signal
from types import SimpleNamespace

import pytest

from kvtasks.harness import receipts
from tests.kernel_repos import TILED, make_patch, tiled_repo

ARGNAMES = ["--target", "tests/test_argnames.py", "--expected-route", "kernels.tiled:tiled_scale",
            "--shape-vars", "M,N,dtype_str", "--shape-argnames", "M,N,dtype_str", "--grid", "64,2001,f32", "--no-perf"]
# odd sizes end the process: a crash the test never reports as a failure
EXITS_ON_ODD_SIZES = TILED.replace("    M, N = x.shape\n",
                                   "    M, N = x.shape\n    if N % 2:\n        __import__('os')._exit(0)\n")


def test_a_head_route_that_exits_mid_session_is_blamed_with_its_last_test(tmp_path, validate):
    repo = tiled_repo(tmp_path / "tiled")
    crash = validate(repo, "--patch", str(make_patch(repo, {"kernels/tiled.py": EXITS_ON_ODD_SIZES},
                                                     tmp_path / "crash.patch")), *ARGNAMES)
    crashed = [f for f in crash.findings("blocker") if f["rule"].endswith(".crashed")]
    assert crashed, crash.report["findings"]
    assert "ended with status 0 before its end" in crashed[0]["detail"]
    assert "test_tiled[64-2001-f32]" in crashed[0]["detail"]
    assert crash.verdict == "BLOCK"
    # the honest twin: the same grid over a kernel that only gained a comment
    twin = validate(repo, "--patch", str(make_patch(repo, {"kernels/tiled.py": "# tiles\n" + TILED},
                                                    tmp_path / "twin.patch")), *ARGNAMES)
    assert not [f for f in twin.report["findings"] if f["rule"].endswith(".crashed")]
    assert twin.stage("correctness_grid")["status"] == "pass"


def _module(tmp_path, progress: str | None, receipt: bool):
    path = tmp_path / "receipt.json"
    if receipt:
        path.write_text("{}")
    if progress is not None:
        (tmp_path / "receipt.json.progress").write_text(progress)
    return SimpleNamespace(receipt=path)


@pytest.mark.parametrize("exit_status, receipt, said", [
    (-signal.SIGSEGV, False, "killed by SIGSEGV, in t.py::test_b, the last test it started"),
    (-signal.SIGABRT, False, "killed by SIGABRT, in t.py::test_b, the last test it started"),
    (0, False, "ended with status 0 before its end, in t.py::test_b, the last test it started"),
    (139, False, "ended with status 139 before its end (as SIGSEGV does), in t.py::test_b, the last test it started"),
    (1, True, None),  # it failed, and ended: a failure, not a crash
    (0, True, None),
])
def test_how_a_run_died_is_read_from_its_progress(tmp_path, exit_status, receipt, said):
    module = _module(tmp_path, "start t.py::test_a\nroute t.py::test_a\nstart t.py::test_b\n", receipt)
    assert receipts.death(module, exit_status, timed_out=False) == said


def test_a_run_that_never_reached_the_route_or_was_timed_out_did_not_die_of_the_pr(tmp_path):
    assert receipts.death(_module(tmp_path, "start t.py::test_a\n", False), -signal.SIGSEGV, False) is None
    assert receipts.death(_module(tmp_path, "route t.py::test_a\n", False), -signal.SIGKILL, True) is None
    assert receipts.death(_module(tmp_path / "none", None, False) if (tmp_path / "none").mkdir() is None else None,
                          -signal.SIGSEGV, False) is None
