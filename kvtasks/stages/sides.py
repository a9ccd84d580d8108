"""Which files the PR changes are the code under test (the route side) and which judge it (the test
side), decided from what base's own run loaded, never from anything head's code does.

The route side is the route's module, the packages it sits in, the checkout modules base's run
first imported while importing it or during a route call (the receipt's `loaded`), and the modules
base's source of those imports, however deep, whichever the test happened to import first (outside
test paths); the files a route's import or call opened (a kernel's configuration: the receipt's
`opened`) and compiled kernel sources (.cu, .hip, ...) outside test paths are route side too (with
no observation, files beside the route's module that are not Python stand for what it reads; with
one, a data file the PR adds in a route module's folder or below it is route side, since base's run
could not have opened it: a tuned configuration the kernel reads). A Python file the PR
adds outside test paths is new code under test: base could not have run it, and holding it at base
would only delete it. Every other changed file is test side: test files and their helpers wherever they live (a package module
the test imports), conftest.py files, pytest's configuration, data, golden outputs, tolerance tables,
interpreter start-up code. A PR that moves a helper onto the route (head's kernel importing it)
does not move it to the route side: base's run decides.

Without a base run that says what it loaded (the base was not run, or ran under a receipt from before
`loaded`), the route side is the route's modules and their packages alone, and the basis says so;
without a route, every changed file outside tests, pytest's configuration and start-up code.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import PurePosixPath

from pydantic import BaseModel

from kvtasks import sources
from kvtasks.harness import layout
from kvtasks.stages import Context, baseline_control

# the phases of a first import that put a module on the route side (the probe's receipt names them)
ROUTE_PHASES = ("route-import", "route-call")
KERNEL_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".hip", ".cl")
# pytest's configuration files: what they say (addopts, plugins, collection) shapes every test's outcome
PYTEST_CONFIGS = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


STARTUP_NAMES = ("sitecustomize.py", "usercustomize.py")


def is_startup_code(path: str) -> bool:
    """Code Python runs at interpreter start-up when its folder is on the path or a site folder."""
    pure = PurePosixPath(path)
    return pure.name in STARTUP_NAMES or pure.suffix == ".pth"


def judges(path: str) -> bool:
    """A file that only ever judges, wherever it sits: tests, pytest's configuration, start-up code."""
    return is_test_path(path) or is_startup_code(path) or PurePosixPath(path).name in PYTEST_CONFIGS


def is_test_path(path: str) -> bool:
    """Test code, wherever it sits: a conftest.py anywhere is pytest's, never the kernel's."""
    pure = PurePosixPath(path)
    return (pure.suffix == ".py" and (pure.name.startswith("test_") or pure.stem.endswith("_test")
                                      or pure.name == "conftest.py")) or \
        any(part in ("tests", "test", "op_tests") for part in pure.parts[:-1])


class Sides(BaseModel):
    """The PR's changed files split by what judges and what is judged, and what the split rests on."""

    route: list[str] = []
    test: list[str] = []
    loaded: list[dict[str, str]] = []  # base's run: {path, during}, in the order they loaded
    basis: str = ""

    def test_side_changed(self, target: str, target_added: bool) -> list[str]:
        """The test-side files whose change the base oracle must undo: all of them, except a target
        the PR adds (there is no base version of it to run)."""
        return [path for path in self.test if not (target_added and path == target)]


def base_loaded(ctx: Context) -> tuple[list[dict[str, str]] | None, str]:
    """What base's run of the target loaded (None when no base run says), and which run said it: the
    modules it imported and the files a route's import or call opened."""
    baseline = ctx.result_of(baseline_control.BaselineControl)
    for run in baseline.runs if baseline is not None else []:
        if run.receipt is not None and run.label.startswith("base"):
            return [asdict(file) for file in (*run.receipt.loaded.modules, *run.receipt.loaded.opened)], run.label
    reason = "the base control did not run" if baseline is None else \
        f"no base run's receipt says what it loaded ({baseline.stage.note if baseline.stage else 'no stage'})"
    return None, reason


def _packages(path: str) -> set[str]:
    """The __init__.py files of the packages a module sits in: importing it runs them."""
    parents = PurePosixPath(path).parents
    return {str(parent / "__init__.py") for parent in list(parents)[:-1]}


def _imported_on_base(ctx: Context, modules: set[str]) -> set[str]:
    """The checkout modules base's route modules import, and what those import, as base's source
    spells it (outside test paths): whichever the test happened to import first, they are the kernel's."""
    roots = [PurePosixPath(root) for root in layout.checkout_roots(ctx.request)]
    found, pending = set(modules), list(modules)
    while pending:
        path = pending.pop()
        tree = sources.parse(ctx.worktree.read_base(path))
        absolute = [*sources.imported_modules(tree), *(f"{module}.{name}" for module, name, _ in
                                                       sources.imported_names(tree))]  # `from pkg import submodule`
        names = [name.removeprefix("./") for name in
                 [*sources.imported_files(tree, PurePosixPath(path).parent),
                  *(file for name in absolute for root in [PurePosixPath(), *roots]
                    for file in sources.module_files(name, root))]]
        texts = ctx.worktree.read_base_many(name for name in names if name not in found and not judges(name))
        for name in names:
            if name not in found and not judges(name) and texts[name] is not None:
                found.add(name)
                pending.append(name)
    return found


def decide(ctx: Context) -> Sides:
    changes = ctx.head_view.changes if ctx.head_view is not None else {}
    candidates = ctx.route_files()
    loaded, said_by = base_loaded(ctx)
    if not candidates:  # nothing names the code under test: every file outside tests and their settings is
        route = [path for path in changes if not judges(path)]
        return Sides(route=route, test=[path for path in changes if path not in route], loaded=loaded or [],
                     basis="no --expected-route: every changed file outside test paths, pytest's configuration "
                           "and start-up code is taken for the code under test (PASS needs a route)")
    if loaded is not None:
        route = {entry["path"] for entry in loaded if entry["path"] in candidates or entry["during"] in ROUTE_PHASES}
        modules = {entry["path"] for entry in loaded if entry["path"] in candidates}
        basis = (f"observed: {said_by} loaded {len(loaded)} checkout files; the route side is the route's module "
                 f"({', '.join(sorted(modules)) or 'not loaded'}), its packages and what its import or calls first "
                 "imported")
    else:
        modules = {path for path, text in ctx.worktree.read_base_many(candidates).items() if text is not None}
        route = set(modules)
        basis = f"static: {said_by}, so the route side is the route's module and its packages alone"
    route |= _imported_on_base(ctx, modules)
    for module in list(route):
        route |= _packages(module)
    folders = {str(PurePosixPath(module).parent) for module in modules}

    def beside_the_route(path: str, change: str) -> bool:
        """The route's data guessed by place: with no observation, any file in a route module's
        folder; with one, a file the PR adds there or below it (a tuned configuration the kernel
        reads: base's run could not have opened a file base did not have)."""
        parent = PurePosixPath(path).parent
        if loaded is None:
            return str(parent) in folders
        return change == "A" and any(parent == PurePosixPath(folder) or (
            folder != "." and parent.is_relative_to(folder)) for folder in folders)

    sides = Sides(loaded=loaded or [], basis=basis)
    for path, change in changes.items():
        on_route = not judges(path) and (path in route or (path.endswith(".py") and change == "A") or (
            not path.endswith(".py") and (path.endswith(KERNEL_SUFFIXES) or beside_the_route(path, change))))
        (sides.route if on_route else sides.test).append(path)
    return sides
