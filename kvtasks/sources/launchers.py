"""The checkout's functions, read statically for the impact map (kvtasks.run.impact): every function
and method of its modules (tests aside) as a route the map's probe can watch, and which of them
launch a `@triton.jit` kernel (`kernel[grid](...)`), the launchers. Nothing is imported or run.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kvtasks.sources.syntax import parse

# folders no module of the package lives in: tests, documentation, build outputs, environments
SKIPPED_FOLDERS = {"tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "bench", "build", "dist",
                   "site-packages", "node_modules", "__pycache__"}
KERNEL_DECORATORS = {"jit", "autotune", "heuristics"}  # triton.jit, and the decorators stacked over it


@dataclass(frozen=True)
class Function:
    route: str  # "module:qualname", as --expected-route names it
    path: str  # its file, relative to the checkout
    launches: bool  # it launches a @triton.jit kernel
    first: int = 0  # its lines in the file, decorators included (0: unknown)
    last: int = 0
    kernel: bool = False  # a @triton.jit function: never watched (the interpreter or the compiler runs it)
    # the checkout's kernels it reaches by name: a launcher's launches, a kernel's calls of @triton.jit helpers
    kernels: tuple[str, ...] = ()


def is_test_path(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1]
    return (any(part in ("tests", "test", "testing") for part in parts[:-1]) or name.startswith("test_")
            or name.endswith("_test.py") or name == "conftest.py")


def _python_files(tree: Path, skipped: set[str]) -> list[str]:
    """The checkout's .py files (relative paths) outside hidden folders, environments and `skipped` ones."""
    found = []
    for path in sorted(tree.rglob("*.py")):
        relative = path.relative_to(tree).as_posix()
        folders = PurePosixPath(relative).parts[:-1]
        if not any(part.startswith(".") or "venv" in part or part in skipped for part in folders):
            found.append(relative)
    return found


def package_files(tree: Path) -> list[str]:
    """The checkout's module files: tests, documentation, build outputs and build scripts aside."""
    return [path for path in _python_files(tree, SKIPPED_FOLDERS)
            if not is_test_path(path) and path not in ("setup.py", "noxfile.py", "dodo.py")]


def python_files(tree: Path) -> list[str]:
    """Every .py file of the checkout a test can import: its modules and its tests' own."""
    return _python_files(tree, {"build", "dist", "site-packages", "node_modules", "__pycache__"})


def test_files(tree: Path) -> list[str]:
    """The checkout's pytest files: test_*.py and *_test.py outside build outputs."""
    return [path for path in python_files(tree)
            if PurePosixPath(path).name.startswith("test_") or PurePosixPath(path).name.endswith("_test.py")]


# the folders a package's sources sit in below the checkout, not part of its import name
SOURCE_ROOTS = ("src", "python")


def module_name(path: str) -> str:
    """The module a file is imported as: its path, a leading src/ or python/ folder dropped."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts[0] in SOURCE_ROOTS and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _decorator_names(node) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute):
            names.add(target.attr)
        elif isinstance(target, ast.Name):
            names.add(target.id)
    return names


def _is_kernel(node) -> bool:
    return isinstance(node, ast.FunctionDef) and bool(_decorator_names(node) & KERNEL_DECORATORS)


def _named(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _launched(node, kernels: set[str]) -> tuple[str, ...]:
    """The kernels K of the checkout the function's body launches (`K[grid](...)`)."""
    return tuple(sorted({_named(call.func.value) for call in ast.walk(node) if isinstance(call, ast.Call)
                         and isinstance(call.func, ast.Subscript) and _named(call.func.value) in kernels}))


def _helpers(node, kernels: set[str]) -> tuple[str, ...]:
    """The checkout's @triton.jit functions a kernel calls (`helper(...)`, `module.helper(...)`)."""
    return tuple(sorted({_named(call.func) for call in ast.walk(node)
                         if isinstance(call, ast.Call) and _named(call.func) in kernels - {node.name}}))


def _definitions(tree: ast.Module):
    """(qualname, node) of the module's functions and its classes' methods."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{inner.name}", inner


def functions(tree: Path) -> list[Function]:
    """Every function and method of the checkout's modules, each said to launch a kernel or not, and
    its kernels, each with the kernels it calls: a change inside a kernel reaches the launchers that
    launch it or a kernel calling it."""
    parsed = {}
    for path in package_files(tree):
        module = parse((tree / path).read_text(errors="replace"))
        if module is not None:  # a file that does not parse here cannot be imported there either
            parsed[path] = module
    kernels = {node.name for module in parsed.values() for node in ast.walk(module) if _is_kernel(node)}
    found: dict[str, Function] = {}
    for path, module in parsed.items():
        name = module_name(path)
        for qualname, node in _definitions(module):
            route = f"{name}:{qualname}"
            first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
            kernel = _is_kernel(node)
            reached = _helpers(node, kernels) if kernel else _launched(node, kernels)
            earlier = found.get(route)  # @overload stubs and redefinitions: one route, all their lines
            if earlier:
                reached = tuple(sorted({*reached, *earlier.kernels}))
            found[route] = Function(route, path, bool(reached) and not kernel,
                                    min(first, earlier.first) if earlier else first,
                                    max(node.end_lineno or node.lineno, earlier.last if earlier else 0),
                                    kernel, reached)
    return list(found.values())
