"""Which of the checkout's files a test file imports, directly or through others, read statically:
the impact map re-runs, on a new base, only the test files whose imports changed
(kvtasks.run.impact). Importing `a.b.c` imports `a` and `a.b` too; a relative import resolves from the
importing file's package; a module is found by its path (a leading src/ or python/ dropped) or beside
the test file, where pytest's rootdir insertion puts it; a test file imports what the conftest.py
files of its folders import.
"""
from __future__ import annotations

import ast
from pathlib import Path, PurePosixPath

from kvtasks.sources.launchers import SOURCE_ROOTS, module_name
from kvtasks.sources.syntax import parse


def _imported(tree: ast.Module, path: str) -> set[str]:
    """The dotted names a file imports (each package on the way included)."""
    package = list(PurePosixPath(path).parent.parts)
    if package[:1] and package[0] in SOURCE_ROOTS:  # a relative import resolves in the import name's package
        package = package[1:]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - (node.level - 1)] if node.level else []
            if node.level and node.level - 1 > len(package):
                continue
            stem = [*base, *(node.module.split(".") if node.module else [])]
            found = [".".join(stem)] if stem else []
            found += [".".join([*stem, alias.name]) for alias in node.names if alias.name != "*"]
        else:
            continue
        for name in found:
            parts = name.split(".")
            names.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return names


def imports_of(tree: Path, files: list[str]) -> dict[str, set[str]]:
    """Per file, the checkout's files it imports, directly or through others."""
    modules = {module_name(path): path for path in files}
    direct: dict[str, set[str]] = {}
    for path in files:
        source = parse((tree / path).read_text(errors="replace")) if (tree / path).is_file() else None
        names = _imported(source, path) if source is not None else set()
        folder = ".".join(PurePosixPath(path).parent.parts)
        direct[path] = {modules[name] for name in names if name in modules} | \
                       {modules[f"{folder}.{name}"] for name in names if folder and f"{folder}.{name}" in modules}
    conftests = [path for path in files if PurePosixPath(path).name == "conftest.py"]
    closure = {}
    for path in files:
        # a test file runs with the conftest.py files of its folders, and what they import
        around = [conftest for conftest in conftests
                  if PurePosixPath(path).parent.is_relative_to(PurePosixPath(conftest).parent)]
        seen, pending = set(around), [path, *around]
        while pending:
            for imported in direct.get(pending.pop(), ()):
                if imported not in seen:
                    seen.add(imported)
                    pending.append(imported)
        closure[path] = seen - {path}
    return closure
