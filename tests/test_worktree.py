"""The lent tree: `Worktree.lend(side)` gives a stage base or head and takes it back as supplied."""
import pytest

from kvtasks.worktree import PatchRefused, Worktree
from tests.kernel_repos import make_patch, make_repo, snapshot


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"kernel.py": "SCALE = 1\n", "tests/test_kernel.py": "def test(): pass\n"})


def test_head_is_lent_patched_base_as_supplied_and_both_come_back_identical(repo, tmp_path):
    patch = make_patch(repo, {"kernel.py": "SCALE = 2\n", "added.py": "NEW = 1\n"}, tmp_path / "pr.patch")
    supplied = snapshot(repo)
    tree = Worktree(repo, str(patch))
    with tree.lend("head"):
        assert (repo / "kernel.py").read_text() == "SCALE = 2\n" and (repo / "added.py").is_file()
        (repo / "run-output.log").write_text("a run wrote this")
    assert snapshot(repo) == supplied
    with tree.lend("base"):
        assert (repo / "kernel.py").read_text() == "SCALE = 1\n" and not (repo / "added.py").exists()
    with tree.lend("head", keep_base=["kernel.py"]):
        assert (repo / "kernel.py").read_text() == "SCALE = 1\n" and (repo / "added.py").is_file()
        assert tree.switch("base") == [] and not (repo / "added.py").exists()
        tree.switch("head")
        assert (repo / "kernel.py").read_text() == "SCALE = 2\n"
    assert snapshot(repo) == supplied and tree.journal.pending() is None


def test_a_patch_that_does_not_apply_is_one_reason_and_no_run_sees_the_tree(repo, tmp_path):
    stale = make_patch(repo, {"kernel.py": "SCALE = 3\n"}, tmp_path / "stale.patch")
    stale.write_text(stale.read_text().replace("-SCALE = 1", "-SCALE = 7"))
    supplied = snapshot(repo)
    tree = Worktree(repo, str(stale))
    ran = False
    with pytest.raises(PatchRefused) as refused:
        with tree.lend("head"):
            ran = True
    assert not ran and snapshot(repo) == supplied and tree.journal.pending() is None
    reason = str(refused.value)
    assert reason.startswith("the patch could not be applied to the worktree for a head run: ")
    assert "kernel.py" in reason and "\n" not in reason and "git apply" not in reason
    with tree.lend("base"):  # base needs no patch: it is still lent
        assert (repo / "kernel.py").read_text() == "SCALE = 1\n"
    with pytest.raises(PatchRefused), tree.lend("base"):
        tree.switch("head")
    assert snapshot(repo) == supplied


def test_without_a_patch_head_is_the_supplied_checkout(repo):
    supplied = snapshot(repo)
    with Worktree(repo, None).lend("head"):
        assert snapshot(repo) == supplied
