"""What the run loads: the checkout's modules in first-import order and the files a route opens, each
with what was running then, and the judging functions the checkout's code replaced."""
import functools
import os
import sys
import sysconfig

from . import state
from .receipt import LoadedFile

_HERE = os.path.dirname(os.path.realpath(__file__)) + os.sep
_checkout = os.path.realpath(os.getcwd()) + os.sep  # a target starts in its checkout


class FirstImports:
    """Records every first import and finds nothing: the import goes on through the finders after it
    (a cached import never reaches a finder)."""

    def find_spec(self, name, path=None, target=None):
        run = state.current
        run.imports.append((name, run.during[-1] if run.during else ""))
        return None


def opened(event, args):
    """Files a route's import or call opens (a kernel's config or data): the route reads them too."""
    run = state.current
    if event != "open" or not run.during or not isinstance(args[0], str):
        return
    path, mode = args[0], args[1] if isinstance(args[1], str) else "r"
    # read, not written; modules (and their cached bytecode) are what the imports record
    if not set(mode) & set("wax+") and not path.endswith((".py", ".pyc")) and "__pycache__" not in path:
        run.opened.append((path, run.during[-1]))


def watch():
    sys.meta_path.insert(0, FirstImports())
    sys.addaudithook(opened)


def during(phase, call, *args, **kwargs):
    """call(*args, **kwargs), noted as `phase` for the imports and opens it makes."""
    run = state.current
    run.during.append(phase)
    try:
        return call(*args, **kwargs)
    finally:
        run.during.pop()


# the interpreter's own folders, read as the package loads (sysconfig reads its build data lazily: a
# corrupted run that first asked mid-test would load a module its ordinary run had not)
_INSTALLED = tuple(os.path.realpath(folder) + os.sep for key, folder in sysconfig.get_paths().items()
                   if key in ("purelib", "platlib", "stdlib", "platstdlib"))


def installed():
    return _INSTALLED


def own(path: str) -> bool:
    """Whether a real path is one of this package's files."""
    return path.startswith(_HERE)


@functools.lru_cache(maxsize=None)
def _real_folder(folder):
    return os.path.realpath(folder)


def real_path(path):
    """os.path.realpath(path), each folder resolved once per process: a run's modules share a few
    hundred folders, and resolving each module's path whole stats every folder above it again (a
    receipt names every module loaded, thousands in a torch suite)."""
    folder, name = os.path.split(path)
    if not os.path.isabs(path) or name in ("", ".", ".."):
        return os.path.realpath(path)
    full = os.path.join(_real_folder(folder), name)  # the folder resolves as it would whole: from the left
    return os.path.realpath(full) if os.path.islink(full) else full


@functools.lru_cache(maxsize=4096)
def in_checkout(source):
    """A file's path relative to the checkout, or None for anything else: installed packages (even in
    a virtual environment inside the checkout) and this package's files are not the checkout's."""
    path = real_path(source or "/")
    if not path.startswith(_checkout) or path.startswith(installed()) or own(path):
        return None
    return path[len(_checkout):]


def loaded_modules(run) -> list[LoadedFile]:
    """The checkout's modules this process imported, in the order they entered sys.modules, each with
    the phase the finder saw its first import in (pytest's own finder, ahead of it, loads test files
    and conftest.py files: they are never a route's)."""
    phases = dict(reversed(run.imports))  # a name's first import wins
    found = {}
    for name, module in list(sys.modules.items()):
        path = in_checkout(getattr(module, "__file__", None))
        if path is not None:
            found.setdefault(path, phases.get(name, ""))
    return [LoadedFile(path, phase) for path, phase in found.items()]


def opened_files(run) -> list[LoadedFile]:
    """The checkout's files a route's import or call opened, each with the phase it first did."""
    found = {}
    for name, phase in list(run.opened):
        path = in_checkout(os.path.abspath(name))
        if path is not None:
            found.setdefault(path, phase)
    return [LoadedFile(path, phase) for path, phase in found.items()]


# the functions tests judge with: one replaced by the checkout's code (or bound to other arguments)
# judges nothing, whoever replaced it
_JUDGES = {"numpy.testing": ("assert_allclose", "assert_array_equal", "assert_array_almost_equal",
                             "assert_almost_equal", "assert_equal", "assert_array_less"),
           "numpy": ("allclose", "isclose", "array_equal"), "torch.testing": ("assert_close",),
           "torch": ("allclose", "isclose", "equal"), "pytest": ("approx", "raises", "skip", "fail"),
           "unittest.case": ("TestCase.assertEqual", "TestCase.assertAlmostEqual", "TestCase.assertTrue"),
           "builtins": ("abs", "all", "any", "isinstance", "max", "min", "round", "sum")}


def judges_replaced() -> list[str]:
    """The judging functions now bound to code of the checkout, or to a functools.partial."""
    found = []
    for module_name, names in _JUDGES.items():
        module = sys.modules.get(module_name)
        for name in names if module is not None else ():
            value = module
            for part in name.split("."):
                value = getattr(value, part, None)
            code = getattr(value, "__code__", None) or getattr(getattr(type(value), "__call__", None), "__code__", None)
            source = in_checkout(code.co_filename) if code is not None else None
            if source is not None or type(value).__name__ == "partial":
                found.append(f"{module_name}.{name} ({'by ' + source if source else 'a functools.partial'})")
    return found
