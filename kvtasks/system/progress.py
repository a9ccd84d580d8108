"""What kvtasks is doing and what it found, said as log records, never printed where they happen.

`say` is progress (the `kvtasks` logger: `[kvtasks] ...` on stderr); `notice` is progress said even
under --quiet (a run waiting on the device, which would otherwise look hung); `result` is what a
command found for its caller (`kvtasks.results`: the summary and the report's paths, on stdout). A
front door decides once what is shown (`show`, from --quiet); a worker process started afresh (doit
-n where processes are not forked) shows what its door decided; with no front door, as on a fleet
node, only notices are said.
"""
from __future__ import annotations

import logging
import os
import sys

PROGRESS = logging.getLogger("kvtasks")
RESULTS = logging.getLogger("kvtasks.results")
# what the front door decided, for the worker processes it starts (never passed to a target: kvtasks.variables)
QUIET_VARIABLE = "KVTASKS_QUIET"


class _Current(logging.StreamHandler):
    """A handler writing to the standard stream as it is when a record is said (a test's capture, a
    doit action's), never as it was when the door was opened."""

    def __init__(self, standard: str, prefix: str):
        super().__init__()
        self.standard = standard
        self.setFormatter(logging.Formatter(prefix + "%(message)s"))

    @property
    def stream(self):
        return getattr(sys, self.standard)

    @stream.setter
    def stream(self, _value) -> None:
        pass


def show(quiet: bool) -> None:
    """Show progress on stderr and results on stdout, or, quiet, notices alone."""
    os.environ[QUIET_VARIABLE] = "1" if quiet else "0"
    for logger, standard, prefix in ((PROGRESS, "stderr", "[kvtasks] "), (RESULTS, "stdout", "")):
        logger.handlers[:] = [handler for handler in logger.handlers if not isinstance(handler, _Current)]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        if not quiet or logger is PROGRESS:
            handler = _Current(standard, prefix)
            handler.setLevel(logging.WARNING if quiet else logging.INFO)
            logger.addHandler(handler)


def say(line: str) -> None:
    PROGRESS.info(line)


def notice(line: str) -> None:
    PROGRESS.warning(line)


def result(text: str) -> None:
    RESULTS.info(text)


if os.environ.get(QUIET_VARIABLE) in ("0", "1"):
    show(os.environ[QUIET_VARIABLE] == "1")
