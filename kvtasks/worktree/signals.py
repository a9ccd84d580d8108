"""Signals while a tree is lent: SIGINT, SIGTERM and SIGHUP become `Interrupted`, so every
`finally` restores state, and are held back while the tree is being restored.

It owns only the handlers and the hold; what to restore is the lend's (`kvtasks.worktree`).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# every signal raised as Interrupted during the current lend: one an `except` or a finalizer
# swallowed still ends the run when the tree is handed back
received: list[int] = []
# while `deferred` holds: the signals that arrived, raised as it ends (None: not holding)
_held: list[int] | None = None
# a handled signal ends the process within this long, however its Interrupted fares (see _raise_interrupted)
ESCALATE_S = 30.0
_ALARM_OFF: dict = {}  # while the escalation is armed: the SIGALRM disposition to restore when disarmed


class Interrupted(SystemExit):
    """A signal arrived while the tree was ours; raised so every `finally` restores state."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum
        self.said = False  # whether the lend it ended has told the user already

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupted(signum, _frame):
    """Raise Interrupted, and arm the kernel to end the process ESCALATE_S from now (SIGALRM at its
    default action, whichever thread it reaches). An exception a handler raises lands wherever the
    main thread happens to be; where Python swallows it (an at-fork callback, a finalizer: "Exception
    ignored in ...") the signal would be lost and the validator ran on, a doit -n parent waiting
    for workers that wait for it. Ended that way, its guardians hand its trees back."""
    if not _ALARM_OFF:
        _ALARM_OFF["disposition"] = signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, ESCALATE_S)
    received.append(signum)
    if _held is not None:
        _held.append(signum)
        return
    raise Interrupted(signum)


def install() -> None:
    """For the rest of the validator, lent tree or not: a handled signal raises Interrupted.

    Without it a signal outside a lend (during the picker, the lease, a report) killed the
    validator outright (SIGTERM, SIGHUP), so no `finally` ran: the process group of a PICKER
    override, which dies with the validator only as a direct child, was left running; SIGINT
    ended it with a traceback. Forked workers (doit -n) inherit it."""
    if _in_main_thread():
        for sig in HANDLED:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # a validator started under nohup keeps ignoring SIGHUP
                signal.signal(sig, _raise_interrupted)


@contextmanager
def raising() -> Iterator[None]:
    """For the block, a handled signal raises Interrupted (Python runs handlers in the main thread only)."""
    received.clear()
    if not _in_main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if previous[signal.SIGINT] is not _raise_interrupted:
            _disarm()  # the outermost block: an in-process caller goes on, with nothing armed against it


def _disarm() -> None:
    if _ALARM_OFF:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, _ALARM_OFF.pop("disposition"))


@contextmanager
def deferred() -> Iterator[None]:
    """Hold signals back for the block; one arriving meanwhile is raised as it ends.

    A flag the handler reads, not the signal mask: the mask is per thread, a signal sent to the
    process reaches any thread that does not block it (a library's helper thread), and Python then
    runs the handler in the main thread all the same, in the middle of the restore."""
    global _held
    if not _in_main_thread():
        yield
        return
    _held = []
    # an armed escalation waits for the restore: ended halfway, a slow one (a large tree's status,
    # many files to remove) would leave the tree to a recovery instead
    paused = signal.setitimer(signal.ITIMER_REAL, 0)[0] if _ALARM_OFF else 0.0
    try:
        yield
    finally:
        if paused:
            signal.setitimer(signal.ITIMER_REAL, paused)
        arrived, _held = _held, None
        if arrived:
            raise Interrupted(arrived[0])
