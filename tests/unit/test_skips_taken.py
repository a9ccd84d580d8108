"""test_skips: a skipif the PR adds whose test ran on head and passed is a note, not a should-fix."""
from kvtasks.harness.junit import CaseResult, ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import StageResult, repo_tests, skips_taken, test_policy
from kvtasks.stages import payloads
from tests.kit import stage_context

WEAKENED = "tests/test_k.py::test_rows: a new skip/skipif/xfail mark ({mark})"


def _context(mark: str, outcome: str):
    policy = StageResult(name=test_policy.NAME, stage=payloads.TestPolicy(status="pass"))
    policy.finding("policy.comparison-weakened", "should-fix",
                   f"comparison weakened without a number moving: {WEAKENED.format(mark=mark)}")
    cases = [CaseResult(name=f"test_rows[{n}]", classname="tests.test_k", outcome=outcome if n == 2 else "passed")
             for n in (1, 2)]
    head = TargetRun(label="head-repo", runner="pytest", command=[], exit=0, duration_s=0.1, log="",
                     stats=ExecutionStats(tests=2, executed=2), cases=cases)
    ran = StageResult(name=repo_tests.NAME, stage=payloads.RepoTests(status="pass"), runs=[head])
    return stage_context({"tests/test_k.py": ""}, target="tests/test_k.py",
                         earlier={test_policy.NAME: policy, repo_tests.NAME: ran})


def test_a_skipif_whose_test_ran_and_passed_on_head_is_a_note():
    amended = skips_taken.run(_context("pytest.mark.skipif", "passed"))
    assert [(f.rule, f.severity) for f in amended.findings] == [("policy.skipif-not-taken", "note")]
    assert amended.name == test_policy.NAME


def test_a_skipif_that_skipped_or_failed_and_an_xfail_stay_weakenings():
    for mark, outcome in (("pytest.mark.skipif", "skipped"), ("pytest.mark.skipif", "failed"),
                          ("pytest.mark.xfail", "passed")):
        amended = skips_taken.run(_context(mark, outcome))
        assert amended is None or [(f.rule, f.severity) for f in amended.findings] == [
            ("policy.comparison-weakened", "should-fix")], (mark, outcome)
