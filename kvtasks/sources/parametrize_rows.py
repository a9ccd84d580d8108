"""A parametrize table as `read_policy` records it: each row as text (a row whose tolerances moved
is the same row, so it is spelt without them), and the table's tolerance columns (atol, rtol, tol,
eps, ...), each entry keyed by its row's other cells so head's row is compared with base's.
`read_policy`'s reader takes these readings as a mixin.

It records into the file's Policy; it must never judge head against base (compare does).
"""
from __future__ import annotations

import ast
from collections import Counter

from kvtasks.sources.parametrize import parametrize_arguments
from kvtasks.sources.policy import Policy
from kvtasks.sources.syntax import number, qualified
from kvtasks.sources.tolerances import is_tolerance_argname


def row_spelling(node: ast.AST, bound: dict[str, str]) -> str:
    """A parametrize row as text, the same spelling a commented-out row gets."""
    if isinstance(node, ast.Call) and qualified(node.func, bound) == "pytest.param":
        elements = node.args
    elif isinstance(node, (ast.Tuple, ast.List)):
        elements = node.elts
    else:
        elements = [node]
    return ", ".join(ast.unparse(element) for element in elements)


class ParametrizeRowReadings:
    """The readings of parametrize marks; the reader that mixes them in gives `policy` and `bound`."""

    policy: Policy
    bound: dict[str, str]

    def _parametrize_rows(self, function: str, mark: ast.Call) -> None:
        names, values = parametrize_arguments(mark, self.policy.constants.get)
        if names is None or not isinstance(values, (ast.List, ast.Tuple)):
            return
        key = f"{function}[{','.join(names)}]"
        columns = [index for index, name in enumerate(names) if is_tolerance_argname(name)]
        # a row whose tolerances moved is the same row: _tolerance_columns compares its numbers
        self.policy.rows.setdefault(key, Counter()).update(
            self._cells_text(element, names, columns) or row_spelling(element, self.bound) for element in values.elts)
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
