"""What a pytest run's JUnit file says: its counts and each item's outcome (junitparser), and a
script run's counts from its exit status."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from junitparser import Error, Failure, JUnitXml, TestSuite
from pydantic import BaseModel

PYTEST_USAGE_ERROR = 4
PYTEST_NOTHING_COLLECTED = 5
FAILED_TESTS_KEPT = 50


class ExecutionStats(BaseModel):
    tests: int = 0
    failures: int = 0
    errors: int = 0
    skipped: int = 0
    executed: int = 0
    observed_work: int | None = None
    junit_xml: str | None = None
    basis: str = ""
    note: str = ""
    # which test ids failed or errored (the first FAILED_TESTS_KEPT): a published page names the failing
    # grid cells from them, after the run's folder may be gone
    failed_tests: list[str] = []


class CaseResult(BaseModel):
    """One JUnit test item: which ran, which were skipped (xfail included), and why one failed."""

    name: str
    classname: str = ""
    outcome: Literal["passed", "failed", "error", "skipped"]
    message: str = ""

    @property
    def test_id(self) -> str:
        """The item as failed_tests names it: classname::name."""
        return f"{self.classname}::{self.name}" if self.classname else self.name


def junit_id(nodeid: str) -> str:
    """A pytest node id as the runs' JUnit cases name it (classname::name)."""
    head, bracket, params = nodeid.partition("[")
    parts = head.split("::")
    module = parts[0].removesuffix(".py").replace("/", ".")
    return "::".join([".".join([module, *parts[1:-1]]), parts[-1] + bracket + params]) if len(parts) > 1 else nodeid


def pytest_stats(junit: Path, exit_code: int | None) -> ExecutionStats:
    if exit_code == PYTEST_USAGE_ERROR and not junit.is_file():
        return ExecutionStats(basis="pytest usage error: nothing was collected or run")  # not a test failure
    if not junit.is_file():
        return ExecutionStats(errors=1, note="JUnit XML missing: pytest died before writing results")
    try:
        xml = JUnitXml.fromfile(str(junit))
    except Exception as exc:  # junitparser raises lxml/ElementTree errors of several kinds
        return ExecutionStats(errors=1, note=f"JUnit XML unreadable: {exc}")
    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    tests = sum(suite.tests or 0 for suite in suites)
    failures = sum(suite.failures or 0 for suite in suites)
    errors = sum(suite.errors or 0 for suite in suites)
    skipped = sum(suite.skipped or 0 for suite in suites)
    note = "pytest collected no tests" if exit_code == PYTEST_NOTHING_COLLECTED else ""
    failed = [f"{case.classname}::{case.name}" if case.classname else case.name
              for suite in suites for case in suite if any(isinstance(r, (Failure, Error)) for r in case.result)]
    return ExecutionStats(
        tests=tests, failures=failures, errors=errors, skipped=skipped,
        # a collection or fixture error never counts as an executed test
        executed=max(0, tests - skipped - errors), junit_xml=str(junit), basis="pytest-junit", note=note,
        failed_tests=failed[:FAILED_TESTS_KEPT],
    )


def pytest_cases(junit: Path) -> list[CaseResult]:
    try:
        xml = JUnitXml.fromfile(str(junit))
    except Exception:  # missing or unreadable: pytest_stats says so; there are no items to name
        return []
    cases = []
    for suite in [xml] if isinstance(xml, TestSuite) else list(xml):
        for case in suite:
            outcomes = {type(item).__name__.lower(): item for item in case.result}
            outcome = next((name for name in ("error", "failure", "skipped") if name in outcomes), "passed")
            item = outcomes.get(outcome)
            cases.append(CaseResult(name=case.name or "", classname=case.classname or "",
                                    outcome="failed" if outcome == "failure" else outcome,
                                    message=((item.message or "") if item is not None else "")[:300]))
    return cases


def script_stats(exit_code: int | None) -> ExecutionStats:
    return ExecutionStats(
        tests=1, failures=int(exit_code != 0), executed=1,
        basis="script exit status: executed is a liveness signal, not a case count",
    )
