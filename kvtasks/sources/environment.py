"""Whether a source reads one environment variable, in any of its common spellings.

Reads the AST only; it must never consult the environment itself.
"""
from __future__ import annotations

import ast


def reads_env(tree: ast.AST, variable: str) -> bool:
    """os.getenv("V"), os.environ.get("V"), os.environ["V"], environ.get("V") or "V" in os.environ."""
    def names_environ(node):
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
            (isinstance(node, ast.Name) and node.id == "environ")

    def is_variable(node):
        return isinstance(node, ast.Constant) and node.value == variable

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and is_variable(node.args[0]):
            func = node.func
            if isinstance(func, ast.Attribute) and (func.attr == "getenv" or
                                                    (func.attr in ("get", "pop") and names_environ(func.value))):
                return True
            if isinstance(func, ast.Name) and func.id == "getenv":
                return True
        if isinstance(node, ast.Subscript) and names_environ(node.value) and is_variable(node.slice):
            return True
        if isinstance(node, ast.Compare) and is_variable(node.left) and any(names_environ(c) for c in node.comparators):
            return True
    return False
