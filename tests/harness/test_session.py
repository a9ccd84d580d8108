"""A merged pytest session: the probe adds the grid and the poisoned cell beside a mark's own cells,
and the session reads back as the repository's run, the grid's and the proof's."""
from pathlib import Path

import pytest

from kvtasks.harness import launching
from kvtasks.harness import session
from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.harness.receipts import StampedReceipt
from kvtasks.request import build_request
from tests.kernel_repos import make_repo
from tests.receipts import receipt as recorded

SUITE = '''import numpy as np
import pytest

from kern.ops import scale


@pytest.mark.parametrize("M,N", [(2, 3), pytest.param(4, 5, id="wide"), pytest.param(1, 1, marks=pytest.mark.skip),
                                 (6, 7), pytest.param(5, 5, id="64-7")],
                         ids=["small", None, "skipped", None, None])
def test_scale(M, N):
    x = np.ones((int(M), int(N)))
    assert (scale(x) == 2 * x).all()


def test_other():
    assert scale(np.ones(3)).sum() == 6
'''


def test_junit_names_a_node_id_the_way_pytest_does():
    assert session.junit_key("tests/test_ops.py::test_scale[64-7]") == ("tests.test_ops", "test_scale[64-7]")
    assert session.junit_key("t/test_a.py::TestA::test_b[x::y]") == ("t.test_a.TestA", "test_b[x::y]")


def test_one_session_runs_the_repo_tests_then_the_grid_then_the_poisoned_cell(tmp_path):
    repo = make_repo(tmp_path / "repo", {
        "kern/__init__.py": "", "kern/ops.py": "def scale(x):\n    return x * 2\n",
        "tests/test_ops.py": SUITE,
        # -x would end the session at the poisoned cell, or at a red repository test before the grid ran
        "pytest.ini": "[pytest]\naddopts = -x\n",
    })
    request = build_request({"repo": str(repo), "target": "tests/test_ops.py", "expected_route": "kern.ops:scale"})
    run = launching.run(request, runner="pytest", run_dir=tmp_path / "run", label="head-session",
                        grid_argnames=["M", "N"], grid_rows=[["6", "7"], ["64", "7"], ["3", "2"]],
                        poisoned_row=["__VALIDATOR_INVALID_GRID__"] * 2)
    assert session.unusable(run) is None, session.unusable(run)
    # the mark's own ids (a list, pytest.param ids, a marked cell) are kept; the added cells get the ids pytest
    # makes for their values (made unique where a grid row equals a repository row); the repo's items run first
    names = [case.name for case in run.cases]
    assert names[:6] == ["test_scale[small]", "test_scale[wide]", "test_scale[skipped]", names[3], names[4],
                         "test_other"]
    assert names[3].startswith("test_scale[6-7") and names[4].startswith("test_scale[64-7")
    assert names[6].startswith("test_scale[6-7") and names[7].startswith("test_scale[64-7")
    assert names[8:] == ["test_scale[3-2]", "test_scale[__VALIDATOR_INVALID_GRID__-__VALIDATOR_INVALID_GRID__]"]
    assert not any("kv" in name for name in names) and run.exit == 1 and run.receipt.maxfail_dropped == 1

    repo_part = session.part(run, "repo", "head-repo")
    # the cells whose ids and values equal the grid's are the repository's: the probe's indices say which are added
    assert (repo_part.exit, repo_part.stats.tests, repo_part.stats.skipped, repo_part.stats.executed) == (0, 6, 1, 5)
    assert repo_part.receipt.route_calls == {"kern.ops:scale": 5} and repo_part.stats.observed_work == 5
    grid_part = session.part(run, "grid", "head-grid")
    assert grid_part.exit == 0 and grid_part.stats.executed == 3 and grid_part.session == "head-session"
    assert grid_part.receipt.route_calls == {"kern.ops:scale": 3} and grid_part.receipt.label == "head-grid"
    grid_items = [f"tests/test_ops.py::{name}" for name in names[6:9]]
    assert {entry.cell for entry in grid_part.receipt.route_outputs} == set(grid_items)
    assert session.cells_by_case(grid_part) == {("tests.test_ops", name): index
                                                for index, name in enumerate(names[6:9])}
    proof = session.part(run, "proof", "head-grid-probe")
    assert proof.exit == 1 and [case.outcome for case in proof.cases] == ["failed"]
    assert "FAILED tests.test_ops::test_scale[__VALIDATOR_INVALID_GRID__" in Path(proof.log).read_text()
    assert proof.receipt.route_calls == {}  # the poisoned cell never reached the route


