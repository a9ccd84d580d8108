"""The report's `containment`: what every launch left alive once its leader had exited (all of it
ended before the tree was handed back), whose output passed the log ceiling, and the finding a head
launch earns by leaving processes that base's same launch did not."""
from __future__ import annotations

from typing import Iterable, Protocol

from kvtasks.records import Survivor
from kvtasks.report.model import Containment, Finding, LaunchSurvivors, LogCut


class Launch(Protocol):
    """What the report reads of a stored target run (kvtasks.harness.launch.TargetRun)."""

    label: str
    session: str | None
    adopted_from: str | None
    survivors: list[Survivor]
    log_written_bytes: int
    log_cut_bytes: int


def _counterpart(label: str) -> str:
    side, _, rest = label.partition("-")
    return f"{'base' if side == 'head' else side}-{rest}"


def contain(runs: Iterable[Launch], stage_of: dict[str, str]) -> tuple[Containment, list[Finding]]:
    """The containment section from every run the results hold (one per label), and a should-fix for
    each head launch that left processes where base's same launch (or, with no such launch, every
    base launch) left none. `stage_of` names the stage each label's run belongs to."""
    by_label = {run.label: run for run in runs}
    survivors = {label: run.survivors for label, run in by_label.items() if run.survivors}
    containment = Containment(
        survivors=[LaunchSurvivors(launch=label, survivors=left) for label, left in sorted(survivors.items())],
        logs_cut=[LogCut(launch=label, written_bytes=run.log_written_bytes, cut_bytes=run.log_cut_bytes)
                  for label, run in sorted(by_label.items()) if run.log_cut_bytes])
    findings = []
    base_left_any = any(label.startswith("base-") for label in survivors)
    for label, left in sorted(survivors.items()):
        if not label.startswith("head-"):
            continue
        counterpart = _counterpart(label)
        if survivors.get(counterpart) or (counterpart not in by_label and base_left_any):
            continue
        commands = "; ".join(dict.fromkeys(survivor.command[:160] for survivor in left))
        findings.append(Finding(
            rule="containment.head-left-processes", severity="should-fix", stage=stage_of.get(label, "report"),
            detail=f"the head launch {label} left {len(left)} processes running after it exited, where base's did not "
                   f"({commands}); they were ended before the tree was handed back"))
    for cut in containment.logs_cut:
        findings.append(Finding(
            rule="containment.log-cut", severity="note", stage=stage_of.get(cut.launch, "report"),
            detail=f"the {cut.launch} run wrote {cut.written_bytes} bytes of output; {cut.cut_bytes} between its first "
                   "and last parts were cut (KVTASKS_LOG_CEILING)"))
    return containment, findings
