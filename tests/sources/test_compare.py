"""kvtasks.sources.reader and .compare: the test policy of each side, and head held against base with it."""
import pytest

from kvtasks.sources import compare, read_policy

BASE = '''import unittest

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose as aac

TOL = {"f32": 1e-5, "f16": 2e-3}
SHAPES = [(4, 64), (3, 13), pytest.param(8, 8)]


def check(a, b, atol=1e-6):
    np.testing.assert_allclose(a, b, atol=atol)


@pytest.mark.parametrize("M,N", SHAPES)
def test_a(M, N):
    out = f(M, N)
    np.testing.assert_allclose(out, ref, atol=1e-3)
    aac(out, ref)
    torch.testing.assert_close(out.to(torch.bfloat16), ref)
    check(out, ref)
    assert pytest.approx(1.0) == out


def test_b():
    np.testing.assert_allclose(x, y, atol=1e-4)


def test_gone():
    assert f(1, 1) is not None


class TestC(unittest.TestCase):
    def test_c(self):
        self.assertAlmostEqual(a, b)
'''


def diff(head: str, base: str = BASE, reference=None):
    return compare(read_policy(base), read_policy(head), "t.py", reference)


def test_a_tolerance_head_adds_is_held_against_the_callees_default():
    head = (BASE.replace("atol=1e-3)", "atol=1e-3, rtol=0.5)")
            .replace("aac(out, ref)", "aac(out, ref, 1e-2)")  # positional rtol, through an alias
            .replace("check(out, ref)", "check(out, ref, atol=1e-2)")  # the file's own helper
            .replace("pytest.approx(1.0)", "pytest.approx(1.0, rel=TOL['f16'])")  # by name, resolved
            .replace("self.assertAlmostEqual(a, b)", "self.assertAlmostEqual(a, b, places=3)"))
    found = diff(head)
    widened = {item["where"]: (item["base"], item["head"]) for item in found.loosened}
    assert widened == {
        "t.py::test_a:assert_allclose.rtol#1": (1e-7, 0.5),
        "t.py::test_a:aac.rtol#1": (1e-7, 1e-2),
        "t.py::test_a:check.atol#1": (1e-6, 1e-2),
        "t.py::test_a:approx.rel#1": (1e-6, 2e-3),
        "t.py::test_c:assertAlmostEqual.places#1": (7, 3),  # fewer places is looser
    }
    assert all("default" in item["basis"] or "signature" in item["basis"] for item in found.loosened)
    assert not found.weakened and not found.uncomparable


def test_torch_assert_close_defaults_follow_the_dtype_the_test_names():
    bf16 = BASE.replace("torch.testing.assert_close(out.to(torch.bfloat16), ref)",
                        "torch.testing.assert_close(out.to(torch.bfloat16), ref, rtol=1e-2, atol=1e-5)")
    assert diff(bf16).loosened == []  # bfloat16's own default rtol is 1.6e-2
    f32 = bf16.replace("torch.bfloat16", "torch.float32")
    assert [(i["base"], i["head"]) for i in diff(f32, BASE.replace("torch.bfloat16", "torch.float32")).loosened] == \
        [(1.3e-6, 1e-2)]


def test_a_helpers_own_default_is_a_tolerance_too():
    found = diff(BASE.replace("def check(a, b, atol=1e-6)", "def check(a, b, atol=1e-1)"))
    assert [(i["where"], i["base"], i["head"]) for i in found.loosened] == [("t.py::check:default.atol", 1e-6, 1e-1)]


def test_a_new_table_entry_is_held_against_base_and_the_reference():
    head = BASE.replace('"f16": 2e-3}', '"f16": 2e-3, "bf16": 5e-2}')
    assert [i["where"] for i in diff(head).loosened] == ["t.py::TOL[bf16]"]
    modest = BASE.replace('"f16": 2e-3}', '"f16": 2e-3, "bf16": 1e-3}')
    assert diff(modest).loosened == []
    assert [i["base"] for i in diff(modest, reference={"bf16": 1e-4}).loosened] == [1e-4]


