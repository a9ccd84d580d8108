"""The options are declared once, on the Request: the CLI, doit and the reference page follow it."""
import re
from pathlib import Path

from kvtasks.front import cli
from kvtasks.host import HostSettings
from kvtasks.request import declared_options, doit_variables

# the option table and the host variables live in the reference page the README links
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
# the CLI's own, about output and the CI gate: no Request field
FRONT_DOOR_FLAGS = {"--quiet", "-v", "--verbose", "--format", "--fail-on", "--report-url", "-h", "--help"}


def test_every_cli_flag_fills_the_request_field_that_declares_it():
    actions = [action for action in cli.parser()._actions if not FRONT_DOOR_FLAGS & set(action.option_strings)]
    declared = {declared.field: declared for declared in declared_options()}
    assert sorted(action.dest for action in actions) == sorted(declared)
    for action in actions:
        assert tuple(action.option_strings) == declared[action.dest].flags
        assert action.help == declared[action.dest].option.help


def _option_table() -> list[tuple[set[str], set[str], set[str]]]:
    """Each row of the reference page's option table: its flags, its doit variables, and those written name=1."""
    lines = REFERENCE.read_text().splitlines()
    start = lines.index("| flag (doit variable) | meaning |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        tokens = re.findall(r"`([^`]+)`", line.split(" | ")[0])
        rows.append(({token for token in tokens if token.startswith("-")},
                     {token.removesuffix("=1") for token in tokens if re.fullmatch(r"[a-z_]+(=1)?", token)},
                     {token.removesuffix("=1") for token in tokens if token.endswith("=1")}))
    return rows


def test_the_reference_option_table_is_the_requests():
    rows = _option_table()
    by_flag = {flag: declared for declared in declared_options() for flag in declared.flags}
    by_variable = {variable: declared for declared in declared_options() for variable in declared.variables}
    parser_flags = {flag for action in cli.parser()._actions for flag in action.option_strings}
    assert set().union(*(flags for flags, _, _ in rows)) == parser_flags - {"-h", "--help"}
    assert set().union(*(variables for _, variables, _ in rows)) == set(doit_variables())
    for flags, variables, written_as_switch in rows:
        # a row's flags and doit variables name the same options, and a switch is written name=1
        assert {by_flag[flag].field for flag in flags - FRONT_DOOR_FLAGS} == {by_variable[v].field for v in variables}
        assert written_as_switch == {v for v in variables if by_variable[v].option.switch}


def test_the_reference_names_every_host_variable():
    text = REFERENCE.read_text()
    assert [name for name in HostSettings.variables() if f"`{name}`" not in text] == []
