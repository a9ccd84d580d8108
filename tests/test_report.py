import pytest

from kvtasks import report
from kvtasks.run import pipeline
from kvtasks.harness import receipts
from kvtasks.stages import Finding, Stage, StageResult, result

REPO = {"worktree": "/w", "base": "b" * 40, "head": "c" * 40, "kind": "unknown", "patch_sha256": "d" * 64}


def results(*extra: StageResult, **facts) -> list[StageResult]:
    base = StageResult(name="run", facts={"repo": REPO, **facts})
    selection = StageResult(name="selection", selection={"target": "t.py", "runner": "pytest",
                                                         "runner_reason": "structure"})
    return [base, selection, *extra]


def passing(name: str, **fields) -> StageResult:
    return result(name, "pass", "ok", **fields)


def test_unbuilt_and_missing_stages_are_backfilled_as_skip():
    composed = pipeline.compose("x", results(passing("merge_sim")))
    assert composed.stages.gpu_claim.status == "skip"
    assert "internal error" in composed.stages.baseline_control.note
    assert any(f.stage == "baseline_control" for f in composed.findings)
    assert composed.verdict == "INCONCLUSIVE" and composed.process_exit_code == 2


def test_halted_runs_say_why_the_rest_did_not_run():
    composed = pipeline.compose("x", results(result("merge_sim", "fail", "conflict"), halt="the patch does not apply"))
    assert composed.stages.correctness_repo_tests.note == "not run: the patch does not apply"
    assert not any("internal error" in f.detail for f in composed.findings)


@pytest.mark.parametrize("severities,verdict,code", [
    (["blocker", "should-fix", "note"], "BLOCK", 1),
    (["should-fix", "note"], "NEEDS_WORK", 1),
    (["note"], "INCONCLUSIVE", 2),
])
def test_findings_decide_before_completeness(severities, verdict, code):
    stage = passing("merge_sim")
    stage.findings = [Finding(rule="merge.patch-does-not-apply", severity=s, stage="merge_sim", detail=s)
                      for s in severities]
    composed = pipeline.compose("x", results(stage))
    assert (composed.verdict, composed.process_exit_code) == (verdict, code)


def complete_run(**receipt) -> list[StageResult]:
    stages = [passing(name) for name in pipeline.REPORT.required
              if name not in ("gpu_claim", "correctness_repo_tests", "execution_receipt", "sensitivity")]
    stages.append(passing("sensitivity", modes={"tail": {"status": "pass", "corrupted_calls": 2}}))
    stages.append(passing("gpu_claim", hip_index=0, arch="gfx942", bdf="0000:01:00.0"))
    stages.append(passing("correctness_repo_tests", exit=0, stats={"executed": 3, "failures": 0, "errors": 0}))
    stages.append(passing("execution_receipt", **receipt))
    stages.append(passing("replay", calls={"head": 2, "base": 2}))  # optional, and PASS needs it where it ran
    identity = {"module": "m", "module_path": "/w/m", "python_executable": "py", "python_version": "3",
                "native_artifacts": []}
    # the report credits the architecture itself, from the claim and the repo tests' run
    return results(*stages, runtime_identity=identity)


def test_pass_needs_every_required_stage_and_the_pass_gate():
    full = {"producer": receipts.PRODUCER, "route": "k:f", "kernel_symbols": ["k:f"],
            "executed_shapes": ["1,2"], "receipt_sha256": "e" * 64}
    run = complete_run(**full)
    run[1].selection.set(expected_route="k:f", shape_vars="M")
    assert pipeline.compose("x", run).verdict == "PASS"


@pytest.mark.parametrize("policy,oracle,withheld", [
    ({"oracle_required": ["pkg/checks.py"]}, None, "the PR changes the test side (pkg/checks.py)"),
    ({"oracle_required": ["pkg/checks.py"]}, result("correctness_base_oracle", "skip", "executed no test"),
     "was not shown to pass base's (executed no test)"),
    ({"reference_from_pr": ["test_new, line 9: ..."]}, None, "takes its expected values from code it supplies"),
])
def test_a_pr_that_changes_its_judge_needs_the_base_oracle_and_an_independent_reference(policy, oracle, withheld):
    full = {"producer": receipts.PRODUCER, "route": "k:f", "kernel_symbols": ["k:f"],
            "executed_shapes": ["1,2"], "receipt_sha256": "e" * 64}
    run = [stage for stage in complete_run(**full) if stage.name != "test_policy"]
    run[1].selection.set(expected_route="k:f", shape_vars="M")
    run += [passing("test_policy", **policy), *([oracle] if oracle else [])]
    composed = pipeline.compose("x", run)
    assert composed.verdict == "INCONCLUSIVE" and withheld in composed.findings[-1].detail
    run.append(passing("correctness_base_oracle"))  # the twin: a passing base oracle, an independent reference
    if "oracle_required" in policy:
        assert pipeline.compose("x", run).verdict == "PASS"


