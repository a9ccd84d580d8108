"""kvtasks' doit reporter: a verdict's exit (a report's, a batch's, a PR's) is said as a verdict, and
anything else that fails a task is said in full, every line in kvtasks' format."""
from types import SimpleNamespace

import pytest
from doit.exceptions import TaskError, TaskFailed

from kvtasks.front import graph
from kvtasks.front.reporting import KvtasksReporter
from kvtasks.system import progress


@pytest.fixture
def shown():
    progress.show(quiet=False)
    yield
    progress.show(quiet=True)


@pytest.mark.parametrize("result", [graph._verdict_result(1, "verdict BLOCK (exit 1): r.json"),
                                    graph._verdict_result(1, "verdict of batch nightly: exit 1 (index.md)"),
                                    graph._verdict_result(2, "verdict of PR pr-7: exit 2 (pr_report.json)")])
def test_a_verdict_s_exit_is_said_as_the_verdict(result, shown, capsys):
    reporter = KvtasksReporter(None, {})
    reporter.add_failure(SimpleNamespace(name="batch"), result)
    said = capsys.readouterr().err.splitlines()
    assert reporter.failed == [] and len(said) == 1 and said[0].startswith("[kvtasks] batch: verdict")


def test_any_other_failure_is_said_in_full_in_kvtasks_format(shown, capsys):
    reporter = KvtasksReporter(None, {})
    reporter.add_failure(SimpleNamespace(name="report:pr-1"), TaskError("Traceback (most recent call last):\n  boom"))
    reporter.add_failure(SimpleNamespace(name="head:" + "a" * 64), TaskFailed("stage crashed"))
    said = capsys.readouterr().err.splitlines()
    assert reporter.failed == ["report:pr-1", "head:" + "a" * 64]
    assert said[0] == "[kvtasks] report pr-1 failed: Traceback (most recent call last):"
    assert said[1] == "[kvtasks]     boom" and said[2] == "[kvtasks] head aaaaaaaaaaaa failed: stage crashed"
