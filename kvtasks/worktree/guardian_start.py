"""Starting the guardian of a lent tree (`guardian.py`, a process of its own run by path), and the
handle its lender holds on it: closing the handle ends the guardian's watch.

The guardian itself imports the package only to recover a tree; this module is what the package
imports, so the lend and its guardian never import each other.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_GUARDIAN = Path(__file__).resolve().with_name("guardian.py")


class Guard:
    """A started guardian, as its lender holds it: closing it ends the guardian's watch."""

    def __init__(self, write_end: int):
        self._write_end = write_end

    def release(self) -> None:
        """The lend ended and the journal is settled: the guardian exits without touching the tree."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1


def watch(tree: Path, pid: int, pid_start: int | None) -> Guard:
    """Start the guardian of `tree` for the lend that process `pid` (started at `pid_start`) opened."""
    read_end, write_end = os.pipe()  # both non-inheritable: no target or helper the lender starts holds it
    try:
        process = subprocess.Popen(
            [sys.executable, str(_GUARDIAN), str(Path(tree).resolve()), str(pid), str(pid_start)],
            stdin=read_end, stdout=subprocess.DEVNULL, stderr=None,  # it says a recovery on the lender's stderr
            cwd="/", start_new_session=True, close_fds=True)
        if process.wait() != 0:  # the first process only forks the guardian
            print(f"kvtasks: the guardian of {tree} did not start (exit {process.returncode}); a validator killed "
                  "outright leaves this tree to the next run's recovery", file=sys.stderr)
    except BaseException:
        os.close(write_end)  # a guardian already forked sees the end of input, no journal, and exits
        raise
    finally:
        os.close(read_end)
    return Guard(write_end)
