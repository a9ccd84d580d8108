"""What a skip looks like (SKIP_CALLS, SKIP_MARKS, SKIP_METHODS, MARK_ADDERS, the outcome hooks, and
canonical: the name a dynamic or private spelling stands for), what ends the process (EXITS), and
WEAKENINGS, each kind of weakening the policy reader records and how a finding names it.

It must never count weakenings itself: the policy reader does.
"""
from __future__ import annotations

import ast

from kvtasks.sources.syntax import COMPUTED, dotted, qualified, resolved

# each kind of weakening the reader records, and how a finding names one
WEAKENINGS = {
    "skip-call": "a new skip/xfail call",
    "skip-mark": "a new skip/skipif/xfail mark",
    "discarded-comparison": "a comparison whose result is thrown away",
    "early-return": "a return before the assertions",
    "swallowed-assertion": "an assertion whose failure is caught and dropped",
    "outcome-hook": "a pytest hook that can rewrite, drop or deselect test outcomes",
    "collection-off": "pytest told to collect nothing from it",
    "process-exit": "a process exit that ends the run before the assertions can fail",
    "vacuous-check": "a check that cannot fail",
    "unreachable-check": "a check under a condition that is always false, so it never runs",
}
# pytest hooks through which a conftest.py or plugin can turn a failure into a pass or make a test vanish
OUTCOME_HOOKS = {"pytest_runtest_makereport", "pytest_report_teststatus", "pytest_collection_modifyitems",
                 "pytest_runtest_call", "pytest_pyfunc_call", "pytest_runtest_protocol", "pytest_runtest_logreport",
                 "pytest_ignore_collect", "pytest_pycollect_makeitem", "pytest_sessionfinish"}
SKIP_CALLS = {"pytest.skip", "pytest.xfail", "pytest.importorskip", "unittest.SkipTest", "pytest.skip.Exception",
              "pytest.xfail.Exception", "pytest.Skipped", "pytest.XFailed"}
SKIP_MARKS = {"pytest.mark.skip", "pytest.mark.skipif", "pytest.mark.xfail", "unittest.skip", "unittest.skipIf",
              "unittest.skipUnless", "unittest.expectedFailure"}
# methods that skip whatever the receiver is named (`self.skipTest`)
SKIP_METHODS = {"skipTest"}
# methods that add a mark to a collected test at run time (`request.node.add_marker(pytest.mark.xfail)`)
MARK_ADDERS = {"add_marker", "applymarker"}
# mark names a string may spell (`request.node.add_marker("xfail")`)
SKIP_MARK_NAMES = {"skip", "skipif", "xfail"}
# the private homes of the public names above, and where a computed attribute could be any of them
_PRIVATE_HOMES = {"_pytest.mark.MARK_GEN.": "pytest.mark.", "_pytest.mark.structures.MARK_GEN.": "pytest.mark.",
                  "_pytest.outcomes.": "pytest.", "unittest.case.": "unittest."}
_ANY_SKIP_OWNERS = {"pytest", "pytest.mark", "unittest", "pytest.skip", "pytest.xfail"}
# calls that end the process (or the pytest session) with whatever status they are given
EXITS = {"os._exit", "sys.exit", "exit", "quit", "builtins.exit", "builtins.quit", "pytest.exit",
         "SystemExit", "builtins.SystemExit", "pytest.Exit"}


def canonical(node: ast.AST, bound: dict[str, str]) -> str:
    """What a node names, through aliases, dynamic attribute spellings and pytest's private modules."""
    plain = dotted(node) and not isinstance(node, ast.Call)  # a call's result is not its callee
    name = resolved(node, bound) or (qualified(node, bound) if plain else "")
    for private, public in _PRIVATE_HOMES.items():
        if name.startswith(private):
            return public + name[len(private):]
    return name


def _any_skip(name: str) -> bool:
    """`getattr(pytest.mark, name)`: the attribute is computed, so it may be a skip."""
    owner, _, attribute = name.rpartition(".")
    return attribute == COMPUTED and owner in _ANY_SKIP_OWNERS


def is_skip_mark(node: ast.AST, bound: dict[str, str]) -> str | None:
    name = canonical(node, bound)
    return name if name in SKIP_MARKS or _any_skip(name) else None


def is_skip_call(node: ast.Call, bound: dict[str, str]) -> str | None:
    name = canonical(node.func, bound)
    return name if name in SKIP_CALLS or _any_skip(name) else None


def skip_marks_in(node: ast.AST, bound: dict[str, str]) -> list[str]:
    """Skip marks named anywhere in a decorator, a `marks=` value or a `pytestmark` assignment."""
    return [name for sub in ast.walk(node) if isinstance(sub, (ast.Attribute, ast.Name, ast.Call, ast.Subscript))
            and (name := is_skip_mark(sub, bound))]
