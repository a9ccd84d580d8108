"""read_policy: the test policy of a file from its AST (a text fallback when it does not parse):
tolerances (parametrize tolerance columns among them), strict checks, commented-out shape rows, and
the constructs that weaken a suite without moving a number (skips, xfails, skip marks, marks added
at run time, collection turned off, process exits, discarded comparisons, swallowed assertions,
checks that cannot fail or never run, early returns, tests and rows), and the numeric bounds of
bare asserts.

It records; it must never judge head against base (compare does).
"""
from __future__ import annotations

import ast
import re
from collections import Counter

from kvtasks.sources.dtypes import canonical_dtype
from kvtasks.sources.parametrize import is_parametrize, parametrize_arguments
from kvtasks.sources.policy import Bound, Call, Policy, Tolerance
from kvtasks.sources.imports import aliases
from kvtasks.sources.skips import (EXITS, MARK_ADDERS, OUTCOME_HOOKS, SKIP_CALLS, SKIP_MARK_NAMES, SKIP_METHODS,
                                   canonical, is_skip_call, skip_marks_in)
from kvtasks.sources.structure import is_main_guard
from kvtasks.sources.syntax import dotted, literal, module_value, number, parse, qualified
from kvtasks.sources.tolerances import TOLERANCE_PARAMETERS, Callee, callee_for, is_tolerance_argname

# recorded for any callee (a repository's own helpers take these too)
_ANY_CALLEE_KEYWORDS = {"atol", "rtol"}
_STRICT_CHECKS = {"assert_close", "assert_allclose", "assert_array_almost_equal", "assert_almost_equal",
                  "assert_array_equal", "assert_equal", "assert_array_max_ulp", "assertEqual", "assertAlmostEqual"}
# calls whose only effect is their result: as a bare statement, nothing is checked
_COMPARISONS = {"allclose", "isclose", "array_equal", "array_equiv", "equal", "approx", "isfinite", "all"}
# exceptions whose handler, if it does not re-raise, swallows a failed assertion
_SWALLOWING = {None, "Exception", "BaseException", "AssertionError"}
# exits that pass on a status computed by a call (`sys.exit(main())`) are how a script reports, not a bypass
_STATUS_EXITS = {"sys.exit", "exit", "quit", "builtins.exit", "builtins.quit", "SystemExit", "builtins.SystemExit"}
# unittest's bound checks: (the bound's position, whether it is an upper bound)
_BOUND_METHODS = {"assertLess": True, "assertLessEqual": True, "assertGreater": False, "assertGreaterEqual": False}
_UPPER_OPS = (ast.Lt, ast.LtE)
_LOWER_OPS = (ast.Gt, ast.GtE)


def _is_check(node: ast.AST) -> bool:
    return isinstance(node, ast.Assert) or (isinstance(node, ast.Call) and (dotted(node.func) or "")
                                            .rsplit(".", 1)[-1] in _STRICT_CHECKS)


def _has_checks(statements: list[ast.stmt]) -> bool:
    return any(_is_check(sub) for statement in statements for sub in ast.walk(statement))


