"""The kernel repository's own kvtasks configuration: `[tool.kvtasks]` in its pyproject.toml, or a
kvtasks.toml (its top level, or its own [tool.kvtasks]).

    [tool.kvtasks]                        # defaults: any option of the Request, for every target
    no_network = true
    [tool.kvtasks.targets.softmax]        # a named target: every per-target option
    target = "tests/test_softmax.py"
    expected_route = "kernels.softmax:softmax_rows"
    shape_vars = "M,N"
    [tool.kvtasks.map]                    # source globs -> the targets a change there needs
    "kernels/softmax*.py" = ["softmax"]

Only base's configuration is read (a PR cannot choose how it is validated); options given on the
command line win over it. It reads files of the base tree and runs nothing.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from kvtasks.request import doit_variables
from kvtasks.errors import UsageError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# where the configuration lives, in the order they are looked for
FILES = ("kvtasks.toml", "pyproject.toml")
# what a repository's configuration cannot set: where the PR comes from and where reports go are the caller's
CALLERS_OPTIONS = ("repo", "base_ref", "head_ref", "patch", "head_sha", "out", "label")


@dataclass(frozen=True)
class RepoConfig:
    file: str  # the file it was read from, relative to the repository
    defaults: dict[str, object] = field(default_factory=dict)
    targets: dict[str, dict[str, object]] = field(default_factory=dict)
    map: dict[str, list[str]] = field(default_factory=dict)

    def options(self, name: str) -> dict[str, object]:
        """A named target's options over the defaults, as doit variables."""
        return {**self.defaults, **self.targets[name]}

    def targets_for(self, changed: list[str]) -> list[str]:
        """The targets whose globs match a changed file, in the order the targets are declared."""
        wanted = {name for pattern, names in self.map.items() for name in names
                  if any(fnmatch.fnmatchcase(path, pattern) for path in changed)}
        return [name for name in self.targets if name in wanted]


def load(tree: Path) -> RepoConfig | None:
    """The configuration in `tree` (base's checkout), or None when it has none."""
    for name in FILES:
        path = tree / name
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text())
        except (OSError, ValueError) as exc:
            if name == "pyproject.toml":  # the packaging's file: judging it is the stages' business, not the configuration's
                continue
            raise UsageError(f"{name} of the base tree does not parse: {exc}") from exc
        table = data.get("tool", {}).get("kvtasks")
        if table is None and name == "kvtasks.toml":
            table = data
        if table is not None:
            return _checked(name, table)
    return None


def table_of(text: str | None) -> object:
    """A configuration file's kvtasks table, to tell whether a PR changed it (its text, when it does not parse)."""
    if text is None:
        return None
    try:
        data = tomllib.loads(text)
    except ValueError:
        return text
    return data.get("tool", {}).get("kvtasks") if "tool" in data else None


def changed_by(changes: dict[str, str], base_text, head_text) -> list[str]:
    """The configuration files a PR changes the kvtasks settings of: kvtasks.toml whenever it is
    touched, pyproject.toml when its [tool.kvtasks] differs. `base_text`/`head_text` read a file on a side."""
    changed = []
    for name in FILES:
        if name in changes and (name == "kvtasks.toml" or
                                table_of(base_text(name)) != table_of(head_text(name))):
            changed.append(name)
    return changed


def _checked(file: str, table: dict) -> RepoConfig:
    table = dict(table)
    targets, globs = table.pop("targets", {}), table.pop("map", {})
    known = set(doit_variables()) - set(CALLERS_OPTIONS)

    def options(where: str, given: dict) -> dict[str, object]:
        unknown = sorted(set(given) - known)
        if unknown:
            raise UsageError(f"{file}: {where} sets {unknown[0]!r}, which is no option a repository may set; "
                             f"it may set {', '.join(sorted(known))}")
        return {key: _flag_value(value) for key, value in given.items()}

    if not isinstance(targets, dict) or not all(isinstance(value, dict) for value in targets.values()):
        raise UsageError(f"{file}: [tool.kvtasks.targets] holds one table per named target")
    named = {name: options(f"target {name!r}", given) for name, given in targets.items()}
    for name, chosen in named.items():
        if "target" not in chosen:
            raise UsageError(f"{file}: target {name!r} names no `target` (the test file or node to run)")
    mapped: dict[str, list[str]] = {}
    for pattern, names in globs.items():
        names = [names] if isinstance(names, str) else names
        unknown = [name for name in names if name not in named]
        if unknown:
            raise UsageError(f"{file}: the map sends {pattern!r} to {unknown[0]!r}, which is no named target "
                             f"(the targets are {', '.join(named) or 'none'})")
        mapped[pattern] = list(names)
    return RepoConfig(file=file, defaults=options("[tool.kvtasks]", table), targets=named, map=mapped)


def _flag_value(value: object) -> object:
    """TOML's true/false as a switch is written on the command line (1 or nothing); lists stay lists."""
    if value is True:
        return "1"
    if value is False:
        return ""
    return value if isinstance(value, list) else str(value)
