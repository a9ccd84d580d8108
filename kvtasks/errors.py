"""What kvtasks raises, and the one handler that turns it into an exit code and one line.

Library code raises a `KvtasksError` (each kind carries its documented exit code) and never exits;
the front doors (`validate-kernel-pr`, dodo.py) run their work under `handled`, which prints
`validate-kernel-pr: error: ...` once and returns the code. Anything else that escapes is a crash:
its traceback goes to `crash.log` beside the report (the label's folder, or the reports folder when
no label is known yet) and the one line names that file.

doit catches every `Exception` a task creator raises and prints it as its own traceback (exit 3),
so the task creators a front door hands doit are wrapped (`through_doit`): what they raise crosses
doit as `Escaped`, which no `except Exception` stops, and `handled` unwraps it (dodo.py, under
doit's own main, exits from the wrapper instead).
"""
from __future__ import annotations

import functools
import inspect
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NoReturn

# EX_USAGE of sysexits.h: the command was used incorrectly; no verdict uses it
USAGE_EXIT = 64
# INCONCLUSIVE's code: kvtasks could not finish, so nothing was judged against the PR
INCONCLUSIVE_EXIT = 2
CRASH_LOG = "crash.log"
PREFIX = "validate-kernel-pr: error: "


class KvtasksError(Exception):
    """A refusal or failure kvtasks explains in one line; `exit_code` is the documented code."""

    exit_code = INCONCLUSIVE_EXIT


class UsageError(KvtasksError):
    """A caller mistake (a flag, doit variable, manifest entry or host variable kvtasks refuses):
    reported as one line, exit USAGE_EXIT, no report, worktree untouched."""

    exit_code = USAGE_EXIT


class InfrastructureError(KvtasksError):
    """The machine, not the PR or the caller, failed (a GPU never came free, a tool is missing):
    INCONCLUSIVE, never a finding against the PR."""


class Escaped(BaseException):
    """An exception crossing doit, which stops every `Exception` a task creator raises."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _escaped(error: Exception) -> NoReturn:
    raise Escaped(error) from error


def through_doit(creator: Callable, escape: Callable[[Exception], NoReturn] = _escaped) -> Callable:
    """`creator` (a doit task creator, a generator's included) whose exceptions go to `escape`
    (by default: raised again as `Escaped`, which crosses doit)."""

    @functools.wraps(creator)  # keeps doit's own attributes (create_after's) on the wrapper
    def generating(*args, **kwargs):
        try:
            yield from creator(*args, **kwargs)
        except Exception as exc:
            escape(exc)

    @functools.wraps(creator)
    def returning(*args, **kwargs):
        try:
            return creator(*args, **kwargs)
        except Exception as exc:
            escape(exc)

    return generating if inspect.isgeneratorfunction(creator) else returning


def namespace_through_doit(namespace: dict, escape: Callable[[Exception], NoReturn] = _escaped) -> dict:
    """A front door's namespace with every task creator passed through `through_doit`."""
    return {name: through_doit(value, escape) if name.startswith("task_") and callable(value) else value
            for name, value in namespace.items()}


@dataclass
class CrashSite:
    """Where a crash's traceback is kept: beside the report of `label` once one is known."""

    reports: Path
    label: str | None = None

    @property
    def folder(self) -> Path:
        return self.reports / self.label if self.label else self.reports


def handled(run: Callable[[], int], site: CrashSite) -> int:
    """`run()`'s exit code, or that of what it raised (`exit_code`). A signal
    (worktree.signals.Interrupted) and argparse's --help are no Exception: they pass through."""
    try:
        return run()
    except Escaped as escaped:
        return exit_code(escaped.error, site)
    except Exception as error:
        return exit_code(error, site)


def exit_code(error: Exception, site: CrashSite) -> int:
    """A KvtasksError's code, said in one line; anything else is a crash, logged under `site`."""
    if isinstance(error, KvtasksError):
        print(f"{PREFIX}{error}", file=sys.stderr)
        return error.exit_code
    return crashed(error, site)


def crashed(crash: BaseException, site: CrashSite) -> int:
    """Keep the traceback in crash.log under `site` and say where, in one line."""
    detail = f"{type(crash).__name__}: {crash}".splitlines()[0]
    log = site.folder / CRASH_LOG
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(traceback.format_exception(crash)))
    except OSError as unwritable:
        print(f"{PREFIX}kvtasks crashed ({detail}); its traceback could not be kept in {log} "
              f"({unwritable.strerror or unwritable})", file=sys.stderr)
    else:
        print(f"{PREFIX}kvtasks crashed ({detail}); the traceback is in {log}", file=sys.stderr)
    return INCONCLUSIVE_EXIT
