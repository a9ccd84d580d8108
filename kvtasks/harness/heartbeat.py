"""A long target run says how far it got: every KVTASKS_HEARTBEAT_S (30 s by default) of waiting on
it, one progress line with the items it started of those pytest collected and the time elapsed,
read from the progress lines the in-target package writes as the run goes
(kvtasks.harness.in_target.state.Run.progress). Every launch waits through it, validations' and
`check`'s alike (kvtasks.harness.launching), so no run of minutes goes silent.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from kvtasks.system import progress

# the line the in-target package writes once pytest has collected (kvtasks.harness.in_target.plugin)
_COLLECTED = re.compile(r"collected (\d+)")


def elapsed(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


class Heartbeat:
    """Called as a launch's wait goes on; says a line at most every `interval_s`."""

    def __init__(self, label: str, lines: Path | None, interval_s: float):
        self.label, self.lines, self.interval_s = label, lines, interval_s
        self.started = time.monotonic()
        self.due = self.started + interval_s

    def __call__(self) -> None:
        """Never raises: the lines it reads are written by the target, whose code is the PR's, and a
        beat must not end the launch it reports on."""
        now = time.monotonic()
        if now < self.due:
            return
        self.due = now + self.interval_s
        try:
            items = self.items()
        except Exception:  # noqa: BLE001 (whatever the target wrote, the wait goes on)
            items = ""
        progress.say(f"{self.label}: {items}{elapsed(now - self.started)} elapsed")

    def items(self) -> str:
        """`item N of M running, `: the items started of those collected, as far as the run wrote them
        (nothing for a run with no in-target package: a timing run)."""
        if self.lines is None:
            return ""
        try:
            written = self.lines.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        collected = [found.group(1) for line in written if (found := _COLLECTED.fullmatch(line))]
        started = sum(line.startswith("start ") for line in written)
        if not collected and not started:
            return ""
        of = f" of {collected[-1]}" if collected else ""
        return f"item {started}{of} running, "
