"""The readings of a test file that find the suite made unable to fail without a number moving:
collection turned off, process exits, swallowed assertions, checks that cannot fail or never run,
and the numeric bounds of bare asserts. `read_policy`'s reader takes them as a mixin.

It records into the file's Policy; it must never judge head against base (compare does).
"""
from __future__ import annotations

import ast

from kvtasks.sources.policy import Bound
from kvtasks.sources.skips import EXITS, SKIP_CALLS, canonical
from kvtasks.sources.syntax import dotted, literal, number

STRICT_CHECKS = {"assert_close", "assert_allclose", "assert_array_almost_equal", "assert_almost_equal",
                  "assert_array_equal", "assert_equal", "assert_array_max_ulp", "assertEqual", "assertAlmostEqual"}
# exceptions whose handler, if it does not re-raise, swallows a failed assertion
_SWALLOWING = {None, "Exception", "BaseException", "AssertionError"}
# exits that pass on a status computed by a call (`sys.exit(main())`) are how a script reports, not a bypass
_STATUS_EXITS = {"sys.exit", "exit", "quit", "builtins.exit", "builtins.quit", "SystemExit", "builtins.SystemExit"}
# unittest's bound checks: (the bound's position, whether it is an upper bound)
BOUND_METHODS = {"assertLess": True, "assertLessEqual": True, "assertGreater": False, "assertGreaterEqual": False}
_UPPER_OPS = (ast.Lt, ast.LtE)
_LOWER_OPS = (ast.Gt, ast.GtE)


def _is_check(node: ast.AST) -> bool:
    return isinstance(node, ast.Assert) or (isinstance(node, ast.Call) and (dotted(node.func) or "")
                                            .rsplit(".", 1)[-1] in STRICT_CHECKS)


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


def own_nodes(function: ast.AST):
    """The nodes of a function body, not those of functions or lambdas nested in it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


class BypassReadings:
    """The visits and helpers of the reader that look for a suite made unable to fail."""

    def _collection_off(self, where: str, target: str, value: ast.AST) -> None:
        """`__test__ = False` (on a module or a class, or set with setattr): pytest collects nothing from it."""
        if _truth(value) is not True:
            self.policy.weakenings[("collection-off", where, f"{target} = {ast.unparse(value)[:60]}")] += 1

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

    def visit_Try(self, node: ast.Try) -> None:
        checks = _has_checks(node.body)
        for handler in node.handlers:
            # only a raise the handler always reaches passes the failure on (`if flaky: raise` drops it otherwise)
            reraises = any(isinstance(statement, ast.Raise) for statement in handler.body)
            if checks and not reraises and self._swallows(handler.type):
                self.policy.weakenings[("swallowed-assertion", self._where(), "")] += 1
        # a return, break or continue in `finally` throws away the exception the checks raised
        if checks and any(isinstance(sub, (ast.Return, ast.Break, ast.Continue))
                          for sub in own_nodes(ast.Module(body=node.finalbody, type_ignores=[]))):
            self.policy.weakenings[("swallowed-assertion", self._where(), "finally")] += 1
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Assert(self, node: ast.Assert) -> None:
        self.policy.checks[(self._where(), "assert")] += 1
        if _truth(node.test) is True:
            self.policy.weakenings[("vacuous-check", self._where(), f"assert {ast.unparse(node.test)[:72]}")] += 1
        self._bounds_of(node.test)
        self.generic_visit(node)
