"""Parsing and the small readings every other reader shares: a source parsed (or None), a dotted
name, a name resolved through aliases, a literal number, what a module-level name is assigned.

Owns nothing about what a name means; it must never import another reader of this package.
"""
from __future__ import annotations

import ast
from typing import Any


def parse(text: str | None) -> ast.Module | None:
    try:
        return ast.parse(text or "")
    except (SyntaxError, ValueError):
        return None


def literal(node: ast.AST | None) -> Any:
    """The value a literal node spells; None when there is no node or its value is computed."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def error_line(text: str) -> int | None:
    """The line a source fails to parse at; None when it parses (or the failure names no line)."""
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return exc.lineno
    except ValueError:
        return None
    return None


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of names and attributes (a call's callee before its parentheses)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def qualified(node: ast.AST, bound: dict[str, str]) -> str:
    """The dotted name with its first part resolved through the imports' aliases."""
    name = dotted(node) or ""
    head, _, rest = name.partition(".")
    origin = bound.get(head, head)
    return f"{origin}.{rest}" if rest else origin


def number(node: ast.AST | None) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    return None


def module_value(tree: ast.AST, name: str) -> ast.AST | None:
    """What a module-level `name = ...` assigns (the last such assignment)."""
    found = None
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                and node.value is not None:
            found = node.value
    return found
