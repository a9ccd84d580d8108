"""What a skip looks like (SKIP_CALLS, SKIP_MARKS, SKIP_METHODS, MARK_ADDERS, the outcome hooks) and
WEAKENINGS, each kind of weakening the policy reader records and how a finding names it.

It must never count weakenings itself: the policy reader does.
"""
from __future__ import annotations

import ast

from kvtasks.sources.syntax import dotted, qualified

# each kind of weakening the reader records, and how a finding names one
WEAKENINGS = {
    "skip-call": "a new skip/xfail call",
    "skip-mark": "a new skip/skipif/xfail mark",
    "discarded-comparison": "a comparison whose result is thrown away",
    "early-return": "a return before the assertions",
    "swallowed-assertion": "an assertion whose failure is caught and dropped",
    "outcome-hook": "a pytest hook that can rewrite, drop or deselect test outcomes",
}
# pytest hooks through which a conftest.py or plugin can turn a failure into a pass or make a test vanish
OUTCOME_HOOKS = {"pytest_runtest_makereport", "pytest_report_teststatus", "pytest_collection_modifyitems",
                 "pytest_runtest_call", "pytest_pyfunc_call", "pytest_runtest_protocol", "pytest_runtest_logreport"}
SKIP_CALLS = {"pytest.skip", "pytest.xfail", "pytest.importorskip", "unittest.SkipTest", "pytest.skip.Exception"}
SKIP_MARKS = {"pytest.mark.skip", "pytest.mark.skipif", "pytest.mark.xfail", "unittest.skip", "unittest.skipIf",
              "unittest.skipUnless", "unittest.expectedFailure"}
# methods that skip whatever the receiver is named (`self.skipTest`)
SKIP_METHODS = {"skipTest"}
# methods that add a mark to a collected test at run time (`request.node.add_marker(pytest.mark.xfail)`)
MARK_ADDERS = {"add_marker", "applymarker"}


def is_skip_mark(node: ast.AST, bound: dict[str, str]) -> str | None:
    name = qualified(node, bound) if dotted(node) else ""
    return name if name in SKIP_MARKS else None


def skip_marks_in(node: ast.AST, bound: dict[str, str]) -> list[str]:
    """Skip marks named anywhere in a decorator, a `marks=` value or a `pytestmark` assignment."""
    return [name for sub in ast.walk(node) if isinstance(sub, (ast.Attribute, ast.Name))
            and (name := is_skip_mark(sub, bound))]
