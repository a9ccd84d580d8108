"""`[tool.kvtasks]` and the batch manifest typed: pydantic models made from the Request's declared
options, so every option a repository (or a manifest) may set is a field with the type a person writes in TOML (a table for a tolerance table,
arrays for names and grid rows, true/false for a switch, as well as the strings the command line
takes), unknown keys are refused, a wrong type names its key and the type it needed, and
`validate-kernel-pr schema --config` prints the configuration's JSON Schema. A value is handed on as
the doit variable the command line would give (kvtasks.request.repo_config, kvtasks.run.batch).
"""
from __future__ import annotations

from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (AliasChoices, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model,
                      model_validator)

from kvtasks.errors import UsageError
from kvtasks.request.model import declared_options
from kvtasks.request.options import DeclaredOption

# what a repository's configuration cannot set: where the PR comes from and where reports go are the caller's
CALLERS_OPTIONS = ("repo", "base_ref", "head_ref", "patch", "head_sha", "out", "label")
Scalar = Union[str, int, float]
# the TOML forms an option takes beyond its command-line string, and how they are said
RICHER: dict[str, tuple[Any, str]] = {
    "tol_table": (Union[str, dict[str, float]],
                  'a table of dtype = tolerance ({f32 = 1e-5, f16 = 2e-3}) or a string "f32=1e-5,f16=2e-3"'),
    "shape_vars": (Union[str, list[str]], 'an array of names (["M", "N"]) or a string "M,N"'),
    "shape_argnames": (Union[str, list[str]], 'an array of names (["M", "N"]) or a string "M,N"'),
    "grid": (Union[str, list[Union[str, list[Scalar]]]],
             'an array of rows ([[64, 2000, "f32"], [7, 4097, "f16"]] or ["64,2000,f32", ...]) or a string '
             '"64,2000,f32;7,4097,f16"'),
}


def _typed(declared: DeclaredOption) -> tuple[Any, str]:
    """The type a configuration value of this option has, and how an error says it."""
    if declared.field in RICHER:
        return RICHER[declared.field]
    option = declared.option
    if option.switch:
        return Union[bool, int, str], 'true or false (or the command line\'s 1, 0 or "")'
    if option.repeated:
        return Union[str, list[str]], "a string or an array of strings"
    if declared.choices:  # its value is checked as the command line's is (kvtasks.request.model)
        return str, "one of " + ", ".join(repr(choice) for choice in declared.choices if choice)
    annotation = declared.info.annotation
    plain = [arg for arg in get_args(annotation) if arg is not type(None)] if get_origin(annotation) is Union \
        else [annotation]
    if plain == [int]:
        return Union[int, Annotated[str, StringConstraints(pattern=r"^\s*\d*\s*$")]], "an integer (or its digits)"
    if plain == [float]:
        return Union[float, Annotated[str, StringConstraints(pattern=r"^\s*([-+]?[\d.]+([eE][-+]?\d+)?)?\s*$")]], \
            "a number (or its digits)"
    return Scalar, "a string (or a bare number)"


def _fields(required_target: bool, callers: bool = False) -> dict[str, Any]:
    fields = {}
    for declared in declared_options():
        if declared.field in CALLERS_OPTIONS and not callers:
            continue
        kind, said = _typed(declared)
        required = required_target and declared.field == "target"
        aliases = AliasChoices(*declared.variables) if len(declared.variables) > 1 else None
        fields[declared.field] = (kind if required else kind | None,
                                  Field(... if required else None, validation_alias=aliases,
                                        description=f"{declared.option.help}; {said}"))
    return fields


_STRICT = ConfigDict(extra="forbid", strict=True)
SWITCHES = {declared.field for declared in declared_options() if declared.option.switch}
RepositoryOptions = create_model("RepositoryOptions", __config__=_STRICT, **_fields(False))
RepositoryOptions.__doc__ = "Options for every target: any option of a validation but where the PR comes from and where reports go."
NamedTarget = create_model("NamedTarget", __config__=_STRICT, **_fields(True))
NamedTarget.__doc__ = "A named target: its test (`target`, required) and any per-target option."


class KvtasksTable(RepositoryOptions):
    """`[tool.kvtasks]` of a kernel repository's pyproject.toml, or kvtasks.toml."""

    targets: dict[str, NamedTarget] = Field({}, description="the named targets, one table each")
    map: dict[str, Union[str, list[str]]] = Field(
        {}, description="source globs -> the named targets a change there needs")


ManifestOptions = create_model("ManifestOptions", __config__=_STRICT, **_fields(False, callers=True))
ManifestOptions.__doc__ = "Options a batch manifest gives: any option of a validation, shared at its top or per PR."


