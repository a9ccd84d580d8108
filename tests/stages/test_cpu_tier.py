"""Whole validations on the Triton CPU tier, on a host with no GPU."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvtasks.front import cli
from kvtasks.stages import cpu_tier, result, target_runs
from kvtasks.records import RuntimeFingerprint
from kvtasks.harness.in_target.cpu_state import BF16_REASON
from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from tests import triton_repos
from tests.conftest import Validation
from tests.kernel_repos import make_patch
from tests.kit import stage_context
from tests.receipts import receipt

BENCH = Path(__file__).resolve().parents[2] / "bench"
GRID = ["--shape-argnames", "M,N,dtype", "--grid", "4,100,f32;3,1000,f32;2,100,bf16",
        "--expected-route", "softmax:softmax", "--shape-vars", "M,N", "--target", "tests/test_softmax.py"]


@pytest.fixture
def no_gpu(validate, gpu_host):
    """After `validate` has set up its idle GPU: this host reports none."""
    triton_repos.require_triton_cpu()
    gpu_host(amd=[])


def _tier_evidence_is_labelled(result):
    tier = result.report["cpu_tier"]
    assert tier["interpreter"] == "triton" and tier["sanitizer"] == "on"
    assert tier["triton"] and tier["torch"] and tier["numpy"]
    assert result.stage("correctness_grid")["cpu_tier"]["versions"]["triton"] == tier["triton"]  # what the run imported
    assert result.report["arch_coverage"] == {} and result.report["degraded_mode"] == "NO_GPU"
    for name in ("baseline_control", "correctness_repo_tests", "correctness_grid", "execution_receipt"):
        assert result.stage(name)["evidence_tier"] == "triton-interpreter (CPU)"
    assert result.stage("correctness_grid")["interpreter_skipped_cells"] == {"2,100,bf16": BF16_REASON}


def test_an_unmasked_tail_blocks_through_the_grid(tmp_path, no_gpu):
    # in a process of its own, as a user runs it: bench/cpu_tier_repeat.py's smoke run (its one validation, on a
    # host with no GPU; the bench repeats it), whose report is judged here
    done = subprocess.run([sys.executable, str(BENCH / "cpu_tier_repeat.py"), "--smoke", "--reports", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "cpu tier repeat: 1 validations, 1 distinct outcomes, trees changed 0"  # the tree handed back
    result = Validation(1, tmp_path / "report-0-0.json")
    assert lines[-2].startswith("1x exit 1, BLOCK,")
    blockers = result.findings("blocker")
    assert result.verdict == "BLOCK"  # and the process's exit was 1 (above)
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # its own power-of-two tests pass
    assert [f["stage"] for f in blockers] == ["correctness_grid"]
    assert blockers[0]["detail"].startswith("out-of-bounds memory access on head and not on base: load out of "
                                            "bounds in kernel softmax_kernel")
    assert "argument in_ptr at element offset 400 of an allocation of 400 elements" in blockers[0]["detail"]
    _tier_evidence_is_labelled(result)


def test_the_fixed_kernel_passes_the_grid_and_the_verdict_waits_for_a_gpu(tmp_path, validate, no_gpu):
    repo = triton_repos.softmax_repo(tmp_path / "softmax", triton_repos.SOFTMAX_UNMASKED)
    patch = make_patch(repo, {"softmax.py": triton_repos.SOFTMAX_MASKED}, tmp_path / "mask.patch")
    result = validate(repo, "--patch", str(patch), "--cpu-tier", "auto", *GRID)
    assert result.report["test_selection"]["cpu_tier_reason"].startswith("auto: no GPU was claimed")
    assert result.stage("correctness_grid")["status"] == "pass"
    base_grid = result.stage("baseline_control")["s1_grid"]
    assert base_grid["cpu_tier"]["violations"][0]["argument"] == "in_ptr"  # base had the bug
    assert result.findings("blocker") == [] and result.findings("should-fix") == []
    # the sensitivity run corrupts the torch CPU tensor the Triton kernel wrote, and the suite sees it
    sensitivity = result.stage("sensitivity")
    assert sensitivity["status"] == "pass" and sensitivity["corrupted_run"] == "head-grid"
    assert sensitivity["modes"]["tail"]["corrupted_calls"] == 2 and sensitivity["modes"]["tail"]["tests_failed_count"] == 2
    assert sensitivity["evidence_tier"] == "triton-interpreter (CPU)"
    assert result.stage("perf")["status"] == "skip" and "interpreter" in result.stage("perf")["note"]
    assert result.verdict == "INCONCLUSIVE"  # PASS needs a claimed GPU
    _tier_evidence_is_labelled(result)


def test_a_bad_cpu_tier_is_a_usage_error(tmp_path, capsys):
    repo = triton_repos.softmax_repo(tmp_path / "softmax")
    assert cli.main(["--repo", str(repo), "--target", "tests/test_softmax.py", "--cpu-tier", "cuda"]) == 64
    assert "--cpu-tier must be one of off, triton, auto" in capsys.readouterr().err


# -- judging, on recorded runs ---------------------------------------------------------------------

def _run(runner="pytest", exit_code=1, violations=(), sparse=(), crashes=(), failures=0):
    tier = {"violations": list(violations), "sparse_launches": list(sparse), "bf16_skipped": [], "autotuned": {},
            "launches": 1, "crashes": list(crashes)}
    return TargetRun(label="head-grid", runner=runner, command=[], exit=exit_code, duration_s=0.0, log="",
                     stats=ExecutionStats(failures=failures), receipt=receipt(cpu_tier=tier))


OOB = {"kernel": "k", "op": "store", "argument": "out_ptr", "element_offset": 70, "extent_elements": 64,
       "program": [1, 0, 0], "test": None}


def _ctx(has_patch=True):
    return SimpleNamespace(request=SimpleNamespace(has_patch=has_patch))


@pytest.mark.parametrize("base,has_patch,blocks", [
    ({"state": "ran", "exit": 0, "cpu_tier": {"violations": []}}, True, True),
    ({"state": "ran", "exit": 1, "cpu_tier": {"violations": []}}, True, True),  # base red for another reason
    ({"state": "ran", "exit": 1, "cpu_tier": {"violations": [OOB]}}, True, False),  # base has the same defect
    ({"state": "target-not-present"}, True, True),  # a PR-added test shows it
    ({"state": "hook-not-consumed"}, True, False),  # no comparable base run: ordinary attribution decides
    ({"state": "ran", "exit": 0}, True, False),  # base ran without the tier
    (None, False, True),  # no patch: the supplied checkout has it
])
def test_a_head_only_sanitizer_violation_is_a_blocker(base, has_patch, blocks):
    stage = cpu_tier.blocker(_ctx(has_patch), "correctness_grid", _run(violations=[OOB]), base, {})
    assert (stage is not None) == blocks
    if blocks:
        assert stage.stage.status == "fail" and stage.findings[0].severity == "blocker"
        assert "store out of bounds in kernel k: argument out_ptr at element offset 70" in stage.findings[0].detail


AUTOTUNE_CRASH = {"test": "t.py::test_a", "cause": "AttributeError: 'function' object has no attribute 'fn' "
                                                   "(in triton/runtime/autotuner.py)"}


def _attributed(base, run, has_patch=True):
    ctx = SimpleNamespace(request=SimpleNamespace(has_patch=has_patch, host=SimpleNamespace(timeout=60)))
    return target_runs.attribute(ctx, base, "target", "fails", "(log tail)", run)


def test_a_tier_crash_is_never_blamed_and_is_named_on_either_side():
    crashed = _run(crashes=[AUTOTUNE_CRASH], failures=1)
    base_crashed = {"state": "ran", "exit": 1, "cpu_tier": cpu_tier.run_evidence(crashed)}
    rule, severity, detail = _attributed(base_crashed, crashed)
    assert rule == "target.tier-limitation"
    assert severity == "note" and detail.startswith("a CPU tier limitation: the tier could not run the target on "
                                                    "either side (head: AttributeError: 'function' object has no "
                                                    "attribute 'fn' (in triton/runtime/autotuner.py) (1 test, first "
                                                    "t.py::test_a)")
    for base in ({"state": "ran", "exit": 0, "cpu_tier": {"crashes": []}}, {"state": "target-not-present"}, None):
        rule, severity, detail = _attributed(base, crashed, has_patch=base is not None)
        assert rule == "target.tier-crash-on-head"
        assert severity == "note" and detail.startswith("the CPU tier crashed on head only (AttributeError: ")
        assert "INCONCLUSIVE and not attributed to the PR" in detail
    # a value failure beside the crash is still the code's
    rule, severity, _ = _attributed({"state": "ran", "exit": 0, "cpu_tier": {"crashes": []}},
                                    _run(crashes=[AUTOTUNE_CRASH], failures=2))
    assert (rule, severity) == ("target.regression", "blocker")


def test_a_target_absent_on_base_says_so_and_red_on_both_sides_stays_for_real_failures():
    rule, severity, detail = _attributed({"state": "target-absent", "exit": 4}, _run(failures=1))
    assert (rule, severity) == ("target.fails-new-target", "blocker") and detail.startswith("the target is absent on base (pytest found no such test "
                                                       "there: exit 4), so the PR adds it")
    rule, severity, detail = _attributed({"state": "ran", "exit": 1, "cpu_tier": {"crashes": []}}, _run(failures=1))
    assert (rule, severity) == ("target.red-on-both-sides", "note") and detail.startswith("the target is red on both sides (base: exit 1)")
    absent = _run(exit_code=4)
    absent.stats.note = "pytest usage error (exit 4), no test ran: ERROR: not found: t.py::test_new"
    assert target_runs.state(absent) == "target-absent"


def test_a_script_that_only_ran_sparse_launches_is_no_evidence_whether_it_failed_or_passed():
    sparse = [{"kernel": "k", "grid": [524289, 1, 1], "programs_run": 2, "test": None}]
    failed = cpu_tier.sparse_skip("correctness_grid", _run("script", 1, sparse=sparse), {})
    assert failed.stage.status == "skip" and "k (524289, 1, 1)" in failed.stage.note
    passed = cpu_tier.sparse_skip("correctness_grid", _run("script", 0, sparse=sparse), {})
    assert passed.stage.status == "skip" and "exited 0 after sparse launches" in passed.stage.note
    assert "not computed in full" in passed.stage.note
    assert cpu_tier.sparse_skip("correctness_grid", _run("script", 1, [OOB], sparse), {}) is None
    assert cpu_tier.sparse_skip("correctness_grid", _run("script", 0), {}) is None


def test_auto_leaves_the_tier_off_when_a_gpu_was_claimed():
    ctx = stage_context({"tests/test_x.py": "def test_x():\n    pass\n"}, target="tests/test_x.py", cpu_tier="auto",
                        earlier={"gpu_claim": result("gpu_claim", "pass", "claimed")})
    decided = cpu_tier.run(ctx)
    assert decided.selection.model_dump() == {"cpu_tier": "off",
                                              "cpu_tier_reason": "auto: a GPU was claimed, so kernels run on it"}
    assert decided.facts.model_dump() == {"cpu_tier": None}


# -- a repository laid out as real ones are ---------------------------------------------------------

PACKAGED = ["--target", "tests/test_norm.py", "--cpu-tier", "triton", "--no-perf"]


def test_a_src_layout_repository_blocks_its_bug_with_no_workaround(tmp_path, validate, no_gpu):
    # src/ layout, --cov addopts without pytest-cov, CUDA queries at import and collection, libdevice,
    # and a benchmark/ package the runtime module must not be taken from
    repo = triton_repos.packaged_repo(tmp_path / "tiny")
    patch = make_patch(repo, {"src/tiny_kernels/norm.py": triton_repos.RMS_NORM_UNMASKED_STORE}, tmp_path / "bug.patch")
    result = validate(repo, "--patch", str(patch), *PACKAGED)
    assert result.verdict == "BLOCK", result.findings("note")
    blockers = result.findings("blocker")
    assert [f["stage"] for f in blockers] == ["correctness_repo_tests"]
    assert "store out of bounds in kernel rms_norm_kernel" in blockers[0]["detail"]
    assert "argument out_ptr at element offset 400 of an allocation of 400 elements" in blockers[0]["detail"]

    identity = result.report["runtime_identity"]
    assert identity["module"] == "tiny_kernels" and identity["import_roots"] == ["src"]
    assert identity["module_path"].endswith("src/tiny_kernels/__init__.py")
    assert result.stage("runtime_compat")["cpu_tier_hooks"] == "installed"
    assert result.report["cpu_tier"]["device_capability"] == "8.0"
    assert "compute capability 8.0" in result.report["cpu_tier"]["assumptions"][0]

    base, head = result.stage("baseline_control"), result.stage("correctness_repo_tests")
    assert base["repo_tests"]["exit"] == 0 and base["repo_tests"]["stats"]["executed"] == 2
    for fields in (base["repo_tests"], head):
        assert fields["pytest_addopts_dropped"]["dropped"] == "--cov=tiny_kernels --cov-report=term"
        assert "unrecognized arguments: --cov" in fields["pytest_addopts_dropped"]["error"]
    tier = base["repo_tests"]["cpu_tier"]
    assert tier["cuda_queries"] == {"get_device_capability": 1, "get_device_properties": 1}
    assert tier["libdevice"]["forwarded"]["rsqrt"] > 0 and tier["libdevice"]["without_equivalent"] == {}
    # six configs a key, two of them distinct to the interpreter; two keys (N=100, N=64)
    assert {k: v for k, v in tier["autotuned"]["rms_norm_kernel"].items() if k != "seconds"} == {
        "keys": 2, "configs_run": 4, "duplicates_skipped": 8}
    notes = [f["detail"] for f in result.findings("note")]
    assert any(note.startswith("correctness_repo_tests: autotune ran every config once per kernel and key")
               for note in notes)
    assert any("-o addopts=, which drops all of pyproject.toml's addopts: --cov=tiny_kernels" in n for n in notes)


def test_a_pr_that_fixes_what_base_violated_is_credited_and_base_is_not_called_clean(tmp_path, validate, no_gpu):
    repo = triton_repos.packaged_repo(tmp_path / "tiny", triton_repos.RMS_NORM_UNMASKED_STORE)
    patch = make_patch(repo, {"src/tiny_kernels/norm.py": triton_repos.RMS_NORM}, tmp_path / "fix.patch")
    result = validate(repo, "--patch", str(patch), "--cpu-device-capability", "9.0", *PACKAGED)
    assert result.findings("blocker") == [] and result.findings("should-fix") == []
    assert result.verdict == "INCONCLUSIVE"  # PASS needs a claimed GPU
    base = result.stage("baseline_control")
    assert base["repo_tests"]["exit"] == 1
    assert "repo tests: ran, exit 1" in base["note"] and "the bounds sanitizer raised on base: store out of bounds " \
        "in kernel rms_norm_kernel" in base["note"]
    assert result.stage("correctness_repo_tests")["status"] == "pass"
    fixed = [f["detail"] for f in result.findings("note") if f["detail"].startswith("this PR fixes")]
    assert fixed == ["this PR fixes an out-of-bounds store that base has: store out of bounds in kernel rms_norm_kernel "
                     "in tests/test_norm.py::test_rms_norm[4-100]: argument out_ptr at element offset 400 of an "
                     "allocation of 400 elements (program (3, 0, 0))"]
    assert result.report["cpu_tier"]["device_capability"] == "9.0"
    assert result.stage("correctness_repo_tests")["cpu_tier"]["device_capability"] == "9.0"


def _tier_ctx(fingerprint, compat_note="runtime_compat said so"):
    compat = result("runtime_compat", "skip", compat_note)
    if fingerprint is not None:
        compat.facts.runtime_fingerprint = RuntimeFingerprint(**fingerprint)
    return stage_context({"tests/test_x.py": "def test_x():\n    pass\n"}, target="tests/test_x.py", cpu_tier="triton",
                         cpu_sparse_grid=4096, cpu_device_capability="8.0", earlier={"runtime_compat": compat})


def test_a_known_bad_triton_numpy_pair_is_an_environment_fact_named_at_tier_start():
    bad = cpu_tier.run(_tier_ctx({"distributions": ["triton==3.5.0", "torch==2.13.0+cpu", "numpy==2.4.6"]}))
    assert bad.facts.model_dump() == {"cpu_tier": None} and bad.selection.cpu_tier == "off"
    assert "triton 3.5.0 with numpy 2.4.6 is a known-bad pair" in bad.selection.cpu_tier_reason
    assert bad.findings[0].severity == "note" and "install numpy<2.4" in bad.findings[0].detail
    good = cpu_tier.run(_tier_ctx({"distributions": ["triton==3.5.0", "torch==2.13.0+cpu", "numpy==2.3.5"]}))
    assert good.facts.cpu_tier.numpy == "2.3.5" and good.findings == []


def test_a_triton_release_outside_the_hooks_range_is_refused_and_numpy_2_4_only_before_3_7():
    for version in ("3.2.0", "3.10.0"):
        installed = [f"triton=={version}", "torch==2.13.0+cpu", "numpy==2.3.5"]
        refused = cpu_tier.run(_tier_ctx({"distributions": installed}))
        assert refused.selection.cpu_tier == "off" and refused.facts.model_dump() == {"cpu_tier": None}
        assert f"triton {version} is outside the releases the CPU tier's hooks are built for (3.3 to 3.9)" in \
            refused.selection.cpu_tier_reason
        assert refused.findings[0].severity == "note"
    for version, numpy, on in (("3.3.1", "2.4.6", False), ("3.6.0", "2.4.6", False), ("3.7.1", "2.4.6", True),
                               ("3.9.0", "2.4.6", True), ("3.3.1", "1.26.4", True), ("3.9.0+git0abc", "2.3.5", True)):
        installed = [f"triton=={version}", "torch==2.13.0+cpu", f"numpy=={numpy}"]
        ran = cpu_tier.run(_tier_ctx({"distributions": installed}))
        assert (ran.selection.cpu_tier == "triton") is on, (version, numpy, ran.selection.cpu_tier_reason)


def test_no_missing_packages_are_claimed_when_the_runtime_probe_never_ran():
    refused = cpu_tier.run(_tier_ctx(None, "PYLIB holds a prebuilt runtime but the patch changes runtime sources"))
    assert refused.findings == [] and "missing" not in refused.selection.cpu_tier_reason
    assert "the runtime probe did not run (PYLIB holds a prebuilt runtime" in refused.selection.cpu_tier_reason


def test_every_closed_gap_at_once_in_a_namespace_package_blocks_its_tail_bug(tmp_path, validate, no_gpu):
    # autotune disk cache, loop-index casts, device seeding at import, a switch only --env passes, and a
    # src/ namespace package with no packaging file: one validation for the set
    repo = triton_repos.namespace_repo(tmp_path / "ns")
    patch = make_patch(repo, {"src/tiny_ns/scale.py": triton_repos.all_gaps_kernel().replace(
        triton_repos.MASKED_STORE, triton_repos.UNMASKED_STORE)}, tmp_path / "bug.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py", "--cpu-tier", "triton",
                      "--no-perf", "--env", "TINY_BACKEND=triton")
    assert result.verdict == "BLOCK", result.findings("note")
    [blocker] = result.findings("blocker")
    assert blocker["stage"] == "correctness_repo_tests"
    assert "store out of bounds in kernel scale_kernel" in blocker["detail"]
    identity = result.report["runtime_identity"]
    assert identity["module"] == "tiny_ns" and identity["import_roots"] == ["src"]
    base = result.stage("baseline_control")["repo_tests"]
    assert base["exit"] == 0 and base["cpu_tier"]["crashes"] == []
    assert result.report["isolation"]["target_environment"]["given"] == ["TINY_BACKEND"]


def test_tests_that_passed_without_a_kernel_launch_or_a_route_call_are_a_note_of_the_run_s_stage(tmp_path):
    from kvtasks.harness.junit import CaseResult

    cases = [CaseResult(name=name, classname="tests.test_ops", outcome=outcome)
             for name, outcome in (("test_kernel[4]", "passed"), ("test_route", "passed"),
                                   ("test_torch_alone", "passed"), ("test_red", "failed"))]
    (tmp_path / "head.log").write_text("")
    run = TargetRun(label="head-repo", runner="pytest", command=[], exit=1, duration_s=1.0, log=str(tmp_path / "head.log"),
                    stats=ExecutionStats(tests=4, executed=4, failures=1), cases=cases,
                    receipt=receipt(cpu_tier={"launches_by_test": {"tests/test_ops.py::test_kernel[4]": 2}},
                                    routed_tests=["tests/test_ops.py::test_route"]))
    assert cpu_tier.not_exercised(run) == ["tests.test_ops::test_torch_alone"]
    stage = result("correctness_repo_tests", "fail", "one red")
    cpu_tier.observe(stage, run)
    [note] = [f for f in stage.findings if f.rule == "cpu-tier.not-exercised"]
    assert note.severity == "note" and "1 of 4 tests passed under the CPU tier without launching a kernel" in note.detail
    # off the tier nothing is known of launches: nothing is said
    plain = run.model_copy(update={"receipt": receipt(routed_tests=[])})
    assert cpu_tier.not_exercised(plain) == []
    # nor when xdist's workers ran the items: their launches never reached this receipt
    workers = run.model_copy(update={"receipt": receipt(cpu_tier={"launches_by_test": None}, routed_tests=[])})
    assert cpu_tier.not_exercised(workers) == []
