"""What one target run left behind, as the stages judge it: its exit, JUnit counts and cases, log,
receipt and how it ended. Data only: kvtasks.harness.launch makes these, kvtasks.stages read them."""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kvtasks.records import Survivor
from kvtasks.harness.junit import PYTEST_USAGE_ERROR, CaseResult, ExecutionStats
from kvtasks.harness.receipts import StampedReceipt

# the header pytest writes above each failing test's traceback: `____ test_name[cell] ____`
_SECTION = re.compile(r"(?m)^_{3,} (\S.*?) _{3,}$")
# pytest's exit-4 message when the target node is not in the file
NOT_FOUND = re.compile(r"not found|no match in any of", re.IGNORECASE)


class TargetRun(BaseModel):
    label: str
    runner: Literal["pytest", "script"]
    command: list[str]
    exit: int | None
    timed_out: bool = False
    duration_s: float
    log: str
    stats: ExecutionStats
    receipt: StampedReceipt | None = None  # None: the run left no valid receipt of its own (receipt_note)
    receipt_path: str | None = None
    receipt_sha256: str | None = None
    receipt_note: str = ""
    # set when pytest refused the repository's own configuration (exit 4) and the run was retried
    # once with -o addopts=: {"dropped": the addopts the repository's config file sets, "file",
    # "error": pytest's message, "first_log"}
    addopts_dropped: dict | None = None
    cases: list[CaseResult] = []
    # the merged session (its label) this run is a part of: read from that launch, never one of its own
    session: str | None = None
    # the step that launched this run, when another adopted it (target_run.adopt): counted as that one's launch
    adopted_from: str | None = None
    # the scratch folder its process saw (its phase's caches, its launch's folder): a run repeating it sees the same
    scratch: str | None = None
    # how it died after reaching the route, and in which test (kvtasks.harness.receipts.death); None: it ended
    died: str | None = None
    # what was still alive once its leader had exited, and was ended (kvtasks.system.containment)
    survivors: list[Survivor] = []
    # what it wrote to its output, and how much of that the log's ceiling left out (kvtasks.harness.capped_log)
    log_written_bytes: int = 0
    log_cut_bytes: int = 0
    # the route calls it kept as data for the replay (kvtasks.harness.in_target.capture), a folder
    captures: str | None = None

    @property
    def usage_error(self) -> bool:
        return self.runner == "pytest" and self.exit == PYTEST_USAGE_ERROR

    @property
    def target_absent(self) -> bool:
        """pytest refused the run because the target node is not in the file (exit 4, "not found")."""
        return self.usage_error and bool(NOT_FOUND.search(self.stats.note or ""))

    @property
    def passed(self) -> bool:
        return self.exit == 0 and not self.timed_out

    @property
    def log_bytes(self) -> int:
        try:
            return Path(self.log).stat().st_size
        except OSError:
            return 0

    def log_text(self) -> str:
        """The run's log as kept ("" when it is gone)."""
        try:
            return Path(self.log).read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 4, width: int = 220, failing_first: bool = True) -> str:
        """What the log says of how the run ended, in one line: pytest's `E` lines (the failing
        assertion or exception, the first `lines` of them, under the test they belong to, cut at
        the end) where it wrote any and `failing_first`; else its last `lines` lines, their last
        `width` characters."""
        text = self.log_text()
        failing = [line[1:].strip() for line in text.splitlines() if line.startswith("E ") and line[1:].strip()]
        if not (failing and failing_first):
            return " | ".join(text.strip().splitlines()[-lines:])[-width:]
        first = _SECTION.search(text)
        said = (f"{first.group(1)}: " if first else "") + " | ".join(failing[:lines])
        return said if len(said) <= width else said[:width - 1] + "…"


def adopt(runs: list[TargetRun], folder: Path, made_by: str) -> list[TargetRun]:
    """Runs another step made (`made_by`), with their artifacts (log, JUnit XML, receipt) copied into
    `folder` (this group's runs folder) and pointed at there: the evidence a group stores is its own."""
    folder.mkdir(parents=True, exist_ok=True)

    def copied(path: str | None) -> str | None:
        if not path or not Path(path).is_file():
            return path
        target = folder / Path(path).name
        if target != Path(path):
            shutil.copy2(path, target)
        return str(target)

    adopted = []
    for run in runs:
        dropped = {**run.addopts_dropped, "first_log": copied(run.addopts_dropped.get("first_log"))} \
            if run.addopts_dropped else None
        adopted.append(run.model_copy(deep=True, update={
            "log": copied(run.log), "receipt_path": copied(run.receipt_path), "addopts_dropped": dropped,
            "adopted_from": made_by,
            "stats": run.stats.model_copy(update={"junit_xml": copied(run.stats.junit_xml)})}))
    return adopted
