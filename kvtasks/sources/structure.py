"""What a target file defines, for choosing its runner: collectable tests (and test-named workers
that need arguments), a `__main__` guard, and argv parsed in the module body.

Reads the AST only; the runner is chosen, and explained, by the selection stage.
"""
from __future__ import annotations

import ast

_ARGV_PARSERS = {"parse_args", "parse_known_args", "parse_intermixed_args"}
_COLLECTING_DECORATORS = ("parametrize", "fixture", "usefixtures")


def test_definitions(tree: ast.Module) -> tuple[list[str], list[str]]:
    """(collectable test* functions and Test* classes, test* functions that are workers: they take
    required arguments and nothing parametrizes them, so pytest collects them and they error)."""
    tests, workers = [], []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            tests.append(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            decorated = any(word in ast.unparse(dec) for dec in node.decorator_list for word in _COLLECTING_DECORATORS)
            required = len(node.args.posonlyargs) + len(node.args.args) - len(node.args.defaults)
            (tests if decorated or required == 0 else workers).append(node.name)
    return tests, workers


def is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test)


def has_main_guard(tree: ast.Module) -> bool:
    return any(is_main_guard(node) for node in tree.body)


def argv_parsed_at_import(tree: ast.Module) -> tuple[int, str] | None:
    """(line, parser method) of the first argv parse in the module body, outside definitions and
    the `__main__` guard: it runs when pytest imports the module."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or is_main_guard(node):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                    and inner.func.attr in _ARGV_PARSERS:
                return inner.lineno, inner.func.attr
    return None
