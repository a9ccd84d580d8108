import json
import shutil
import sys

import pytest

from kvtasks.stages import StageResult, gpu_activity, gpu_requirement, repo_tests
from kvtasks.stages.coverage import arch_coverage
from kvtasks.stages.payloads import GpuClaim
from tests.conftest import FAKES, IDLE_AMD
from tests.kernel_repos import git, make_patch
from tests.kit import RecordingLauncher, stage_context, target_run
from tests.processes import lock_held_elsewhere
from tests.recorded import BASE, HEAD, TARGET, after_both_sides, ready

GPU_ONLY_TEST = '''import os


def test_needs_a_device():
    assert os.environ.get("HIP_VISIBLE_DEVICES"), "no GPU visible"
'''
SKIPIF_GUARDED = '''import os

import pytest


@pytest.mark.skipif(not os.environ.get("HIP_VISIBLE_DEVICES"), reason="needs a GPU")
def test_on_device():
    pass
'''


def readme_patch(repo, tmp_path):
    return make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")


@pytest.fixture
def rocm_install(tmp_path, monkeypatch):
    """A ROCm install whose share/amd_smi holds the (fake) amdsmi, and no amdsmi wheel anywhere."""
    folder = tmp_path / "rocm-7.1" / "share" / "amd_smi"
    folder.mkdir(parents=True)
    shutil.copy(FAKES / "amdsmi.py", folder / "amdsmi.py")
    config = tmp_path / "amdsmi.json"
    config.write_text(json.dumps({"devices": [IDLE_AMD]}))
    monkeypatch.setenv("KVTASKS_FAKE_AMDSMI", str(config))
    monkeypatch.setenv("ROCM_PATH", str(folder.parent.parent))
    monkeypatch.setattr(sys, "path", list(sys.path))  # whatever kvtasks appends is gone afterwards
    yield folder
    sys.modules.pop("amdsmi", None)


def test_the_target_sees_only_the_claimed_device(repo, validate, tmp_path):
    patch = make_patch(repo, {"tests/test_gpu.py": GPU_ONLY_TEST.replace(
        'assert os.environ.get("HIP_VISIBLE_DEVICES")', 'assert os.environ.get("HIP_VISIBLE_DEVICES") == "57"')},
        tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_gpu.py")
    assert result.stage("correctness_repo_tests")["status"] == "pass"


def write_picker(tmp_path, stdout: str, code: int, basis: str = "activity+vram"):
    script = tmp_path / "my-picker"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({stdout!r})\n"
                      f"print('idleness-basis: {basis}', file=sys.stderr)\nsys.exit({code})\n")
    script.chmod(0o755)
    return script


def test_on_this_host_a_cpu_suite_is_not_required_and_still_inconclusive(repo, home, tmp_path):
    from tests.conftest import Validation
    from kvtasks.front import cli

    out = tmp_path / "r.json"
    code = cli.main(["--repo", str(repo), "--patch", str(readme_patch(repo, tmp_path)),
                     "--target", "tests/test_scale.py", "--out", str(out), "--quiet", "--cpu-tier", "auto"])
    result = Validation(code, out)
    assert result.stage("gpu_claim")["status"] == "skip"
    assert "reports no GPUs" in result.stage("gpu_claim")["note"]
    selection = result.report["test_selection"]
    # numpy kernels: the Triton CPU tier has nothing to interpret, so auto leaves it off
    assert selection["cpu_tier"] == "off" and "import triton" in selection["cpu_tier_reason"]
    assert result.report["cpu_tier"] is None
    assert selection["gpu_requirement"] == "not-required" and "2 executed" in selection["gpu_requirement_basis"]
    assert result.stage("correctness_repo_tests")["status"] == "pass"
    assert result.report["arch_coverage"] == {} and result.verdict == "INCONCLUSIVE"


