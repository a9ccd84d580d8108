"""Every subprocess: a timeout, its own process group killed whole, recorded; none outlives its parent."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kvtasks.system import processes
from kvtasks.gpu import picker
from tests.processes import alive


def test_a_timeout_kills_the_whole_group_and_says_so(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = ("import subprocess, sys, time\n"
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(60)\n")
    done = processes.run([sys.executable, "-c", script], timeout_s=2)
    assert done.timed_out and done.returncode is None and not done.ok
    assert done.said() == "timed out after 2s; its process group was killed"
    assert not alive(int(pid_file.read_text()))


def test_a_child_dies_with_the_process_that_started_it(tmp_path):
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom kvtasks.system import processes\n"
        "child = processes.popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\ntime.sleep(60)\n")])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    parent.kill()
    parent.wait()
    assert not alive(int(pid_file.read_text()))


def test_a_start_time_tells_a_reused_pid_from_the_recorded_process():
    started = processes.start_time(os.getpid())
    assert processes.alive(os.getpid(), started) and not processes.alive(os.getpid(), started + 1)


def test_a_picker_that_hangs_is_killed_and_recorded(tmp_path, monkeypatch):
    hanging = tmp_path / "picker"
    hanging.write_text("#!/bin/sh\nsleep 60\n")
    hanging.chmod(0o755)
    monkeypatch.setattr(picker, "EXTERNAL_GRACE_S", 1.0)
    started = time.monotonic()
    code, ranked, _, said = picker.run_external(str(hanging), picker.IdleSettings(samples=1, interval_s=0))
    assert code == picker.NO_ANSWER and ranked == [] and "timed out after 1s" in said
    assert time.monotonic() - started < 10


def test_a_launch_whose_recording_is_interrupted_is_killed_not_left_running(monkeypatch):
    started = []

    def interrupted(pid, _start, _cgroup):
        started.append(pid)
        raise KeyboardInterrupt  # a signal landing after the fork, before the caller holds the process

    monkeypatch.setattr(processes, "spawned", [interrupted])
    try:
        processes.popen([sys.executable, "-c", "import time; time.sleep(60)"], track=True)
    except KeyboardInterrupt:
        pass
    assert started and not alive(started[0])


class _Stopped(Exception):
    pass


@pytest.mark.parametrize("wait", ["launch", "run"])
def test_a_signal_another_thread_received_still_ends_the_wait_at_once(wait):
    """The kernel may hand a signal sent to the validator to any of its threads (a library's helper
    thread); Python runs the handler in the main thread only once that thread is back in Python,
    so a wait that stayed in one blocking call ran on until the child exited."""
    def stop(_signum, _frame):
        raise _Stopped()

    def signal_from_a_helper_thread():
        time.sleep(0.3)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)  # this thread, never the main one

    previous = signal.signal(signal.SIGUSR1, stop)
    helper = threading.Thread(target=signal_from_a_helper_thread)
    started = time.monotonic()
    try:
        with pytest.raises(_Stopped):
            helper.start()
            if wait == "launch":
                child = processes.popen([sys.executable, "-c", "import time; time.sleep(30)"])
                try:
                    processes.wait_or_expire(child, timeout_s=60)
                finally:
                    processes.kill_group(child)
            else:
                processes.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=60)
    finally:
        helper.join()
        signal.signal(signal.SIGUSR1, previous)
    assert time.monotonic() - started < 5


def test_a_launch_waits_where_the_kernel_gives_no_pidfd(monkeypatch):
    def refused(pid):
        raise OSError(38, "Function not implemented")  # an old kernel, a sandbox's seccomp filter

    monkeypatch.setattr(os, "pidfd_open", refused)
    done = processes.run([sys.executable, "-c", "import time; time.sleep(0.3)"], timeout_s=30)
    assert done.ok and not done.timed_out
    expired = processes.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    assert expired.timed_out and expired.duration_s < 20
