import os
import re
import time

import pytest

from kvtasks.harness import launching
from kvtasks.harness import receipts
from kvtasks.harness.heartbeat import Heartbeat
from kvtasks.system import progress
from kvtasks.harness.junit import pytest_stats
from kvtasks.harness.launch import launch
from kvtasks.request import build_request
from tests.kernel_repos import make_repo
from tests.processes import alive


def launch_script(tmp_path, script, timeout_s, argv=()):
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[],
                             receipt=tmp_path / "receipt.json")
    return launch(label="head-repo", runner="script", target=str(script), cwd=tmp_path,
                  env={"PATH": os.environ["PATH"], "PYTHONPATH": str(probe.folder), **probe.environment},
                  python_bin=os.sys.executable,
                  run_dir=tmp_path / "runs", timeout_s=timeout_s, probe=probe.name, argv=list(argv))

HANGING_SCRIPT = '''import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1], "w") as pids:
    pids.write(str(child.pid))
time.sleep(120)
'''


def test_timeout_kills_the_whole_process_group(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANGING_SCRIPT)
    pid_file = tmp_path / "grandchild.pid"
    started = time.monotonic()
    run = launch_script(tmp_path, script, 2, [str(pid_file)])
    assert run.timed_out and run.exit is None
    assert "timed out after 2s" in run.stats.note
    assert time.monotonic() - started < 30
    assert not alive(int(pid_file.read_text()))


