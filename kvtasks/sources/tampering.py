"""tampering: code that reaches into what judges a run rather than computing a result.

Read in every file a PR changes, kernel side included: writes to the judges' modules (numpy, torch,
pytest, unittest, builtins: an attribute set, `setattr`, a monkeypatch or mock patch of one of
their names, `sys.modules` replaced, torch's own `aten` operators re-implemented through `torch.library`;
reached by any spelling: an alias, `sys.modules[...]`,
`importlib.import_module`, `getattr`, `vars`, `__builtins__`), looks at the caller's frames or the collector's objects
(`sys._getframe`, `inspect.stack`, `f_back`, `gc.get_objects`, `gc.get_freeze_count`, which is
non-zero in every run the validator launches, tracing and profiling hooks),
reads of pytest's or the validator's state (`PYTEST_CURRENT_TEST`, the grid's shape variable, any
KVTASKS name, a dimension the validator drew for its grid, whether a test framework is loaded), and a context manager whose `__exit__` can return true (it swallows the failure of
whatever check it wraps). Each is returned with its line, as the finding names it.

It records; the stage decides what each is worth on which side.
"""
from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass

from kvtasks.sources.imports import aliases
from kvtasks.sources.skips import OUTCOME_HOOKS
from kvtasks.sources.structure import is_main_guard
from kvtasks.sources.syntax import dotted, literal, number, parse, qualified

# the modules whose functions judge a run: replacing one of their names changes every check made with it
JUDGES = ("numpy", "torch", "pytest", "_pytest", "unittest", "builtins")
INTROSPECTION = {"sys._getframe", "sys._current_frames", "inspect.currentframe", "inspect.stack",
                 "inspect.getouterframes", "inspect.trace", "inspect.getinnerframes", "gc.get_objects",
                 "gc.get_freeze_count", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile", "threading.settrace",
                 "threading.setprofile", "sys.addaudithook", "traceback.extract_stack", "traceback.walk_stack",
                 "traceback.format_stack", "traceback.print_stack", "traceback.StackSummary.extract",
                 "inspect.getframeinfo"}
# what says how the process was started (pytest's command line, the validator's): read outside a script's
# own `__main__` block, code can tell a test run from use
PROCESS_STATE = {"sys.argv", "sys.orig_argv"}
PROCESS_FILES = ("/proc/self/cmdline", "/proc/self/environ", "/proc/self/status")
# calls that run source text: a literal one is read like the file around it
SOURCE_RUNNERS = {"exec", "eval", "compile", "builtins.exec", "builtins.eval", "builtins.compile"}
# settings a kernel or a test legitimately writes (precision and compiler switches): not tampering
SETTINGS = ("torch.backends.", "torch._dynamo.config.", "torch._inductor.config.")
# the words of a comparison's name: a test file that patches one changes how every test compares
COMPARISON_WORDS = ("testing", "allclose", "isclose", "approx", "assert", "equal", "close")
FRAME_ATTRIBUTES = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame"}
PATCHERS = {"setattr", "builtins.setattr", "delattr", "builtins.delattr"}
# pytest's monkeypatch and unittest.mock: a target given as an object and a name, or as a dotted string
PATCH_METHODS = {"setattr", "delattr", "setitem", "object", "patch", "dict"}
# a judge's own attribute writers (`np.testing.__setattr__(...)`, `object.__setattr__(np.testing, ...)`) and
# the writers of the module table (`sys.modules.update(...)`)
DUNDER_WRITERS = {"__setattr__", "__delattr__", "__setitem__", "__delitem__"}
MAPPING_WRITERS = {"update", "setdefault", "pop", "popitem", "clear"}
KINDS = {
    "patches-judge": "changes a name of the modules that judge tests",
    "introspects": "inspects frames, tracing or the garbage collector's objects",
    "reads-run-state": "reads pytest's or the validator's run state",
    "exit-swallows": "a context manager whose __exit__ can return true, swallowing the failure of what it wraps",
    "pytest-hook": "a pytest hook that can rewrite, drop or deselect test outcomes",
}


