"""Launch one target run and read back what it did: exit status, JUnit counts, its log.

Every launch gets its own process group (kvtasks.processes); a timeout, an interrupt of the
validator or the end of the run kills the whole group, grandchildren included; the target dies
with its validator, and the group is journalled so a killed validator's leftovers are killed.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Literal, Mapping

from junitparser import Error, Failure, JUnitXml, TestSuite
from pydantic import BaseModel

from kvtasks import faults, processes
from kvtasks.harness.receipts import StampedReceipt

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


class TargetRun(BaseModel):
    label: str
    runner: Literal["pytest", "script"]
    command: list[str]
    exit: int | None
    timed_out: bool = False
    duration_s: float
    log: str
    stats: ExecutionStats
    receipt: StampedReceipt | None = None  # None: the run left no valid receipt of its own (receipt_note)
    receipt_path: str | None = None
    receipt_sha256: str | None = None
    receipt_note: str = ""
    # set when pytest refused the repository's own configuration (exit 4) and the run was retried
    # once with -o addopts=: {"dropped": the addopts the repository's config file sets, "file",
    # "error": pytest's message, "first_log"}
    addopts_dropped: dict | None = None
    cases: list[CaseResult] = []
    # the merged session (its label) this run is a part of: read from that launch, never one of its own
    session: str | None = None
    # the step that launched this run, when another adopted it (harness.adopt): counted as that one's launch
    adopted_from: str | None = None
    # the scratch folder its process saw (its phase's caches, its launch's folder): a run repeating it sees the same
    scratch: str | None = None

    @property
    def usage_error(self) -> bool:
        return self.runner == "pytest" and self.exit == PYTEST_USAGE_ERROR

    @property
    def target_absent(self) -> bool:
        """pytest refused the run because the target node is not in the file (exit 4, "not found")."""
        return self.usage_error and bool(_NOT_FOUND.search(self.stats.note or ""))

    @property
    def passed(self) -> bool:
        return self.exit == 0 and not self.timed_out

    @property
    def log_bytes(self) -> int:
        try:
            return Path(self.log).stat().st_size
        except OSError:
            return 0

    def log_tail(self, lines: int = 4, width: int = 220) -> str:
        try:
            text = Path(self.log).read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])[-width:]


def command_for(runner: str, python_bin: str, target: str, junit: Path, argv: list[str], probe: str | None) -> list[str]:
    """The in-target package (`python -m <its random name>`) starts first and runs pytest with its
    plugin (having read its configuration before any plugin the repository's pytest configuration
    names loads), or the script under its runpy shim; a timing run (no probe: a traced kernel is not
    the kernel being timed) runs the file bare."""
    if probe is None:
        return [python_bin, target.split("::", 1)[0], *argv]
    if runner == "pytest":
        return [python_bin, "-m", probe, "--pytest", target, "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                *argv]
    return [python_bin, "-m", probe, target.split("::", 1)[0], *argv]


def launch(
    *,
    label: str,
    runner: Literal["pytest", "script"],
    target: str,
    cwd: Path,
    env: Mapping[str, str],
    python_bin: str,
    run_dir: Path,
    timeout_s: int,
    probe: str | None,
    argv: list[str] | None = None,
    prefix: tuple[str, ...] = (),
    private: Path | None = None,
    before_retry: Callable[[], None] | None = None,
) -> TargetRun:
    """One target run; its JUnit file and log end up as run_dir/junit-<label>.xml and
    run_dir/<label>.log. With `private` (a folder of this launch's own) the process writes them
    there under neutral names, so no path it can read names its label; `before_retry` runs before
    a second attempt."""
    run_dir.mkdir(parents=True, exist_ok=True)
    kept_junit, kept_log = run_dir / f"junit-{label}.xml", run_dir / f"{label}.log"
    if private is not None:
        private.mkdir(parents=True, exist_ok=True)
    junit, log = (private / "junit.xml", private / "output.log") if private is not None else (kept_junit, kept_log)
    command = [*prefix, *command_for(runner, python_bin, target, junit, list(argv or []), probe)]
    done = _launch_once(label, runner, command, cwd, env, junit, log, timeout_s)
    text = Path(log).read_text(errors="replace") if done.usage_error and probe is not None else ""
    configured = configured_addopts(text, cwd) if text else {}
    if configured.get("dropped") and not _NOT_FOUND.search(usage_message(text)):
        # pytest refused its own command line before running anything, and the repository's addopts
        # are on it: most often they name a plugin this interpreter lacks (--cov without pytest-cov).
        # Once more without them.
        first_log = kept_log.with_name(f"{label}-usage-error.log")
        log.replace(first_log)
        if before_retry is not None:
            before_retry()
        retry = _launch_once(label, runner, [*command, "-o", "addopts="], cwd, env, junit, log, timeout_s)
        retry.addopts_dropped = {**configured, "error": usage_message(text), "first_log": str(first_log)}
        retry.duration_s = round(retry.duration_s + done.duration_s, 3)
        done = retry
    if private is not None:
        _keep(done, junit, kept_junit, log, kept_log)
    return done


def _keep(done: TargetRun, junit: Path, kept_junit: Path, log: Path, kept_log: Path) -> None:
    """Move a run's JUnit file and log from its launch's own folder to the label's names."""
    kept_junit.unlink(missing_ok=True)
    if junit.is_file():
        junit.replace(kept_junit)
    if log.is_file():
        log.replace(kept_log)
    done.log = str(kept_log)
    if done.stats.junit_xml:
        done.stats.junit_xml = str(kept_junit)


def _launch_once(label, runner, command, cwd, env, junit, log, timeout_s) -> TargetRun:
    junit.unlink(missing_ok=True)
    started = time.monotonic()
    timed_out = False
    with open(log, "wb") as log_file:
        process = processes.popen(command, track=True, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                  stdout=log_file, stderr=subprocess.STDOUT)
        try:
            faults.point("launch", label)
            timed_out = processes.wait_or_expire(process, timeout_s)
        finally:
            processes.kill_group(process)
    duration = time.monotonic() - started
    exit_code = None if timed_out else process.returncode
    cases = pytest_cases(junit) if runner == "pytest" else []
    if runner == "pytest":
        stats = pytest_stats(junit, exit_code)
        if exit_code == PYTEST_USAGE_ERROR:
            stats.note = f"pytest usage error (exit 4), no test ran: {usage_message(log.read_text(errors='replace'))}"
    else:
        stats = script_stats(exit_code)
    if timed_out:
        stats.note = f"timed out after {timeout_s}s; the process group was killed"
    return TargetRun(label=label, runner=runner, command=command, exit=exit_code, timed_out=timed_out,
                     duration_s=round(duration, 3), log=str(log), stats=stats, cases=cases)


def usage_message(log_text: str) -> str:
    """pytest's own one-line complaint about its command line."""
    lines = [line.strip() for line in log_text.splitlines() if "error:" in line.lower()] or \
        [line.strip() for line in log_text.splitlines() if line.strip()][-1:] or ["(no output)"]
    return lines[-1][:300]


# a usage error about the target itself (a node that does not exist), which no addopts cause
_NOT_FOUND = re.compile(r"not found|no match in any of", re.IGNORECASE)
_INI_SECTIONS = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}


