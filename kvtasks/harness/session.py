"""A merged pytest session, read back as the runs it stands for.

On the argnames channel one pytest launch runs the repository's own tests, the grid's cells and the
poisoned cell: the probe adds the last two beside the parametrize mark's own cells (with the ids
pytest makes for their values and no mark, so nothing in the process tells them from the
repository's), runs them after the repository's tests, counts the route per part and lists, in its
receipt, the node ids it added and the grid row each ran. JUnit names the items, so the session
reads back as three runs (`part`): "repo", "grid" and "proof", each with the exit pytest would have
given it alone (1 with a failure or error, 5 with no item, else 0), its own items' counts, its own
part of the receipt and a log of its own items' outcomes (a grid or proof part without items exits
0: alone, it would have run the repository's other tests). A part names its session
(`TargetRun.session`) and is never counted as a launch of its own.

A session that did not end as pytest ends a run of tests (a timeout, a crash, a signal, an
interrupted collection, a stop before its last item, a rewritten exit status, the repository's own
session hooks or hooks that can rewrite an item's report, a teardown failing on an added item,
xdist workers, a missing JUnit file or receipt) stands for nothing: `unusable` says why, and the
caller runs the parts alone.
"""
from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from kvtasks.harness.in_target.receipt import PartReceipt
from kvtasks.harness.junit import FAILED_TESTS_KEPT, PYTEST_NOTHING_COLLECTED, CaseResult, ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.harness.receipts import StampedReceipt

_ENDED_AS_TESTS = (0, 1)  # pytest's OK and TESTS_FAILED: every item ran and JUnit holds it


def unusable(session: TargetRun) -> str | None:
    """Why the session cannot stand for its parts; None when it can."""
    receipt = session.receipt
    if session.timed_out:
        return f"it timed out ({session.stats.note})"
    if session.exit not in _ENDED_AS_TESTS:
        return f"it ended with exit {session.exit}, not as a run of tests ({session.log_tail(2)})"
    if not session.cases:
        return f"it left no readable JUnit XML ({session.stats.note or 'no items'})"
    if receipt is None or receipt.parts is None:
        return f"it left no merged receipt ({session.receipt_note or 'the probe did not count the parts'})"
    if receipt.xdist:
        return f"pytest-xdist ({receipt.xdist}) ran its items in workers the probe does not count"
    if not receipt.merged_marks:
        return "the probe found no parametrize mark to add the grid's cells to"
    if receipt.session_stopped:
        return f"it stopped before its last item ({receipt.session_stopped})"
    if receipt.session_hooks:
        return ("the repository's own session hooks see the whole session's outcome, which the poisoned cell "
                f"makes a failure ({', '.join(receipt.session_hooks[:3])})")
    if receipt.report_hooks:
        return ("the repository's own hooks can rewrite an item's report or outcome or call its test, and so "
                f"treat the items kvtasks added apart from its own ({', '.join(receipt.report_hooks[:3])})")
    if receipt.exit_rewritten:
        return f"a hook rewrote its exit status ({receipt.exit_rewritten})"
    if receipt.added_teardown_failed:
        return ("a teardown failed on an item kvtasks added, where a higher-scoped fixture reports on the last item "
                f"that used it ({receipt.added_teardown_failed[0]})")
    named = {junit_key(nodeid) for nodeid in receipt.added or {}}
    if not named or not named <= {(case.classname, case.name) for case in session.cases}:
        return "its JUnit XML does not name every item kvtasks added"
    return None


def junit_key(nodeid: str) -> tuple[str, str]:
    """A pytest node id as its JUnit testcase names it (classname, name), the way pytest's junitxml
    plugin mangles it: the path dotted without .py, the parameters kept whole."""
    path, bracket, parameters = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + parameters
    return ".".join(names[:-1]), names[-1]


def cells_by_case(run: TargetRun) -> dict[tuple[str, str], int]:
    """Which grid row each of a run's JUnit items ran, as the probe's receipt says (its `cells`):
    the ids pytest gave the items name nothing of the grid."""
    cells = run.receipt.cells if run.receipt else None
    return {junit_key(nodeid): index for nodeid, index in (cells or {}).items()}


