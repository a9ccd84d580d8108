"""The one top-level handler: a typed error is its documented exit code and one line; anything else
is a crash whose traceback is kept in crash.log beside the report, the line naming it."""
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvtasks import errors
from kvtasks.front import cli, front_doors, graph
from kvtasks.errors import CRASH_LOG, InfrastructureError, UsageError


def said(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("error, code", [(UsageError("--label 'a b' must be letters"), 64),
                                         (InfrastructureError("the GPU never came free"), 2)])
def test_a_typed_error_is_its_exit_code_and_one_line(error, code, tmp_path, capsys):
    def run():
        raise error

    assert errors.handled(run, errors.CrashSite(tmp_path)) == code
    assert said(capsys) == [f"validate-kernel-pr: error: {error}"]
    assert not (tmp_path / CRASH_LOG).exists()


def test_a_usage_error_from_the_front_door_exits_64_with_one_line(home, capsys):
    assert cli.main(["serve", "--port", "eighty"]) == 64
    assert said(capsys) == ["validate-kernel-pr: error: port= takes a port number, e.g. port=8000; got 'eighty'"]
    assert not (home / "reports").exists()


def test_a_usage_error_raised_in_a_task_creator_crosses_doit(home, capsys):
    # doit turns an Exception from a task creator into its own traceback and exit 3
    assert cli.main(["report", "--label", "never-validated"]) == 64
    err = said(capsys)
    assert len(err) == 1 and err[0].startswith("validate-kernel-pr: error: label 'never-validated' has no report")


def _crash():
    raise RuntimeError("a bug in kvtasks")


def test_a_crash_keeps_its_traceback_in_the_reports_folder_and_says_where(home, monkeypatch, capsys):
    monkeypatch.setattr(front_doors, "namespace", lambda *args: _crash())
    assert cli.main(["report"]) == errors.INCONCLUSIVE_EXIT
    log = home / "reports" / CRASH_LOG
    assert said(capsys) == [f"validate-kernel-pr: error: kvtasks crashed (RuntimeError: a bug in kvtasks); the "
                            f"traceback is in {log}"]
    traceback = log.read_text()
    assert traceback.startswith("Traceback (most recent call last):")
    assert "in _crash" in traceback and traceback.rstrip().endswith("RuntimeError: a bug in kvtasks")


def test_a_crash_in_a_task_creator_is_kept_beside_its_labels_report(home, monkeypatch, capsys):
    def task_validate():
        _crash()

    request = SimpleNamespace(label="pr-7", repo="/tree", target="t.py")
    monkeypatch.setattr(front_doors, "namespace", lambda command, workspace, given, quiet: {
        "task_validate": task_validate, graph.REQUESTS: [request], "DOIT_CONFIG": workspace.doit_config()})
    assert cli.main(["report"]) == errors.INCONCLUSIVE_EXIT
    log = home / "reports" / "pr-7" / CRASH_LOG
    assert said(capsys)[-1] == (f"validate-kernel-pr: error: kvtasks crashed (RuntimeError: a bug in kvtasks); the "
                                f"traceback is in {log}")
    assert "in task_validate" in log.read_text()


def test_no_library_module_exits():
    package = Path(errors.__file__).parent
    # the scripts' own `sys.exit(main())` under `if __name__ == "__main__"` (the package's entry, the
    # picker's command line, the guardian process, the in-target probe) are entries, not library code
    exiting = re.compile(r"^\s*(raise SystemExit|sys\.exit\()", re.MULTILINE)
    entries = re.compile(r'^if __name__ == "__main__":\n(\s+.*\n?)*', re.MULTILINE)
    found = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
             if exiting.search(entries.sub("", path.read_text())) and path.name != "__main__.py"]
    assert found == []