def configured_addopts(log_text: str, cwd: Path) -> dict:
    """The addopts `-o addopts=` drops: read from the config file pytest named (`inifile:`/`configfile:`)."""
    import configparser

    named = re.search(r"^\s*(?:inifile|configfile):\s*(\S+)", log_text, re.MULTILINE)
    path = Path(named.group(1)) if named else None
    if path is not None and not path.is_absolute():
        path = cwd / path
    found = {"file": str(path.name) if path else None, "dropped": ""}
    if path is None or not path.is_file():
        return found
    try:
        if path.name == "pyproject.toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib
            options = tomllib.loads(path.read_text()).get("tool", {}).get("pytest", {}).get("ini_options", {})
            value = options.get("addopts", "")
        else:
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(path.read_text())
            value = parser.get(_INI_SECTIONS.get(path.name, "pytest"), "addopts", fallback="")
    except Exception as exc:  # an unreadable config file: say so instead of guessing
        return {**found, "dropped": f"(unreadable: {exc})"}
    found["dropped"] = " ".join(value) if isinstance(value, list) else " ".join(str(value).split())
    return found


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


def pytest_runnable(python_bin: str, env: Mapping[str, str], cwd: Path,
                    timeout_s: float = 120) -> processes.Finished:
    """`python -m pytest --version` in the target's environment: ok, or why not (its timeout too)."""
    return processes.run([python_bin, "-m", "pytest", "--version"], cwd=cwd, env=env, timeout_s=timeout_s)
