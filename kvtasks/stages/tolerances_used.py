"""tolerances_used: the tolerance each judging call really received, base against head (amends
test_policy).

test_policy reads tolerances where the test spells them; a PR can widen one where no reader looks (a
constant in the kernel's package, `finfo(ACC_DTYPE).eps * 84` with ACC_DTYPE switched from f32 to
f16). The probe records each judging call of the checkout's code with its effective rtol, atol,
equal_nan and check_dtype (kvtasks.harness.in_target.judges). Base's and head's runs of the target
and of the grid are paired by test, caller file:line and ordinal, wherever the caller's file is the
same on both sides: a call looser on head than on base is a should-fix naming both values (a blocker
when the base oracle fails too: the looser tolerance is then what lets head's failures through), and
a call base made that head's same passing test no longer makes is a should-fix. A hand-written
comparison calls no judging function and is invisible here (docs/trust-model.md).
"""
from __future__ import annotations

from kvtasks.harness.in_target.receipt import Judgment
from kvtasks.harness.junit import junit_id
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import Context, StageResult, StageSpec
from kvtasks.stages.base_oracle import BaseOracle
from kvtasks.stages.payloads import BaselineControl, CorrectnessGrid, RepoTests, TestPolicy

NAME = "tolerances_used"
# head's run -> base's run of the same tests
PAIRS = {"head-repo": "base-repo", "head-grid": "base-grid"}
LISTED = 5  # calls named in one finding; the rest are counted
Key = tuple[str, str, int]  # (test, caller file:line, ordinal)


def _side(runs: list[TargetRun], label: str) -> tuple[dict[Key, Judgment], set[str], int]:
    """A label's judging calls by key, the tests that passed in it, and the calls its receipts dropped."""
    calls: dict[Key, Judgment] = {}
    passed: set[str] = set()
    dropped = 0
    for run in runs:
        if run.label != label or run.receipt is None:
            continue
        cases = {case.test_id: case.outcome for case in run.cases}
        passed |= {test for test, outcome in cases.items() if outcome == "passed"}
        dropped += run.receipt.judgments_dropped
        for call in run.receipt.judgments:
            test = junit_id(call.test)
            if not cases or test in cases:  # a merged session's receipt holds its other parts' calls too
                calls.setdefault((test, call.caller, call.ordinal), call)
    return calls, passed, dropped


def _spelt(call: Judgment) -> str:
    flags = [f"{name}={value}" for name, value in (("equal_nan", call.equal_nan), ("check_dtype", call.check_dtype))
             if value is not None]
    dtypes = f" (defaults for {'/'.join(call.dtypes)})" if call.dtypes else ""
    return f"{call.function}(rtol={call.rtol:g}, atol={call.atol:g}{', ' if flags else ''}{', '.join(flags)}){dtypes}"


def looser(base: Judgment, head: Judgment) -> bool:
    """Whether head's call accepts something base's refused: a larger tolerance, NaN or a dtype let through."""
    if None in (base.rtol, base.atol, head.rtol, head.atol):
        return False
    return head.rtol > base.rtol or head.atol > base.atol or (head.equal_nan is True and base.equal_nan is False) \
        or (head.check_dtype is False and base.check_dtype is True)


def compare(base_runs: list[TargetRun], head_runs: list[TargetRun], changed: set[str]
            ) -> tuple[list[str], list[str]]:
    """(calls looser on head, calls head no longer makes), each named with where and both values."""
    widened, vanished = [], []
    for head_label, base_label in PAIRS.items():
        before, base_passed, base_dropped = _side(base_runs, base_label)
        after, head_passed, head_dropped = _side(head_runs, head_label)
        for key, call in before.items():
            test, caller, ordinal = key
            if caller.rpartition(":")[0] in changed:  # a changed file's lines pair with nothing
                continue
            now = after.get(key)
            where = f"{test} at {caller}" + (f" (call {ordinal + 1})" if ordinal else "")
            if now is None:
                if test in base_passed and test in head_passed and not (base_dropped or head_dropped):
                    vanished.append(f"{where}: {_spelt(call)} on base, no such call on head")
            elif looser(call, now):
                widened.append(f"{where}: {_spelt(call)} on base, {_spelt(now)} on head")
    return list(dict.fromkeys(widened)), list(dict.fromkeys(vanished))


def _named(calls: list[str]) -> str:
    more = f"; and {len(calls) - LISTED} more" if len(calls) > LISTED else ""
    return "; ".join(calls[:LISTED]) + more


def run(ctx: Context) -> StageResult | None:
    policy = ctx.result_of(TestPolicy)
    if policy is None or ctx.head_view is None:
        return None
    base, head = ctx.result_of(BaselineControl), ctx.result_of(RepoTests)
    grid = ctx.result_of(CorrectnessGrid)
    head_runs = [*(head.runs if head else []), *(grid.runs if grid else [])]
    widened, vanished = compare(base.runs if base else [], head_runs, set(ctx.head_view.changes))
    if not widened and not vanished:
        return None
    amended = policy.model_copy(deep=True)
    if widened:
        oracle = ctx.result_of(BaseOracle)
        failing = oracle is not None and oracle.stage.status == "fail"
        amended.finding("policy.effective-tolerance-looser", "blocker" if failing else "should-fix",
                        f"a comparison received a looser tolerance on head than on base"
                        f"{', and the base oracle fails' if failing else ''}: {_named(widened)}")
    if vanished:
        amended.finding("policy.judging-call-vanished", "should-fix",
                        f"a judging call base's passing test made is gone from head's: {_named(vanished)}")
    return amended


STAGE = StageSpec(NAME, run, payload=TestPolicy, requires=(BaselineControl, RepoTests, TestPolicy),
                  reads_if_present=(CorrectnessGrid, BaseOracle))