def test_exit_status_and_log_are_kept(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("print('about to fail')\nraise SystemExit(4)\n")
    run = launch_script(tmp_path, script, 30)
    assert run.exit == 4 and run.stats.failures == 1 and run.stats.executed == 1
    assert "about to fail" in run.log_tail()


def test_junit_counts_exclude_errors_and_skips_from_executed(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest" tests="5" failures="1" errors="1" skipped="2">'
                     '</testsuite></testsuites>')
    stats = pytest_stats(junit, 1)
    assert (stats.tests, stats.failures, stats.errors, stats.skipped, stats.executed) == (5, 1, 1, 2, 2)


def test_unreadable_junit_is_an_error_not_a_pass(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text("<testsuites")
    stats = pytest_stats(junit, 0)
    assert stats.errors == 1 and stats.executed == 0 and "unreadable" in stats.note


def launch_pytest(tmp_path, env_extra=None):
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[],
                             receipt=tmp_path / "receipt.json")
    return launch(label="head-repo", runner="pytest", target="test_ok.py", cwd=tmp_path,
                  env={"PATH": os.environ["PATH"], "PYTHONPATH": str(probe.folder), **(env_extra or {}),
                       **probe.environment},
                  python_bin=os.sys.executable, run_dir=tmp_path / "runs", timeout_s=120, probe=probe.name)


def test_addopts_needing_an_absent_plugin_are_dropped_once_and_said(tmp_path):
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\naddopts = --cov=pkg\n    -p no:warnings\n")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    run = launch_pytest(tmp_path)
    assert run.exit == 0 and run.stats.executed == 1
    assert run.addopts_dropped["file"] == "setup.cfg" and run.addopts_dropped["dropped"] == "--cov=pkg -p no:warnings"
    assert "unrecognized arguments: --cov=pkg" in run.addopts_dropped["error"]
    assert run.command[-2:] == ["-o", "addopts="]


def test_a_usage_error_that_persists_is_never_a_test_failure(tmp_path):
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    run = launch_pytest(tmp_path, {"PYTEST_ADDOPTS": "--no-such-option"})
    assert run.usage_error and run.addopts_dropped is None  # no addopts of the repository's to drop
    assert run.stats.failures == 0 and run.stats.errors == 0 and run.stats.executed == 0
    assert run.stats.note.startswith("pytest usage error (exit 4), no test ran")
    assert pytest_stats(tmp_path / "missing.xml", 4).errors == 0


def test_a_target_node_that_does_not_exist_is_not_retried(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:warnings\n")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[],
                             receipt=tmp_path / "receipt.json")
    run = launch(label="head-repo", runner="pytest", target="test_ok.py::test_gone", cwd=tmp_path,
                 env={"PATH": os.environ["PATH"], "PYTHONPATH": str(probe.folder), **probe.environment},
                 python_bin=os.sys.executable,
                 run_dir=tmp_path / "runs", timeout_s=120, probe=probe.name)
    assert run.usage_error and run.addopts_dropped is None
    assert "not found" in run.stats.note and run.stats.errors == 0


def test_pytest_is_asked_once_per_interpreter_and_path_and_a_refusal_is_asked_again(tmp_path, monkeypatch):
    asked = tmp_path / "asked"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho x >> {asked}\nexit $(cat {tmp_path / 'status'})\n")
    python.chmod(0o755)
    (tmp_path / "status").write_text("1")
    monkeypatch.setenv("PYTHON_BIN", str(python))
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    pass\n"})
    request = build_request({"repo": str(repo), "target": "tests/test_a.py"})
    assert "not runnable" in launching.pytest_available(request, tmp_path / "run")
    assert "not runnable" in launching.pytest_available(request, tmp_path / "run")
    (tmp_path / "status").write_text("0")
    assert launching.pytest_available(request, tmp_path / "run") is None
    assert launching.pytest_available(request, tmp_path / "other-run") is None  # another group, same process
    assert asked.read_text().count("x") == 3


@pytest.fixture
def shown():
    """Progress shown for one test, and quiet again after it, as the suite's validations run."""
    progress.show(quiet=False)
    yield
    progress.show(quiet=True)


def test_a_long_run_says_how_far_it_got_as_it_goes(tmp_path, capsys, shown):
    # three items of 0.7 s each, a beat due every 0.2 s (the wait returns to Python, and so beats, at
    # most every half second: processes.SIGNAL_SLICE_S): lines while the run goes, each with the item
    # it has reached of those pytest collected and the time elapsed
    (tmp_path / "test_ok.py").write_text("import time\nimport pytest\n\n\n@pytest.mark.parametrize('n', [1, 2, 3])\n"
                                         "def test_slow(n):\n    time.sleep(0.7)\n")
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[], receipt=tmp_path / "receipt.json")
    run = launch(label="head-repo", runner="pytest", target="test_ok.py", cwd=tmp_path,
                 env={"PATH": os.environ["PATH"], "PYTHONPATH": str(probe.folder), **probe.environment},
                 python_bin=os.sys.executable, run_dir=tmp_path / "runs", timeout_s=120, probe=probe.name,
                 beat=Heartbeat("head-repo", tmp_path / "receipt.json.progress", 0.2))
    assert run.exit == 0 and run.stats.executed == 3
    beats = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[kvtasks] head-repo: ")]
    assert len(beats) >= 3 and all(line.endswith(" elapsed") for line in beats)
    assert any(re.search(r"head-repo: item [123] of 3 running, \ds elapsed", line) for line in beats), beats


def test_a_heartbeat_says_nothing_before_its_interval_and_the_time_alone_without_items(tmp_path, capsys, shown):
    beat = Heartbeat("perf-head", None, 3600)
    beat()
    assert capsys.readouterr().err == ""
    beat.due = 0.0
    beat()
    assert re.fullmatch(r"\[kvtasks\] perf-head: \d+s elapsed\n", capsys.readouterr().err)


def test_a_beat_survives_whatever_the_target_wrote_into_its_progress_lines(tmp_path, capsys, shown):
    lines = tmp_path / "receipt.json.progress"
    lines.write_text("collected \nstart a\ncollected x\n\x00\ncollected 3\nstart b\n")
    beat = Heartbeat("head-repo", lines, 3600)
    beat.due = 0.0
    beat()
    assert re.fullmatch(r"\[kvtasks\] head-repo: item 2 of 3 running, \d+s elapsed\n", capsys.readouterr().err)