def test_a_session_that_did_not_end_as_a_run_of_tests_stands_for_nothing(tmp_path):
    def receipt(**said) -> StampedReceipt:
        return recorded(**{"parts": {}, "merged_marks": 1, "added": {"t.py::test_a[1]": "grid"}, **said})

    def ended(**how) -> TargetRun:
        fields = {"label": "base-session", "runner": "pytest", "command": [], "exit": 1, "duration_s": 1.0,
                  "log": str(tmp_path / "none.log"), "stats": ExecutionStats(), "receipt": receipt(),
                  "cases": [{"name": "test_a[1]", "classname": "t", "outcome": "passed"}]}
        return TargetRun(**{**fields, **how})

    assert session.unusable(ended()) is None
    assert "timed out" in session.unusable(ended(exit=None, timed_out=True))
    assert "exit -9" in session.unusable(ended(exit=-9))  # a grid cell that crashed the interpreter
    assert "exit 2" in session.unusable(ended(exit=2))  # an interrupted collection
    assert "JUnit" in session.unusable(ended(cases=[]))
    assert "merged receipt" in session.unusable(ended(receipt=None))
    assert "merged receipt" in session.unusable(ended(receipt=recorded()))  # a run of its own, not a session
    assert "no parametrize mark" in session.unusable(ended(receipt=receipt(merged_marks=0)))
    assert "stopped before its last item" in session.unusable(ended(receipt=receipt(session_stopped="-x")))
    assert "rewrote its exit status (1 -> 0)" in session.unusable(ended(receipt=receipt(exit_rewritten="1 -> 0")))
    assert "rewrite an item's report" in session.unusable(ended(receipt=receipt(
        report_hooks=["conftest.py: pytest_runtest_makereport"])))
    assert "pytest-xdist (-n 2)" in session.unusable(ended(receipt=receipt(xdist="-n 2")))
    assert "does not name every item" in session.unusable(ended(cases=[{"name": "test_a", "outcome": "passed"}]))


@pytest.mark.parametrize("conftest, why", [
    # a module fixture's teardown reports on the last item that used it: alone, a repository item
    ('''import pytest


@pytest.fixture(scope="module", autouse=True)
def leak_check():
    yield
    raise AssertionError("a buffer leaked")
''', "a teardown failed on an item kvtasks added"),
    # an end-of-session check sees the whole session, which the poisoned cell makes red
    ('''def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 0:
        session.exitstatus = 0
''', "session hooks see the whole session's outcome, which the poisoned cell makes a failure (tests/conftest.py: pytest_sessionfinish)"),
    # a report hook can tell the added items from the repository's and pass them whatever they did
    ('''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.callspec.indices.get("M", 0) > 4:
        report.outcome = "passed"
''', "hooks can rewrite an item's report or outcome or call its test, and so treat the items kvtasks "
        "added apart from its own (tests/conftest.py: pytest_runtest_makereport)"),
    # the same, from an object a conftest registers as a plugin (it has no file of its own)
    ('''import pytest


class Lenient:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        yield


def pytest_configure(config):
    config.pluginmanager.register(Lenient(), "lenient")
''', "hooks can rewrite an item's report or outcome or call its test, and so treat the items kvtasks "
        "added apart from its own (tests/conftest.py: pytest_runtest_makereport)"),
    # a hook that calls the test function its own way (here: not at all for rows it did not list)
    ('''def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.callspec.params.get("M") not in (2, 4, 1, 6, 5):
        return True
''', "hooks can rewrite an item's report or outcome or call its test, and so treat the items kvtasks "
        "added apart from its own (tests/conftest.py: pytest_pyfunc_call)"),
], ids=["module-teardown", "session-hook", "report-hook", "registered-object", "pyfunc-call"])
def test_what_the_repository_does_around_its_items_makes_a_session_stand_for_nothing(tmp_path, conftest, why):
    repo = make_repo(tmp_path / "repo", {
        "kern/__init__.py": "", "kern/ops.py": "def scale(x):\n    return x * 2\n",
        "tests/test_ops.py": SUITE, "tests/conftest.py": conftest,
    })
    request = build_request({"repo": str(repo), "target": "tests/test_ops.py", "expected_route": "kern.ops:scale"})
    run = launching.run(request, runner="pytest", run_dir=tmp_path / "run", label="base-session",
                        grid_argnames=["M", "N"], grid_rows=[["64", "7"]], poisoned_row=["__VALIDATOR_INVALID_GRID__"] * 2)
    assert why in (session.unusable(run) or ""), session.unusable(run)
