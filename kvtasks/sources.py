"""Everything kvtasks reads from Python source, read from the AST in one place.

Readers: imports (and the aliases they bind), argparse flags, environment reads, parametrize
marks and their rows (through `parametrize(*CONSTANT)` and module-level names; a one-name mark's
tuple values are single cells; the marks stacked on one test, grouped), and the test policy of a
file: its tolerances (parametrize tolerance columns by argname among them), strict checks,
commented-out shape rows, and the constructs that weaken a suite without moving a number (skips,
xfails, skip marks, marks added at run time with `request.node.add_marker`, discarded
comparisons, early returns, test functions and parametrize rows).

Two tables make the policy reader easy to extend: CALLEES, each comparison callee with its
documented default tolerances (a keyword head passes where base passed none is compared with
these), and WEAKENINGS, each kind of weakening the reader records (SKIP_CALLS and SKIP_MARKS say
what a skip looks like). `compare` holds head against base with both.
"""
from __future__ import annotations

import ast
import difflib
import re
from collections import Counter
from dataclasses import dataclass, field

# -- parsing, imports and names --------------------------------------------------------------------


def parse(text: str | None) -> ast.Module | None:
    try:
        return ast.parse(text or "")
    except (SyntaxError, ValueError):
        return None


def imported_modules(tree: ast.AST | None) -> list[str]:
    """Absolute module names a source imports, in order (relative imports are the package's own)."""
    names = []
    for node in ast.walk(tree) if tree is not None else []:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return list(dict.fromkeys(names))


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


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of names and attributes (a call's callee before its parentheses)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def qualified(node: ast.AST, bound: dict[str, str]) -> str:
    """The dotted name with its first part resolved through the imports' aliases."""
    name = dotted(node) or ""
    head, _, rest = name.partition(".")
    origin = bound.get(head, head)
    return f"{origin}.{rest}" if rest else origin


def number(node: ast.AST | None) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    return None


# -- grid channels: argparse flags, environment reads, parametrize marks ---------------------------

def row_text(row) -> str:
    return ",".join(str(cell).strip() for cell in row)


def literal_rows(node: ast.AST | None) -> list[str] | None:
    """A literal list of cells or rows, each as grid text; None when the default is computed."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return None
    rows = []
    for item in value:
        if isinstance(item, (list, tuple)):
            rows.append(row_text(item))
        else:
            rows.append(row_text(str(item).split(",")))
    return rows


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


def _argnames(node: ast.AST | None) -> list[str] | None:
    if node is None:
        return None
    try:
        names = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None
    if isinstance(names, str):
        return [n.strip() for n in names.split(",") if n.strip()]
    return [str(n) for n in names] if isinstance(names, (list, tuple)) else None


def _argvalues(call: ast.Call) -> ast.AST | None:
    return call.args[1] if len(call.args) > 1 else next((kw.value for kw in call.keywords if kw.arg == "argvalues"),
                                                         None)


def _is_parametrize(node: ast.AST) -> bool:
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


def cell_text(value) -> str:
    """One grid cell as text: a tuple-valued cell (a shape) keeps its parentheses, `(2049,2)`."""
    if isinstance(value, tuple):
        return "(" + ",".join(cell_text(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ",".join(cell_text(item) for item in value) + "]"
    return str(value).strip()


def mark_rows(names: list[str], values: ast.AST | None) -> list[str] | None:
    """A parametrize mark's literal rows as grid text (None when computed): with one argname each
    value is one cell, whatever it holds; with several each value is a row of cells."""
    if values is None:
        return None
    try:
        value = ast.literal_eval(values)
    except (ValueError, SyntaxError, TypeError):
        return None
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
                if _is_parametrize(decorator):
                    stacked.add(id(decorator))
                    names, values = parametrize_arguments(decorator, lookup)
                    if names is not None:
                        group.append((names, mark_rows(names, values)))
            if group:
                groups.append(group)
    if every_call:
        for node in ast.walk(tree):
            if _is_parametrize(node) and id(node) not in stacked:
                names, values = parametrize_arguments(node, lookup)
                if names is not None:
                    groups.append([(names, mark_rows(names, values))])
    return groups


def module_value(tree: ast.AST, name: str) -> ast.AST | None:
    """What a module-level `name = ...` assigns (the last such assignment)."""
    found = None
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name \
                and node.value is not None:
            found = node.value
    return found


# -- packaging: what setup.py declares ----------------------------------------------------------------

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


# -- callees and their documented default tolerances -----------------------------------------------

@dataclass(frozen=True)
class Callee:
    """A comparison callee: its positional parameters and the documented default of each tolerance."""

    positional: tuple[str, ...]
    defaults: dict[str, float | dict[str, float]]
    # where the defaults are documented (the report names it beside a widening)
    source: str = ""


_NUMPY_CLOSE = Callee(("a", "b", "rtol", "atol"), {"rtol": 1e-5, "atol": 1e-8}, "numpy: rtol=1e-05, atol=1e-08")
_TORCH_CLOSE = Callee(("input", "other", "rtol", "atol"), {"rtol": 1e-5, "atol": 1e-8}, "torch: rtol=1e-05, atol=1e-08")
# torch.testing.assert_close: the defaults depend on the dtype compared (its documented table)
TORCH_ASSERT_CLOSE = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
    "quint8": (1.3e-6, 1e-5), "quint2x4": (1.3e-6, 1e-5), "quint4x2": (1.3e-6, 1e-5), "qint8": (1.3e-6, 1e-5),
    "qint32": (1.3e-6, 1e-5),
}
_ALMOST_EQUAL = Callee(("first", "second", "places", "msg", "delta"), {"places": 7, "delta": 0.5e-7},
                       "unittest: places=7 (|a-b| < 5e-8)")

CALLEES: dict[str, Callee] = {
    "numpy.testing.assert_allclose": Callee(("actual", "desired", "rtol", "atol"), {"rtol": 1e-7, "atol": 0.0},
                                            "numpy.testing.assert_allclose: rtol=1e-07, atol=0"),
    "numpy.testing.assert_array_almost_equal": Callee(("x", "y", "decimal"), {"decimal": 6},
                                                      "numpy.testing.assert_array_almost_equal: decimal=6"),
    "numpy.testing.assert_almost_equal": Callee(("actual", "desired", "decimal"), {"decimal": 7},
                                                "numpy.testing.assert_almost_equal: decimal=7"),
    "numpy.allclose": _NUMPY_CLOSE,
    "numpy.isclose": _NUMPY_CLOSE,
    "torch.allclose": _TORCH_CLOSE,
    "torch.isclose": _TORCH_CLOSE,
    "torch.testing.assert_close": Callee(("actual", "expected"), {
        "rtol": {dtype: pair[0] for dtype, pair in TORCH_ASSERT_CLOSE.items()},
        "atol": {dtype: pair[1] for dtype, pair in TORCH_ASSERT_CLOSE.items()}},
        "torch.testing.assert_close: per-dtype defaults"),
    "pytest.approx": Callee(("expected", "rel", "abs"), {"rel": 1e-6, "abs": 1e-12}, "pytest.approx: rel=1e-06, "
                                                                                    "abs=1e-12"),
    "unittest.TestCase.assertAlmostEqual": _ALMOST_EQUAL,
}
# methods called on a test case (`self.assertAlmostEqual`), whatever the receiver is named
METHOD_CALLEES = {"assertAlmostEqual": _ALMOST_EQUAL, "assertAlmostEquals": _ALMOST_EQUAL,
                  "failUnlessAlmostEqual": _ALMOST_EQUAL}
# the tolerance parameters; for these two fewer means looser
TOLERANCE_PARAMETERS = {"atol", "rtol", "rel", "abs", "delta", "places", "decimal"}
# parametrize columns read as tolerances, by argname (and any argname containing "tol")
TOLERANCE_ARGNAMES = TOLERANCE_PARAMETERS | {"tol", "eps", "epsilon", "tolerance"}


def is_tolerance_argname(name: str) -> bool:
    return name.lower() in TOLERANCE_ARGNAMES or "tol" in name.lower()
FEWER_IS_LOOSER = {"places", "decimal"}
# recorded for any callee (a repository's own helpers take these too)
_ANY_CALLEE_KEYWORDS = {"atol", "rtol"}

_STRICT_CHECKS = {"assert_close", "assert_allclose", "assert_array_almost_equal", "assert_almost_equal",
                  "assert_array_equal", "assert_equal", "assert_array_max_ulp", "assertEqual", "assertAlmostEqual"}
# calls whose only effect is their result: as a bare statement, nothing is checked
_COMPARISONS = {"allclose", "isclose", "array_equal", "array_equiv", "equal", "approx", "isfinite", "all"}


def callee_for(name: str) -> Callee | None:
    if name in CALLEES:
        return CALLEES[name]
    return METHOD_CALLEES.get(name.rsplit(".", 1)[-1]) if "." in name else None


def looser(parameter: str, head: float, base: float) -> bool:
    return head < base if parameter in FEWER_IS_LOOSER else head > base


_DTYPE_SPELLINGS = {
    "float16": ("f16", "fp16", "half", "float16"), "bfloat16": ("bf16", "bfloat16"),
    "float32": ("f32", "fp32", "float", "float32"), "float64": ("f64", "fp64", "double", "float64"),
    "float8": ("fp8", "f8", "float8_e4m3fn", "float8_e5m2", "fp8_e4m3", "fp8_e5m2"),
}
_CANONICAL_DTYPE = {spelling: name for name, spellings in _DTYPE_SPELLINGS.items() for spelling in spellings}


def canonical_dtype(text: str) -> str | None:
    """`f32`, `torch.float32`, `np.float32`, "<class 'numpy.float32'>" -> float32; None if not a dtype."""
    word = re.sub(r"^<class '|'>$", "", str(text).strip()).rsplit(".", 1)[-1].lower()
    return _CANONICAL_DTYPE.get(word)


# -- the test policy of one file --------------------------------------------------------------------

@dataclass
class Tolerance:
    """One tolerance a call passes: a literal value, or the text of a value that is not one."""

    parameter: str
    value: float | None
    text: str
    key: str  # "function:callee.parameter#occurrence", as base and head both spell it


@dataclass
class Call:
    """A comparison call: who it calls and which tolerances it passes, for pairing base with head."""

    function: str
    callee: str  # resolved through the imports' aliases
    signature: str  # the callee and its non-tolerance arguments
    tolerances: dict[str, Tolerance]
    dtypes: set[str] = field(default_factory=set)  # dtypes named in the enclosing function


@dataclass
class Policy:
    """What one side of one file says about how strictly it checks."""

    tolerances: dict[str, float] = field(default_factory=dict)
    by_name: list[str] = field(default_factory=list)
    checks: Counter = field(default_factory=Counter)  # (function, "strict comparison" | "assert") -> count
    commented_rows: Counter = field(default_factory=Counter)
    parsed: bool = True
    calls: list[Call] = field(default_factory=list)
    helpers: dict[str, Callee] = field(default_factory=dict)  # the file's own functions with tolerance defaults
    constants: dict[str, ast.AST] = field(default_factory=dict)  # module-level assignments
    # weakenings: (kind, where, what) -> count; see WEAKENINGS
    weakenings: Counter = field(default_factory=Counter)
    tests: set[str] = field(default_factory=set)
    rows: dict[str, Counter] = field(default_factory=dict)  # "function[argnames]" -> parametrize rows
    # tolerance columns of parametrize tables: key -> (table, argname, the row's other cells, value)
    table_tolerances: dict[str, tuple[str, str, str, float]] = field(default_factory=dict)


# each kind of weakening the reader records, and how a finding names one
WEAKENINGS = {
    "skip-call": "a new skip/xfail call",
    "skip-mark": "a new skip/skipif/xfail mark",
    "discarded-comparison": "a comparison whose result is thrown away",
    "early-return": "a return before the assertions",
    "swallowed-assertion": "an assertion whose failure is caught and dropped",
    "outcome-hook": "a pytest hook that can rewrite, drop or deselect test outcomes",
}
# pytest hooks through which a conftest.py or plugin can turn a failure into a pass or make a test vanish
OUTCOME_HOOKS = {"pytest_runtest_makereport", "pytest_report_teststatus", "pytest_collection_modifyitems",
                 "pytest_runtest_call", "pytest_pyfunc_call", "pytest_runtest_protocol", "pytest_runtest_logreport"}
# exceptions whose handler, if it does not re-raise, swallows a failed assertion
_SWALLOWING = {None, "Exception", "BaseException", "AssertionError"}
SKIP_CALLS = {"pytest.skip", "pytest.xfail", "pytest.importorskip", "unittest.SkipTest", "pytest.skip.Exception"}
SKIP_MARKS = {"pytest.mark.skip", "pytest.mark.skipif", "pytest.mark.xfail", "unittest.skip", "unittest.skipIf",
              "unittest.skipUnless", "unittest.expectedFailure"}
# methods that skip whatever the receiver is named (`self.skipTest`)
SKIP_METHODS = {"skipTest"}
# methods that add a mark to a collected test at run time (`request.node.add_marker(pytest.mark.xfail)`)
MARK_ADDERS = {"add_marker", "applymarker"}


def _is_skip_mark(node: ast.AST, bound: dict[str, str]) -> str | None:
    name = qualified(node, bound) if dotted(node) else ""
    return name if name in SKIP_MARKS else None


def _skip_marks_in(node: ast.AST, bound: dict[str, str]) -> list[str]:
    """Skip marks named anywhere in a decorator, a `marks=` value or a `pytestmark` assignment."""
    return [name for sub in ast.walk(node) if isinstance(sub, (ast.Attribute, ast.Name))
            and (name := _is_skip_mark(sub, bound))]


def _row(node: ast.AST, bound: dict[str, str]) -> str:
    """A parametrize row as text, the same spelling a commented-out row gets."""
    if isinstance(node, ast.Call) and qualified(node.func, bound) == "pytest.param":
        elements = node.args
    elif isinstance(node, (ast.Tuple, ast.List)):
        elements = node.elts
    else:
        elements = [node]
    return ", ".join(ast.unparse(element) for element in elements)


def _mentioned_dtypes(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        text = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else \
            dotted(sub) if isinstance(sub, ast.Attribute) else None
        dtype = canonical_dtype(text) if text else None
        if dtype:
            found.add(dtype)
    return found


class _Reader(ast.NodeVisitor):
    def __init__(self, policy: Policy, tree: ast.Module):
        self.policy = policy
        self.bound = aliases(tree)
        self.scope = ["<module>"]
        self.classes: list[str] = []
        self.seen: Counter = Counter()
        self.dtypes: list[set[str]] = [set()]
        self.policy.constants = {name: value for name in self._module_names(tree)
                                 if (value := module_value(tree, name)) is not None}
        for node in tree.body:  # helpers may be defined below the tests that call them
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._helper_defaults(node)

    @staticmethod
    def _module_names(tree: ast.Module) -> set[str]:
        return {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)}

    def _where(self) -> str:
        return self.scope[-1]

    # -- definitions ------------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            for mark in _skip_marks_in(decorator, self.bound):
                self.policy.weakenings[("skip-mark", node.name, mark)] += 1
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _function(self, node):
        name = ".".join([*self.classes, node.name])
        if node.name.startswith("test"):
            self.policy.tests.add(name)
        if node.name in OUTCOME_HOOKS:
            self.policy.weakenings[("outcome-hook", name, node.name)] += 1
        for decorator in node.decorator_list:
            if _is_parametrize(decorator):  # its rows' marks are read where pytest.param is called
                self._parametrize_rows(node.name, decorator)
                continue
            for mark in _skip_marks_in(decorator, self.bound):
                self.policy.weakenings[("skip-mark", node.name, mark)] += 1
        self.scope.append(node.name)
        self.dtypes.append(_mentioned_dtypes(node))
        self._early_returns(node)
        self.generic_visit(node)
        self.dtypes.pop()
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _helper_defaults(self, node) -> None:
        """A function of the file's own that takes tolerances documents its defaults in its signature."""
        arguments = node.args
        positional = [a.arg for a in [*arguments.posonlyargs, *arguments.args]]
        defaults = dict(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
        defaults.update({a.arg: d for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None})
        given = {name: value for name, node_ in defaults.items()
                 if name in TOLERANCE_PARAMETERS and (value := number(node_)) is not None}
        if given:
            self.policy.helpers[node.name] = Callee(tuple(positional), given, f"{node.name}'s own signature")
            # the defaults are tolerances in their own right: a PR may loosen the helper instead of the call
            self.policy.tolerances.update({f"{node.name}:default.{name}": value for name, value in given.items()})

    def _parametrize_rows(self, function: str, mark: ast.Call) -> None:
        names, values = parametrize_arguments(mark, self.policy.constants.get)
        if names is None or not isinstance(values, (ast.List, ast.Tuple)):
            return
        key = f"{function}[{','.join(names)}]"
        columns = [index for index, name in enumerate(names) if is_tolerance_argname(name)]
        # a row whose tolerances moved is the same row: _tolerance_columns compares its numbers
        self.policy.rows.setdefault(key, Counter()).update(
            self._cells_text(element, names, columns) or _row(element, self.bound) for element in values.elts)
        if columns:
            self._tolerance_columns(function, names, columns, values.elts)

    def _cells_text(self, element: ast.AST, names: list[str], skipped: list[int]) -> str | None:
        """A row's cells other than `skipped`, as text; None when the row's cells cannot be told apart."""
        if not skipped:
            return None
        if isinstance(element, ast.Call) and qualified(element.func, self.bound) == "pytest.param":
            cells = element.args
        else:
            cells = element.elts if isinstance(element, (ast.Tuple, ast.List)) else [element]
        if len(cells) != len(names):
            return None
        return ", ".join(ast.unparse(cell) for index, cell in enumerate(cells) if index not in skipped) or "-"

    def _tolerance_columns(self, function: str, names: list[str], columns: list[int], rows: list[ast.AST]) -> None:
        """A parametrize table's tolerance columns (atol, rtol, tol, eps, ...), each keyed by its row's
        other cells (the dtype, typically), so head's row is compared with base's."""
        table = f"{function}:parametrize({','.join(names)})"
        seen: Counter = Counter()
        for element in rows:
            row = self._cells_text(element, names, columns)
            if row is None:
                continue
            cells = element.args if isinstance(element, ast.Call) else \
                element.elts if isinstance(element, (ast.Tuple, ast.List)) else [element]
            seen[row] += 1
            row_key = row if seen[row] == 1 else f"{row}#{seen[row]}"
            for index in columns:
                value = number(cells[index])
                key = f"{table}[{row_key}].{names[index]}"
                if value is None:
                    self.policy.by_name.append(f"{key}={ast.unparse(cells[index])}")
                    continue
                self.policy.tolerances[key] = value
                self.policy.table_tolerances[key] = (table, names[index], row, value)

    def _early_returns(self, node) -> None:
        """Returns that come before the function's last assertion: what follows them may never run."""
        own = list(_own_nodes(node))
        checks = [sub.lineno for sub in own if isinstance(sub, ast.Assert) or
                  (isinstance(sub, ast.Call) and (dotted(sub.func) or "").rsplit(".", 1)[-1] in _STRICT_CHECKS)]
        if not checks:
            return
        last = max(checks)
        early = sum(1 for sub in own if isinstance(sub, ast.Return) and sub.lineno < last)
        if early:
            self.policy.weakenings[("early-return", node.name, "")] += early

    # -- statements and calls ---------------------------------------------------------------------
    def visit_Expr(self, node: ast.Expr) -> None:
        value = node.value
        if isinstance(value, ast.Compare) or (isinstance(value, ast.Call) and (dotted(value.func) or "")
                                              .rsplit(".", 1)[-1] in _COMPARISONS):
            self.policy.weakenings[("discarded-comparison", self._where(), ast.unparse(value)[:80])] += 1
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = qualified(node.func, self.bound)
        short = (dotted(node.func) or "call").rsplit(".", 1)[-1]
        where = self._where()
        if short in _STRICT_CHECKS:
            self.policy.checks[(where, "strict comparison")] += 1
        if name in SKIP_CALLS or short in SKIP_METHODS:
            self.policy.weakenings[("skip-call", where, name)] += 1
        if short in MARK_ADDERS:
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                for mark in _skip_marks_in(argument, self.bound):
                    self.policy.weakenings[("skip-mark", where, f"{short}({mark})")] += 1
        if name == "pytest.param":
            for keyword in node.keywords:
                if keyword.arg == "marks":
                    for mark in _skip_marks_in(keyword.value, self.bound):
                        self.policy.weakenings[("skip-mark", where, f"pytest.param({_row(node, self.bound)}) "
                                                                    f"marks={mark}")] += 1
        self._tolerances(node, name, short, where)
        self.generic_visit(node)

    def _tolerances(self, node: ast.Call, name: str, short: str, where: str) -> None:
        callee = callee_for(name) or self.policy.helpers.get(name)
        given: list[tuple[str, ast.AST]] = []
        if callee is not None:
            for position, arg in enumerate(node.args):
                if position < len(callee.positional) and callee.positional[position] in callee.defaults:
                    given.append((callee.positional[position], arg))
        wanted = set(callee.defaults) if callee is not None else _ANY_CALLEE_KEYWORDS
        given += [(kw.arg, kw.value) for kw in node.keywords if kw.arg in wanted | _ANY_CALLEE_KEYWORDS]
        if not given and callee is None:
            return
        tolerances = {}
        for parameter, value_node in given:
            slot = f"{where}:{short}.{parameter}"
            self.seen[slot] += 1
            value = number(value_node)
            key = f"{slot}#{self.seen[slot]}"
            if value is None:
                self.policy.by_name.append(f"{slot}={ast.unparse(value_node)}")
            else:
                self.policy.tolerances[key] = value
            tolerances[parameter] = Tolerance(parameter, value, ast.unparse(value_node), key)
        tolerance_nodes = {id(value_node) for _, value_node in given}
        rest = [ast.unparse(a) for a in node.args if id(a) not in tolerance_nodes] + \
               [f"{kw.arg}={ast.unparse(kw.value)}" for kw in node.keywords if id(kw.value) not in tolerance_nodes]
        self.policy.calls.append(Call(where, name, f"{name}({', '.join(rest)})", tolerances, set(self.dtypes[-1])))

    def visit_Try(self, node: ast.Try) -> None:
        checks = any(isinstance(sub, ast.Assert) or (isinstance(sub, ast.Call) and (dotted(sub.func) or "")
                                                      .rsplit(".", 1)[-1] in _STRICT_CHECKS)
                     for statement in node.body for sub in ast.walk(statement))
        for handler in node.handlers:
            caught = [dotted(t) for t in (handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type])] \
                if handler.type is not None else [None]
            reraises = any(isinstance(sub, ast.Raise) for statement in handler.body for sub in ast.walk(statement))
            if checks and not reraises and any((name or "").rsplit(".", 1)[-1] in _SWALLOWING or name is None
                                               for name in caught):
                self.policy.weakenings[("swallowed-assertion", self._where(), "")] += 1
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Assert(self, node: ast.Assert) -> None:
        self.policy.checks[(self._where(), "assert")] += 1
        self.generic_visit(node)

    def _assigned(self, name: str, value: ast.AST) -> None:
        if name == "pytestmark":
            for mark in _skip_marks_in(value, self.bound):
                self.policy.weakenings[("skip-mark", "<module>", f"pytestmark={mark}")] += 1
        if "tol" not in name.lower():
            return
        found = number(value)
        if found is not None:
            self.policy.tolerances[name] = found
        elif isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                found = number(item)
                if key is not None and found is not None:
                    self.policy.tolerances[f"{name}[{_key_text(key)}]"] = found

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, (ast.Name, ast.Attribute)):
                self._assigned(ast.unparse(target), node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(ast.unparse(node.target), node.value)
        self.generic_visit(node)


def _own_nodes(function: ast.AST):
    """The nodes of a function body, not those of functions or lambdas nested in it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _key_text(node: ast.AST) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)


def _shape_row(comment: str) -> str | None:
    """A commented tuple or list of numbers and dtype spellings, normalised; else None."""
    text = comment.strip().rstrip(",").strip()
    if not text or text[0] not in "([" and not text.startswith("pytest.param("):
        return None
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    elements = node.args if isinstance(node, ast.Call) else getattr(node, "elts", None)
    if not elements or len(elements) < 2:
        return None
    ints = [e for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, int)]
    allowed = all(isinstance(e, (ast.Constant, ast.Attribute, ast.Name)) or number(e) is not None for e in elements)
    return ", ".join(ast.unparse(e) for e in elements) if ints and allowed else None


_TOLERANCE_TEXT = re.compile(r"\b(atol|rtol|\w*tol\w*)\s*[=:]\s*([-+]?\d[\d.]*(?:[eE][-+]?\d+)?)", re.IGNORECASE)


def read_policy(source: str) -> Policy:
    policy = Policy()
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            row = _shape_row(stripped.lstrip("#"))
            if row:
                policy.commented_rows[row] += 1
    tree = parse(source)
    if tree is not None:
        _Reader(policy, tree).visit(tree)
        return policy
    policy.parsed = False
    for position, match in enumerate(_TOLERANCE_TEXT.finditer(source), 1):
        try:
            policy.tolerances[f"text:{match.group(1)}#{position}"] = float(match.group(2))
        except ValueError:
            continue
    return policy


# -- head against base ------------------------------------------------------------------------------

@dataclass
class Comparison:
    """What head does to the oracle base had, in one file."""

    loosened: list[dict] = field(default_factory=list)  # {where, base, head[, basis]}
    uncomparable: list[str] = field(default_factory=list)  # tolerances that are no longer literals
    weakened: list[str] = field(default_factory=list)  # weakenings without a number moving
    unknown_defaults: list[str] = field(default_factory=list)  # added tolerances on callees with no known default


def resolve(text_node: ast.AST | None, policy: Policy) -> float | None:
    """A tolerance given by name: a module constant, or the loosest entry of a module-level table
    it subscripts (`TOL[dtype]`); None if it is computed."""
    if text_node is None:
        return None
    found = number(text_node)
    if found is not None:
        return found
    if isinstance(text_node, ast.Name) and text_node.id in policy.constants:
        return resolve(policy.constants[text_node.id], policy)
    if isinstance(text_node, ast.Subscript) and isinstance(text_node.value, ast.Name):
        table = policy.constants.get(text_node.value.id)
        if isinstance(table, ast.Dict):
            key = text_node.slice
            if isinstance(key, ast.Constant):
                matching = [v for k, v in zip(table.keys, table.values) if isinstance(k, ast.Constant)
                            and k.value == key.value]
                if matching:
                    return resolve(matching[0], policy)
            values = [number(v) for v in table.values]
            if values and all(v is not None for v in values):
                return max(values)
    return None


def _default(callee: Callee, parameter: str, dtypes: set[str]) -> tuple[float, str]:
    """The documented default of one parameter; per-dtype defaults take the loosest of the dtypes the
    function names (every float dtype when it names none), so a legitimate keyword is never blamed."""
    default = callee.defaults[parameter]
    if not isinstance(default, dict):
        return float(default), callee.source
    known = [d for d in dtypes if d in default] or [d for d in default if d.startswith(("float", "bfloat"))]
    chosen = max(known, key=lambda d: default[d])
    return default[chosen], f"{callee.source} ({parameter} for {chosen}, the loosest of {', '.join(sorted(known))})"


def _pairs(base: list[Call], head: list[Call]) -> list[tuple[Call, Call]]:
    """Base and head calls that are the same call: aligned by signature, changed arguments paired in place."""
    matcher = difflib.SequenceMatcher(a=[c.signature for c in base], b=[c.signature for c in head], autojunk=False)
    pairs = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and a1 - a0 == b1 - b0):
            pairs += list(zip(base[a0:a1], head[b0:b1]))
    return pairs


def _by_function(calls: list[Call]) -> dict[str, list[Call]]:
    grouped: dict[str, list[Call]] = {}
    for call in calls:
        grouped.setdefault(call.function, []).append(call)
    return grouped


def compare(base: Policy, head: Policy, path: str, reference: dict[str, float] | None = None) -> Comparison:
    """Hold head's oracle against base's: loosened, no longer literal, or weakened."""
    found = Comparison()
    reference = {canonical_dtype(k) or k: v for k, v in (reference or {}).items()}
    # named tolerances (ATOL = ..., TOL = {...}) keep their names, so compare by key
    call_keys = {t.key for call in [*base.calls, *head.calls] for t in call.tolerances.values()}
    call_keys |= base.table_tolerances.keys() | head.table_tolerances.keys()  # compared by _compare_tables
    for key, value in head.tolerances.items():
        if key in call_keys:
            continue
        if key in base.tolerances and looser(key.rsplit(".", 1)[-1].split("#")[0], value, base.tolerances[key]):
            found.loosened.append({"where": f"{path}::{key}", "base": base.tolerances[key], "head": value})
        elif key not in base.tolerances and "[" in key:
            table = key.split("[", 1)[0]
            entries = [v for k, v in base.tolerances.items() if k.startswith(f"{table}[")]
            entry = canonical_dtype(key.split("[", 1)[1].rstrip("]"))
            if entries and value > max(entries):
                found.loosened.append({"where": f"{path}::{key}", "base": max(entries), "head": value,
                                       "basis": f"a new entry of {table}, looser than the loosest entry base had"})
            elif entry in reference and value > reference[entry]:
                found.loosened.append({"where": f"{path}::{key}", "base": reference[entry], "head": value,
                                       "basis": f"a new entry of {table}, looser than --tol-table's {entry}"})
    head_calls = _by_function(head.calls)
    for function, calls in _by_function(base.calls).items():
        for old, new in _pairs(calls, head_calls.get(function, [])):
            _compare_call(old, new, base, head, path, found)
    _compare_tables(base, head, path, reference, found)
    _compare_weakenings(base, head, path, found)
    return found


def _compare_tables(base: Policy, head: Policy, path: str, reference: dict[str, float], found: Comparison) -> None:
    """Parametrize tolerance columns: a row base had, against its base value; a new row, against the
    loosest value its column had on base and against --tol-table for its dtype."""
    for key, (table, argname, row, value) in head.table_tolerances.items():
        where = f"{path}::{key}"
        if key in base.table_tolerances:
            before = base.table_tolerances[key][3]
            if looser(argname, value, before):
                found.loosened.append({"where": where, "base": before, "head": value})
            continue
        column = [v for t, a, _, v in base.table_tolerances.values() if (t, a) == (table, argname)]
        loosest = (min(column) if argname in FEWER_IS_LOOSER else max(column)) if column else None
        dtypes = [d for cell in row.split(", ") if (d := canonical_dtype(cell)) is not None]
        if loosest is not None and looser(argname, value, loosest):
            found.loosened.append({"where": where, "base": loosest, "head": value,
                                   "basis": f"a new row of {table}, looser than the loosest {argname} base had"})
        elif argname in ("atol", "tol") and dtypes and dtypes[0] in reference and value > reference[dtypes[0]]:
            found.loosened.append({"where": where, "base": reference[dtypes[0]], "head": value,
                                   "basis": f"a new row of {table}, looser than --tol-table's {dtypes[0]}"})


def _compare_call(old: Call, new: Call, base: Policy, head: Policy, path: str, found: Comparison) -> None:
    callee = callee_for(new.callee) or head.helpers.get(new.callee) or base.helpers.get(new.callee)
    for parameter in old.tolerances.keys() - new.tolerances.keys():
        found.weakened.append(f"{path}::{old.tolerances[parameter].key}: tolerance no longer given (a default or "
                              "nothing applies)")
    for parameter, given in new.tolerances.items():
        where = f"{path}::{given.key}"
        before = old.tolerances.get(parameter)
        value = given.value if given.value is not None else resolve(_expression(given.text), head)
        # a named tolerance (atol=ATOL) is held at the value base gave that name, not skipped as unknown
        earlier = None if before is None else \
            before.value if before.value is not None else resolve(_expression(before.text), base)
        if before is not None and given.text == before.text and before.value is None:
            continue  # the same name on both sides: a change of its value is reported where it is assigned
        if before is not None and earlier is not None:
            if value is None:
                found.uncomparable.append(f"{where}: {parameter}={given.text} is not a literal on head "
                                          f"(base: {before.text}), so it cannot be compared")
            elif looser(parameter, value, earlier):
                found.loosened.append({"where": where, "base": earlier, "head": value})
        elif before is not None and given.text != before.text:
            found.uncomparable.append(f"{where}: {parameter}={given.text} on head, {before.text} on base, and "
                                      "base's value could not be resolved, so they cannot be compared")
        elif before is None:
            if callee is None or parameter not in callee.defaults:
                found.unknown_defaults.append(f"{where}: {parameter}={given.text} added to {new.callee}, whose "
                                              "default is not known")
                continue
            default, basis = _default(callee, parameter, new.dtypes)
            if value is None:
                found.uncomparable.append(f"{where}: {parameter}={given.text} added where base passed none, and it "
                                          f"is not a literal, so it cannot be compared with the default ({basis})")
            elif looser(parameter, value, default):
                found.loosened.append({"where": where, "base": default, "head": value,
                                       "basis": f"added where base passed none; the callee's default: {basis}"})


def _expression(text: str) -> ast.AST | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _compare_weakenings(base: Policy, head: Policy, path: str, found: Comparison) -> None:
    head_functions = {function for function, _ in head.checks} | {call.function for call in head.calls}
    for (function, kind), count in base.checks.items():
        if function in head_functions and head.checks.get((function, kind), 0) < count:
            found.weakened.append(f"{path}::{function}: {count} {kind}s on base, "
                                  f"{head.checks.get((function, kind), 0)} on head")
    for (kind, where, what), count in (head.weakenings - base.weakenings).items():
        found.weakened.append(f"{path}::{where}: {WEAKENINGS[kind]}{f' ({what})' if what else ''}"
                              f"{f' x{count}' if count > 1 else ''}")
    for test in sorted(base.tests - head.tests):
        found.weakened.append(f"{path}::{test}: a test function base had is deleted")
    commented = head.commented_rows - base.commented_rows
    for key, rows in base.rows.items():
        if key.split("[", 1)[0] not in {name.rsplit(".", 1)[-1] for name in head.tests} | \
                {k.split("[", 1)[0] for k in head.rows}:
            continue  # the whole function went: already named
        for row in (rows - head.rows.get(key, Counter()) - commented).elements():
            found.weakened.append(f"{path}::{key}: parametrize row ({row}) deleted")
