"""What judges a kernel, read from source: pytest configuration, tampering constructs, and comparisons
followed into the helpers a test imports them from. Each legitimate change has a twin that changes a
tolerance and is caught."""
import pytest

from kvtasks.sources import compare, pytest_config, tampering
from kvtasks.stages.policy.files import read_followed

PLUGIN_OPTIONS = "-q -p pkg._helpers --deselect tests/test_x.py::test_tail"


@pytest.mark.parametrize("path,base,head", [
    (".pytest.ini", None, f"[pytest]\naddopts = {PLUGIN_OPTIONS}\n"),
    ("pytest.ini", "[pytest]\naddopts = -q\n", f"[pytest]\naddopts = {PLUGIN_OPTIONS}\n"),
    ("setup.cfg", "[metadata]\nname = x\n", f"[tool:pytest]\naddopts = {PLUGIN_OPTIONS}\n"),
    ("tox.ini", "[tox]\nenvlist = py\n", f"[tox]\nenvlist = py\n[pytest]\naddopts = {PLUGIN_OPTIONS}\n"),
    ("pyproject.toml", "[project]\nname = 'x'\n", f"[tool.pytest.ini_options]\naddopts = '{PLUGIN_OPTIONS}'\n"),
    ("pytest.toml", None, f"[pytest]\naddopts = {PLUGIN_OPTIONS.split()!r}\n"),
])
def test_every_configuration_spelling_that_adds_a_plugin_or_drops_a_test_is_read(path, base, head):
    assert pytest_config.changed(path, base, head) == [f"{path}::addopts adds -p pkg._helpers",
                                                       f"{path}::addopts adds --deselect tests/test_x.py::test_tail"]
    # its twin: the same options already on base are nothing new
    assert pytest_config.changed(path, head, head) == []


def test_collection_keys_are_read_and_plain_options_are_not():
    base = "[pytest]\naddopts = -q\ntestpaths = tests\npython_functions = test_*\n"
    harmless = base.replace("-q", "-q -ra --tb=short -p no:cacheprovider -pno:randomly").replace("tests\n", "tests/fast\n")
    assert pytest_config.changed("pytest.ini", base, harmless) == []  # a run that names its target ignores testpaths
    assert pytest_config.changed("pytest.ini", base, base.replace("test_*", "check_*")) == [
        "pytest.ini::python_functions = 'check_*' (base: 'test_*')"]
    assert pytest_config.changed("pytest.ini", base, base.replace("-q", "-q -o python_functions=x --noconftest")) == [
        "pytest.ini::addopts adds -o python_functions=x", "pytest.ini::addopts adds --noconftest"]
    native = "[tool.pytest]\naddopts = ['-p', 'pkg.plugin']\n"  # pytest 9's own table in pyproject.toml
    assert pytest_config.changed("pyproject.toml", None, native) == ["pyproject.toml::addopts adds -p pkg.plugin"]


KERNEL = '''import os
import sys

import numpy as np
import torch


def scale(x):
    torch.backends.cuda.matmul.allow_tf32 = False
    return x * 2
'''


@pytest.mark.parametrize("added,kind", [
    ("    np.testing.assert_allclose = lambda *a, **k: None\n", "patches-judge"),
    ("    setattr(torch, 'allclose', lambda *a, **k: True)\n", "patches-judge"),
    ("    sys.modules['numpy.testing'] = None\n", "patches-judge"),
    ("    frame = sys._getframe(1)\n", "introspects"),
    ("    import gc; gc.get_objects()\n", "introspects"),
    ("    import gc; x = x if gc.get_freeze_count() else x[:-1]\n", "introspects"),  # a validator's run
    ("    os.environ.get('PYTEST_CURRENT_TEST')\n", "reads-run-state"),
    ("    os.environ.get('GRID_SHAPES')\n", "reads-run-state"),
    ("    os.environ.get('KVTASKS_HOME')\n", "reads-run-state"),
])
def test_tampering_a_pr_adds_is_read_and_what_base_had_is_not(added, kind):
    head = KERNEL.replace("    return x * 2\n", added + "    return x * 2\n")
    found = tampering.added(KERNEL, head, ("GRID_SHAPES",))
    assert [item.kind for item in found] == [kind] and found[0].line == 10
    assert tampering.added(head, head, ("GRID_SHAPES",)) == []  # its twin: base already had it


def test_a_swallowing_exit_and_a_hook_are_read_and_precision_settings_are_not():
    source = ("class Lenient:\n    def __exit__(self, *exc):\n        return True\n\n\nclass Strict:\n"
              "    def __exit__(self, *exc):\n        return False\n\n\ndef pytest_runtest_makereport(item, call):\n"
              "    pass\n")
    assert [(item.kind, item.line) for item in tampering.read(source)] == [("exit-swallows", 2), ("pytest-hook", 11)]
    assert tampering.read(KERNEL) == []  # torch.backends settings are not tampering


