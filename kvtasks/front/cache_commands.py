"""The cache front doors: list stored evidence, and collect what is older than an age. They read
and remove evidence only through store.py, private clones and their trees only through clone_collection.py,
and run no stage.
"""
from __future__ import annotations

from kvtasks.worktree import clone_collection
from kvtasks.errors import UsageError
from kvtasks.evidence.workspace import Workspace


def list_cache(workspace: Workspace, base_oid: str | None = None) -> None:
    """Stored evidence, oldest first; with a base OID, only the evidence about that commit.

    Keys and labels are printed whole, so any of them can be pasted into `doit report label=`;
    each column is as wide as its longest value."""
    wanted = workspace.store.keys_for_base(base_oid) if base_oid else None
    rows = [("kind", "key", "labels", "size", "age")]
    for entry in workspace.store.entries():
        if wanted is None or f"{entry['kind']}:{entry['key']}" in wanted:
            rows.append((entry["kind"], entry["key"], ",".join(entry["labels"]), str(entry["size"]),
                         f"{entry['age_s'] / 86400:.1f}d"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        left = [cell.ljust(width) for cell, width in zip(row[:3], widths)]
        right = [cell.rjust(width) for cell, width in zip(row[3:], widths[3:])]
        print(" ".join(left + right))


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> float:
    """Seconds in an age such as 30d or 1.5h."""
    text = text.strip()
    if not text or text[-1] not in _AGE_UNITS or not text[:-1].replace(".", "", 1).isdigit():
        raise UsageError(f"older= takes a number and a unit (s, m, h, d, w), e.g. older=30d; got {text!r}")
    return float(text[:-1]) * _AGE_UNITS[text[-1]]


def collect(workspace: Workspace, older: str, age: float) -> None:
    """Remove what is older than `age` seconds (`older` as the caller wrote it, e.g. 30d)."""
    removed = workspace.store.gc(age)
    print(f"removed {len(removed)} evidence entries older than {older}")
    collected = clone_collection.collect(workspace.clones, age)
    kept = f"; {len(collected.in_use)} trees in use kept" if collected.in_use else ""
    print(f"removed {len(collected.trees)} trees and {len(collected.clones)} clones unused for longer than {older}{kept}")
