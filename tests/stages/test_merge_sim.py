from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, git, make_patch


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


def test_without_head_sha_the_report_is_not_bound_to_a_remote_head(repo, validate, tmp_path):
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py")
    assert result.report["repo"]["head"] is None
    assert "cannot be matched" in result.stage("merge_sim")["identity_note"]


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


def test_no_patch_validates_the_checkout_directly(repo, validate):
    result = validate(repo, "--target", "tests/test_scale.py")
    assert result.stage("merge_sim")["status"] == "skip"
    assert result.report["repo"]["head"] == result.report["repo"]["base"]
    assert result.stage("baseline_control")["status"] == "skip"
    assert result.stage("correctness_repo_tests")["status"] == "pass"
    assert result.verdict == "INCONCLUSIVE"
