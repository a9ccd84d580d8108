"""The test policy of one side of one file, as records: its tolerances, comparison calls, strict
checks, weakenings, tests, parametrize rows and tolerance columns.

Records only: the reader fills them and compare holds head's against base's.
"""
from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field

from kvtasks.sources.tolerances import Callee


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
class Bound:
    """A number a bare assert holds an expression to (`assert err < 1e-5`): an upper bound, or a lower one."""

    function: str
    upper: bool
    node: ast.AST  # the number, or the name of one (resolved against the module's constants)
    text: str
    expression: str  # what is bounded


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
    # numeric bounds of bare asserts and assertLess/assertGreater: "function:assert upper#n" -> Bound
    bounds: dict[str, Bound] = field(default_factory=dict)