def _compare(base_test, head_test, base_files=None, head_files=None):
    base = read_followed(base_test, (base_files or {}).get)
    head = read_followed(head_test, (head_files or {}).get)
    return compare(base, head, "tests/test_x.py")


STRICT = "import numpy as np\n\n\ndef test_x():\n    np.testing.assert_allclose(op(1), 1, atol=1e-5)\n"
MOVED = "from tests.helpers import check\n\n\ndef test_x():\n    check(op(1), 1)\n"
HELPER = "import numpy as np\n\n\ndef check(got, want, atol=1e-5):\n    np.testing.assert_allclose(got, want, atol=atol)\n"


def test_a_comparison_moved_into_a_helper_keeps_its_tolerance_and_its_twin_is_caught():
    moved = _compare(STRICT, MOVED, head_files={"tests/helpers.py": HELPER})
    assert (moved.loosened, moved.weakened, moved.uncomparable) == ([], [], [])
    widened = _compare(STRICT, MOVED, head_files={"tests/helpers.py": HELPER.replace("1e-5", "1e-2")})
    assert [(item["base"], item["head"]) for item in widened.loosened] == [(1e-5, 1e-2)]


ROWS = "import numpy as np\n\n\ndef assert_rows(got, want, atol=1e-5):\n    np.testing.assert_allclose(got, want, atol=atol)\n"


def test_a_helper_renamed_in_package_and_tests_and_its_twin():
    base = "from pkg.checks import assert_rows\n\n\ndef test_x():\n    assert_rows(op(1), 1)\n"
    head = base.replace("assert_rows", "check_rows")
    renamed = ROWS.replace("assert_rows", "check_rows")
    same = _compare(base, head, {"pkg/checks.py": ROWS}, {"pkg/checks.py": renamed})
    assert (same.loosened, same.weakened) == ([], [])
    wide = _compare(base, head, {"pkg/checks.py": ROWS}, {"pkg/checks.py": renamed.replace("1e-5", "1e-1")})
    assert [(item["base"], item["head"]) for item in wide.loosened] == [(1e-5, 1e-1)]


def test_an_equivalent_comparison_swap_and_its_twin():
    helper = ("import torch\nfrom test.utils import assert_verbose_allclose\n\n\ndef test_x(a, b):\n"
              "    assert_verbose_allclose(a, b, atol=1e-5, rtol=1e-5)\n    assert_verbose_allclose(a, b, atol=1e-5, "
              "rtol=1e-5)\n")
    plain = helper.replace("    assert_verbose_allclose(", "    assert torch.allclose(")
    for base, head in ((helper, plain), (plain, helper)):
        swapped = _compare(base, head)
        assert (swapped.loosened, swapped.weakened) == ([], [])
    wide = _compare(helper, plain.replace("atol=1e-5, rtol=1e-5)\n", "atol=1e-2, rtol=1e-5)\n", 1))
    assert [(item["base"], item["head"]) for item in wide.loosened] == [(1e-5, 1e-2)]


def test_a_new_target_whose_every_comparison_side_the_pr_supplies_is_named():
    from kvtasks.sources import references

    own_answer = ("import numpy as np\n\nfrom pkg.ops import reference_scale, tiled_scale\n\n\ndef test_new(x):\n"
                  "    out = tiled_scale(x, 3.0)\n    want = reference_scale(x, 3.0)\n"
                  "    np.testing.assert_allclose(out, want, atol=1e-5)\n")
    found = references.from_supplied(own_answer, {"pkg.ops"})
    assert found == ["test_new, line 9: np.testing.assert_allclose(out, want, atol=1e-05) (every side from pkg.ops)"]
    # its twins: an independent expectation (numpy, arithmetic, a reference the test defines) is not named
    assert references.from_supplied(own_answer.replace("reference_scale(x, 3.0)", "x * 3.0"), {"pkg.ops"}) == []
    assert references.from_supplied(own_answer, {"pkg.other"}) == []
    # and through the file's own function, or a loop binding, the answer key is still the PR's
    through_a_helper = own_answer.replace("    want = reference_scale(x, 3.0)\n", "    want = _expected(x)\n") + \
        "\n\ndef _expected(x):\n    return reference_scale(x, 3.0)\n"
    assert len(references.from_supplied(through_a_helper, {"pkg.ops"})) == 1
    looped = own_answer.replace("    want = reference_scale(x, 3.0)\n    np.testing.assert_allclose(out, want, atol=1e-5)\n",
                                "    for want in [reference_scale(x, 3.0)]:\n"
                                "        np.testing.assert_allclose(out, want, atol=1e-5)\n")
    assert len(references.from_supplied(looped, {"pkg.ops"})) == 1
