"""Fault points: named places where a validator stops to be sent a signal, so a test or the soak
can interrupt it at an exact point instead of after a guessed delay.

`KVTASKS_FAULT_POINT` names the point: `picker` (between two samples of the sampling window),
`lease` (a GPU claim just taken), `apply` (the patch just applied to the lent tree), `launch`
(a target just started; `launch:<run label>` only that run), `report` and `page` (before a
report or its page is written), or a stage's name (`merge_sim`, `sensitivity`, ...: as it starts). The first
process of a validator that reaches it writes `<pid> <point>` to the file `KVTASKS_FAULT_MARKER`
names and waits there for its signal, at most FAULT_WAIT_S, then carries on, saying so. Unset, a
point costs one dictionary lookup. It never changes what a run does otherwise.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

POINT_VARIABLE = "KVTASKS_FAULT_POINT"
MARKER_VARIABLE = "KVTASKS_FAULT_MARKER"
FAULT_WAIT_S = 120.0


def point(name: str, detail: str | None = None) -> None:
    """Stop here when KVTASKS_FAULT_POINT names this point (or `name:detail`)."""
    wanted = os.environ.get(POINT_VARIABLE)
    if not wanted or wanted not in (name, f"{name}:{detail}"):
        return
    marker = os.environ.get(MARKER_VARIABLE)
    if not marker:
        raise RuntimeError(f"{POINT_VARIABLE}={wanted} needs {MARKER_VARIABLE}: the file that says the point is reached")
    try:
        # O_EXCL: a second process of the validator (a parallel worker) reaching it later carries on
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as out:
        out.write(f"{os.getpid()} {wanted}\n")
    deadline = time.monotonic() + FAULT_WAIT_S
    while time.monotonic() < deadline:  # short sleeps: a signal another thread received is handled at the next
        time.sleep(0.05)
    print(f"kvtasks: fault point {wanted} waited {FAULT_WAIT_S:g}s for a signal that never came; carrying on",
          file=sys.__stderr__)


def reached(marker: Path) -> tuple[int, str] | None:
    """The pid that stopped at the point and the point, once the marker says so."""
    try:
        pid, name = marker.read_text().split()
    except (OSError, ValueError):
        return None
    return int(pid), name