@dataclass(frozen=True)
class Tampering:
    kind: str
    line: int
    what: str

    def describe(self, path: str) -> str:
        return f"{path}:{self.line}: {KINDS[self.kind]} ({self.what})"

    @property
    def patches_a_comparison(self) -> bool:
        return self.kind == "patches-judge" and any(word in self.what.lower() for word in COMPARISON_WORDS)


def _judge_name(name: str) -> bool:
    if name.startswith(SETTINGS):
        return False
    return name.split(".", 1)[0].split("[", 1)[0] in JUDGES or name.startswith("sys.modules")


# calls that hand back a module by its name, and those that hand back an object's namespace
IMPORTERS = {"importlib.import_module", "__import__", "builtins.__import__"}
NAMESPACES = {"vars", "builtins.vars"}


# lookups that say whether a module is loaded or installed: code under test asking them of a test
# framework behaves one way under the tests and another in use
MODULE_LOOKUPS = {"importlib.util.find_spec", "pkgutil.find_loader", "importlib.find_loader"}
TEST_FRAMEWORKS = ("pytest", "_pytest", "unittest")
TEST_FRAMEWORK_WORDS = ("pytest", "py.test", "unittest")


# torch.library's entry points that take a namespace or an operator name first (`ns=` / `qualname=`)
TORCH_LIBRARY = {"torch.library.Library", "torch.library.impl", "torch.library.register_kernel",
                 "torch.library.register_fake", "torch.library.register_autograd", "torch.library.define",
                 "torch.library.custom_op", "torch.library.fallthrough_kernel"}


def _text(node: ast.AST | None) -> str | None:
    """A string literal, or literals joined with +; None for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None or right is None else left + right
    return None


def _names_aten(call: ast.Call) -> bool:
    """Whether a torch.library call reaches torch's own `aten` namespace, or names one no reading can tell."""
    given = call.args[0] if call.args else next((kw.value for kw in call.keywords if kw.arg in ("ns", "qualname")),
                                                None)
    if given is None:
        return False
    text = _text(given)
    return text is None or text.split(":", 1)[0].strip() == "aten"


def _asks_argv_for_tests(node: ast.AST, bound: dict[str, str]) -> bool:
    """A comparison or call that reads the command line (sys.argv, sys.orig_argv) and names a test
    framework: `"pytest" in sys.argv[0]`, `any("pytest" in word for word in sys.argv)`. A build
    script's own flags (`"--cuda" in sys.argv`) name none."""
    parts = list(ast.walk(node))
    return any(isinstance(part, ast.Constant) and isinstance(part.value, str)
               and any(word in part.value for word in TEST_FRAMEWORK_WORDS) for part in parts) \
        and any(isinstance(part, (ast.Attribute, ast.Name)) and reached(part, bound) in PROCESS_STATE for part in parts)


def _judge_module(node: ast.AST) -> bool:
    name = literal(node) if isinstance(node, ast.Constant) else None
    return isinstance(name, str) and name.split(".", 1)[0] in TEST_FRAMEWORKS


