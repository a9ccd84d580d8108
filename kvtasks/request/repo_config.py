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
    "examples/*" = []                     # a change here needs no target (declared by base)

Only base's configuration is read (a PR cannot choose how it is validated); options given on the
command line win over it. Values are typed (kvtasks.request.config_model): a tolerance table may be a
TOML table, names and grid rows arrays. It reads files of the base tree and runs nothing.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from kvtasks.errors import UsageError
from kvtasks.request import config_model

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# where the configuration lives, in the order they are looked for
FILES = ("kvtasks.toml", "pyproject.toml")
# what no test, kernel, build or dependency reads: documentation and CI files. A change of these alone
# is nothing to validate; any other file a map does not reach (a constant, an autotune config, a C/CUDA
# source, a build file, a test, a document inside the package, which it may read as data) is a change
# nobody validated. Folders by fnmatch (`*` crossing folders); documents at the top level only.
NEEDS_NO_VALIDATION = ("docs/*", "doc/*", ".github/*", ".gitlab/*", ".circleci/*", ".buildkite/*")
TOP_LEVEL_DOCUMENTS = ("*.md", "*.rst", "*.adoc", "LICENSE*", "COPYING*", "AUTHORS*", "NOTICE*", "CODEOWNERS",
                       ".mailmap", ".editorconfig", ".gitignore", ".gitlab-ci.yml", "azure-pipelines.yml",
                       ".pre-commit-config.yaml", ".readthedocs.yml", ".readthedocs.yaml")


def needs_no_validation(path: str) -> bool:
    """Whether a changed file is documentation or CI, which no test, kernel, build or dependency reads."""
    documents = TOP_LEVEL_DOCUMENTS if "/" not in path else ()
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in (*NEEDS_NO_VALIDATION, *documents))


@dataclass(frozen=True)
class RepoConfig:
    file: str  # the file it was read from, relative to the repository
    defaults: dict[str, object] = field(default_factory=dict)
    targets: dict[str, dict[str, object]] = field(default_factory=dict)
    map: dict[str, list[str]] = field(default_factory=dict)

    def options(self, name: str) -> dict[str, object]:
        """A named target's options over the defaults, as doit variables."""
        return {**self.defaults, **self.targets[name]}

    def chosen(self, given: dict, tree: Path) -> dict[str, object]:
        """The options for a target the caller named: a configured name gives its options (the
        caller's other options win), a path the defaults under it; a bare word that is neither a
        configured name nor a file of the checkout is a usage error naming the configured targets."""
        named = given.get("target") or given.get("tests")
        if named in self.targets:
            return {**self.options(named), **{key: value for key, value in given.items() if key not in ("target", "tests")}}
        path = str(named or "").split("::", 1)[0]
        # a word with no folder and no .py is a name; a path (a test the PR adds, a renamed one) is the stages' to judge
        a_name = "/" not in path and not path.endswith(".py")
        if named and a_name and self.targets and not (tree / path).exists():
            raise UsageError(f"--target {named!r} is neither a target named in base's {self.file} "
                             f"({', '.join(self.targets)}) nor a file of the checkout")
        return {**self.defaults, **given}

    def unreached(self, changed: list[str]) -> list[str]:
        """The changed files no target validates: matched by no glob of the map that names a target,
        by none that base maps to no target (`"glob" = []`), and neither documentation nor CI."""
        return [path for path in changed if not needs_no_validation(path)
                and not any(fnmatch.fnmatchcase(path, pattern) for pattern in self.map)]

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
    parsed = config_model.parse(file, table)
    named = {name: config_model.options(given) for name, given in parsed.targets.items()}
    mapped: dict[str, list[str]] = {}
    for pattern, names in parsed.map.items():
        names = [names] if isinstance(names, str) else names
        unknown = [name for name in names if name not in named]
        if unknown:
            raise UsageError(f"{file}: the map sends {pattern!r} to {unknown[0]!r}, which is no named target "
                             f"(the targets are {', '.join(named) or 'none'})")
        mapped[pattern] = list(names)
    return RepoConfig(file=file, defaults=config_model.options(parsed), targets=named, map=mapped)
