"""@pytest.mark.parametrize marks: their argnames and literal rows, through `parametrize(*CONSTANT)`
and module-level names (a one-name mark's tuple values are single cells), grouped by the test they
are stacked on.

Reads the AST only; judging what a row means (a tolerance, a deleted case) is the policy reader's.
"""
from __future__ import annotations

import ast

from kvtasks.sources.cells import cell_text, row_text
from kvtasks.sources.syntax import literal, module_value


def _argnames(node: ast.AST | None) -> list[str] | None:
    names = literal(node)
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    return [str(n) for n in names] if isinstance(names, (list, tuple)) else None


def _argvalues(call: ast.Call) -> ast.AST | None:
    return call.args[1] if len(call.args) > 1 else next((kw.value for kw in call.keywords if kw.arg == "argvalues"),
                                                         None)


def is_parametrize(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parametrize" \
        and bool(node.args)


def parametrize_arguments(call: ast.Call, lookup) -> tuple[list[str] | None, ast.AST | None]:
    """(argnames, the argvalues node) of a parametrize call, through module-level names: `lookup(name)`
    gives what a module-level name is assigned. `parametrize(*_SHAPE_PARAMS)` unpacks a constant pair,
    and argnames or argvalues may each be a constant's name."""
    first, values = call.args[0], _argvalues(call)
    if isinstance(first, ast.Starred):
        packed = lookup(first.value.id) if isinstance(first.value, ast.Name) else first.value
        if not isinstance(packed, (ast.Tuple, ast.List)) or len(packed.elts) < 2:
            return None, None
        first, values = packed.elts[0], packed.elts[1]
    if isinstance(first, ast.Name):
        first = lookup(first.id)
    if isinstance(values, ast.Name):
        values = lookup(values.id) or values
    return _argnames(first), values


def mark_rows(names: list[str], values: ast.AST | None) -> list[str] | None:
    """A parametrize mark's literal rows as grid text (None when computed): with one argname each
    value is one cell, whatever it holds; with several each value is a row of cells."""
    value = literal(values)
    if not isinstance(value, (list, tuple)):
        return None
    if len(names) == 1:
        return [cell_text(item) for item in value]
    return [",".join(cell_text(cell) for cell in item) if isinstance(item, (list, tuple)) else
            row_text(str(item).split(",")) for item in value]


def parametrize_marks(tree: ast.AST) -> list[tuple[list[str], list[str] | None]]:
    """(argnames, literal default rows) of every @pytest.mark.parametrize in the source."""
    return [mark for group in parametrize_groups(tree, every_call=True) for mark in group]


def parametrize_groups(tree: ast.AST, every_call: bool = False) -> list[list[tuple[list[str], list[str] | None]]]:
    """The parametrize marks stacked on each decorated function or class, as (argnames, rows) per
    mark; with every_call, also each parametrize call found elsewhere (a `pytestmark`, a helper), alone."""
    def lookup(name):
        return module_value(tree, name)

    groups, stacked = [], set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            group = []
            for decorator in node.decorator_list:
                if is_parametrize(decorator):
                    stacked.add(id(decorator))
                    names, values = parametrize_arguments(decorator, lookup)
                    if names is not None:
                        group.append((names, mark_rows(names, values)))
            if group:
                groups.append(group)
    if every_call:
        for node in ast.walk(tree):
            if is_parametrize(node) and id(node) not in stacked:
                names, values = parametrize_arguments(node, lookup)
                if names is not None:
                    groups.append([(names, mark_rows(names, values))])
    return groups
