"""What holds one validator's run together, from before its first task until its last: the
worktrees it holds, its GPU lease owner, its signal handlers, and its forked doit workers, which die
with it."""
from __future__ import annotations

import multiprocessing.util

from kvtasks import worktree
from kvtasks.errors import UsageError
from kvtasks.gpu import lease, picker
from kvtasks.request import Request
from kvtasks.system import processes
from kvtasks.worktree import signals


class _Workers:
    """doit -n workers are multiprocessing forks: each dies with the validator, as its targets die
    with it, so a killed validator leaves no worker holding its locks or running its stages."""

    def __init__(self):
        multiprocessing.util.register_after_fork(self, _Workers.forked)

    @staticmethod
    def forked(_self) -> None:
        processes.die_with_parent()


_WORKERS: _Workers | None = None


_HELD: list = []  # the worktrees this validator holds, released when its run ends


def hold_worktrees(requests: list[Request]) -> None:
    """Take each worktree for this validator before anything runs (a busy one is refused at
    once), and start the validator's GPU lease owner before any worker forks."""
    global _WORKERS
    for repo in dict.fromkeys(request.repo for request in requests):
        try:
            worktree.hold_exclusively(repo)
        except (worktree.WorktreeBusy, worktree.GitFailed) as exc:
            release_held()
            raise UsageError(str(exc)) from None
        _HELD.append(repo)
    _WORKERS = _WORKERS or _Workers()
    signals.install()
    lease.start(picker.lock_dir())


def release_held() -> None:
    picker.release_all()  # the claim is held until the report is written, and no longer
    lease.stop()
    while _HELD:
        worktree.release_exclusive(_HELD.pop())
