"""kvtasks' own comparison of what a route produced, never the test's: per dtype by the tolerance
table (--tol-table, else DEFAULT_TABLE), integers and booleans exactly, NaN and Inf at the same
places; a route's measured nondeterminism widens it by at most NOISE_MULTIPLE times the table."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy

DEFAULT_TABLE = {"f64": 1e-7, "f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}
SHORT = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}
NOISE_MULTIPLE = 4.0
# the plain array types: any other type an output has is the route's own (a subclass of one of these)
PLAIN = ("numpy.ndarray", "torch.Tensor", "torch.nn.parameter.Parameter")


@dataclass(frozen=True)
class Produced:
    """What one call produced (in the run, or replayed): its folder and its record."""
    folder: Path
    record: dict

    @classmethod
    def read(cls, folder: Path, name: str) -> "Produced | None":
        path = folder / name
        return cls(folder, json.loads(path.read_text())) if path.is_file() else None

    @property
    def raised(self) -> str | None:
        return self.record.get("raised")

    def leaves(self) -> dict[str, dict]:
        """Each value it produced, by where: its return (items of a tuple, list or dict) and its arguments after the call."""
        found: dict[str, dict] = {}

        def walk(encoded: dict, where: str) -> None:
            if encoded["kind"] in ("list", "tuple"):
                for index, item in enumerate(encoded["items"]):
                    walk(item, f"{where}[{index}]")
            elif encoded["kind"] == "dict":
                for key, item in encoded["items"].items():
                    walk(item, f"{where}[{key!r}]")
            else:
                found[where] = encoded

        if "returned" in self.record:
            walk(self.record["returned"], "return")
        for index, item in enumerate(self.record.get("args_after", [])):
            walk(item, f"argument {index}")
        for key, item in self.record.get("kwargs_after", {}).items():
            walk(item, f"argument {key}")
        return found

    def types(self) -> set[str]:
        """The types of the arrays it returned (an argument's type is the caller's)."""
        return {leaf["type"] for where, leaf in self.leaves().items() if where.startswith("return") and "type" in leaf}


def values(folder: Path, encoded: dict) -> numpy.ndarray:
    """An encoded array's values as numpy holds them (bfloat16 widened to float32 exactly)."""
    # numpy is imported where a comparison needs it: at the top it was a tenth of every validator's
    # start, and most validations compare no replay
    import numpy
    data = numpy.load(folder / encoded["file"], allow_pickle=False)
    if encoded.get("stored_as") and encoded["dtype"] == "bfloat16":
        return (data.astype(numpy.uint16).astype(numpy.uint32) << 16).view(numpy.float32)
    return data


def tolerance(dtype: str, table: dict[str, float]) -> float | None:
    """The tolerance for a floating dtype (None: compared exactly)."""
    short = SHORT.get(dtype)
    if short is None:
        return None
    return table.get(short, DEFAULT_TABLE.get(short))


def difference(one: Produced, other: Produced, table: dict[str, float], widen: float = 0.0
               ) -> tuple[str | None, float]:
    """(the first difference beyond tolerance, in words, or None; the largest difference relative to
    the tolerance seen) between two calls' products. Each float tolerance is widened by `widen`
    times itself (a route's measured nondeterminism, which the caller caps)."""
    if one.raised or other.raised:
        if one.raised == other.raised:
            return None, 0.0
        return f"raised {one.raised or 'nothing'} where the other raised {other.raised or 'nothing'}", float("inf")
    mine, theirs = one.leaves(), other.leaves()
    largest = 0.0
    for where in sorted(set(mine) | set(theirs)):
        left, right = mine.get(where), theirs.get(where)
        if left is None or right is None or left["kind"] != right["kind"] or left.get("dtype") != right.get("dtype"):
            return f"{where}: {_kind(left)} against {_kind(right)}", float("inf")
        if "file" not in left:
            said, relative = _plain(where, left, right, table, widen)
            largest = max(largest, relative)
            if said:
                return said, largest
            continue
        said, relative = _arrays(where, values(one.folder, left), values(other.folder, right),
                                 tolerance(left["dtype"], table), widen)
        largest = max(largest, relative)
        if said:
            return said, largest
    return None, largest


def _plain(where: str, left: dict, right: dict, table: dict[str, float], widen: float) -> tuple[str | None, float]:
    """Two plain values: numbers as a one-element array of their dtype (a Python float as float32's
    tolerance: what a kernel's scalar result is computed in), anything else exactly."""
    one, other = left.get("value"), right.get("value")

    def floating(encoded: dict) -> bool:  # "float" holds NaN and the infinities, spelt as strings
        value = encoded.get("value")
        return encoded["kind"] == "float" or isinstance(value, float) or (
            encoded["kind"] == "npscalar" and "float" in encoded["dtype"])

    if not (floating(left) and floating(right)):
        return (None, 0.0) if one == other else (f"{where}: {one!r} against {other!r}", float("inf"))
    import numpy  # as in values()
    return _arrays(where, numpy.array([float(one)]), numpy.array([float(other)]),
                   tolerance(left.get("dtype", "float32"), table), widen)


def _kind(encoded: dict | None) -> str:
    return "nothing" if encoded is None else encoded.get("dtype", encoded["kind"])


def _arrays(where: str, left: numpy.ndarray, right: numpy.ndarray, tol: float | None, widen: float
            ) -> tuple[str | None, float]:
    import numpy  # as in values()
    if left.shape != right.shape or left.dtype != right.dtype:
        return f"{where}: {left.dtype}{list(left.shape)} against {right.dtype}{list(right.shape)}", float("inf")
    if tol is None:
        left, right = numpy.atleast_1d(left), numpy.atleast_1d(right)
        unequal = left != right
        first = numpy.argwhere(unequal)
        return (f"{where}: at index {tuple(int(i) for i in first[0])}: {left[tuple(first[0])]!r} against "
                f"{right[tuple(first[0])]!r}" if first.size else None), float("inf") if first.size else 0.0
    a, b = numpy.atleast_1d(left).astype(numpy.float64), numpy.atleast_1d(right).astype(numpy.float64)
    with numpy.errstate(invalid="ignore"):  # a zero tolerance times an infinity
        bound = (tol + tol * numpy.abs(b)) * (1 + widen)
        gap = numpy.abs(a - b)
        same_special = (numpy.isnan(a) & numpy.isnan(b)) | (numpy.isinf(a) & (a == b))
        bad = ~same_special & (~(gap <= bound) | ~numpy.isfinite(a) | ~numpy.isfinite(b))
        finite = numpy.isfinite(gap)
        relative = float(numpy.max(gap[finite] / bound[finite])) if finite.any() else 0.0
    first = numpy.argwhere(bad)
    if not first.size:
        return None, relative
    index = tuple(int(i) for i in first[0])
    return f"{where}: at index {index}: {a[index]!r} against {b[index]!r} (tolerance {tol:g})", \
        max(relative, float("inf") if not numpy.isfinite(gap[index]) else relative)
