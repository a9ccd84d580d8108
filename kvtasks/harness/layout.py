"""Where a checkout's packages import from, read from its packaging (never by importing it).

A `src/` layout keeps its package one folder down: `import liger_kernel` works only with `src` on
the path. The roots are what pyproject.toml (setuptools, hatch, poetry, pdm, maturin), setup.cfg
and setup.py declare, plus a `src/` folder that holds a package; the packages are what the same
files name. Both are read from the tree as it is when asked, so base and head each get their own.
"""
from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

from kvtasks import sources
from kvtasks.request import Request

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# folders that hold a repository's tooling around the package, never the package itself
NOT_A_PACKAGE = {"benchmark", "bench", "doc", "test", "testing", "example", "script", "tutorial", "tool", "conftest",
                 "build", "dist", "site", "notebook", "asset"}


def is_tooling(name: str) -> bool:
    """benchmarks, docs, tests, examples, scripts ... in any of their usual spellings."""
    lowered = name.lower().strip("_")
    return lowered.rstrip("s") in NOT_A_PACKAGE or lowered in NOT_A_PACKAGE


def _pyproject(checkout: Path) -> dict:
    try:
        return tomllib.loads((checkout / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}


def _setup_cfg(checkout: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    try:
        parser.read_string((checkout / "setup.cfg").read_text())
    except (OSError, configparser.Error, UnicodeDecodeError):
        pass
    return parser


def _setup_py(checkout: Path) -> tuple[list[str], str | None]:
    try:
        text = (checkout / "setup.py").read_text()
    except (OSError, UnicodeDecodeError):
        text = ""
    return sources.setup_py_layout(sources.parse(text))


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value] if value else []


def _declared_roots(checkout: Path) -> list[str]:
    project = _pyproject(checkout)
    tool = project.get("tool", {})
    roots: list[str] = []
    setuptools = tool.get("setuptools", {})
    for package, folder in (setuptools.get("package-dir") or {}).items():
        roots.append(folder if package == "" else str(Path(folder).parent))
    find = (setuptools.get("packages") or {}) if isinstance(setuptools.get("packages"), dict) else {}
    roots += _as_list((find.get("find") or {}).get("where"))
    wheel = tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
    roots += [str(Path(package).parent) for package in _as_list(wheel.get("packages"))]
    sources = wheel.get("sources")
    roots += list(sources) if isinstance(sources, (list, dict)) else []
    roots += [entry.get("from", "") for entry in _as_list(tool.get("poetry", {}).get("packages"))
              if isinstance(entry, dict)]
    roots += _as_list(tool.get("pdm", {}).get("build", {}).get("package-dir"))
    roots += _as_list(tool.get("maturin", {}).get("python-source"))
    cfg = _setup_cfg(checkout)
    package_dir = cfg.get("options", "package_dir", fallback="")
    roots += [line.split("=", 1)[1] for line in package_dir.splitlines() if line.strip().startswith("=")]
    roots += [cfg.get("options.packages.find", "where", fallback="")]
    roots += _setup_py(checkout)[0]
    return roots


def is_package(folder: Path) -> bool:
    """A folder `import` finds as a package: a regular one (__init__.py) or an implicit namespace
    package (PEP 420: an importable name holding Python modules, directly or in subpackages)."""
    if not folder.name.isidentifier() or not folder.is_dir():
        return False
    return (folder / "__init__.py").is_file() or next(folder.rglob("*.py"), None) is not None


def import_roots(checkout: Path) -> list[str]:
    """Folders of the checkout (relative to it, never the checkout itself) its packaging imports from."""
    roots = _declared_roots(checkout)
    src = checkout / "src"
    if src.is_dir() and any(is_package(folder) for folder in src.iterdir()):
        roots.append("src")
    found = []
    for root in roots:
        cleaned = str(root).strip().strip("/")
        if cleaned in ("", ".") or ".." in Path(cleaned).parts or not (checkout / cleaned).is_dir():
            continue
        found.append(cleaned)
    return list(dict.fromkeys(found))


def declared_packages(checkout: Path) -> list[str]:
    """Top-level import names the packaging declares (the project's own name among them), in order."""
    project = _pyproject(checkout)
    tool = project.get("tool", {})
    names: list[str] = []
    packages = tool.get("setuptools", {}).get("packages")
    names += [package for package in packages if isinstance(package, str)] if isinstance(packages, list) else []
    names += _as_list(((packages or {}).get("find") or {}).get("include")) if isinstance(packages, dict) else []
    wheel = tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
    names += [Path(package).name for package in _as_list(wheel.get("packages"))]
    names += [entry.get("include", "") for entry in _as_list(tool.get("poetry", {}).get("packages"))
              if isinstance(entry, dict)]
    cfg = _setup_cfg(checkout)
    names += cfg.get("options", "packages", fallback="").split()
    for name in (project.get("project", {}).get("name"), tool.get("poetry", {}).get("name"),
                 cfg.get("metadata", "name", fallback=""), _setup_py(checkout)[1]):
        if isinstance(name, str) and name:
            names.append(re.sub(r"[-.]+", "_", name).lower())
    tops = [name.replace("/", ".").split(".")[0].rstrip("*") for name in names if name and name != "find:"]
    return list(dict.fromkeys(top for top in tops if top.isidentifier() and not is_tooling(top)))


def checkout_roots(request: Request) -> list[str]:
    """The checkout's import roots as the tree is now: what its packaging declares (a src/ layout),
    then --python-path, relative to the checkout."""
    return list(dict.fromkeys([*import_roots(Path(request.repo)), *request.python_path]))


def python_path(request: Request) -> list[str]:
    """The checkout's import roots, the checkout itself, then PYLIB; except FlyDSL with PYLIB, whose
    pinned build must win over the checkout's uncompiled python/flydsl."""
    worktree, pylib = Path(request.repo), request.host.pylib
    roots = [str(worktree / root) for root in checkout_roots(request)]
    python = [str(worktree / "python")] if (worktree / "python").is_dir() and "python" not in checkout_roots(request) \
        else []
    checkout = roots + python + [str(worktree)]
    if pylib and (worktree / "python" / "flydsl" / "__init__.py").is_file():
        return [pylib, *reversed(checkout)]
    return checkout + ([pylib] if pylib else [])
