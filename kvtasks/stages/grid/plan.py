"""The grid plan: the cells (the caller's --grid, or a default grid generated from --shape-vars for
the seed's three classes), the axes, whether they add coverage beyond the target's own defaults,
and the plan as a stage reads it back (bf16 cells set aside under the CPU tier).

Reads requests and earlier results only; it must never launch the target nor read source.
"""
from __future__ import annotations

import hashlib
import itertools
import random
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


def parse_axis(spec: str) -> Axis | None:
    name, _, rest = spec.partition("=")
    flag, _, values = rest.partition(":")
    cells = [value.strip() for value in values.split(";") if value.strip()]
    if not name.strip() or not flag.strip().startswith("-") or not cells:
        return None
    return Axis(name=name.strip(), flag=flag.strip(), values=cells)


def drawn_dimensions(seed: str) -> tuple[int, int, int]:
    """(odd M, odd N, large M) for one seed: odd, so never a multiple of any power-of-two tile, and
    drawn, so a kernel cannot single out the shapes it will be judged on (the seed is secret to the
    workspace, see grid_seed). The large M keeps M*4096 past 2^31."""
    draw = random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big"))
    large = _LARGE_ELEMENTS // 4096 + 1
    return draw.choice(_ODD_M), draw.randrange(4097, 4609, 2), large + draw.randrange(0, 1024)


def grid_seed(secret: str, base_oid: str, target: str) -> str:
    """One seed per workspace secret, base and target: every PR against the same base shares its
    base's grid runs, and nobody without the secret knows the cells before the report says them."""
    return f"{secret}\0{base_oid}\0{target}"


def default_grid(shape_vars: list[str], defaults: list[str] | None, seed: str = "") -> tuple[list[list[str]], str]:
    """Cells for the seed's three classes when shape vars are named but no grid is: a non-toy
    shape, an odd N that is not a multiple of the tile, and an M large enough that M*N passes 2^31;
    the odd and the large dimensions are drawn from `seed`."""
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
    odd_m, odd_n, large_m = drawn_dimensions(seed)
    classes = {"non-toy": (256, 4096), "odd N, not a multiple of the tile": (odd_m, odd_n),
               "large M (32-bit offsets wrap)": (large_m, 4096)}
    rows = []
    for m, n in classes.values():
        rows.append([str(m) if role == "M" else str(n) if role == "N" else role[1] for role in roles])
    return rows, f"generated for {', '.join(classes)}; the odd and large dimensions drawn for this base " \
                 "from the workspace's grid secret"


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
        limited = [row for row in plan.rows if any(is_bf16(cell) for cell in row)]
        plan.rows = [row for row in plan.rows if row not in limited]
        plan.interpreter_skipped = [row_text(row) for row in limited]
    return plan
