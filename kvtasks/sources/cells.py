"""Grid cells as text: a row of cells, one cell (a tuple keeps its parentheses), and the rows of a
literal default.

Spelling only; it must never decide what a cell means to a target.
"""
from __future__ import annotations

import ast

from kvtasks.sources.syntax import literal


def row_text(row) -> str:
    return ",".join(str(cell).strip() for cell in row)


def literal_rows(node: ast.AST | None) -> list[str] | None:
    """A literal list of cells or rows, each as grid text; None when the default is computed."""
    value = literal(node)
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return None
    rows = []
    for item in value:
        if isinstance(item, (list, tuple)):
            rows.append(row_text(item))
        else:
            rows.append(row_text(str(item).split(",")))
    return rows


def cell_text(value) -> str:
    """One grid cell as text: a tuple-valued cell (a shape) keeps its parentheses, `(2049,2)`."""
    if isinstance(value, tuple):
        return "(" + ",".join(cell_text(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ",".join(cell_text(item) for item in value) + "]"
    return str(value).strip()
