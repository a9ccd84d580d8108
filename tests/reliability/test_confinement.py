"""Git confined to the tree it was given: a tree, clone or demo repository whose `.git` vanished
is no repository at all, never the one around it, and a tree a validator holds is never rebuilt."""
import shutil
import subprocess
import sys

import pytest

from kvtasks import demo
from kvtasks.system import locks
from kvtasks.worktree import GitFailed, Worktree, hold_exclusively, release_exclusive, run_git
from tests.kernel_repos import make_patch, make_repo, snapshot

pytestmark = pytest.mark.usefixtures("bystanders")


@pytest.fixture
def nested(tmp_path):
    """A tree inside the test folder's bystander, where the demo sits inside kvtasks' checkout."""
    return make_repo(tmp_path / "cache" / "demo" / "kernels",
                     {"edited.txt": "the tree's own\n", "kernel.py": "SCALE = 1\n"})


def test_a_tree_whose_git_dir_vanished_mid_lend_is_refused_not_the_enclosing_repository(nested, tmp_path):
    patch = make_patch(nested, {"kernel.py": "SCALE = 2\n", "edited.txt": None, "added.py": "NEW = 1\n"},
                       tmp_path / "pr.patch")
    tree = Worktree(nested, str(patch))
    with pytest.raises(GitFailed) as refused:
        with tree.lend("head"):
            shutil.rmtree(nested / ".git")  # a rebuild or a cleanup removed it while the run had the tree
    assert "refusing to change" in str(refused.value) and str(nested) in str(refused.value)
    assert (nested / "added.py").is_file()  # nothing is touched when git cannot say whose tree it is


def test_git_run_in_a_folder_without_its_own_git_dir_finds_no_repository(tmp_path):
    inside = tmp_path / "cache" / "demo" / "plain"
    inside.mkdir(parents=True)
    assert not run_git(inside, "status", "--porcelain").ok  # the bystander at tmp_path is not found
    assert run_git(inside, "status", "--porcelain", confined=False).ok


def test_a_demo_build_whose_git_dir_is_removed_midway_leaves_the_enclosing_repository_alone(tmp_path, monkeypatch):
    built = demo._git

    def removed_by_another_builder(repo, *args):
        if args[0] == "add":
            shutil.rmtree(repo / ".git")
        return built(repo, *args)

    monkeypatch.setattr(demo, "_git", removed_by_another_builder)
    with pytest.raises(GitFailed):
        demo.materialize(tmp_path / "cache")
    monkeypatch.undo()
    repo, heads = demo.materialize(tmp_path / "cache")  # the next build starts afresh
    assert set(heads) == set(demo.PRS) and snapshot(repo)[0] == ""


def test_the_demo_is_not_rebuilt_under_a_validator_and_builds_take_turns(tmp_path):
    root = tmp_path / "cache"
    repo, heads = demo.materialize(root)
    hold_exclusively(repo)
    try:
        with Worktree(repo, str(demo.patch_path(demo.DEFAULT_PR))).lend("head"):
            lent = snapshot(repo)
            assert demo.materialize(root) == (repo, heads)  # dirty, but held: left to its validator
            assert snapshot(repo) == lent
    finally:
        release_exclusive(repo)
    waiting = "import sys; from pathlib import Path; from kvtasks import demo; demo.materialize(Path(sys.argv[1]))"
    with locks.held(locks.open_lock(repo.parent / "materialize.lock")):
        builder = subprocess.Popen([sys.executable, "-c", waiting, str(root)])
        with pytest.raises(subprocess.TimeoutExpired):
            builder.wait(timeout=1.5)  # another build waits for the one in progress
    assert builder.wait(timeout=60) == 0
