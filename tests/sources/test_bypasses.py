"""Ways a PR could make its own oracle unable to fail without moving a tolerance, each one named."""
import pytest

from kvtasks.sources import compare, read_policy

BASE = '''import contextlib
import os
import sys
import unittest

import numpy as np
import pytest

MAX_ERR = 1e-5


def test_a(out, ref):
    err = abs(out - ref).max()
    assert err < 1e-5
    assert 0.99 < similarity(out, ref)
    np.testing.assert_allclose(out, ref)


def test_b(out, ref):
    assert abs(out - ref).max() <= MAX_ERR


class TestC(unittest.TestCase):
    def test_c(self):
        self.assertLess(err(), 1e-6)
'''


def weakened(head: str, base: str = BASE) -> list[str]:
    return compare(read_policy(base), read_policy(head), "t.py").weakened


def test_the_base_file_reads_clean_against_itself():
    found = compare(read_policy(BASE), read_policy(BASE), "t.py")
    assert (found.weakened, found.loosened, found.uncomparable) == ([], [], [])


@pytest.mark.parametrize("edit, says", [
    (lambda s: s.replace("MAX_ERR = 1e-5\n", "MAX_ERR = 1e-5\n__test__ = False\n"),
     "t.py::<module>: pytest told to collect nothing from it (__test__ = False)"),
    (lambda s: s.replace("    def test_c", "    __test__ = 0\n\n    def test_c"),
     "t.py::TestC: pytest told to collect nothing from it (__test__ = 0)"),
    (lambda s: s + "\nTestC.__test__ = False\n", "t.py::TestC: pytest told to collect nothing"),
    (lambda s: s + "\nsetattr(TestC, '__test__', False)\n", "t.py::<module>: pytest told to collect nothing"),
    (lambda s: s + "\nglobals()['__test__'] = False\n", "t.py::<module>: pytest told to collect nothing"),
    (lambda s: s + "\ncollect_ignore = ['test_a.py']\n",
     "t.py::<module>: pytest told to collect nothing from it (collect_ignore = ['test_a.py'])"),
])
def test_turning_collection_off_is_named(edit, says):
    assert any(says in line for line in weakened(edit(BASE))), weakened(edit(BASE))


WRAPPED = "    np.testing.assert_allclose(out, ref)\n"


@pytest.mark.parametrize("head, says", [
    ("    with contextlib.suppress(AssertionError):\n        np.testing.assert_allclose(out, ref)\n",
     "contextlib.suppress(AssertionError)"),
    ("    with suppress(Exception):\n        np.testing.assert_allclose(out, ref)\n", "suppress(Exception)"),
    ("    with contextlib.suppress(ValueError, BaseException):\n        assert out is not None\n", "suppress"),
    ("    try:\n        np.testing.assert_allclose(out, ref)\n    except AssertionError:\n        pass\n", ""),
    ("    try:\n        np.testing.assert_allclose(out, ref)\n    except OK:\n        pass\n", ""),
    ("    try:\n        np.testing.assert_allclose(out, ref)\n    except AssertionError:\n        if flaky:\n"
     "            raise\n", ""),
    ("    for _ in range(1):\n        try:\n            np.testing.assert_allclose(out, ref)\n        finally:\n"
     "            return\n", "finally"),
])
def test_a_swallowed_assertion_is_named_in_each_spelling(head, says):
    source = BASE.replace("import contextlib\n", "import contextlib\nfrom contextlib import suppress\n")
    source = source.replace("MAX_ERR = 1e-5\n", "MAX_ERR = 1e-5\nOK = (ValueError, AssertionError)\n")
    found = weakened(source.replace(WRAPPED, head), source)
    assert any("test_a: an assertion whose failure is caught and dropped" in line and says in line
               for line in found), found


def test_a_handler_that_always_reraises_is_not_blamed():
    head = BASE.replace(WRAPPED, "    try:\n        np.testing.assert_allclose(out, ref)\n    except AssertionError:\n"
                                 "        print(out)\n        raise\n")
    assert weakened(head) == []


SKIPPED = "    err = abs(out - ref).max()\n"


@pytest.mark.parametrize("spelling, says", [
    ("    getattr(pytest, 'skip')('later')\n", "skip/xfail call (pytest.skip)"),
    ("    pytest.__getattribute__('xfail')('later')\n", "skip/xfail call (pytest.xfail)"),
    ("    pytest.__dict__['skip']('later')\n", "skip/xfail call (pytest.skip)"),
    ("    vars(pytest)['skip']('later')\n", "skip/xfail call (pytest.skip)"),
    ("    __import__('pytest').skip('later')\n", "skip/xfail call (pytest.skip)"),
    ("    sys.modules['pytest'].skip('later')\n", "skip/xfail call (pytest.skip)"),
    ("    getattr(pytest, 'sk' + 'ip')('later')\n", "skip/xfail call (pytest.<computed>)"),
    ("    raise unittest.SkipTest\n", "skip/xfail call (unittest.SkipTest)"),
    ("    from _pytest.outcomes import skip as later\n    later('x')\n", "skip/xfail call (pytest.skip)"),
    ("    request.node.add_marker('xfail')\n", "skip/skipif/xfail mark (add_marker('xfail'))"),
    ("    request.node.add_marker(getattr(pytest.mark, 'xfail'))\n",
     "skip/skipif/xfail mark (add_marker(pytest.mark.xfail))"),
])
def test_a_dynamic_skip_call_is_a_skip(spelling, says):
    found = weakened(BASE.replace(SKIPPED, spelling + SKIPPED))
    assert any(line.startswith("t.py::test_a: ") and says in line for line in found), found