def test_a_tolerance_that_stops_being_a_literal_is_named():
    head = BASE.replace("atol=1e-3)", "atol=compute())").replace("aac(out, ref)", "aac(out, ref, rtol=pick())")
    found = diff(head)
    assert len(found.uncomparable) == 2
    assert "atol=compute() is not a literal on head (base: 0.001)" in found.uncomparable[0]
    assert "added where base passed none, and it is not a literal" in found.uncomparable[1]


@pytest.mark.parametrize("edit, says", [
    (lambda s: s.replace("    out = f(M, N)\n", "    if N % 64:\n        pytest.skip('tail')\n    out = f(M, N)\n"),
     "test_a: a new skip/xfail call (pytest.skip)"),
    (lambda s: s.replace("def test_b", "@pytest.mark.skipif(True, reason='flaky')\ndef test_b"),
     "test_b: a new skip/skipif/xfail mark (pytest.mark.skipif)"),
    (lambda s: s.replace("pytest.param(8, 8)", "pytest.param(8, 8, marks=pytest.mark.xfail)"),
     "<module>: a new skip/skipif/xfail mark (pytest.param(8, 8) marks=pytest.mark.xfail)"),
    (lambda s: s.replace("    def test_c", "    @unittest.skip('later')\n    def test_c"),
     "test_c: a new skip/skipif/xfail mark (unittest.skip)"),
    (lambda s: s.replace("import unittest\n", "import unittest\npytestmark = pytest.mark.skip\n"),
     "<module>: a new skip/skipif/xfail mark (pytestmark=pytest.mark.skip)"),
    (lambda s: s.replace("np.testing.assert_allclose(x, y, atol=1e-4)", "np.allclose(x, y, atol=1e-4)"),
     "test_b: a comparison whose result is thrown away (np.allclose(x, y, atol=0.0001))"),
    (lambda s: s.replace("    np.testing.assert_allclose(x, y, atol=1e-4)",
                         "    if x is None:\n        return\n    np.testing.assert_allclose(x, y, atol=1e-4)"),
     "test_b: a return before the assertions"),
    (lambda s: s.replace("def test_gone():\n    assert f(1, 1) is not None\n", ""),
     "test_gone: a test function base had is deleted"),
    (lambda s: s.replace("(3, 13), ", ""), "test_a[M,N]: parametrize row (3, 13) deleted"),
    (lambda s: s.replace(", atol=1e-4)", ")"), "test_b:assert_allclose.atol#1: tolerance no longer given"),
    (lambda s: s.replace("    np.testing.assert_allclose(x, y, atol=1e-4)\n",
                         "    try:\n        np.testing.assert_allclose(x, y, atol=1e-4)\n    except AssertionError:\n"
                         "        pass\n"),
     "test_b: an assertion whose failure is caught and dropped"),
])
def test_each_weakening_is_named(edit, says):
    found = diff(edit(BASE))
    assert any(says in line for line in found.weakened), found.weakened


def test_a_row_moved_into_a_comment_is_named_once():
    head = BASE.replace("SHAPES = [(4, 64), (3, 13), ", "SHAPES = [(4, 64),\n    # (3, 13),\n    ")
    assert read_policy(head).commented_rows and diff(head).weakened == []


def test_legitimate_changes_are_not_blamed():
    tightened = BASE.replace("atol=1e-3)", "atol=1e-5)").replace("atol=1e-4)", "atol=1e-4, rtol=0)")
    row_added = BASE.replace("(3, 13), ", "(3, 13), (5, 100), ")
    renamed = BASE.replace("f(M, N)", "g(M, N)").replace("f(1, 1)", "g(1, 1)")
    for head in (tightened, row_added, renamed):
        found = diff(head)
        assert (found.loosened, found.weakened, found.uncomparable) == ([], [], []), head


def test_an_inserted_call_does_not_shift_which_call_is_compared():
    head = BASE.replace("    np.testing.assert_allclose(out, ref, atol=1e-3)\n",
                        "    np.testing.assert_allclose(out[:1], ref[:1], atol=1e-2)\n"
                        "    np.testing.assert_allclose(out, ref, atol=1e-3)\n")
    assert diff(head).loosened == []


