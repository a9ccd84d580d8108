"""references: where a test's comparisons take their expected values from.

A comparison holds two sides against each other: what the code under test computed and what it
should have. When every side of a comparison comes from the modules a PR supplies (the route's own
module, or a file the PR adds), the PR wrote its own answer key: a kernel and its reference wrong the
same way pass. A side counts as independent when it calls nothing from those modules (numpy,
torch, arithmetic, base's code). A local variable carries the modules its assignments called, one
assignment or loop binding deep per name, followed through the function and through the file's
own functions it calls.
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
    def __init__(self, bound: dict[str, str], provided: set[str], helpers: dict[str, set[str]]):
        self.bound, self.provided, self.helpers = bound, provided, helpers
        self.carried: dict[str, set[str]] = {}  # local name -> the supplied modules its value came from
        self.found: list[str] = []

    def sources(self, node: ast.AST) -> set[str]:
        found: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and dotted(sub.func):
                name = qualified(sub.func, self.bound)
                found |= {module for module in self.provided if name == module or name.startswith(f"{module}.")}
                found |= self.helpers.get(name, set())  # a function of the same file: what its body calls
            elif isinstance(sub, ast.Name) and sub.id in self.carried:
                found |= self.carried[sub.id]
        return found

    def _bind(self, target: ast.AST, value: ast.AST) -> None:
        carried = self.sources(value)
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                self.carried[name.id] = carried

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._bind(target, node.value)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self._bind(node.target, node.iter)
        self.generic_visit(node)

    def visit_withitem(self, node: ast.withitem) -> None:
        if node.optional_vars is not None:
            self._bind(node.optional_vars, node.context_expr)
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
    functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    helpers: dict[str, set[str]] = {}
    for _ in range(2):  # a helper calling another helper of the file, two deep
        for node in functions:
            reader = _Function(bound, provided, helpers)
            reader.visit(node)
            helpers[node.name] = reader.sources(node)
    found = []
    for node in functions:
        if node.name.startswith("test"):
            reader = _Function(bound, provided, helpers)
            reader.visit(node)
            found += [f"{node.name}, {item}" for item in reader.found]
    return list(dict.fromkeys(found))  # a nested function is read with the one around it too
