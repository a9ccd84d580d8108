"""references: where a test's comparisons take their expected values from.

A comparison holds two sides against each other: what the code under test computed and what it
should have. When every side of a comparison comes from the modules a PR supplies (the route's own
module, or a file the PR adds), the PR wrote its own answer key: a kernel and its reference wrong the
same way pass. A side counts as independent when it calls nothing from those modules (numpy,
torch, arithmetic, base's code). A local variable carries the modules its assignments called, one
assignment deep per name, followed through the function.
"""
from __future__ import annotations

import ast

from kvtasks.sources.bypasses import STRICT_CHECKS
from kvtasks.sources.imports import aliases
from kvtasks.sources.syntax import dotted, parse, qualified

_CHECKS = STRICT_CHECKS | {"allclose", "isclose", "equal", "array_equal", "approx"}


def _is_comparison(call: ast.Call) -> bool:
    short = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return short in _CHECKS or "assert" in short.lower() or "check" in short.lower()


class _Function(ast.NodeVisitor):
    def __init__(self, bound: dict[str, str], provided: set[str]):
        self.bound, self.provided = bound, provided
        self.carried: dict[str, set[str]] = {}  # local name -> the supplied modules its value came from
        self.found: list[str] = []

    def sources(self, node: ast.AST) -> set[str]:
        found: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and dotted(sub.func):
                name = qualified(sub.func, self.bound)
                found |= {module for module in self.provided if name == module or name.startswith(f"{module}.")}
            elif isinstance(sub, ast.Name) and sub.id in self.carried:
                found |= self.carried[sub.id]
        return found

    def visit_Assign(self, node: ast.Assign) -> None:
        carried = self.sources(node.value)
        for target in node.targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    self.carried[name.id] = carried
        self.generic_visit(node)

    def _sides(self, sides: list[ast.AST], where: ast.AST) -> None:
        if len(sides) >= 2 and all(self.sources(side) for side in sides):
            modules = sorted(set().union(*(self.sources(side) for side in sides)))
            self.found.append(f"line {where.lineno}: {ast.unparse(where)[:80]} (every side from {', '.join(modules)})")

    def visit_Call(self, node: ast.Call) -> None:
        if _is_comparison(node):
            self._sides(list(node.args[:2]), node)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        test = node.test
        if isinstance(test, ast.Compare):
            self._sides([test.left, *test.comparators], node)
        self.generic_visit(node)


def from_supplied(text: str | None, provided: set[str]) -> list[str]:
    """The comparisons of a test source whose every side comes from `provided` (module names)."""
    tree = parse(text)
    if tree is None or not provided:
        return []
    bound = aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            reader = _Function(bound, provided)
            reader.visit(node)
            found += [f"{node.name}, {item}" for item in reader.found]
    return list(dict.fromkeys(found))  # a nested function is read with the one around it too