def test_pass_gate_withholds_pass_and_names_what_is_missing():
    run = complete_run(producer="someone else")
    composed = pipeline.compose("x", run)
    assert composed.verdict == "INCONCLUSIVE"
    withheld = [f.detail for f in composed.findings if f.stage == "report"][0]
    assert "--expected-route and --shape-vars" in withheld and "execution_receipt lacks" in withheld


@pytest.mark.parametrize("modes", [{}, {"tail": {"status": "pass", "corrupted_calls": 0}},
                                   {"tail": {"status": "pass", "corrupted_calls": 1}, "nan": {"status": "skip"}}])
def test_pass_gate_needs_a_sensitivity_run_that_corrupted_and_failed(modes):
    full = {"producer": receipts.PRODUCER, "route": "k:f", "kernel_symbols": ["k:f"],
            "executed_shapes": ["1,2"], "receipt_sha256": "e" * 64}
    run = complete_run(**full)
    run[1].selection.set(expected_route="k:f", shape_vars="M")
    run.append(passing("sensitivity", modes=modes))  # a later result replaces the passing one
    composed = pipeline.compose("x", run)
    assert composed.verdict == "INCONCLUSIVE"
    assert "sensitivity: the suite was not shown to fail" in composed.findings[-1].detail


def test_summary_lists_every_stage_and_finding():
    stage = result("merge_sim", "fail", "patch | conflict")
    stage.finding("merge.patch-does-not-apply", "blocker", "does not apply")
    composed = pipeline.compose("x", results(stage, halt="the patch does not apply"))
    # the report itself says what decided its verdict, as its comment and summary lead with it
    assert composed.decided_by == "1 blocker rule: `merge.patch-does-not-apply` (merge_sim)"
    text = report.summary_markdown(composed)
    assert "**BLOCK**" in text and "patch \\| conflict" in text
    assert "- **blocker** `merge.patch-does-not-apply` (merge_sim): does not apply" in text
    # the comment's order: the verdict, what decided it, the findings, then the stages
    assert text.index("**Decided by:** 1 blocker rule: `merge.patch-does-not-apply`") < text.index("### Findings") \
        < text.index("| stage | status | reason |")
    for name in pipeline.REPORT.names:
        assert f"| {name} |" in text


def test_stage_objects_keep_their_own_fields():
    composed = pipeline.compose("x", results(passing("merge_sim", changed_paths={"a.py": "M"})))
    assert composed.model_dump()["stages"]["merge_sim"]["changed_paths"] == {"a.py": "M"}
    assert isinstance(composed.stages.merge_sim, Stage)


def test_the_schema_lists_every_stage_and_its_fields():
    from kvtasks.run.pipeline import REPORTED
    from kvtasks.stages import PAYLOADS

    schema = pipeline.REPORT.json_schema()
    stages = schema["$defs"]["Stages"]["properties"]
    assert list(stages) == [row.name for row in REPORTED]
    for row in REPORTED:
        payload = PAYLOADS[row.name]  # every stage the report shows declares its payload
        fields = schema["$defs"][payload.__name__]["properties"]
        assert {"status", "note"} < set(fields) and len(fields) > 3, row.name
        if row.tiered:  # the report says on each of them what ran its targets
            assert "evidence_tier" in payload.model_fields, row.name
    assert set(schema["$defs"]["Stages"]["required"]) == set(pipeline.REPORT.required)
    assert "cells" in schema["$defs"]["CorrectnessGrid"]["properties"]


def test_a_declared_payload_refuses_a_field_it_does_not_declare():
    with pytest.raises(ValueError, match="reuse_me"):
        result("baseline_control", "pass", "ok", reuse_me=True)


@pytest.mark.parametrize("log_bytes, covered", [(120, {"gfx942": "runtime"}), (0, {})])
def test_a_script_grid_that_printed_credits_the_claimed_arch(log_bytes, covered):
    stages = [passing(name) for name in pipeline.REPORT.required if name not in ("gpu_claim", "correctness_grid")]
    stages.append(passing("gpu_claim", hip_index=0, arch="gfx942", bdf="0000:01:00.0"))
    stages.append(passing("correctness_grid", exit=0, log_bytes=log_bytes,
                          stats={"executed": 1, "basis": "script exit status", "observed_work": 4}))
    assert pipeline.compose("x", results(*stages)).arch_coverage == covered


@pytest.mark.parametrize("replay,verdict", [
    (result("replay", "skip", "no route call could be captured", required=False), "PASS"),
    (result("replay", "skip", "the head replay exited 1", required=True), "INCONCLUSIVE"),
    (result("replay", "skip", "--no-replay: the route was not replayed outside the test"), "INCONCLUSIVE"),
])
def test_pass_needs_the_replay_wherever_a_call_could_be_captured(replay, verdict):
    full = {"producer": receipts.PRODUCER, "route": "k:f", "kernel_symbols": ["k:f"],
            "executed_shapes": ["1,2"], "receipt_sha256": "e" * 64}
    run = [stage for stage in complete_run(**full) if stage.name != "replay"] + [replay]
    run[1].selection.set(expected_route="k:f", shape_vars="M")
    assert pipeline.compose("x", run).verdict == verdict
