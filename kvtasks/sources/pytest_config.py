"""pytest_config: what a pytest configuration file tells every run, read from its text.

pytest reads its configuration from the first of `pytest.toml`, `.pytest.toml` ([pytest]),
`pytest.ini`, `.pytest.ini`, `pyproject.toml` ([tool.pytest.ini_options]), `tox.ini` ([pytest]) and
`setup.cfg` ([tool:pytest]) that has its section. Two things in it change what a run can report: addopts that load a plugin or drop tests
(`-p`, `--deselect`, `--ignore`, `-k`, `-m`, ...), and the keys that decide what is collected. Packaging
metadata on the import path (a `*.dist-info/entry_points.txt` with `[pytest11]`) loads a plugin as surely.
"""
from __future__ import annotations

import configparser
import shlex
from pathlib import PurePosixPath

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

SECTIONS = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}
# addopts that load code into every run, or keep tests from running or from counting
OPTIONS_THAT_JUDGE = ("-p", "--deselect", "--ignore", "--ignore-glob", "-k", "-m", "--lf", "--last-failed", "--sw",
                      "--stepwise", "--continue-on-collection-errors", "--runxfail", "--co", "--collect-only",
                      "--noconftest", "-o", "--override-ini", "--confcutdir", "--rootdir")
# options that take the next word as their value
_VALUED = ("-p", "--deselect", "--ignore", "--ignore-glob", "-k", "-m", "-o", "--override-ini", "--confcutdir",
           "--rootdir")
# keys that decide what is collected, run or imported when the run names its target (testpaths does not)
COLLECTION_KEYS = ("python_files", "python_classes", "python_functions", "norecursedirs", "required_plugins",
                   "xfail_strict", "empty_parameter_set_mark", "usefixtures", "pythonpath")


def settings(path: str, text: str | None) -> dict[str, str] | None:
    """The pytest section of a configuration file as key -> text; None when it has none."""
    if text is None:
        return None
    name = PurePosixPath(path).name
    if name.endswith(".toml"):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
        tool = data.get("tool", {}).get("pytest", {})
        # pytest 9 reads [tool.pytest] natively, beside the older [tool.pytest.ini_options]
        native = {key: value for key, value in tool.items() if key != "ini_options"}
        section = data.get("pytest") if name in ("pytest.toml", ".pytest.toml") else \
            ({**tool.get("ini_options", {}), **native} if tool else None)
        if section is None:
            return None
        return {key: " ".join(map(str, value)) if isinstance(value, list) else str(value)
                for key, value in section.items()}
    if name not in SECTIONS:
        return None
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    if not parser.has_section(SECTIONS[name]):
        return None
    return dict(parser.items(SECTIONS[name]))


def _judging_options(addopts: str) -> list[str]:
    try:
        words = shlex.split(addopts)
    except ValueError:
        words = addopts.split()
    found = []
    for index, word in enumerate(words):
        option, _, value = word.partition("=")
        if word.startswith("-p") and len(word) > 2:  # -pNAME
            option, value = "-p", word[2:]
        if option not in OPTIONS_THAT_JUDGE:
            continue
        taken = value or (words[index + 1] if option in _VALUED and index + 1 < len(words) else "")
        if option == "-p" and taken.startswith("no:"):
            continue  # turning a plugin off loads no code
        found.append(f"{option} {taken}".strip())
    return found


def entry_point_plugins(path: str, text: str | None) -> set[str]:
    """The pytest plugins a packaging metadata file declares (`[pytest11]` of a `*.dist-info` or
    `*.egg-info` folder's entry_points.txt): on a target's import path, pytest's autoload finds them."""
    pure = PurePosixPath(path)
    if text is None or pure.name != "entry_points.txt" or not pure.parent.name.endswith((".dist-info", ".egg-info")):
        return set()
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    try:
        parser.read_string(text)
    except configparser.Error:
        return {"(unreadable entry points)"}
    return {f"{name} = {value}" for name, value in parser.items("pytest11")} if parser.has_section("pytest11") \
        else set()


def changed(path: str, base_text: str | None, head_text: str | None) -> list[str]:
    """What head's configuration adds that changes what runs or how it counts, in words."""
    plugins = entry_point_plugins(path, head_text) - entry_point_plugins(path, base_text)
    if plugins:
        return [f"{path} declares a pytest plugin that autoloads in every run: {plugin}" for plugin in sorted(plugins)]
    head = settings(path, head_text)
    if head is None:
        return []
    base = settings(path, base_text) or {}
    said = [f"{path}::addopts adds {option}" for option in _judging_options(head.get("addopts", ""))
            if option not in _judging_options(base.get("addopts", ""))]
    said += [f"{path}::{key} = {head[key]!r} (base: {base.get(key)!r})" for key in COLLECTION_KEYS
             if head.get(key) != base.get(key) and key in head]
    return said
