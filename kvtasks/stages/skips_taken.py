"""test_skips: test_policy's skip marks read again once head's tests ran (amends test_policy).

A skipif the PR adds to a test base had is a weakening when it can skip here; one whose condition
was false on this host, so that the test ran on head and passed (a fix that sets aside one
vendor's GPUs, say), hides nothing this validation relies on: its should-fix becomes a note. A skip
or an xfail mark, and a skipif whose test was skipped or failed, stay as test_policy said.
"""
from __future__ import annotations

from kvtasks.stages import Context, StageResult, StageSpec, repo_tests
from kvtasks.stages.payloads import RepoTests, TestPolicy

NAME = "test_skips"
_SKIPIF = "a new skip/skipif/xfail mark (pytest.mark.skipif"


def _passed_functions(ctx: Context) -> dict[tuple[str, str], bool]:
    """(module as JUnit names it, test function) -> whether every item of it passed on head."""
    head = ctx.result_of(repo_tests.RepoTests)
    passed: dict[tuple[str, str], bool] = {}
    for run in head.runs if head is not None else []:
        if not run.label.startswith("head-repo"):
            continue
        for case in run.cases:
            key = (case.classname, case.name.split("[", 1)[0])
            passed[key] = passed.get(key, True) and case.outcome == "passed"
    return passed


def _ran_and_passed(weakening: str, passed: dict[tuple[str, str], bool]) -> bool:
    where = weakening.split(": ", 1)[0]
    path, _, function = where.partition("::")
    module = path.removesuffix(".py").replace("/", ".")
    found = [ok for (classname, name), ok in passed.items()
             if name == function.rsplit(".", 1)[-1] and (classname == module or classname.startswith(module + "."))]
    return bool(found) and all(found)


def run(ctx: Context) -> StageResult | None:
    policy = ctx.result_of(TestPolicy)
    if policy is None or not any(finding.rule == "policy.comparison-weakened" and _SKIPIF in finding.detail
                                 for finding in policy.findings):
        return None
    passed = _passed_functions(ctx)
    amended = policy.model_copy(deep=True)
    findings = amended.findings
    amended.findings = []
    for finding in findings:
        weakening = finding.detail.removeprefix("comparison weakened without a number moving: ")
        if finding.rule == "policy.comparison-weakened" and _SKIPIF in weakening and _ran_and_passed(weakening, passed):
            amended.finding("policy.skipif-not-taken", "note",
                            f"a skipif the PR adds did not skip here: the test ran on head and passed ({weakening})")
        else:
            amended.findings.append(finding)
    return amended


STAGE = StageSpec(NAME, run, payload=TestPolicy, requires=(RepoTests, TestPolicy))
