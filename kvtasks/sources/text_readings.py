"""What `read_policy` reads from a file's lines rather than its AST: the shape rows commented out
(a tuple or list of numbers and dtypes behind a `#`), and, when the file does not parse, its
tolerances as text.

It records into the file's Policy; it must never judge head against base (compare does).
"""
from __future__ import annotations

import ast
import re

from kvtasks.sources.policy import Policy
from kvtasks.sources.syntax import number


def _shape_row(comment: str) -> str | None:
    """A commented tuple or list of numbers and dtype spellings, normalised; else None."""
    text = comment.strip().rstrip(",").strip()
    if not text or text[0] not in "([" and not text.startswith("pytest.param("):
        return None
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    elements = node.args if isinstance(node, ast.Call) else getattr(node, "elts", None)
    if not elements or len(elements) < 2:
        return None
    ints = [e for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, int)]
    allowed = all(isinstance(e, (ast.Constant, ast.Attribute, ast.Name)) or number(e) is not None for e in elements)
    return ", ".join(ast.unparse(e) for e in elements) if ints and allowed else None


def read_commented_rows(source: str, policy: Policy) -> None:
    """Every commented-out shape row of the file, counted by its normalised text."""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            row = _shape_row(stripped.lstrip("#"))
            if row:
                policy.commented_rows[row] += 1


_TOLERANCE_TEXT = re.compile(r"\b(atol|rtol|\w*tol\w*)\s*[=:]\s*([-+]?\d[\d.]*(?:[eE][-+]?\d+)?)", re.IGNORECASE)


def read_tolerances_as_text(source: str, policy: Policy) -> None:
    """A file that does not parse: every `name = number` or `name: number` whose name says tolerance."""
    policy.parsed = False
    for position, match in enumerate(_TOLERANCE_TEXT.finditer(source), 1):
        try:
            policy.tolerances[f"text:{match.group(1)}#{position}"] = float(match.group(2))
        except ValueError:
            continue
