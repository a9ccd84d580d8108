"""The process table as Linux's /proc has it: each process's state, parent, group and start, from one
read of its /proc/<pid>/stat (containment scans it a few times a launch)."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A process as /proc/<pid>/stat has it."""
    state: str  # one letter: R, S, D, Z, ...
    parent: int
    group: int
    started: int  # clock ticks after boot


ZOMBIE = "Z"


def stat(pid: int | str) -> Entry | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:  # gone, or never there
        return None
    # the command name in parentheses may hold spaces and parentheses of its own: the fields follow the last ")"
    fields = data[data.rfind(b")") + 2:].split()
    return Entry(state=fields[0].decode(), parent=int(fields[1]), group=int(fields[2]), started=int(fields[19]))


def read() -> dict[int, Entry]:
    """Every process, each from one read of its /proc/<pid>/stat: a scan runs a few times a launch,
    and psutil's reading of the same fields (a process object, its identity check and a getpgid
    call each) took four times as long."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            entry = stat(name)
            if entry is not None:
                table[int(name)] = entry
    return table