class ManifestPR(ManifestOptions):
    """One PR of a batch: its label, and its patch or head ref, over the manifest's shared options."""

    label: str = Field(description="the PR's run name, unique in the batch")

    @model_validator(mode="after")
    def _named(self) -> "ManifestPR":
        if not (self.patch or self.head_ref):
            raise ValueError("a PR of `prs` needs `patch` or `head_ref`")
        return self


class Manifest(ManifestOptions):
    """A batch manifest (TOML or JSON): shared options at the top, one entry per PR under `prs`."""

    engine: Any = Field(None, description="where the batch runs: local or ray")
    archs: Any = Field(None, description="the architectures every PR is validated on (engine ray)")
    base: str | None = Field(None, description="the worktree's HEAD the batch is made against, checked")
    prs: list[ManifestPR] = Field(min_length=1, description="one entry per PR")


def manifest(path: str, data: dict) -> Manifest:
    """A manifest's contents, checked; a UsageError names the first wrong key and where it is."""
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        location = [str(part) for part in error["loc"]]
        if location[:1] == ["prs"] and len(location) == 1:
            raise UsageError(f"manifest {path!r} has no `prs` list") from None
        if location[:1] == ["prs"]:
            where, key, model = f"prs[{location[1]}]", location[2] if len(location) > 2 else "", ManifestPR
        else:
            where, key, model = "the top level", location[0], Manifest
        if not key:  # the entry as a whole (a PR naming neither a patch nor a head ref)
            raise UsageError(f"manifest {path!r}: {where}: {error['msg'].removeprefix('Value error, ')}") from None
        raise UsageError(f"manifest {path!r}: "
                         f"{_refusal(error, model, where, key, sorted(ManifestOptions.model_fields))}") from None


# a doit variable spelt otherwise than its field (`tests` for `target`) -> the field
ALIASES = {variable: declared.field for declared in declared_options() for variable in declared.variables}


def _refusal(error: dict, model: type[BaseModel], where: str, key: str, allowed: list[str]) -> str:
    """What is wrong with one key, where it is, and the type it needs."""
    if error["type"] == "extra_forbidden":
        return f"{where} sets {key!r}, which is no option; it may set {', '.join(allowed)}"
    if error["type"] == "missing":
        return f"{where} needs {key!r}"
    field = model.model_fields.get(ALIASES.get(key, key))
    if field is not None and field.description and "; " in field.description:
        value = error.get("input")
        return f"{where} {key} must be {field.description.rsplit('; ', 1)[-1]}; it is {type(value).__name__} {value!r}"
    return f"{where} {key}: {error['msg'].removeprefix('Value error, ')}"


def _first_error(file: str, exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = [str(part) for part in error["loc"]]
    if location[:1] == ["targets"] and len(location) >= 3:
        where, key, model = f"[tool.kvtasks.targets.{location[1]}]", location[2], NamedTarget
    else:
        where, key, model = "[tool.kvtasks]", location[0], KvtasksTable
    return f"{file}: {_refusal(error, model, where, key, sorted(RepositoryOptions.model_fields))}"


def parse(file: str, table: dict) -> KvtasksTable:
    """The table, checked; a UsageError names the first wrong key, where it is and what it needed."""
    try:
        return KvtasksTable.model_validate(table)
    except ValidationError as exc:
        raise UsageError(_first_error(file, exc)) from None


def as_variable(field: str, value: Any) -> object:
    """A configuration value as the doit variable the command line gives: a switch 1 or nothing, a
    table or an array in the option's own text form."""
    if value is True:
        return "1"
    if value is False:
        return ""
    if isinstance(value, int) and field in SWITCHES:
        return "1" if value else ""
    if isinstance(value, dict):  # a tolerance table
        return ",".join(f"{dtype}={tolerance!r}" for dtype, tolerance in value.items())
    if isinstance(value, list):
        if field == "grid":
            return ";".join(row if isinstance(row, str) else ",".join(str(cell) for cell in row) for row in value)
        if field in RICHER:
            return ",".join(value)
        return value  # a repeated option: one value each
    return str(value)


def options(given: BaseModel, fields: type[BaseModel] = RepositoryOptions) -> dict[str, object]:
    """The options a model sets (of `fields`), as doit variables."""
    # a null (a JSON manifest's) is an option not given, as on the command line
    return {key: as_variable(key, value) for key, value in given.model_dump(exclude_unset=True, exclude_none=True).items()
            if key in fields.model_fields}
