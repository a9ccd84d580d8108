"""kvtasks.sources.structure: what a target file defines, for choosing its runner."""
from kvtasks.sources import error_line, parse
from kvtasks.sources import structure

SOURCE = '''import argparse
import pytest

ARGS = argparse.ArgumentParser().parse_known_args()


@pytest.fixture
def test_data():
    return 1


def test_worker(m, n):
    pass


class TestOps:
    pass


if __name__ == "__main__":
    argparse.ArgumentParser().parse_args()
'''


def test_tests_workers_the_main_guard_and_argv_in_the_module_body_are_read():
    tree = parse(SOURCE)
    assert structure.test_definitions(tree) == (["test_data", "TestOps"], ["test_worker"])
    assert structure.has_main_guard(tree) and not structure.has_main_guard(parse("def main():\n    pass\n"))
    assert structure.argv_parsed_at_import(tree) == (4, "parse_known_args")
    assert structure.argv_parsed_at_import(parse(SOURCE.replace("ARGS = ", "def f():\n    "))) is None


def test_the_line_a_source_fails_to_parse_at_is_named():
    assert error_line("x = 1\ndef broken(:\n") == 2
    assert error_line("x = 1\n") is None
