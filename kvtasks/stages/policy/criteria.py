"""The criteria test_policy holds what it read to: the --tol-table reference, the changed paths a PR
may not add or change (compiled modules, modules named like the standard library's), the drawn grid
dimensions tampering is looked for by, and the weakenings that need something of base's to weaken.
"""
from __future__ import annotations

import sys
from pathlib import PurePosixPath

from kvtasks.sources.skips import WEAKENINGS
from kvtasks.records import Selection


def parse_tol_table(text: str) -> dict[str, float]:
    """--tol-table's `dtype=value,...` as a table; an entry whose value is no number is left out."""
    table = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        dtype, _, value = entry.partition("=")
        try:
            table[dtype.strip()] = float(value)
        except ValueError:
            continue
    return table


def shadows_stdlib(path: str, roots: list[str]) -> bool:
    """A module or package at one of the checkout's import roots named like a standard-library module."""
    parts = PurePosixPath(path).parts
    for root in ["", *roots]:
        prefix = PurePosixPath(root).parts  # () for the checkout itself
        inside = parts[len(prefix):]
        if parts[:len(prefix)] != prefix or not inside:
            continue
        top = inside[0]  # a package folder, or a module file
        if (top.removesuffix(".py") if len(inside) > 1 or top.endswith(".py") else "") in sys.stdlib_module_names:
            return True
    return False


# files Python imports as modules without a source to read: extension modules and sourceless bytecode
COMPILED_MODULES = (".so", ".pyd", ".dylib", ".dll", ".pyc", ".pyo")


def drawn_dimensions(selection: Selection) -> frozenset[int]:
    """The dimensions of the default grid that were drawn for this base (grid.plan.drawn_dimensions)
    past 4096: the large M and an N just past 4096, numbers no kernel writes by chance (the smaller
    ones are left out: an odd number below 4096 is any kernel's constant); a caller's own --grid is
    known anyway."""
    if "drawn" not in (selection.grid_cells_basis or ""):
        return frozenset()
    return frozenset(int(part) for cell in selection.grid_cells or [] for part in cell.split(",")
                     if part.strip().isdigit() and int(part) > 4096 and int(part) & (int(part) - 1))


# weakenings that need something to weaken: a file the PR adds (and that replaces none) has nothing
# of them; what a new file does to every other test (an outcome hook, collection turned off) counts
_NEEDS_A_BASE = {"skip-call", "skip-mark", "discarded-comparison", "early-return", "swallowed-assertion",
                 "vacuous-check", "unreachable-check", "process-exit"}


def weakens_nothing(weakening: str, path: str, had: set[str] | None) -> bool:
    """Whether a weakening is one that needs something to weaken and names code base did not have: a new
    test (or a new file: `had` None) guarded by a skip mark has nothing of base's to skip."""
    if not any(WEAKENINGS[kind] in weakening for kind in _NEEDS_A_BASE):
        return False
    where = weakening[len(path) + 2:].split(":", 1)[0]
    return had is None or (where != "<module>" and where not in had)
