"""A merged pytest session: the probe adds the grid and the poisoned cell beside a mark's own cells,
and the session reads back as the repository's run, the grid's and the proof's."""
from pathlib import Path

from kvtasks import harness
from kvtasks.harness import session
from kvtasks.harness.launch import ExecutionStats, TargetRun
from kvtasks.harness.probe import part_of
from kvtasks.request import build_request
from tests.kernel_repos import make_repo

SUITE = '''import numpy as np
import pytest

from kern.ops import scale


@pytest.mark.parametrize("M,N", [(2, 3), pytest.param(4, 5, id="wide"), pytest.param(1, 1, marks=pytest.mark.skip)],
                         ids=["small", None, "skipped"])
def test_scale(M, N):
    x = np.ones((int(M), int(N)))
    assert (scale(x) == 2 * x).all()


def test_other():
    assert scale(np.ones(3)).sum() == 6
'''


def test_part_of_reads_a_cell_from_its_id_alone():
    assert part_of("t.py::test[kvcell0=1,2]") == "grid"
    assert part_of("t.py::test[bias0-kvcell12=64,2000,f32]") == "grid"  # beside another mark's id
    assert part_of("t.py::test[kvpoison=__VALIDATOR_INVALID_GRID__]") == "proof"
    for repo_item in ("t.py::test_kvcell", "t.py::test[mykvcell0=1]", "t.py::test[kvcell=1]", ""):
        assert part_of(repo_item) == "repo", repo_item


def test_one_session_runs_the_repo_tests_then_the_grid_then_the_poisoned_cell(tmp_path):
    repo = make_repo(tmp_path / "repo", {
        "kern/__init__.py": "", "kern/ops.py": "def scale(x):\n    return x * 2\n",
        "tests/test_ops.py": SUITE,
        # -x would end the session at the poisoned cell, or at a red repository test before the grid ran
        "pytest.ini": "[pytest]\naddopts = -x\n",
    })
    request = build_request({"repo": str(repo), "target": "tests/test_ops.py", "expected_route": "kern.ops:scale"})
    run = harness.run(request, runner="pytest", run_dir=tmp_path / "run", label="head-session",
                      grid_argnames=["M", "N"], grid_rows=[["64", "7"], ["3", "2"]],
                      poisoned_row=["__VALIDATOR_INVALID_GRID__"] * 2)
    assert session.unusable(run) is None, session.unusable(run)
    # the mark's own ids (a list, pytest.param ids, a marked cell) are kept; the repo's items run first
    assert [case.name for case in run.cases] == [
        "test_scale[small]", "test_scale[wide]", "test_scale[skipped]", "test_other",
        "test_scale[kvcell0=64,7]", "test_scale[kvcell1=3,2]", "test_scale[kvpoison=__VALIDATOR_INVALID_GRID__,"
                                                               "__VALIDATOR_INVALID_GRID__]"]
    assert run.exit == 1 and run.receipt["maxfail_dropped"] == 1

    repo_part = session.part(run, "repo", "head-repo")
    assert (repo_part.exit, repo_part.stats.tests, repo_part.stats.skipped, repo_part.stats.executed) == (0, 4, 1, 3)
    assert repo_part.receipt["route_calls"] == {"kern.ops:scale": 3} and repo_part.stats.observed_work == 3
    grid_part = session.part(run, "grid", "head-grid")
    assert grid_part.exit == 0 and grid_part.stats.executed == 2 and grid_part.session == "head-session"
    assert grid_part.receipt["route_calls"] == {"kern.ops:scale": 2} and grid_part.receipt["label"] == "head-grid"
    assert {entry["cell"] for entry in grid_part.receipt["route_outputs"]} == {
        "tests/test_ops.py::test_scale[kvcell0=64,7]", "tests/test_ops.py::test_scale[kvcell1=3,2]"}
    proof = session.part(run, "proof", "head-grid-probe")
    assert proof.exit == 1 and [case.outcome for case in proof.cases] == ["failed"]
    assert "FAILED tests.test_ops::test_scale[kvpoison=" in Path(proof.log).read_text()
    assert proof.receipt["route_calls"] == {}  # the poisoned cell never reached the route


def test_a_session_that_did_not_end_as_a_run_of_tests_stands_for_nothing(tmp_path):
    def ended(**how) -> TargetRun:
        fields = {"label": "base-session", "runner": "pytest", "command": [], "exit": 1, "duration_s": 1.0,
                  "log": str(tmp_path / "none.log"), "stats": ExecutionStats(), "receipt": {"parts": {}, "merged_marks": 1},
                  "cases": [{"name": "test_a", "outcome": "passed"}]}
        return TargetRun(**{**fields, **how})

    assert session.unusable(ended()) is None
    assert "timed out" in session.unusable(ended(exit=None, timed_out=True))
    assert "exit -9" in session.unusable(ended(exit=-9))  # a grid cell that crashed the interpreter
    assert "exit 2" in session.unusable(ended(exit=2))  # an interrupted collection
    assert "JUnit" in session.unusable(ended(cases=[]))
    assert "merged receipt" in session.unusable(ended(receipt=None))
    assert "no parametrize mark" in session.unusable(ended(receipt={"parts": {}, "merged_marks": 0}))
