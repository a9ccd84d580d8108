"""What a source imports and declares as importable: module names, the aliases its imports bind,
the candidate files of its imports (relative ones included), and what a setup.py packages.

Reads text only; it must never import the code it reads nor look at the disk.
"""
from __future__ import annotations

import ast
from pathlib import PurePosixPath

from kvtasks.sources.skips import SKIP_CALLS, SKIP_MARKS
from kvtasks.sources.syntax import dotted, qualified
from kvtasks.sources.tolerances import callee_for


def imported_modules(tree: ast.AST | None) -> list[str]:
    """Absolute module names a source imports, in order (relative imports are the package's own)."""
    names = []
    for node in ast.walk(tree) if tree is not None else []:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return list(dict.fromkeys(names))


def module_files(module: str, anchor: PurePosixPath = PurePosixPath()) -> list[str]:
    """The two files a dotted module name may be below `anchor`: `a/b.py` and `a/b/__init__.py`."""
    stem = anchor.joinpath(*module.split("."))
    return [f"{stem}.py", f"{stem}/__init__.py"]


def imported_names(tree: ast.AST | None) -> list[tuple[str, str, str]]:
    """(module, name, the local name it is bound to) for each `from module import name [as alias]`."""
    return [(node.module, alias.name, alias.asname or alias.name)
            for node in (ast.walk(tree) if tree is not None else [])
            if isinstance(node, ast.ImportFrom) and node.module and not node.level for alias in node.names]


def imported_files(tree: ast.AST | None, folder: PurePosixPath) -> list[str]:
    """Candidate files of every module a source in `folder` imports, found where pytest's rootdir
    insertion finds them (beside the source) and through relative imports (`from ..x import y`)."""
    paths = []
    for node in ast.walk(tree) if tree is not None else []:
        if isinstance(node, ast.ImportFrom):
            anchor = folder
            for _ in range(max(node.level - 1, 0)):
                anchor = anchor.parent
            modules = [node.module] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            anchor, modules = folder, [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            paths += module_files(module, anchor)
    return paths


def aliases(tree: ast.AST | None) -> dict[str, str]:
    """Local name -> what it names: `import numpy as np` gives np -> numpy, `from numpy.testing import
    assert_allclose as aac` gives aac -> numpy.testing.assert_allclose."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree) if tree is not None else []:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    bound[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    # a module-level name bound to a skip, a mark or a comparison is another spelling of it:
    # `S = pytest.mark.skipif(...)` then `@S`, `sk = pytest.skip`, `check = np.testing.assert_allclose`
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, (ast.Attribute, ast.Name, ast.Call)) and dotted(node.value):
            name = qualified(node.value, bound)
            is_mark = name in SKIP_MARKS or name in SKIP_CALLS
            if is_mark or (not isinstance(node.value, ast.Call) and callee_for(name) is not None):
                bound[node.targets[0].id] = name
    return bound


def setup_py_layout(tree: ast.AST | None) -> tuple[list[str], str | None]:
    """(import roots, project name) a setup.py's setup(...) call declares: package_dir={"": "src"},
    packages=find_packages("src") / find_packages(where="src"), name="..."."""
    roots, name = [], None
    for node in ast.walk(tree) if tree is not None else []:
        if not isinstance(node, ast.Call) or (dotted(node.func) or "").rsplit(".", 1)[-1] != "setup":
            continue
        for keyword in node.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                name = keyword.value.value
            elif keyword.arg == "package_dir" and isinstance(keyword.value, ast.Dict):
                roots += [value.value for key, value in zip(keyword.value.keys, keyword.value.values)
                          if isinstance(key, ast.Constant) and key.value == "" and isinstance(value, ast.Constant)]
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and (dotted(call.func) or "").rsplit(".", 1)[-1] in (
                    "find_packages", "find_namespace_packages"):
                where = call.args[:1] + [kw.value for kw in call.keywords if kw.arg == "where"]
                roots += [arg.value for arg in where if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
    return roots, name