def test_on_this_host_a_gpu_suite_is_required_and_correctness_is_skipped(repo, home, tmp_path):
    # end to end with a suite pytest skips when no device is visible (a suite that fails without one:
    # a unit below)
    from tests.conftest import Validation
    from kvtasks.front import cli

    (repo / "tests/test_gpu.py").write_text(SKIPIF_GUARDED)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "gpu suite")
    out = tmp_path / "r.json"
    code = cli.main(["--repo", str(repo), "--patch", str(readme_patch(repo, tmp_path)),
                     "--target", "tests/test_gpu.py", "--out", str(out), "--quiet"])
    result = Validation(code, out)
    assert result.report["test_selection"]["gpu_requirement"] == "required"
    assert result.stage("correctness_repo_tests")["status"] == "skip"
    assert "no verified-idle GPU" in result.stage("correctness_repo_tests")["note"]
    assert result.verdict == "INCONCLUSIVE"


# -- the claim's decisions on a stage Context (tests/kit.py): no git, no target run -----------------

def claim_here():
    """gpu_claim on this host's (fake) devices and PICKER, for an in-memory repository."""
    from kvtasks.gpu import picker
    from kvtasks.stages import gpu_claim

    try:
        return gpu_claim.run(stage_context({"tests/test_scale.py": ""}, target="tests/test_scale.py"))
    finally:
        picker.release_all()


def said_no_gpu(stage, reason: str) -> None:
    assert stage.stage.status == "skip" and reason in stage.stage.note, stage.stage.note
    assert stage.facts.degraded_mode == "NO_GPU"
    assert [f.rule for f in stage.findings] == ["gpu.not-claimed"]


def test_claim_records_every_field_and_its_head_run_credits_the_arch(idle_gpu, tmp_path):
    claim = claim_here()
    stage = claim.stage
    assert stage.status == "pass"
    assert (stage.hip_index, stage.amd_smi_index, stage.bdf) == (57, 0, "0000:c1:00.0")
    assert (stage.model, stage.arch, stage.vendor) == ("Fake Instinct MI-T", "gfx-test", "amd")
    assert stage.idleness_basis == "activity+vram" and isinstance(stage.gfx_activity_before_pct, int)
    assert stage.host and stage.lock.endswith("gpu-57.lock")
    assert claim.facts.degraded_mode is None
    # gpu_activity amends the claim after the runs, and the report credits the claimed arch with head's
    # run (kvtasks.stages.coverage, which pipeline.compose applies: tests/test_report.py)
    ctx, _ = after_both_sides(tmp_path, {}, earlier={**ready(), "gpu_claim": claim})
    after = gpu_activity.run(ctx)
    assert isinstance(after.stage.gfx_activity_after_pct, int)
    ctx.earlier[after.name] = after
    covered, basis = arch_coverage({name: made.stage for name, made in ctx.earlier.items() if made.stage})
    assert covered == {"gfx-test": "runtime"} and basis["gfx-test"].startswith("pytest-junit-executed:2")


def test_a_suite_that_fails_without_a_gpu_is_required_and_correctness_is_skipped(tmp_path):
    failed = target_run(tmp_path, "head-repo", exit=1, failures=1, log="E AssertionError: no GPU visible")
    earlier = {**ready(), "gpu_claim": StageResult(name="gpu_claim", stage=GpuClaim(status="skip"))}
    ctx = stage_context(BASE, HEAD, target=TARGET, earlier=earlier, launcher=RecordingLauncher({"head-repo": failed}))
    amended = gpu_requirement.run(ctx)
    ctx.earlier[amended.name] = amended  # it replaces the claim, as the pipeline has it
    assert ctx.selection.gpu_requirement == "required"
    head = repo_tests.run(ctx)
    assert head.stage.status == "skip" and "no verified-idle GPU" in head.stage.note


