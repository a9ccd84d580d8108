"""read_policy: the test policy of a file from its AST (a text fallback when it does not parse):
tolerances (parametrize tolerance columns among them), strict checks, commented-out shape rows, and
the constructs that weaken a suite without moving a number (skips, xfails, skip marks, marks added
at run time, discarded comparisons, early returns, tests and rows); what makes a suite unable to
fail otherwise (collection off, exits, swallowed or vacuous checks, bare-assert bounds) is read by
`bypasses.BypassReadings`, and parametrize tables by `parametrize_rows.ParametrizeRowReadings`,
which it mixes in; commented-out rows, and a file that does not parse, are read as text
(`text_readings`).

It records; it must never judge head against base (compare does).
"""
from __future__ import annotations

import ast
from collections import Counter

from kvtasks.sources.bypasses import BOUND_METHODS, STRICT_CHECKS, BypassReadings, own_nodes
from kvtasks.sources.dtypes import canonical_dtype
from kvtasks.sources.parametrize import is_parametrize
from kvtasks.sources.parametrize_rows import ParametrizeRowReadings, row_spelling
from kvtasks.sources.policy import Call, Policy, Tolerance
from kvtasks.sources.imports import aliases
from kvtasks.sources.skips import (MARK_ADDERS, OUTCOME_HOOKS, SKIP_MARK_NAMES, SKIP_METHODS, canonical, is_skip_call,
                                   skip_marks_in)
from kvtasks.sources.structure import is_main_guard
from kvtasks.sources.syntax import dotted, literal, module_value, number, parse, qualified
from kvtasks.sources.text_readings import read_commented_rows, read_tolerances_as_text
from kvtasks.sources.tolerances import TOLERANCE_PARAMETERS, Callee, callee_for

# recorded for any callee (a repository's own helpers take these too)
_ANY_CALLEE_KEYWORDS = {"atol", "rtol"}
# calls whose only effect is their result: as a bare statement, nothing is checked
_COMPARISONS = {"allclose", "isclose", "array_equal", "array_equiv", "equal", "approx", "isfinite", "all"}


def _checks_by_its_call(call: ast.Call) -> bool:
    """A call made for its check, a repository's comparison helper (`assert_verbose_allclose(a, b,
    atol=atol)`, `checkAllclose(...)`): a check as an assert or a strict comparison is, so swapping one
    for another is no weakening (strict comparisons are counted as such)."""
    short = (dotted(call.func) or "").rsplit(".", 1)[-1]
    if short in STRICT_CHECKS or short in _COMPARISONS:
        return False
    return any(word in short.lower() for word in ("assert", "check")) or \
        any(keyword.arg in _ANY_CALLEE_KEYWORDS for keyword in call.keywords)


def _mentioned_dtypes(node: ast.AST) -> set[str]:
    found = set()
    for sub in ast.walk(node):
        text = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else \
            dotted(sub) if isinstance(sub, ast.Attribute) else None
        dtype = canonical_dtype(text) if text else None
        if dtype:
            found.add(dtype)
    return found


class _Reader(BypassReadings, ParametrizeRowReadings, ast.NodeVisitor):
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
            strict = any(isinstance(sub, ast.Call) and (dotted(sub.func) or "").rsplit(".", 1)[-1] in STRICT_CHECKS
                         for sub in ast.walk(node))
            self.policy.helpers[node.name] = Callee(tuple(positional), given, f"{node.name}'s own signature", strict)
            # the defaults are tolerances in their own right: a PR may loosen the helper instead of the call
            self.policy.tolerances.update({f"{node.name}:default.{name}": value for name, value in given.items()})

    def _early_returns(self, node) -> None:
        """Returns that come before the function's last assertion: what follows them may never run."""
        own = list(own_nodes(node))
        checks = [sub.lineno for sub in own if isinstance(sub, ast.Assert) or
                  (isinstance(sub, ast.Call) and (dotted(sub.func) or "").rsplit(".", 1)[-1] in STRICT_CHECKS)]
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
        elif isinstance(value, ast.Call) and _checks_by_its_call(value):
            self.policy.checks[(self._where(), "comparison call")] += 1
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = qualified(node.func, self.bound)
        short = (dotted(node.func) or "call").rsplit(".", 1)[-1]
        where = self._where()
        helper = self.policy.helpers.get(name)
        if short in STRICT_CHECKS or (helper is not None and helper.strict):
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
        if short in BOUND_METHODS and len(node.args) >= 2:
            self._bound(where, BOUND_METHODS[short], node.args[1], node.args[0])
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
                        self.policy.weakenings[("skip-mark", where, f"pytest.param({row_spelling(node, self.bound)}) "
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


def _key_text(node: ast.AST) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)


def read_policy(source: str, helpers: dict[str, Callee] | None = None) -> Policy:
    """The policy of one file; `helpers` are comparison helpers it imports (by qualified name), whose
    tolerance defaults its calls take as their own file's helpers' are taken."""
    policy = Policy(helpers=dict(helpers or {}))
    read_commented_rows(source, policy)
    tree = parse(source)
    if tree is not None:
        _Reader(policy, tree).visit(tree)
    else:
        read_tolerances_as_text(source, policy)
    return policy