def reached(node: ast.AST, bound: dict[str, str]) -> str | None:
    """What an expression names, however it is spelt: `np.testing`, `sys.modules["numpy"].testing`,
    `importlib.import_module("numpy").testing`, `getattr(np, "testing")`, `vars(np.testing)[...]`,
    `__builtins__`; None for anything else (a local object, a call's result)."""
    if isinstance(node, ast.Name):
        return "builtins" if node.id == "__builtins__" else bound.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        inner = reached(node.value, bound)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Subscript):
        inner = reached(node.value, bound)
        key = literal(node.slice) if isinstance(node.slice, ast.Constant) else None
        if inner == "sys.modules" and isinstance(node.slice, ast.Name) and node.slice.id == "__name__":
            return None  # the module itself: what it writes into itself is its own
        if inner == "sys.modules" and isinstance(key, str):
            return key
        return f"{inner}[...]" if inner else None
    if isinstance(node, ast.Call) and node.args:
        callee = qualified(node.func, bound) if dotted(node.func) else ""
        first = node.args[0]
        name = literal(first) if isinstance(first, ast.Constant) else None
        if callee in IMPORTERS and isinstance(name, str):
            return name
        if callee in ("getattr", "builtins.getattr") and len(node.args) >= 2:
            inner, attribute = reached(first, bound), node.args[1]
            key = literal(attribute) if isinstance(attribute, ast.Constant) else None
            return f"{inner}.{key}" if inner and isinstance(key, str) else inner
        if callee in NAMESPACES:
            return reached(first, bound)
    return None


def _bindings(tree: ast.AST, bound: dict[str, str]) -> dict[str, str]:
    """The imports' aliases plus every plain name bound to a judge's module or attribute (`t = np.testing`,
    `m = sys.modules["numpy"]`), wherever it is bound: a write through the name is a write to the judge."""
    names = dict(bound)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = reached(node.value, names)
            if name and _judge_name(name):
                names[node.targets[0].id] = name
    return names


def _truthy(value: ast.AST) -> bool:
    """Whether an expression can be true: anything but a false constant."""
    return not isinstance(value, ast.Constant) or bool(value.value)


def _truthy_return(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(node, ast.Return) and node.value is not None and _truthy(node.value)
               for node in ast.walk(function))


