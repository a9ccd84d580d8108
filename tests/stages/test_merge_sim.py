from pathlib import Path

from kvtasks.request import Request
from kvtasks.stages import Context, StageResult, baseline_control, merge_sim, repo_tests
from kvtasks.worktree import Worktree
from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, TESTS, git, make_patch
from tests.kit import RecordingLauncher, stage_context, target_run
from tests.recorded import ready


def merged(repo: Path, patch: Path | None = None) -> StageResult:
    """merge_sim's decision on the checkout itself: git reads and checks it, no target runs."""
    request = Request(repo=str(repo), target="tests/test_scale.py", patch=str(patch) if patch else None)
    return merge_sim.run(Context(request=request, worktree=Worktree(repo, request.patch), run_dir=repo.parent / "run"))


def test_clean_patch_applies_and_records_identity(repo, validate, tmp_path):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL.replace("out = np.zeros_like(x)", "out = np.empty_like(x)")},
                       tmp_path / "pr.patch")
    head = "a" * 40
    result = validate(repo, "--patch", str(patch), "--head-sha", head, "--target", "tests/test_scale.py")
    merge = result.stage("merge_sim")
    assert merge["status"] == "pass"
    assert merge["changed_paths"] == {"kernels/scale.py": "M"}
    assert "identity_note" not in merge
    assert result.report["repo"]["base"] == git(repo, "rev-parse", "HEAD").strip()
    assert result.report["repo"]["head"] == head
    assert len(result.report["repo"]["patch_sha256"]) == 64
    assert result.stage("baseline_control")["status"] == "pass"
    assert result.stage("correctness_repo_tests")["status"] == "pass"
    # gpu_claim and the receipt are not established, so the verdict can only be INCONCLUSIVE
    assert result.verdict == "INCONCLUSIVE" and result.code == 2


def test_without_head_sha_the_report_is_not_bound_to_a_remote_head(repo, tmp_path):
    merge = merged(repo, make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch"))
    # the report's repo is this record (test_clean_patch_applies_and_records_identity)
    assert merge.facts.repo.head is None
    assert "cannot be matched" in merge.stage.identity_note


def test_conflicting_patch_blocks_and_leaves_the_tree_identical(repo, validate, tmp_path):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    (repo / "kernels/scale.py").write_text(KERNEL.replace("range(0, N, TILE)", "range(0, N, TILE)  # tiles"))
    git(repo, "commit", "-qam", "base moved on")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py")
    assert result.code == 1 and result.verdict == "BLOCK"
    assert result.stage("merge_sim")["status"] == "fail"
    assert any("does not apply" in f["detail"] for f in result.findings("blocker"))
    assert result.report["repo"]["head"] is None
    assert result.stage("correctness_repo_tests")["note"] == "not run: the patch does not apply"


def test_dirty_tree_with_only_an_ignored_file_is_inconclusive_and_untouched(repo, validate, tmp_path):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    (repo / "build").mkdir()
    (repo / "build" / "artifact.bin").write_bytes(b"\x00\x01")
    assert git(repo, "status", "--porcelain") == ""  # invisible without --ignored
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py")
    assert result.code == 2 and result.verdict == "INCONCLUSIVE"
    merge = result.stage("merge_sim")
    assert merge["status"] == "skip" and "not isolated-clean" in merge["note"]
    assert result.stage("baseline_control")["note"].startswith("not run:")
    assert (repo / "kernels/scale.py").read_text() == KERNEL  # nothing applied


def test_no_patch_validates_the_checkout_directly(repo, tmp_path):
    merge = merged(repo)
    assert merge.stage.status == "skip"
    assert merge.facts.repo.head == merge.facts.repo.base == git(repo, "rev-parse", "HEAD").strip()
    launcher = RecordingLauncher({"head-repo": target_run(tmp_path, "head-repo")})
    ctx = stage_context({"kernels/__init__.py": "", "kernels/scale.py": KERNEL, "tests/test_scale.py": TESTS},
                        target="tests/test_scale.py", earlier=ready(), launcher=launcher)
    base = baseline_control.run(ctx)
    assert base.stage.status == "skip"
    ctx.earlier[base.name] = base
    assert repo_tests.run(ctx).stage.status == "pass"
    # the checkout as supplied is head, and nothing runs on base; with no base to attribute against the
    # verdict is INCONCLUSIVE (tests/test_cli.py's summary test, end to end)
    assert [(side, asked.label) for side, asked in launcher.asked] == [("head", "head-repo")]