NAMED_TOLERANCE = '''import numpy as np
ATOL = 1e-5


def test_a(out, ref):
    np.testing.assert_allclose(out, ref, atol=ATOL)
'''


@pytest.mark.parametrize("head,loosened,uncomparable", [
    ("atol=1e-1", [(1e-5, 0.1)], False),   # the name base used is replaced by a looser literal
    ("atol=1e-6", [], False),              # tighter
    ("atol=ATOL", [], False),              # unchanged
    ("atol=ATOL * 1e4", [], True),         # an expression over the name: named, never silent
    ("atol=OTHER_NAME", [], True),
])
def test_a_named_tolerance_on_base_is_held_at_its_value(head, loosened, uncomparable):
    found = compare(read_policy(NAMED_TOLERANCE), read_policy(NAMED_TOLERANCE.replace("atol=ATOL)", head + ")")),
                    "tests/test_a.py")
    assert [(item["base"], item["head"]) for item in found.loosened] == loosened
    assert bool(found.uncomparable) is uncomparable


PLAIN = '''import numpy as np
import pytest


def test_a(out, ref):
    np.testing.assert_allclose(out, ref)
'''


@pytest.mark.parametrize("spelling,decorator,body,expected", [
    ("S = pytest.mark.skipif(True, reason='')", "@S\n", "", "a new skip/skipif/xfail mark (pytest.mark.skipif)"),
    ("XF = pytest.mark.xfail", "@XF\n", "", "a new skip/skipif/xfail mark (pytest.mark.xfail)"),
    ("sk = pytest.skip", "", "    sk('not today')\n", "a new skip/xfail call (pytest.skip)"),
])
def test_a_skip_bound_to_a_module_name_is_still_a_skip(spelling, decorator, body, expected):
    head = PLAIN.replace("\n\ndef test_a", f"\n{spelling}\n\n{decorator}def test_a").replace(
        "    np.testing", f"{body}    np.testing")
    found = compare(read_policy(PLAIN), read_policy(head), "tests/test_a.py")
    assert f"tests/test_a.py::test_a: {expected}" in found.weakened


def test_a_comparison_bound_to_a_module_name_keeps_its_default():
    head = PLAIN.replace("\n\ndef test_a", "\nchk = np.testing.assert_allclose\n\ndef test_a").replace(
        "np.testing.assert_allclose(out, ref)", "chk(out, ref, rtol=0.5)")
    found = compare(read_policy(PLAIN), read_policy(head), "tests/test_a.py")
    assert [(item["base"], item["head"]) for item in found.loosened] == [(1e-7, 0.5)]


ROWS = '''import numpy as np
import pytest


@pytest.mark.parametrize("dtype,atol", [("float32", 1e-5), ("float16", 1e-3)])
def test_rows(dtype, atol):
    np.testing.assert_allclose(f(dtype), ref, atol=atol)
'''


def test_a_new_dtype_row_within_the_tol_table_is_no_widening():
    bf16 = ROWS.replace('("float16", 1e-3)]', '("float16", 1e-3), ("bfloat16", 1e-2)]')
    table = {"bf16": 2e-2, "f32": 1e-5}
    assert diff(bf16, ROWS, reference=table).loosened == []  # bf16 needs more than f16, and the table says how much
    # past the table's entry for its dtype, or with no entry to hold it to, it is a widening
    assert [i["base"] for i in diff(bf16, ROWS, reference={"bf16": 5e-3}).loosened] == [5e-3]
    assert [i["base"] for i in diff(bf16, ROWS).loosened] == [1e-3]
    # the honest twin keeps its finding: a row of a dtype base had, looser than base's rows of it
    f32 = ROWS.replace('("float16", 1e-3)]', '("float16", 1e-3), ("float32", 1e-4)]')
    assert [i["base"] for i in diff(f32, ROWS, reference=table).loosened] == [1e-5]
