"""Parsing and the small readings every other reader shares: a source parsed (or None), a dotted
name, a name resolved through aliases, a literal number, what a module-level name is assigned.

Owns nothing about what a name means; it must never import another reader of this package.
"""
from __future__ import annotations

import ast
import functools
import math
import operator
from typing import Any


# a file's text is read by several readers in one policy read (its tolerances, its tampering, its
# references, its configuration, the modules it imports): one parse serves them all; no reader
# changes a tree it is given
@functools.lru_cache(maxsize=64)
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


# arithmetic a tolerance is spelt with (`1e-5 * 1000`, `10 ** -2`, `2 / 1024`): folded to its number
_FOLDED = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.Pow: operator.pow}


def number(node: ast.AST | None) -> float | None:
    """A numeric literal, however it is spelt: `1e-2`, `-3`, `1e-5 * 1000`, `10 ** -2`, `float("1e-2")`;
    None for anything computed at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return None if math.isnan(node.value) else float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLDED:
        left, right = number(node.left), number(node.right)
        if left is None or right is None or (isinstance(node.op, ast.Pow) and abs(right) > 64):
            return None
        try:
            folded = _FOLDED[type(node.op)](left, right)
        except (ArithmeticError, ValueError):
            return None
        return float(folded) if isinstance(folded, (int, float)) and not math.isnan(folded) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("float", "int") \
            and len(node.args) == 1 and not node.keywords:
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            try:
                parsed = float(argument.value)
            except ValueError:
                return None
            return None if math.isnan(parsed) else parsed  # float("nan") passes no bound and fails none
        return number(argument)
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


# what `getattr(x, <computed>)` names: the attribute cannot be read, but the object it is taken from can
COMPUTED = "<computed>"


def resolved(node: ast.AST, bound: dict[str, str]) -> str | None:
    """The dotted name a node names, through aliases and the dynamic spellings of an attribute
    (`getattr(x, "a")`, `x.__getattr__("a")`, `x.__dict__["a"]`, `vars(x)["a"]`, `__import__("m")`,
    `importlib.import_module("m")`, `sys.modules["m"]`); a computed attribute is COMPUTED. None for anything else (a
    plain call's result among them)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        owner = resolved(node.value, bound)
        return None if owner is None else f"{owner}.{node.attr}"
    if isinstance(node, ast.Subscript):
        container = node.value
        if isinstance(container, ast.Attribute) and container.attr == "__dict__":
            owner = resolved(container.value, bound)
        elif isinstance(container, ast.Call) and resolved(container.func, bound) == "vars" and container.args:
            owner = resolved(container.args[0], bound)
        elif resolved(container, bound) == "sys.modules":
            module = literal(node.slice)
            return module if isinstance(module, str) else None
        else:
            return None
        return None if owner is None else f"{owner}.{_attribute_name(node.slice)}"
    if not isinstance(node, ast.Call):
        return None
    function = resolved(node.func, bound) if isinstance(node.func, (ast.Name, ast.Attribute)) else None
    if function in ("__import__", "importlib.import_module") and node.args:
        module = _attribute_name(node.args[0])
        return None if module == COMPUTED else module
    if function in ("getattr", "builtins.getattr") and len(node.args) >= 2:
        owner = resolved(node.args[0], bound)
        return None if owner is None else f"{owner}.{_attribute_name(node.args[1])}"
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("__getattr__", "__getattribute__") and node.args:
        owner = resolved(node.func.value, bound)
        return None if owner is None else f"{owner}.{_attribute_name(node.args[0])}"
    return None


def _attribute_name(node: ast.AST) -> str:
    value = literal(node)
    return value if isinstance(value, str) and value.isidentifier() else COMPUTED
