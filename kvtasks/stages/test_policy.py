"""test_policy: can this suite still fail? Compared head against base before any test runs.

Tolerances are read from the AST: literals given to atol/rtol keywords, names containing tol/TOL
assigned a number or a dict of numbers (keyed by dtype), and atol/rtol given by name, recorded
as such so an empty literal list never reads as "no tolerance". Each tolerance is keyed by where
it lives (function, call, keyword, occurrence; or name and dict key), so head is compared with
the same tolerance on base. Commented-out shape rows are compared as multisets.
"""
from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from kvtasks.stages import Context, StageResult, result

NAME = "test_policy"
_TOLERANCE_KEYWORDS = {"atol", "rtol"}
_STRICT_CHECKS = {"assert_close", "assert_allclose", "assert_array_almost_equal", "assert_almost_equal",
                  "assert_array_equal", "assert_equal", "assert_array_max_ulp", "assertEqual", "assertAlmostEqual"}
_KERNEL_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".c", ".hip", ".cl")
_TOLERANCE_TEXT = re.compile(r"\b(atol|rtol|\w*tol\w*)\s*[=:]\s*([-+]?\d[\d.]*(?:[eE][-+]?\d+)?)", re.IGNORECASE)


@dataclass
class Policy:
    """What one side of one file says about how strictly it checks."""

    tolerances: dict[str, float] = field(default_factory=dict)
    by_name: list[str] = field(default_factory=list)
    checks: Counter = field(default_factory=Counter)  # (function, "strict comparison" | "assert") -> count
    commented_rows: Counter = field(default_factory=Counter)
    parsed: bool = True