@pytest.mark.parametrize("decorator, says", [
    ("@getattr(pytest.mark, 'skip')\n", "pytest.mark.skip"),
    ("@pytest.mark.__getattr__('xfail')(reason='x')\n", "pytest.mark.xfail"),
    ("@getattr(pytest, 'mark').skipif(True, reason='x')\n", "pytest.mark.skipif"),
    ("@getattr(pytest.mark, MARK)\n", "pytest.mark.<computed>"),
    ("@unittest.case.skip('x')\n", "unittest.skip"),
])
def test_a_dynamic_skip_mark_is_a_skip(decorator, says):
    found = weakened(BASE.replace("def test_b", decorator + "def test_b"))
    assert found == [f"t.py::test_b: a new skip/skipif/xfail mark ({says})"]


@pytest.mark.parametrize("spelling", ["    os._exit(0)\n", "    sys.exit(0)\n", "    sys.exit()\n", "    exit()\n",
                                      "    raise SystemExit\n", "    raise SystemExit(0)\n",
                                      "    pytest.exit('done', returncode=0)\n",
                                      "    import atexit\n    atexit.register(os._exit, 0)\n"])
def test_an_exit_before_the_assertions_is_named(spelling):
    found = weakened(BASE.replace(SKIPPED, spelling + SKIPPED))
    assert any(line.startswith("t.py::test_a: a process exit") for line in found), found


def test_an_exit_in_a_conftest_is_named_and_a_scripts_status_is_not():
    assert weakened("import os\nos._exit(0)\n", "import os\n") == \
        ["t.py::<module>: a process exit that ends the run before the assertions can fail (os._exit(0))"]
    for closing in ("sys.exit(pytest.main([__file__]))", "test_b(1, 1)\n    sys.exit(0)", "raise SystemExit"):
        assert weakened(BASE + f"\n\nif __name__ == '__main__':\n    {closing}\n") == [], closing
    early = BASE + "\n\nif __name__ == '__main__':\n    sys.exit(0)\n    test_b(1, 1)\n"
    assert weakened(early) == ["t.py::<module>: a process exit that ends the run before the assertions can fail "
                               "(sys.exit(0))"]


@pytest.mark.parametrize("old, new", [
    ("assert err < 1e-5", "assert True or err < 1e-5"),
    ("assert err < 1e-5", "assert err < 1e-5 or True"),
    ("assert err < 1e-5", "assert (err < 1e-5, 'err too large')"),
    ("assert err < 1e-5", "assert [err < 1e-5]"),
    ("assert err < 1e-5", "assert not (False and err < 1e-5)"),
    ("assert err < 1e-5", "assert err is err"),
    ("assert err < 1e-5", "assert err < 1e-5 if False else True"),
    ("np.testing.assert_allclose(out, ref)", "np.testing.assert_allclose(out, out)"),
])
def test_an_assert_that_cannot_fail_is_named(old, new):
    found = weakened(BASE.replace(old, new))
    assert any(line.startswith("t.py::test_a: a check that cannot fail") for line in found), found


@pytest.mark.parametrize("guard", ["if False:", "if 0:", "if not True:", "while None:"])
def test_a_check_that_never_runs_is_named(guard):
    head = BASE.replace("    assert err < 1e-5\n", f"    {guard}\n        assert err < 1e-5\n")
    found = weakened(head)
    assert any(line.startswith("t.py::test_a: a check under a condition that is always false") for line in found), \
        found


@pytest.mark.parametrize("old, new, where, loosened", [
    ("assert err < 1e-5", "assert err < 1e-1", "test_a:assert upper bound#1", (1e-5, 1e-1)),
    ("assert 0.99 < similarity", "assert 0.5 < similarity", "test_a:assert lower bound#1", (0.99, 0.5)),
    ("MAX_ERR = 1e-5", "MAX_ERR = 1e-2", "test_b:assert upper bound#1", (1e-5, 1e-2)),
    ("<= MAX_ERR", "<= 1e-3", "test_b:assert upper bound#1", (1e-5, 1e-3)),
    ("assertLess(err(), 1e-6)", "assertLess(err(), 1e-2)", "test_c:assert upper bound#1", (1e-6, 1e-2)),
])
def test_a_bare_asserts_bound_is_held_like_a_tolerance(old, new, where, loosened):
    found = compare(read_policy(BASE), read_policy(BASE.replace(old, new)), "t.py")
    assert [(item["where"], item["base"], item["head"]) for item in found.loosened] == [(f"t.py::{where}", *loosened)]


def test_a_tightened_bound_is_not_blamed_and_a_computed_one_is_named():
    tightened = BASE.replace("err < 1e-5", "err < 1e-6").replace("0.99 <", "0.999 <")
    found = compare(read_policy(BASE), read_policy(tightened), "t.py")
    assert (found.loosened, found.uncomparable, found.weakened) == ([], [], [])
    for computed in ("scale()", "limit", "2 * scale"):
        found = compare(read_policy(BASE), read_policy(BASE.replace("err < 1e-5", f"err < {computed}")), "t.py")
        assert found.loosened == [] and len(found.uncomparable) == 1, computed
        assert f"is {computed} on head (base: 1e-05), not a literal" in found.uncomparable[0]


def test_an_assert_added_before_a_bound_does_not_shift_which_bound_it_is_compared_with():
    head = BASE.replace("    assert err < 1e-5\n", "    assert out.shape[0] < 4096\n    assert err < 1e-5\n")
    found = compare(read_policy(BASE), read_policy(head), "t.py")
    assert (found.loosened, found.uncomparable) == ([], [])
