import hashlib
import os
import stat
import subprocess

import pytest

from kvtasks import clones
from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, git, kernel_repo, snapshot, write_files


def caller_state(repo) -> tuple:
    """Everything of the caller's clone kvtasks must never write: the tree as git and the bytes see
    it, and .git's refs, index, config, hooks and object count."""
    dot_git = repo / ".git"
    kept = {}
    for path in sorted(dot_git.rglob("*")):
        relative = path.relative_to(dot_git)
        if path.is_file() and relative.parts[0] in ("refs", "hooks", "info", "logs") or \
                str(relative) in ("HEAD", "index", "config", "packed-refs", "FETCH_HEAD", "ORIG_HEAD"):
            kept[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    objects = sum(1 for path in (dot_git / "objects").rglob("*") if path.is_file())
    return snapshot(repo), kept, objects


def branch(repo, name: str, files: dict, message: str, start: str = "main") -> str:
    git(repo, "checkout", "-q", "-b", name, start)
    write_files(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    git(repo, "checkout", "-q", "main")
    return git(repo, "rev-parse", name).strip()


@pytest.fixture
def caller(tmp_path):
    """A maintainer's clone: a PR branch, work in progress and an untracked file."""
    repo = kernel_repo(tmp_path / "caller")
    branch(repo, "pr-tail", {"kernels/scale.py": KERNEL_TAIL_BUG}, "tail bug")
    (repo / "kernels" / "scale.py").write_text(KERNEL + "# work in progress\n")
    (repo / "notes.txt").write_text("untracked\n")
    return repo


def test_refs_become_a_base_worktree_and_a_patch_without_writing_the_callers_clone(caller, tmp_path):
    before = caller_state(caller)
    change = clones.prepare(str(caller), "main", "pr-tail", tmp_path / "clones")
    assert caller_state(caller) == before
    assert change.base_oid == git(caller, "rev-parse", "main").strip()
    assert change.head_oid == git(caller, "rev-parse", "pr-tail").strip()
    assert change.merge_base == change.base_oid
    assert git(change.worktree, "rev-parse", "HEAD").strip() == change.base_oid
    assert git(change.worktree, "status", "--porcelain", "--ignored") == ""
    assert (change.worktree / "kernels/scale.py").read_text() == KERNEL  # the commit, not the caller's edits
    assert not change.worktree.is_relative_to(caller) and not change.patch.is_relative_to(change.worktree)
    git(change.worktree, "apply", "--check", str(change.patch))
    # a second PR against the same tip reuses the same tree
    again = clones.prepare(str(caller), "main", "pr-tail", tmp_path / "clones")
    assert again.worktree == change.worktree and again.patch.read_bytes() == change.patch.read_bytes()
    assert caller_state(caller) == before


def test_binary_files_modes_and_renames_replay_exactly(caller, tmp_path):
    git(caller, "checkout", "-q", "-b", "pr-odd", "main")
    git(caller, "mv", "kernels/scale.py", "kernels/scaled.py")
    (caller / "blob.bin").write_bytes(bytes(range(256)) * 4)
    script = caller / "run.sh"
    script.write_text("#!/bin/sh\necho hi \n\n")  # trailing blank context and spaces survive
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    git(caller, "add", "-A")
    git(caller, "commit", "-q", "-m", "odd change")
    git(caller, "checkout", "-q", "main")
    change = clones.prepare(str(caller), "main", "pr-odd", tmp_path / "clones")
    git(change.worktree, "apply", "--binary", str(change.patch))
    git(change.worktree, "add", "-A")
    assert git(change.worktree, "write-tree").strip() == git(caller, "rev-parse", "pr-odd^{tree}").strip()
    git(change.worktree, "reset", "-q", "--hard")
    git(change.worktree, "clean", "-qfdx")


def test_a_bare_repository_by_url_with_a_pull_ref(caller, tmp_path):
    bare = tmp_path / "forge.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(caller), str(bare)], check=True)
    head = git(caller, "rev-parse", "pr-tail").strip()
    git(bare, "update-ref", "refs/pull/7/head", head)
    git(bare, "branch", "-D", "pr-tail")  # only the forge's pull ref names the PR now
    change = clones.prepare(f"file://{bare}", "main", "pull/7/head", tmp_path / "clones")
    assert change.head_oid == head and change.source == f"file://{bare}"
    assert change.clone.is_relative_to(tmp_path / "clones")


def test_refusals_name_the_ref_and_gits_reason(caller, tmp_path):
    root = tmp_path / "clones"
    with pytest.raises(clones.RefsError, match="unknown --head-ref 'no-such-branch'"):
        clones.prepare(str(caller), "main", "no-such-branch", root)
    with pytest.raises(clones.RefsError, match="unknown --base-ref 'nope'"):
        clones.prepare(str(caller), "nope", "pr-tail", root)
    git(caller, "checkout", "-q", "--orphan", "elsewhere")
    git(caller, "rm", "-rqf", ".")
    write_files(caller, {"other.txt": "unrelated\n"})
    git(caller, "add", "other.txt")
    git(caller, "commit", "-q", "-m", "unrelated root")
    with pytest.raises(clones.RefsError, match="share no history"):
        clones.prepare(str(caller), "main", "elsewhere", root)
    with pytest.raises(clones.RefsError, match="changes nothing"):
        clones.prepare(str(caller), "pr-tail", "main", root)
    with pytest.raises(clones.RefsError, match="cannot clone file://"):
        clones.prepare(f"file://{tmp_path}/missing.git", "main", "pr-tail", root)
    with pytest.raises(clones.RefsError, match="neither an existing repository path nor a git URL"):
        clones.prepare(str(tmp_path / "missing"), "main", "pr-tail", root)
    assert not os.path.exists(caller / ".git" / "kvtasks")
