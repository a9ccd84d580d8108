"""How a caller gives a Request field: its `Option` (flags, doit variables, how its value is
written), and the text forms some values take (comma-separated names, grid rows). Pure: it reads
nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args, get_origin

from pydantic.fields import FieldInfo


KEYED = ("base", "head", "neither")


@dataclass(frozen=True)
class Option:
    """Field metadata: how the caller gives one Request field.

    `flags` default to the field's name spelt `--like-this` and `variables` (doit's) to the name
    itself. A `switch` takes no value (doit: `name=1`); a `repeated` option is given once per value
    (doit: one variable, values joined by `joined_by`); a `dash_led` value may start with '-' and
    then follow its flag as the next word. A `path` names a file or folder of the caller's, so a
    manifest gives it relative to itself."""

    help: str
    flags: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()
    switch: bool = False
    repeated: bool = False
    joined_by: str = ""
    dash_led: bool = False
    path: bool = False
    # which content key the option is part of (kvtasks.evidence.keys): "base" (how base's runs come out, so every
    # PR against the base shares it), "head" (only how head's evidence is made or judged), "neither"
    # (where things are, what they are called, or what reaches the keys through what it decides)
    keys: str = ""

    def __post_init__(self):
        if self.keys not in KEYED:
            raise TypeError(f"the option '{self.help}' must say which content key it is part of: keys= one of {KEYED}")


@dataclass(frozen=True)
class DeclaredOption:
    """One option as the front doors see it: the Request field it fills and its spellings."""

    field: str
    option: Option
    info: FieldInfo

    @property
    def flags(self) -> tuple[str, ...]:
        return self.option.flags or ("--" + self.field.replace("_", "-"),)

    @property
    def variables(self) -> tuple[str, ...]:
        return self.option.variables or (self.field,)

    @property
    def choices(self) -> tuple[str, ...]:
        """The values a Literal-typed field allows (empty for a free value)."""
        annotation = self.info.annotation
        for candidate in (annotation, *get_args(annotation)):  # Literal[...] or Literal[...] | None
            if get_origin(candidate) is Literal:
                return get_args(candidate)
        return ()

    @property
    def default(self):
        return self.info.default


def option_of(info: FieldInfo) -> Option | None:
    return next((item for item in info.metadata if isinstance(item, Option)), None)


def switched(value: object) -> bool:
    """A switch as the CLI (a bool), doit (`name=1`) or a manifest (true, "yes") gives it."""
    if isinstance(value, bool):
        return value
    return str(value or "").strip().lower() in {"1", "true", "yes", "on"}


class Route(str):
    """One --expected-route, `module:function`, parsed once: its text is what the probe watches and
    the receipt names."""

    @property
    def module(self) -> str:
        return self.partition(":")[0]

    def files(self) -> set[str]:
        """The files that can hold its module, in the checkout or under a python/ folder."""
        stem = self.module.replace(".", "/")
        return {f"{prefix}{stem}{suffix}" for prefix in ("", "python/") for suffix in (".py", "/__init__.py")}


def names(text: str) -> list[str]:
    """A comma-separated flag value (routes, shape vars, argnames) as its names."""
    return [part.strip() for part in text.split(",") if part.strip()]


def grid_rows(text: str) -> list[list[str]]:
    """A --grid value's rows of cells: ';' between rows, ',' between cells, neither inside brackets,
    so a tuple-valued cell stays one cell: "(2049,2);(4097,4)" is two rows of one cell."""
    rows, row, cell, depth = [], [], "", 0
    for char in text + ";":
        depth += (char in "([") - (char in ")]")
        if depth <= 0 and char in ",;":
            row.append(cell.strip())
            cell = ""
            if char == ";":
                rows.append(row)
                row = []
        else:
            cell += char
    return [row for row in rows if any(row)]
