"""What a script declares on its command line: the flags passed to argparse's add_argument, with
their literal defaults.

Reads the AST only; it must never run the parser it reads.
"""
from __future__ import annotations

import ast

from kvtasks.sources.cells import literal_rows


def argparse_flags(tree: ast.AST) -> dict[str, list[str] | None]:
    """Every flag passed to add_argument, with its literal default rows (None if not literal)."""
    flags = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            default = next((kw.value for kw in node.keywords if kw.arg == "default"), None)
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    flags[arg.value] = literal_rows(default)
    return flags
