"""compare: head's test policy held against base's, one file at a time: tolerances loosened (against
base, a callee's documented default, or --tol-table), bare asserts' bounds loosened, tolerances no
longer literal, and weakenings without a number moving.

It judges two policies; it must never read source itself (the reader does).
"""
from __future__ import annotations

import ast
import difflib
from collections import Counter
from dataclasses import dataclass, field

from kvtasks.sources.dtypes import canonical_dtype
from kvtasks.sources.policy import Bound, Call, Policy
from kvtasks.sources.skips import WEAKENINGS
from kvtasks.sources.syntax import number
from kvtasks.sources.tolerances import FEWER_IS_LOOSER, Callee, callee_for, looser


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
            if entry not in reference and entries and value > max(entries):
                found.loosened.append({"where": f"{path}::{key}", "base": max(entries), "head": value,
                                       "basis": f"a new entry of {table}, looser than the loosest entry base had"})
            elif entry in reference and value > reference[entry]:
                found.loosened.append({"where": f"{path}::{key}", "base": reference[entry], "head": value,
                                       "basis": f"a new entry of {table}, looser than --tol-table's {entry}"})
    for key, value in base.tolerances.items():  # a named tolerance base spelt as a number, computed on head
        if key not in call_keys and key in head.constants and key not in head.tolerances:
            found.uncomparable.append(f"{path}::{key} = {ast.unparse(head.constants[key])[:80]} is not a literal "
                                      f"on head (base: {value:g})")
    head_calls = _by_function(head.calls)
    for function, calls in _by_function(base.calls).items():
        for old, new in _pairs(calls, head_calls.get(function, [])):
            _compare_call(old, new, base, head, path, found)
    _compare_tables(base, head, path, reference, found)
    _compare_weakenings(base, head, path, found)
    _compare_bounds(base, head, path, found)
    return found


def _bound_pairs(base: Policy, head: Policy) -> list[tuple[str, Bound, Bound]]:
    """(head's key, base's bound, head's) for the same assert: aligned by what they bound in each function,
    so an assert added before another does not shift which bound it is compared with."""
    pairs = []
    for function in {bound.function for bound in head.bounds.values()}:
        old = [b for b in base.bounds.values() if b.function == function]
        new = [(k, b) for k, b in head.bounds.items() if b.function == function]
        matcher = difflib.SequenceMatcher(a=[(b.upper, b.expression) for b in old],
                                          b=[(b.upper, b.expression) for _, b in new], autojunk=False)
        for tag, a0, a1, b0, b1 in matcher.get_opcodes():
            if tag == "equal" or (tag == "replace" and a1 - a0 == b1 - b0):
                pairs += [(key, before, bound) for before, (key, bound) in zip(old[a0:a1], new[b0:b1])
                          if before.upper == bound.upper]
    return sorted(pairs, key=lambda pair: pair[0])


def _compare_bounds(base: Policy, head: Policy, path: str, found: Comparison) -> None:
    """A bare assert's bound (`assert err < 1e-5`) is a tolerance too: held at the value base gave it."""
    for key, before, bound in _bound_pairs(base, head):
        if bound.text == before.text and bound.text in head.tolerances:
            continue  # the same tolerance name on both sides: a change of its value is reported where it is assigned
        earlier, value = resolve(before.node, base), resolve(bound.node, head)
        where = f"{path}::{key}"
        if earlier is None:
            continue
        if value is None:
            found.uncomparable.append(f"{where}: the bound of {bound.expression} is {bound.text} on head (base: "
                                      f"{before.text}), not a literal, so it cannot be compared")
        elif (value > earlier) if bound.upper else (value < earlier):
            found.loosened.append({"where": where, "base": earlier, "head": value,
                                   "basis": f"the bound an assert holds {bound.expression} to"})


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
        dtype = _row_dtype(row)
        column = [(v, _row_dtype(r)) for t, a, r, v in base.table_tolerances.values() if (t, a) == (table, argname)]
        # a row of a dtype base had is held to that dtype's rows; a new dtype, to --tol-table's entry
        # for it where there is one (a bf16 row needs more than f32's), else to the whole column
        same = [v for v, d in column if dtype is not None and d == dtype]
        if not same and argname in ("atol", "tol") and dtype in reference:
            if value > reference[dtype]:
                found.loosened.append({"where": where, "base": reference[dtype], "head": value,
                                       "basis": f"a new row of {table}, looser than --tol-table's {dtype}"})
            continue
        values = same or [v for v, _ in column]
        loosest = (min(values) if argname in FEWER_IS_LOOSER else max(values)) if values else None
        if loosest is not None and looser(argname, value, loosest):
            found.loosened.append({"where": where, "base": loosest, "head": value,
                                   "basis": f"a new row of {table}, looser than the loosest {argname} base had"
                                            + (f" for {dtype}" if same else "")})


def _row_dtype(row: str) -> str | None:
    """The dtype a parametrize row names (its first cell that is one, as written: quoted or not)."""
    return next((d for cell in row.split(", ") if (d := canonical_dtype(cell.strip("'\""))) is not None), None)


def _compare_call(old: Call, new: Call, base: Policy, head: Policy, path: str, found: Comparison) -> None:
    callee = callee_for(new.callee) or head.helpers.get(new.callee) or base.helpers.get(new.callee)
    old_callee = callee_for(old.callee) or base.helpers.get(old.callee)
    for parameter in old.tolerances.keys() - new.tolerances.keys():
        before = old.tolerances[parameter]
        earlier = before.value if before.value is not None else resolve(_expression(before.text), base)
        helper = head.helpers.get(new.callee) or base.helpers.get(new.callee)
        if helper is not None and parameter in helper.defaults and earlier is not None:
            # a comparison moved into a repository's helper: the helper's default is what applies now
            default, basis = _default(helper, parameter, new.dtypes)
            if looser(parameter, default, earlier):
                found.loosened.append({"where": f"{path}::{before.key}", "base": earlier, "head": default,
                                       "basis": f"no longer given; the default of {basis}"})
            continue
        found.weakened.append(f"{path}::{before.key}: tolerance no longer given (a default or nothing applies)")
    if callee is not None and old_callee is not None and old.callee != new.callee:
        # neither call gives it: each callee's default applies (a helper renamed, or swapped for another;
        # the same helper's default moving is read where it is defined, in a file the PR changed)
        for parameter in (callee.defaults.keys() & old_callee.defaults.keys()) - old.tolerances.keys() - \
                new.tolerances.keys():
            (earlier, _), (default, basis) = (_default(old_callee, parameter, old.dtypes),
                                              _default(callee, parameter, new.dtypes))
            if looser(parameter, default, earlier):
                found.loosened.append({"where": f"{path}::{new.function}:{new.callee}.{parameter}", "base": earlier,
                                       "head": default, "basis": f"the default of {basis}, where base's call had "
                                                                 f"the default of {old_callee.source}"})
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
    # an assert and a comparison helper's call are each one check, so a swap of one for the other keeps
    # the count; a strict comparison (shapes and dtypes too) is counted apart: an allclose is weaker
    base_checks, head_checks = Counter(), Counter()
    for checks, policy in ((base_checks, base), (head_checks, head)):
        for (function, kind), count in policy.checks.items():
            checks[(function, "check" if kind in ("assert", "comparison call") else kind)] += count
    for (function, kind), count in base_checks.items():
        if function in head_functions and head_checks[(function, kind)] < count:
            found.weakened.append(f"{path}::{function}: {count} {kind}s on base, {head_checks[(function, kind)]} "
                                  "on head")
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
