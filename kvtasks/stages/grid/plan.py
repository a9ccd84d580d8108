"""The grid plan: the cells (the caller's --grid, or a default grid generated from --shape-vars for
the seed's three classes), the axes, whether they add coverage beyond the target's own defaults,
and the plan as a stage reads it back (bf16 cells set aside under the CPU tier).

Reads requests and earlier results only; it must never launch the target nor read source.
"""
from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from kvtasks.request import grid_rows
from kvtasks.records import Axis, Independence, Plan
from kvtasks.sources import row_text
from kvtasks.stages import Context, cpu_tier
from kvtasks.harness.in_target.cpu_state import is_bf16

NAME = "correctness_grid"
CHANNEL = "grid_channel"
_LARGE_ELEMENTS = 2**31  # past this, 32-bit element offsets wrap
_M_NAMES = {"m", "batch", "b", "rows", "num_rows", "seq", "seq_len", "seqlen", "tokens", "num_tokens", "n_rows"}
_N_NAMES = {"n", "k", "cols", "num_cols", "hidden", "hidden_size", "dim", "d", "head_dim", "width", "n_cols"}
_DTYPE_NAMES = {"dtype", "dtype_str", "dt", "type", "precision"}
# the odd Ms a grid draws from: never a mask or a bound a kernel writes anyway (2^k - 1, 2^k + 1), so
# a kernel that names one is singling out the grid's shape
_ODD_M = tuple(m for m in range(33, 257, 2) if (m + 1) & m and (m - 1) & (m - 2))


def parse_grid(text: str) -> list[list[str]]:
    return grid_rows(text)


def stacked_marks(group: list[tuple[list[str], list[str] | None]], wanted: list[str]
                  ) -> tuple[list[str], list[str] | None] | None:
    """Stacked parametrize marks of one test that each bind only grid argnames and together bind all
    of them: (each mark's names, the defaults they multiply out to in the grid's order, None when
    one is computed); None when they do not cover the grid exactly."""
    inside = [(names, rows) for names, rows in group if set(names) < set(wanted)]
    covered = [name for names, _ in inside for name in names]
    if len(inside) < 2 or sorted(covered) != sorted(wanted):
        return None
    bound = [",".join(names) for names, _ in inside]
    if any(rows is None for _, rows in inside):
        return bound, None
    defaults = []
    for combination in itertools.product(*(rows for _, rows in inside)):
        cells = dict(zip(covered, (cell for row in combination for cell in grid_rows(row)[0])))
        defaults.append(row_text(cells[name] for name in wanted))
    return bound, defaults


def filled_mark(marks: list[tuple[list[str], list[str] | None]], wanted: list[str]
                ) -> tuple[list[str], list[str], dict[str, str]] | None:
    """A parametrize mark binding the grid's argnames and more (a dtype): (its names, its rows' cells of
    the grid's argnames, each other name's cell in its first row, which every grid row keeps); None when
    no such mark has literal rows."""
    for names, rows in marks:
        if not set(wanted) < set(names) or not rows:
            continue
        table = [cells for row in rows if len(cells := grid_rows(row)[0]) == len(names)]
        if len(table) != len(rows):
            continue
        defaults = [row_text(cells[names.index(name)] for name in wanted) for cells in table]
        return names, defaults, {name: table[0][index] for index, name in enumerate(names) if name not in wanted}
    return None


def parse_axis(spec: str) -> Axis | None:
    name, _, rest = spec.partition("=")
    flag, _, values = rest.partition(":")
    cells = [value.strip() for value in values.split(";") if value.strip()]
    if not name.strip() or not flag.strip().startswith("-") or not cells:
        return None
    return Axis(name=name.strip(), flag=flag.strip(), values=cells)


@dataclass(frozen=True)
class Drawn:
    """The default grid's dimensions for one seed: every one odd (never a multiple of a power-of-two
    tile) and drawn, so a kernel cannot single out the shapes it will be judged on (the seed is
    secret to the workspace, see grid_seed)."""

    m: int  # the leading dimension of the first three cells, which change only N between calls
    small_n: int  # below 64: a fast path for small sizes
    mid_n: int  # between 65 and 4095
    past_power_n: int  # just past a power of two (64 to 4096): one element into the next tile
    large_m: int  # large M * 4096 passes 2^31, so 32-bit element offsets wrap


