"""What kvtasks is doing and what it found, said as log records, never printed where they happen.

`say` is progress (the `kvtasks` logger: `[kvtasks] ...` on stderr); `result` is what a command
found for its caller (`kvtasks.results`: the summary and the report's paths, on stdout). A front
door decides once whether either is shown (`show`, from --quiet); with no front door, as on a fleet
node, neither is.
"""
from __future__ import annotations

import logging
import sys

PROGRESS = logging.getLogger("kvtasks")
RESULTS = logging.getLogger("kvtasks.results")


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
    """Show progress on stderr and results on stdout, or, quiet, neither."""
    for logger, standard, prefix in ((PROGRESS, "stderr", "[kvtasks] "), (RESULTS, "stdout", "")):
        logger.handlers[:] = [handler for handler in logger.handlers if not isinstance(handler, _Current)]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        if not quiet:
            logger.addHandler(_Current(standard, prefix))


def say(line: str) -> None:
    PROGRESS.info(line)


def result(text: str) -> None:
    RESULTS.info(text)