def test_amd_smi_from_a_rocm_install_is_found_and_named(rocm_install):
    claim = claim_here().stage
    assert claim.status == "pass" and claim.hip_index == 57, claim.note
    assert claim.note.endswith(f"; AMD SMI from the ROCm install at {rocm_install}")
    assert claim.smi_source == f"AMD SMI from the ROCm install at {rocm_install}"


def test_vram_only_basis_keeps_activity_null(gpu_host):
    gpu_host(amd=[{**IDLE_AMD, "gfx_activity": "raise"}])
    claim = claim_here()
    assert claim.stage.status == "pass" and claim.stage.idleness_basis == "vram-only"
    assert claim.stage.gfx_activity_before_pct is None
    assert any("VRAM only" in f.detail for f in claim.findings if f.severity == "note")
    after = gpu_activity.run(stage_context(BASE, target=TARGET, earlier={"gpu_claim": claim}))
    assert "activity API does not report" in after.stage.post_run_note and after.stage.gfx_activity_after_pct is None


def test_lock_falls_through_to_the_next_idle_gpu(gpu_host, private_gpu_locks):
    second = {**IDLE_AMD, "hip_id": 12, "bdf": "0000:c2:00.0", "gfx_activity": [1, 2]}
    gpu_host(amd=[IDLE_AMD, second])
    with lock_held_elsewhere(private_gpu_locks / "gpu-57.lock"):
        claim = claim_here()
    assert claim.stage.hip_index == 12


def test_all_idle_gpus_locked_is_a_skip(idle_gpu, private_gpu_locks):
    with lock_held_elsewhere(private_gpu_locks / "gpu-57.lock"):
        claim = claim_here()
    assert claim.stage.status == "skip" and "already locked by another validator" in claim.stage.note
    assert claim.facts.degraded_mode == "NO_GPU"
    assert [f.rule for f in claim.findings] == ["gpu.not-claimed", "gpu.all-busy"]


@pytest.mark.parametrize("amd,options,reason", [
    ([], {}, "this host reports no GPUs"),
    ([{**IDLE_AMD, "gfx_activity": [50]}], {}, "none stayed below the idleness thresholds"),
    ([IDLE_AMD], {"handles": "raise"}, "could not be queried; this says nothing about the GPUs"),
])
def test_each_no_gpu_reason_is_distinct(gpu_host, amd, options, reason):
    gpu_host(amd=amd, **options)
    said_no_gpu(claim_here(), reason)


def test_picker_override_is_used_and_its_index_is_mapped_back(idle_gpu, monkeypatch, tmp_path):
    monkeypatch.setenv("PICKER", str(write_picker(tmp_path, "57\n", 0, basis="vram-only")))
    claim = claim_here().stage
    assert claim.status == "pass" and claim.hip_index == 57 and claim.idleness_basis == "vram-only"
    assert claim.picker.startswith("PICKER")


@pytest.mark.parametrize("code,reason", [
    (1, "none stayed below"), (2, "could not be queried"), (3, "reports no GPUs"), (7, "picker failed with exit 7")])
def test_picker_override_exit_codes(gpu_host, monkeypatch, tmp_path, code, reason):
    gpu_host(amd=[IDLE_AMD])
    monkeypatch.setenv("PICKER", str(write_picker(tmp_path, "", code)))
    stage = claim_here()
    said_no_gpu(stage, reason)
    assert stage.stage.picker_exit == code


def test_picker_naming_an_unknown_index_is_not_claimed(gpu_host, monkeypatch, tmp_path):
    gpu_host(amd=[IDLE_AMD])
    monkeypatch.setenv("PICKER", str(write_picker(tmp_path, "3\n", 0)))
    said_no_gpu(claim_here(), "could not be mapped back")


def test_missing_picker_is_its_own_reason(gpu_host, monkeypatch, tmp_path):
    gpu_host(amd=[IDLE_AMD])
    monkeypatch.setenv("PICKER", str(tmp_path / "no-such-picker"))
    said_no_gpu(claim_here(), "picker unavailable")
