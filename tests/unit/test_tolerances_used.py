"""tolerances_used: the tolerance a judging call received, base against head, wherever it was spelt."""
import pytest

from kvtasks.harness.in_target.receipt import Judgment, Loaded, Receipt
from kvtasks.harness.junit import CaseResult, ExecutionStats, junit_id
from kvtasks.harness.target_run import TargetRun
from kvtasks.harness.receipts import StampedReceipt
from kvtasks.stages import StageResult, baseline_control, repo_tests, test_policy, tolerances_used
from kvtasks.stages import base_oracle, payloads
from tests.kit import stage_context

TEST = "tests/test_k.py::test_rows[7]"
CALLER = "tests/test_k.py:12"


def _run(label: str, calls: list[Judgment], outcome: str = "passed") -> TargetRun:
    receipt = Receipt(nonce="n", route="kern.ops:k", kernel_symbols=["kern.ops:k"], route_calls={"kern.ops:k": 1},
                      unresolved_routes=[], executed_shapes=[], shape_vars=[], exit_status=0, route_outputs=[],
                      loaded=Loaded(), judges_replaced=[], written_arguments={}, judgments=calls)
    return TargetRun(label=label, runner="pytest", command=[], exit=0, duration_s=0.1, log="",
                     stats=ExecutionStats(tests=1, executed=1), receipt=StampedReceipt.of(receipt, label),
                     cases=[CaseResult(name="test_rows[7]", classname="tests.test_k", outcome=outcome)])


def _call(atol=1e-5, rtol=1e-5, caller=CALLER, ordinal=0, **flags) -> Judgment:
    return Judgment(test=TEST, caller=caller, ordinal=ordinal, function="torch.testing.assert_close", rtol=rtol,
                    atol=atol, **flags)


def _context(base_calls, head_calls, *, changed=("kern/ops.py",), oracle="skip", head_outcome="passed"):
    base = StageResult(name=baseline_control.NAME, stage=payloads.BaselineControl(status="pass"),
                       runs=[_run("base-repo", base_calls)])
    head = StageResult(name=repo_tests.NAME, stage=payloads.RepoTests(status="pass"),
                       runs=[_run("head-repo", head_calls, head_outcome)])
    policy = StageResult(name=test_policy.NAME, stage=payloads.TestPolicy(status="pass"))
    judged = StageResult(name=base_oracle.NAME, stage=base_oracle.BaseOracle(status=oracle))
    files = {"tests/test_k.py": "", "kern/ops.py": "TOL = 1e-5\n"}
    head_files = {path: files[path] + "# changed\n" for path in changed}
    return stage_context(files, head_files, target="tests/test_k.py",
                         earlier={baseline_control.NAME: base, test_policy.NAME: policy, repo_tests.NAME: head,
                                  base_oracle.NAME: judged})


def _findings(amended):
    return [] if amended is None else [(finding.rule, finding.severity) for finding in amended.findings]


def test_a_tolerance_widened_on_the_route_side_is_a_should_fix_naming_both_values():
    amended = tolerances_used.run(_context([_call()], [_call(atol=1e-2)]))
    assert _findings(amended) == [("policy.effective-tolerance-looser", "should-fix")]
    detail = amended.findings[0].detail
    assert "atol=1e-05" in detail and "atol=0.01" in detail and CALLER in detail


def test_with_a_failing_base_oracle_it_is_a_blocker():
    amended = tolerances_used.run(_context([_call()], [_call(rtol=1e-1)], oracle="fail"))
    assert _findings(amended) == [("policy.effective-tolerance-looser", "blocker")]


@pytest.mark.parametrize("flags", [{"equal_nan": True}, {"check_dtype": False}])
def test_letting_nan_or_another_dtype_through_is_looser(flags):
    base_flags = {name: not value for name, value in flags.items()}
    amended = tolerances_used.run(_context([_call(**base_flags)], [_call(**flags)]))
    assert _findings(amended) == [("policy.effective-tolerance-looser", "should-fix")]


def test_the_same_or_a_tighter_tolerance_and_a_changed_test_file_say_nothing():
    assert tolerances_used.run(_context([_call()], [_call()])) is None
    assert tolerances_used.run(_context([_call(atol=1e-2)], [_call(atol=1e-5)])) is None
    # the test file changed: its lines are other lines, test_policy reads what it spells
    assert tolerances_used.run(_context([_call()], [_call(atol=1e-2)], changed=("tests/test_k.py",))) is None


def test_a_judging_call_gone_from_a_passing_test_is_a_should_fix_and_a_failing_one_is_not():
    calls = [_call(), _call(ordinal=1)]
    amended = tolerances_used.run(_context(calls, calls[:1]))
    assert _findings(amended) == [("policy.judging-call-vanished", "should-fix")]
    assert "(call 2)" in amended.findings[0].detail
    assert tolerances_used.run(_context(calls, calls[:1], head_outcome="failed")) is None


def test_junit_ids_of_node_ids():
    assert junit_id("tests/test_k.py::test_rows[a::b/c]") == "tests.test_k::test_rows[a::b/c]"
    assert junit_id("tests/test_k.py::TestK::test_x") == "tests.test_k.TestK::test_x"