def read(text: str | None, state_names: tuple[str, ...] = (), grid_numbers: frozenset[int] = frozenset(),
         outer: dict[str, str] | None = None) -> list[Tampering]:
    """Every tampering construct in a module's source, in line order (nothing when it does not parse);
    `grid_numbers` are the dimensions the validator drew for its grid: a module naming one singles out
    a shape it will be judged on."""
    tree = parse(text)
    if tree is None:
        return []
    bound = _bindings(tree, {**(outer or {}), **aliases(tree)})
    in_main = {id(sub) for node in tree.body if is_main_guard(node) for sub in ast.walk(node)}
    names = {"PYTEST_CURRENT_TEST", *filter(None, state_names)}
    found: list[Tampering] = []
    drawn_named: set[tuple[int, int]] = set()

    def add(kind: str, node: ast.AST, what: str) -> None:
        found.append(Tampering(kind, getattr(node, "lineno", 0), what[:100]))

    memory_only = _status_read_for_memory(tree)

    for node in ast.walk(tree):
        if isinstance(node, (ast.Compare, ast.Call)) and id(node) not in in_main and _asks_argv_for_tests(node, bound):
            add("reads-run-state", node, f"the command line asked for a test framework: {ast.unparse(node)[:60]}")
        if isinstance(node, (ast.Constant, ast.BinOp, ast.Call)) and grid_numbers \
                and (value := number(node)) is not None and value.is_integer() and int(value) in grid_numbers \
                and (node.lineno, int(value)) not in drawn_named:
            drawn_named.add((node.lineno, int(value)))
            add("reads-run-state", node, f"the grid's drawn dimension {int(value)}")
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda) and _truthy(node.value.body) \
                and any(isinstance(target, ast.Name) and target.id == "__exit__" for target in node.targets):
            add("exit-swallows", node, "__exit__ = lambda")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                written = reached(target, bound) if isinstance(target, (ast.Attribute, ast.Subscript)) else None
                replaces_a_module = isinstance(target, ast.Subscript) and reached(target.value, bound) == "sys.modules"
                if replaces_a_module or (written and _judge_name(written)):
                    add("patches-judge", node, ast.unparse(target))
        elif isinstance(node, ast.Call):
            name = qualified(node.func, bound)
            short = name.rsplit(".", 1)[-1]
            owner = reached(node.func.value, bound) if isinstance(node.func, ast.Attribute) else None
            code = literal(node.args[0]) if node.args and isinstance(node.args[0], ast.Constant) else None
            if name in TORCH_LIBRARY and _names_aten(node):
                add("patches-judge", node, ast.unparse(node)[:100])  # torch's own operators, comparisons included
            if (name in MODULE_LOOKUPS or (owner == "sys.modules" and short == "get")) and node.args \
                    and _judge_module(node.args[0]):
                add("reads-run-state", node, f"whether {literal(node.args[0])} is loaded")
            if name in SOURCE_RUNNERS and isinstance(code, str):  # the code it runs is read as the file's own
                found += [Tampering(item.kind, node.lineno, item.what) for item in read(code, state_names,
                                                                                         grid_numbers, bound)]
            if name in INTROSPECTION or name.startswith("sys.monitoring."):
                add("introspects", node, name)
            elif owner and ((short in DUNDER_WRITERS and _judge_name(owner))
                            or (short in MAPPING_WRITERS and owner == "sys.modules")):
                add("patches-judge", node, ast.unparse(node)[:100])
            elif (name in PATCHERS or short in PATCH_METHODS | DUNDER_WRITERS) and node.args:
                first = node.args[0]
                spelled = literal(first) if isinstance(first, ast.Constant) else reached(first, bound)
                if isinstance(spelled, str) and spelled and _judge_name(spelled):
                    add("patches-judge", node, ast.unparse(node)[:100])
        elif isinstance(node, ast.Attribute) and node.attr in FRAME_ATTRIBUTES:
            add("introspects", node, f".{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and (node.value in names or node.value.upper().startswith("KVTASKS")
                     or (node.value.startswith(PROCESS_FILES) and not memory_only.get(id(node)))):
            add("reads-run-state", node, node.value)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and _judge_module(node.left) and any(reached(c, bound) == "sys.modules" for c in node.comparators):
            add("reads-run-state", node, f"whether {literal(node.left)} is loaded")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__exit__" \
                and _truthy_return(node):
            add("exit-swallows", node, node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in OUTCOME_HOOKS:
            add("pytest-hook", node, node.name)
    found.sort(key=lambda item: item.line)
    return found


# the fields of /proc/self/status that say how much memory the process uses: a kernel reading its own
# footprint is no tell; every other field (PPid, NSpid, TracerPid, ...) says how and where it runs
MEMORY_FIELDS = ("Vm", "Rss", "Hugetlb")
_STATUS_FIELD = re.compile(r"^[A-Z][A-Za-z_]+:?$")


def _status_read_for_memory(tree: ast.AST) -> dict[int, bool]:
    """For each "/proc/self/status" constant: whether the code around it (its function, or the
    module outside any function) names only memory fields of that file, and at least one."""
    reads: dict[int, bool] = {}
    scopes = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(sub) for scope in scopes for sub in ast.walk(scope)}
    for scope in [tree, *scopes]:
        constants = [sub for sub in ast.walk(scope) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
                     and (scope is not tree or id(sub) not in inside)]
        fields = {sub.value.rstrip(":") for sub in constants if _STATUS_FIELD.match(sub.value)}
        memory = bool(fields) and all(field.startswith(MEMORY_FIELDS) for field in fields)
        reads.update({id(sub): memory for sub in constants if sub.value.startswith("/proc/self/status")})
    return reads


def added(base_text: str | None, head_text: str | None, state_names: tuple[str, ...] = (),
          grid_numbers: frozenset[int] = frozenset()) -> list[Tampering]:
    """What head's version adds to base's: constructs base already had (by kind and what) are not new."""
    before = Counter((item.kind, item.what) for item in read(base_text, state_names, grid_numbers))
    new = []
    for item in read(head_text, state_names, grid_numbers):
        if before[(item.kind, item.what)]:
            before[(item.kind, item.what)] -= 1
        else:
            new.append(item)
    return new
