"""kvtasks.sources.environment, .flags and .parametrize: the readings a grid channel is proven by."""
import ast

import pytest

from kvtasks.sources import argparse_flags, parametrize_marks, reads_env


@pytest.mark.parametrize("source", [
    'import os\nos.getenv("V")\n', 'import os\nos.environ.get("V", "")\n', 'import os\nos.environ["V"]\n',
    'from os import environ\nenviron.get("V")\n', 'import os\nif "V" in os.environ:\n    pass\n'])
def test_every_common_env_read_is_recognised(source):
    assert reads_env(ast.parse(source), "V")
    assert not reads_env(ast.parse(source), "OTHER")


def test_argparse_defaults_and_parametrize_defaults_are_read():
    flags = argparse_flags(ast.parse('p.add_argument("--shapes", nargs="+", default=[(64, 128), "4,8"])\n'
                                     'p.add_argument("-n", "--heads", default=compute())\n'))
    assert flags == {"--shapes": ["64,128", "4,8"], "-n": None, "--heads": None}
    marks = parametrize_marks(ast.parse('ROWS = [(1, 2)]\n@pytest.mark.parametrize("a,b", ROWS)\ndef test(a, b): pass\n'))
    assert marks == [(["a", "b"], ["1,2"])]
