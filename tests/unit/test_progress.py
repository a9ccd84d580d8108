"""Progress and results are log records a front door shows or not, written to the standard streams
as they are when said."""
import os
import subprocess
import sys

from kvtasks.system import progress


def test_a_shown_door_says_progress_on_stderr_and_results_on_stdout(capsys):
    progress.show(quiet=False)
    progress.say("baseline_control: running base-repo")
    progress.result("verdict BLOCK")
    said = capsys.readouterr()
    assert said.err == "[kvtasks] baseline_control: running base-repo\n" and said.out == "verdict BLOCK\n"


def test_a_quiet_door_says_only_notices_and_showing_twice_says_once(capsys):
    progress.show(quiet=True)
    progress.say("running")
    progress.result("summary")
    assert capsys.readouterr() == ("", "")
    progress.notice("waiting for the device")
    assert capsys.readouterr() == ("", "[kvtasks] waiting for the device\n")
    progress.show(quiet=False)
    progress.show(quiet=False)
    progress.say("running")
    assert capsys.readouterr().err == "[kvtasks] running\n"
    progress.show(quiet=True)


def test_a_worker_started_afresh_shows_what_its_door_decided():
    for quiet in (True, False):
        progress.show(quiet)
        done = subprocess.run([sys.executable, "-c", "from kvtasks.system import progress\nprogress.say('running')\n"
                               "progress.result('summary')"], capture_output=True, text=True, env={**os.environ})
        assert (done.stdout, done.stderr) == (("", "") if quiet else ("summary\n", "[kvtasks] running\n"))
    progress.show(quiet=True)