def _number(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _number(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    return None


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "call"


def _key_text(node: ast.AST) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)


class _Reader(ast.NodeVisitor):
    def __init__(self, policy: Policy):
        self.policy = policy
        self.scope = ["<module>"]
        self.seen: Counter = Counter()

    def _function(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Call(self, node: ast.Call) -> None:
        callee, where = _callee(node), self.scope[-1]
        if callee in _STRICT_CHECKS:
            self.policy.checks[(where, "strict comparison")] += 1
        for keyword in node.keywords:
            if keyword.arg in _TOLERANCE_KEYWORDS:
                slot = f"{where}:{callee}.{keyword.arg}"
                self.seen[slot] += 1
                value = _number(keyword.value)
                if value is None:
                    self.policy.by_name.append(f"{slot}={ast.unparse(keyword.value)}")
                else:
                    self.policy.tolerances[f"{slot}#{self.seen[slot]}"] = value
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self.policy.checks[(self.scope[-1], "assert")] += 1
        self.generic_visit(node)

    def _assigned(self, name: str, value: ast.AST) -> None:
        if "tol" not in name.lower():
            return
        number = _number(value)
        if number is not None:
            self.policy.tolerances[name] = number
        elif isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                number = _number(item)
                if key is not None and number is not None:
                    self.policy.tolerances[f"{name}[{_key_text(key)}]"] = number

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, (ast.Name, ast.Attribute)):
                self._assigned(ast.unparse(target), node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(ast.unparse(node.target), node.value)
        self.generic_visit(node)


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
    allowed = all(isinstance(e, (ast.Constant, ast.Attribute, ast.Name)) or _number(e) is not None for e in elements)
    return ", ".join(ast.unparse(e) for e in elements) if ints and allowed else None


def read_policy(source: str) -> Policy:
    policy = Policy()
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            row = _shape_row(stripped.lstrip("#"))
            if row:
                policy.commented_rows[row] += 1
    try:
        _Reader(policy).visit(ast.parse(source))
    except SyntaxError:
        policy.parsed = False
        for position, match in enumerate(_TOLERANCE_TEXT.finditer(source), 1):
            try:
                policy.tolerances[f"text:{match.group(1)}#{position}"] = float(match.group(2))
            except ValueError:
                continue
    return policy


def parse_tol_table(text: str) -> dict[str, float]:
    table = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        dtype, _, value = entry.partition("=")
        try:
            table[dtype.strip()] = float(value)
        except ValueError:
            continue
    return table


def _is_test_path(path: str) -> bool:
    pure = PurePosixPath(path)
    return (pure.suffix == ".py" and (pure.name.startswith("test_") or pure.stem.endswith("_test"))) or \
        any(part in ("tests", "test", "op_tests") for part in pure.parts[:-1])


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if ctx.head_view is None:
        return result(NAME, "skip", "no patch: head and base tests cannot be compared")
    changes = ctx.head_view.changes
    files = list(dict.fromkeys([request.target_path, *(p for p in changes if _is_test_path(p) and p.endswith(".py"))]))
    kernel_changed = any(p.endswith(_KERNEL_SUFFIXES) and not _is_test_path(p) for p in changes)
    reference = parse_tol_table(request.tol_table)
    ceiling = max(reference.values()) if reference else None

    fields = {"files": files, "kernel_files_changed": kernel_changed, "reference_tolerances": reference,
              "tolerances_base": {}, "tolerances_head": {}, "tolerances_base_by_name": [],
              "tolerances_head_by_name": [], "loosened": [], "exceeds_reference": [],
              "commented_out_shape_rows_base": 0, "commented_out_shape_rows": 0,
              "commented_out_shape_rows_added": 0, "newly_commented_rows": [], "weakened": []}
    unparsed = []
    for path in files:
        base = read_policy(ctx.worktree.read_base(path) or "")
        head_text = ctx.head_text(path)
        head = read_policy(head_text or "")
        if not (base.parsed and head.parsed):
            unparsed.append(path)
        fields["tolerances_base"].update({f"{path}::{k}": v for k, v in base.tolerances.items()})
        fields["tolerances_head"].update({f"{path}::{k}": v for k, v in head.tolerances.items()})
        fields["tolerances_base_by_name"] += [f"{path}::{k}" for k in base.by_name]
        fields["tolerances_head_by_name"] += [f"{path}::{k}" for k in head.by_name]
        for key, value in head.tolerances.items():
            if key in base.tolerances and value > base.tolerances[key]:
                fields["loosened"].append({"where": f"{path}::{key}", "base": base.tolerances[key], "head": value})
        if head_text is not None:
            head_functions = {function for function, _ in head.checks} | {k.split(":")[0] for k in head.tolerances}
            for key in sorted(base.tolerances.keys() - head.tolerances.keys()):
                if key.split(":")[0] in head_functions:
                    fields["weakened"].append(f"{path}::{key}: tolerance no longer given (a default or nothing applies)")
            for (function, kind), count in base.checks.items():
                if function in head_functions and head.checks.get((function, kind), 0) < count:
                    fields["weakened"].append(f"{path}::{function}: {count} {kind}s on base, "
                                              f"{head.checks.get((function, kind), 0)} on head")
        newly = head.commented_rows - base.commented_rows
        fields["newly_commented_rows"] += [f"{path}: ({row})" for row in newly.elements()]
        fields["commented_out_shape_rows_base"] += sum(base.commented_rows.values())
        fields["commented_out_shape_rows"] += sum(head.commented_rows.values())
    fields["commented_out_shape_rows_added"] = len(fields["newly_commented_rows"])
    if ceiling is not None:
        fields["exceeds_reference"] = sorted({v for v in fields["tolerances_head"].values() if v > ceiling})

    loosened = fields["loosened"]
    note = f"{len(files)} files compared; {len(loosened)} tolerances loosened, " \
           f"{fields['commented_out_shape_rows_added']} shape rows newly commented out"
    if unparsed:
        note += f"; read as text (did not parse): {', '.join(unparsed)}"
    stage = result(NAME, "fail" if loosened else "pass", note, **fields)
    widened = ", ".join(f"{item['where']} {item['base']:g} -> {item['head']:g}" for item in loosened)
    if loosened and kernel_changed:
        stage.finding("should-fix", f"tolerance widened alongside a kernel change; needs numerical justification: "
                                    f"{widened}")
    elif loosened:
        stage.finding("blocker", f"test-only change widens tolerances, so the suite can no longer fail: {widened}")
    if fields["exceeds_reference"]:
        stage.finding("should-fix", f"the suite accepts error above the loosest --tol-table reference ({ceiling:g}): "
                                    f"{', '.join(f'{v:g}' for v in fields['exceeds_reference'])}")
    if fields["newly_commented_rows"]:
        stage.finding("should-fix", f"{fields['commented_out_shape_rows_added']} more shape rows commented out: "
                                    f"{'; '.join(fields['newly_commented_rows'][:5])}")
    for weakening in fields["weakened"]:
        stage.finding("should-fix", f"comparison weakened without a number moving: {weakening}")
    return stage
