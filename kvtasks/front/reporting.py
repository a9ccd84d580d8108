"""doit's reporter, replaced (doit's reporter API: `DOIT_CONFIG["reporter"]`): every line a run prints
is kvtasks' own, through kvtasks.system.progress, so --quiet and the progress prefix hold for the
graph's own lines too. A task starting is said as its group and key; evidence up to date as reused;
a report task ending with its verdict's exit code is the verdict, never a failure of kvtasks; any
other failure is said in full, every line of it ours.
"""
from __future__ import annotations

from kvtasks.evidence.workspace import Workspace
from kvtasks.system import progress

# the start of a verdict's message (kvtasks.front.graph._verdict_result: a report's, a batch's or a
# PR's result for exit 1 or 2)
VERDICT = "verdict"


def _task(name: str) -> str:
    """A task as kvtasks names it: its group and its label, or the first twelve characters of its key."""
    group, _, key = name.partition(":")
    return f"{group} {key[:12] if len(key) == 64 else key}".strip()


class KvtasksReporter:
    """What doit tells a reporter, said as kvtasks' progress lines."""

    def __init__(self, outstream, options):
        self.failed: list[str] = []

    def initialize(self, tasks, selected_tasks) -> None:
        pass

    def get_status(self, task) -> None:
        pass

    def execute_task(self, task) -> None:
        if task.actions and not task.name.startswith("_"):
            progress.say(_task(task.name))

    def add_success(self, task) -> None:
        pass

    def add_failure(self, task, fail) -> None:
        message = fail.get_msg().strip()
        if message.startswith(VERDICT):
            progress.say(f"{_task(task.name)}: {message}")
            return
        self.failed.append(task.name)
        first, *rest = message.splitlines() or [""]
        progress.notice(f"{_task(task.name)} failed: {first}")
        for line in rest:
            progress.notice(f"  {line}")

    def skip_uptodate(self, task) -> None:
        if not task.name.startswith("_"):
            progress.say(f"{_task(task.name)}: stored evidence is up to date, reused")

    def skip_ignore(self, task) -> None:
        progress.say(f"{_task(task.name)}: ignored")

    def cleanup_error(self, exception) -> None:
        progress.notice(f"cleanup failed: {exception.get_msg().strip()}")

    def runtime_error(self, msg: str) -> None:
        progress.notice(f"the task graph could not run: {msg.strip()}")

    def teardown_task(self, task) -> None:
        pass

    def complete_run(self) -> None:
        pass


def doit_config(workspace: Workspace) -> dict:
    """A front door's DOIT_CONFIG: the workspace's dependency file, and this reporter."""
    return {**workspace.doit_config(), "reporter": KvtasksReporter}