def drawn_dimensions(seed: str) -> Drawn:
    draw = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    large = _LARGE_ELEMENTS // 4096 + 1
    return Drawn(m=draw.choice(_ODD_M), small_n=draw.randrange(3, 64, 2), mid_n=draw.randrange(65, 4096, 2),
                 past_power_n=2 ** draw.randrange(6, 13) + draw.randrange(1, 16, 2),
                 large_m=large + 2 * draw.randrange(0, 512))


def grid_seed(secret: str, base_oid: str, target: str) -> str:
    """One seed per workspace secret, base and target: every PR against the same base shares its
    base's grid runs, and nobody without the secret knows the cells before the report says them."""
    return f"{secret}\0{base_oid}\0{target}"


def default_grid(shape_vars: list[str], defaults: list[str] | None, seed: str = "") -> tuple[list[list[str]], str]:
    """Cells across scales when shape vars are named but no grid is: an N below 64, an odd N between
    65 and 4095, an N just past a power of two (all three with one odd M), and an odd M large enough
    that M*N passes 2^31; every dimension drawn from `seed`."""
    roles = []
    default_cells = [row.split(",") for row in defaults or [] if len(row.split(",")) == len(shape_vars)]
    for position, name in enumerate(shape_vars):
        lowered = name.lower()
        if lowered in _M_NAMES:
            roles.append("M")
        elif lowered in _N_NAMES:
            roles.append("N")
        elif lowered in _DTYPE_NAMES:
            seen = [cells[position] for cells in default_cells]
            roles.append(("dtype", seen[0] if seen else "f32"))
        else:
            return [], f"cannot generate a default grid: no role known for shape var {name!r}"
    if "M" not in roles or "N" not in roles:
        return [], "cannot generate a default grid: the shape vars name no M-like and N-like dimension"
    drawn = drawn_dimensions(seed)
    # one process runs the cells in this order: the first three keep M and change N, so a plan
    # cached per M alone (wrong once N changes) meets a second N
    classes = {"a size below 64": (drawn.m, drawn.small_n), "an odd size between 65 and 4095": (drawn.m, drawn.mid_n),
               "a size just past a power of two": (drawn.m, drawn.past_power_n),
               "a large odd M (32-bit offsets wrap)": (drawn.large_m, 4096)}
    rows = []
    for m, n in classes.values():
        rows.append([str(m) if role == "M" else str(n) if role == "N" else role[1] for role in roles])
    return rows, f"generated for {', '.join(classes)}; every dimension drawn for this base from the workspace's " \
                 "grid secret"


class GridSelection(BaseModel):
    """The channel step's payload: the grid's fields in the report's test_selection (the stage
    updates the independence and the axis fields after its runtime probes)."""

    grid_channel: Literal["", "env", "cli", "pytest"]
    grid_channel_basis: str  # the source evidence of the chosen channel
    grid_channel_reason: str  # every channel tried and why it was refused
    grid_cells: list[str]
    grid_cells_basis: str  # declared-by-caller, or how the default grid was generated (or why it was not)
    grid_independence: Independence
    grid_independence_reason: str
    axes: list[Axis]
    axis_state: Literal["none", "malformed-spec", "unusable", "hook-not-found", "declared", "hook-not-consumed",
                        "proven"]
    axis_state_reason: str


def independence_of(cells: list[str], defaults: list[str] | None, chosen: str) -> tuple[Independence, str]:
    if not cells:
        return "unknown", "no grid cells"
    if defaults is None:
        kind = "an environment variable exposes no literal default" if chosen == "env" else \
            "the target's default is not a literal"
        return "unknown", kind
    squeezed = {cell.replace(" ", "") for cell in defaults}
    novel = [cell for cell in cells if cell.replace(" ", "") not in squeezed]
    if novel:
        return "adds-coverage", f"outside the target's defaults: {', '.join(novel)}"
    return "duplicates-target-defaults", "every cell is already one of the target's own defaults"


def plan_of(ctx: Context) -> Plan | None:
    plan = ctx.facts.grid_plan
    if plan is None:
        return None
    plan = plan.model_copy(deep=True)
    if cpu_tier.active(ctx):
        # the interpreter's bf16 arithmetic is wrong: such a cell would prove nothing either way
        filled_bf16 = any(is_bf16(cell) for cell in plan.fill.values())  # a wider mark's kept cell rides every row
        limited = [row for row in plan.rows if filled_bf16 or any(is_bf16(cell) for cell in row)]
        plan.rows = [row for row in plan.rows if row not in limited]
        plan.interpreter_skipped = [row_text(row) for row in limited]
    return plan