def part(session: TargetRun, name: str, label: str) -> TargetRun:
    """The `name` part ("repo", "grid" or "proof") of a usable session, as a run labelled `label`."""
    by_case = {junit_key(nodeid): part for nodeid, part in (session.receipt.added or {}).items()}
    cases = [case for case in session.cases if by_case.get((case.classname, case.name), "repo") == name]
    stats = _stats(cases, session, name)
    # no item: the repository's part is pytest's "nothing collected"; a grid or proof part alone would
    # have run the repository's other tests too, so its missing cells are judged as cells, not as a crash
    exit_code = 1 if stats.failures or stats.errors else PYTEST_NOTHING_COLLECTED if not cases and name == "repo" else 0
    receipt = _receipt(session.receipt, name, label)
    if session.stats.observed_work is not None:
        stats.observed_work = sum(receipt.route_calls.values())
    log = Path(session.log).with_name(f"{label}.log")
    log.write_text(_log(session, name, cases, stats))
    return session.model_copy(update={
        "label": label, "exit": exit_code, "duration_s": 0.0, "log": str(log), "stats": stats, "cases": cases,
        "receipt": receipt, "session": session.label}, deep=True)


def _stats(cases: list[CaseResult], session: TargetRun, name: str) -> ExecutionStats:
    failures = sum(case.outcome == "failed" for case in cases)
    errors = sum(case.outcome == "error" for case in cases)
    skipped = sum(case.outcome == "skipped" for case in cases)
    failed = [case.test_id for case in cases if case.outcome in ("failed", "error")]
    return ExecutionStats(tests=len(cases), failures=failures, errors=errors, skipped=skipped,
                          executed=max(0, len(cases) - skipped - errors), junit_xml=session.stats.junit_xml,
                          basis=f"pytest-junit: the {name} items of the merged session {session.label}",
                          note="" if cases else f"the merged session {session.label} ran no {name} item",
                          failed_tests=failed[:FAILED_TESTS_KEPT])


def _receipt(receipt: StampedReceipt, name: str, label: str) -> StampedReceipt:
    """The session's receipt as this part alone would have written it: its route calls and shapes,
    and the NaN/Inf watch and the CPU tier's per-test findings of its own items."""
    counted = (receipt.parts or {}).get(name) or PartReceipt(route="", kernel_symbols=[], route_calls={},
                                                            executed_shapes=[])
    added = receipt.added or {}

    def part_of(test: str) -> str:
        return added.get(test, "repo")

    corrupted, tier = receipt.sensitivity, receipt.cpu_tier
    if corrupted:  # a corrupted session: this part's tests, as its run alone would have counted them
        own = corrupted.parts.get(name)
        corrupted = replace(corrupted, parts={}, **({item.name: getattr(own, item.name) for item in fields(own)}
                                                    if own else {}))
    if tier:
        tier = {**tier, **{key: [entry for entry in tier.get(key) or []
                                 if part_of(str(entry.get("test") or "")) == name]
                           for key in ("violations", "sparse_launches")},
                "bf16_skipped": [test for test in tier.get("bf16_skipped") or [] if part_of(test) == name]}
    return replace(receipt, route=counted.route, kernel_symbols=counted.kernel_symbols,
                   route_calls=counted.route_calls, executed_shapes=counted.executed_shapes, label=label,
                   parts=None, merged_marks=None, added=None, sensitivity=corrupted, cpu_tier=tier,
                   cells={test: index for test, index in (receipt.cells or {}).items() if part_of(test) == name},
                   route_outputs=[entry for entry in receipt.route_outputs if part_of(entry.cell) == name])


def _log(session: TargetRun, name: str, cases: list[CaseResult], stats: ExecutionStats) -> str:
    """What this part's items did, as pytest's short summary would say it; the session's whole
    output is its own log."""
    lines = [f"the {name} part of the merged pytest session {session.label}; its whole output: {session.log}"]
    for case in cases:
        if case.outcome != "passed":
            message = " ".join(case.message.split())[:200]
            lines.append(f"{case.outcome.upper()} {case.test_id}" + (f" - {message}" if message else ""))
    passed = stats.tests - stats.failures - stats.errors - stats.skipped
    lines.append(f"{stats.failures} failed, {passed} passed, {stats.skipped} skipped, {stats.errors} errors "
                 f"({name} items of {session.label})")
    return "\n".join(lines) + "\n"
