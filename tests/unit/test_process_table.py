import os
import subprocess
import sys
import time

import psutil

from kvtasks.system import process_table

# a process that names itself with the characters that make /proc/<pid>/stat hard to split
NAMED = ("import ctypes, sys, time\n"
         "ctypes.CDLL(None).prctl(15, b') S 1 1 (', 0, 0, 0)\n"  # PR_SET_NAME
         "print(flush=True)\n"
         "time.sleep(30)\n")


def test_a_process_s_state_parent_group_and_start_are_read_whatever_its_name():
    child = subprocess.Popen([sys.executable, "-c", NAMED], stdout=subprocess.PIPE, start_new_session=True)
    try:
        child.stdout.readline()
        entry = process_table.stat(child.pid)
        assert psutil.Process(child.pid).name() == ") S 1 1 ("
        assert entry.state in ("R", "S") and (entry.parent, entry.group) == (os.getpid(), child.pid)
        assert entry.started >= process_table.stat(os.getpid()).started
        assert process_table.read()[child.pid].started == entry.started
        child.kill()
        deadline = time.monotonic() + 10
        while process_table.stat(child.pid).state != process_table.ZOMBIE:  # dead, not yet reaped
            assert time.monotonic() < deadline, "the killed child never read as a zombie"
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    assert process_table.stat(child.pid) is None  # reaped: gone from the table
