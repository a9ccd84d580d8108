"""Launch one target run and read back what it did: exit status, JUnit counts, its log.

Every launch gets its own process group (kvtasks.system.processes); a timeout, an interrupt of the
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

from kvtasks.system import containment, faults, processes
from kvtasks.harness.capped_log import DEFAULT_CEILING, CappedLog
from kvtasks.harness.junit import PYTEST_USAGE_ERROR, pytest_cases, pytest_stats, script_stats
from kvtasks.harness.target_run import NOT_FOUND, TargetRun


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
    log_ceiling: int = DEFAULT_CEILING,
    beat: Callable[[], None] | None = None,
) -> TargetRun:
    """One target run; its JUnit file and log end up as run_dir/junit-<label>.xml and
    run_dir/<label>.log. With `private` (a folder of this launch's own) the process writes them
    there under neutral names, so no path it can read names its label; `before_retry` runs before
    a second attempt; `beat` runs as the wait for the process goes on (kvtasks.harness.heartbeat)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    kept_junit, kept_log = run_dir / f"junit-{label}.xml", run_dir / f"{label}.log"
    if private is not None:
        private.mkdir(parents=True, exist_ok=True)
    junit, log = (private / "junit.xml", private / "output.log") if private is not None else (kept_junit, kept_log)
    command = [*prefix, *command_for(runner, python_bin, target, junit, list(argv or []), probe)]
    done = _launch_once(label, runner, command, cwd, env, junit, log, timeout_s, log_ceiling, beat)
    text = Path(log).read_text(errors="replace") if done.usage_error and probe is not None else ""
    configured = configured_addopts(text, cwd) if text else {}
    if configured.get("dropped") and not NOT_FOUND.search(usage_message(text)):
        # pytest refused its own command line before running anything, and the repository's addopts
        # are on it: most often they name a plugin this interpreter lacks (--cov without pytest-cov).
        # Once more without them.
        first_log = kept_log.with_name(f"{label}-usage-error.log")
        log.replace(first_log)
        if before_retry is not None:
            before_retry()
        retry = _launch_once(label, runner, [*command, "-o", "addopts="], cwd, env, junit, log, timeout_s,
                             log_ceiling, beat)
        retry.addopts_dropped = {**configured, "error": usage_message(text), "first_log": str(first_log)}
        retry.duration_s = round(retry.duration_s + done.duration_s, 3)
        retry.survivors = [*done.survivors, *retry.survivors]
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


def _launch_once(label, runner, command, cwd, env, junit, log, timeout_s, log_ceiling, beat=None) -> TargetRun:
    junit.unlink(missing_ok=True)
    started = time.monotonic()
    output = CappedLog(log, log_ceiling)

    def handed_over() -> None:  # the child holds the pipe's write end: ours closes, and the hook may fire
        output.started()
        faults.point("launch", label)

    try:
        # what the leader left is ended before the output is read to its end: a process left holding
        # the pipe would keep the drain waiting
        process, timed_out, survivors = containment.launched(
            command, timeout_s, handed_over, beat, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
            stdout=output.write_end, stderr=subprocess.STDOUT)
    finally:
        output.started()  # when the child never started
        output.close()
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
                     duration_s=round(duration, 3), log=str(log), stats=stats, cases=cases, survivors=survivors,
                     log_written_bytes=output.total, log_cut_bytes=output.cut)


def usage_message(log_text: str) -> str:
    """pytest's own one-line complaint about its command line."""
    lines = [line.strip() for line in log_text.splitlines() if "error:" in line.lower()] or \
        [line.strip() for line in log_text.splitlines() if line.strip()][-1:] or ["(no output)"]
    return lines[-1][:300]


# a usage error about the target itself (a node that does not exist), which no addopts cause
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


def pytest_runnable(python_bin: str, env: Mapping[str, str], cwd: Path,
                    timeout_s: float = 120) -> processes.Finished:
    """`python -m pytest --version` in the target's environment: ok, or why not (its timeout too)."""
    return processes.run([python_bin, "-m", "pytest", "--version"], cwd=cwd, env=env, timeout_s=timeout_s)