def _truth(node: ast.AST) -> bool | None:
    """Whether an expression is true whatever the values it names are; None when that depends on them."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) if not any(isinstance(e, ast.Starred) for e in node.elts) else None
    if isinstance(node, ast.Dict):
        return bool(node.keys) or None
    if isinstance(node, ast.JoinedStr):
        return True if any(isinstance(v, ast.Constant) and v.value for v in node.values) else None
    if isinstance(node, ast.Constant):
        return bool(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _truth(node.operand)
        return None if inner is None else not inner
    if isinstance(node, ast.BoolOp):
        values = [_truth(value) for value in node.values]
        if isinstance(node.op, ast.Or):
            return True if True in values else False if all(v is False for v in values) else None
        return False if False in values else True if all(v is True for v in values) else None
    if isinstance(node, ast.NamedExpr):
        return _truth(node.value)
    if isinstance(node, ast.IfExp):
        branches = (node.body,) if _truth(node.test) is True else (node.orelse,) if _truth(node.test) is False \
            else (node.body, node.orelse)
        truths = {_truth(branch) for branch in branches}
        return truths.pop() if len(truths) == 1 else None
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is) \
            and ast.dump(node.left) == ast.dump(node.comparators[0]):
        return True  # a value is itself (== and <= are left out: NaN makes them real checks)
    value = literal(node)
    return None if value is None else bool(value)


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
        # a script's last word (`sys.exit(0)` closing its `__main__` guard) runs after whatever it checked
        self.closing_exits = {id(sub) for node in tree.body if is_main_guard(node) and node.body
                              for sub in ast.walk(node.body[-1])}
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
            for mark in skip_marks_in(decorator, self.bound):
                self.policy.weakenings[("skip-mark", node.name, mark)] += 1
        for statement in node.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else \
                [statement.target] if isinstance(statement, ast.AnnAssign) and statement.value else []
            if any(isinstance(t, ast.Name) and t.id == "__test__" for t in targets):
                self._collection_off(node.name, "__test__", statement.value)
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
            if is_parametrize(decorator):  # its rows' marks are read where pytest.param is called
                self._parametrize_rows(node.name, decorator)
                continue
            for mark in skip_marks_in(decorator, self.bound):
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

    def _collection_off(self, where: str, target: str, value: ast.AST) -> None:
        """`__test__ = False` (on a module or a class, or set with setattr): pytest collects nothing from it."""
        if _truth(value) is not True:
            self.policy.weakenings[("collection-off", where, f"{target} = {ast.unparse(value)[:60]}")] += 1

    def visit_Call(self, node: ast.Call) -> None:
        name = qualified(node.func, self.bound)
        short = (dotted(node.func) or "call").rsplit(".", 1)[-1]
        where = self._where()
        if short in _STRICT_CHECKS:
            self.policy.checks[(where, "strict comparison")] += 1
            if len(node.args) >= 2 and ast.dump(node.args[0]) == ast.dump(node.args[1]):
                self.policy.weakenings[("vacuous-check", where, ast.unparse(node)[:80])] += 1
        skip = is_skip_call(node, self.bound)
        if skip or short in SKIP_METHODS:
            self.policy.weakenings[("skip-call", where, skip or name)] += 1
        self._exits(node, where)
        if canonical(node.func, self.bound) in ("setattr", "builtins.setattr") and len(node.args) == 3 \
                and literal(node.args[1]) == "__test__":
            self._collection_off(where, f"setattr({ast.unparse(node.args[0])}, '__test__')", node.args[2])
        if short in _BOUND_METHODS and len(node.args) >= 2:
            self._bound(where, _BOUND_METHODS[short], node.args[1], node.args[0])
        if short in MARK_ADDERS:
            for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
                for mark in skip_marks_in(argument, self.bound):
                    self.policy.weakenings[("skip-mark", where, f"{short}({mark})")] += 1
                if literal(argument) in SKIP_MARK_NAMES:  # add_marker("xfail") takes a mark's name too
                    self.policy.weakenings[("skip-mark", where, f"{short}({literal(argument)!r})")] += 1
        if name == "pytest.param":
            for keyword in node.keywords:
                if keyword.arg == "marks":
                    for mark in skip_marks_in(keyword.value, self.bound):
                        self.policy.weakenings[("skip-mark", where, f"pytest.param({_row(node, self.bound)}) "
                                                                    f"marks={mark}")] += 1
        self._tolerances(node, name, short, where)
        self.generic_visit(node)

    def _exits(self, node: ast.Call, where: str) -> None:
        """An exit called, or handed to something that calls it later (`atexit.register(os._exit, 0)`)."""
        name = canonical(node.func, self.bound)
        passes_status = name in _STATUS_EXITS and len(node.args) == 1 and isinstance(node.args[0], ast.Call)
        if name in EXITS and not passes_status and id(node) not in self.closing_exits:
            self.policy.weakenings[("process-exit", where, ast.unparse(node)[:80])] += 1
        for argument in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if isinstance(argument, (ast.Name, ast.Attribute)) and canonical(argument, self.bound) in EXITS:
                self.policy.weakenings[("process-exit", where, ast.unparse(node)[:80])] += 1

    def visit_Raise(self, node: ast.Raise) -> None:
        # `raise unittest.SkipTest` / `raise SystemExit` without a call: the call forms are read as calls
        if node.exc is not None and not isinstance(node.exc, ast.Call):
            name = canonical(node.exc, self.bound)
            if name in SKIP_CALLS:
                self.policy.weakenings[("skip-call", self._where(), name)] += 1
            elif name in EXITS and id(node.exc) not in self.closing_exits:
                self.policy.weakenings[("process-exit", self._where(), ast.unparse(node)[:80])] += 1
        self.generic_visit(node)

    def _bound(self, where: str, upper: bool, bound: ast.AST, expression: ast.AST) -> None:
        slot = f"{where}:assert {'upper' if upper else 'lower'} bound"
        self.seen[slot] += 1
        self.policy.bounds[f"{slot}#{self.seen[slot]}"] = Bound(where, upper, bound, ast.unparse(bound),
                                                               ast.unparse(expression))

    def _bounds_of(self, test: ast.AST) -> None:
        """The numeric bounds an assert's comparison holds an expression to, each side of a chain."""
        if not isinstance(test, ast.Compare):
            return
        operands = [test.left, *test.comparators]
        for left, op, right in zip(operands, test.ops, operands[1:]):
            if not isinstance(op, (*_UPPER_OPS, *_LOWER_OPS)):
                continue
            # the number is the bound; with none (yet), the right side, so a bound made computed keeps its place
            if self._numeric(left) and not self._numeric(right):
                self._bound(self._where(), isinstance(op, _LOWER_OPS), left, right)
            else:
                self._bound(self._where(), isinstance(op, _UPPER_OPS), right, left)

    def _numeric(self, node: ast.AST) -> bool:
        if number(node) is not None:
            return True
        return isinstance(node, ast.Name) and number(self.policy.constants.get(node.id)) is not None

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            expression = item.context_expr
            if isinstance(expression, ast.Call) and canonical(expression.func, self.bound) == "contextlib.suppress" \
                    and _has_checks(node.body) and any(self._swallows(argument) for argument in expression.args):
                self.policy.weakenings[("swallowed-assertion", self._where(), ast.unparse(expression)[:80])] += 1
        self.generic_visit(node)

    visit_AsyncWith = visit_With

    def _swallows(self, caught: ast.AST | None) -> bool:
        """Whether an exception class (or tuple of them, or a module name bound to one) catches AssertionError."""
        if caught is None or isinstance(caught, ast.Starred):
            return True
        if isinstance(caught, ast.Name) and caught.id in self.policy.constants:
            return self._swallows(self.policy.constants[caught.id])
        if isinstance(caught, ast.Tuple):
            return any(self._swallows(element) for element in caught.elts)
        return (dotted(caught) or "").rsplit(".", 1)[-1] in _SWALLOWING

    def visit_If(self, node: ast.If) -> None:
        truth = _truth(node.test)
        dead = node.body if truth is False else node.orelse if truth is True else []
        if _has_checks(dead):
            self.policy.weakenings[("unreachable-check", self._where(), f"if {ast.unparse(node.test)[:60]}")] += 1
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        if _truth(node.test) is False and _has_checks(node.body):
            self.policy.weakenings[("unreachable-check", self._where(), f"while {ast.unparse(node.test)[:60]}")] += 1
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
        checks = _has_checks(node.body)
        for handler in node.handlers:
            # only a raise the handler always reaches passes the failure on (`if flaky: raise` drops it otherwise)
            reraises = any(isinstance(statement, ast.Raise) for statement in handler.body)
            if checks and not reraises and self._swallows(handler.type):
                self.policy.weakenings[("swallowed-assertion", self._where(), "")] += 1
        # a return, break or continue in `finally` throws away the exception the checks raised
        if checks and any(isinstance(sub, (ast.Return, ast.Break, ast.Continue))
                          for sub in _own_nodes(ast.Module(body=node.finalbody, type_ignores=[]))):
            self.policy.weakenings[("swallowed-assertion", self._where(), "finally")] += 1
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Assert(self, node: ast.Assert) -> None:
        self.policy.checks[(self._where(), "assert")] += 1
        if _truth(node.test) is True:
            self.policy.weakenings[("vacuous-check", self._where(), f"assert {ast.unparse(node.test)[:72]}")] += 1
        self._bounds_of(node.test)
        self.generic_visit(node)

    def _assigned(self, name: str, value: ast.AST) -> None:
        if (name == "__test__" and self._where() == "<module>" and not self.classes) or name.endswith(".__test__"):
            self._collection_off(self._where() if not name.endswith(".__test__") else name[:-len(".__test__")],
                                 "__test__", value)
        if name in ("collect_ignore", "collect_ignore_glob") and self._where() == "<module>":
            self.policy.weakenings[("collection-off", "<module>", f"{name} = {ast.unparse(value)[:60]}")] += 1
        if name == "pytestmark":
            for mark in skip_marks_in(value, self.bound):
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
            elif isinstance(target, ast.Subscript) and literal(target.slice) == "__test__":  # globals()["__test__"]
                self._collection_off(self._where(), ast.unparse(target), node.value)
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
