"""baseline_control: the target on the clean base tree, which must stay clean."""
from tests.kernel_repos import TESTS, git, make_patch


def test_base_run_leaving_artifacts_aborts_head_and_is_cleaned(repo, validate, tmp_path):
    dirtying = TESTS + '''

def test_writes_into_the_tree():
    import os

    os.makedirs("build", exist_ok=True)
    with open("build/out.log", "w") as log:
        log.write("x")
'''
    (repo / "tests/test_scale.py").write_text(dirtying)
    git(repo, "commit", "-qam", "a suite that writes into the tree")
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py")
    base = result.stage("baseline_control")
    assert base["status"] == "skip" and base["artifacts"] == ["build/out.log"]
    assert "head tests were not run" in result.stage("correctness_repo_tests")["note"]
    assert result.verdict == "INCONCLUSIVE"
    assert not (repo / "build").exists()
