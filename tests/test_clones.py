"""Validating by refs: the private clone, the patch it makes, and whole validations through it."""
import hashlib
import json
import os
import stat
import subprocess

import pytest

from kvtasks.front import cli
from kvtasks.system import locks
from kvtasks.worktree import clones
from kvtasks.worktree.clone_collection import Collected, collect
from kvtasks.worktree import Worktree, state_dir
from tests.batches import base_runs_per_key, doit
from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, TESTS, git, kernel_repo, make_patch, snapshot, write_files

# every tree these destructive scenarios lend sits among repositories kvtasks was never given
pytestmark = pytest.mark.usefixtures("bystanders")


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
    (caller / "windows.txt").write_bytes(b"line one\r\nline two\r\n")
    (caller / "lone.txt").write_bytes(b"carriage\rreturn\n")
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
    git(caller, "stash", "-q", "--include-untracked")
    git(caller, "checkout", "-q", "--orphan", "elsewhere")
    git(caller, "rm", "-rqf", ".")
    write_files(caller, {"other.txt": "unrelated\n"})
    git(caller, "add", "other.txt")
    git(caller, "commit", "-q", "-m", "unrelated root")
    before = caller_state(caller)
    with pytest.raises(clones.RefsError, match="--head-ref 'no-such-branch': no such branch, tag or commit in "):
        clones.prepare(str(caller), "main", "no-such-branch", root)
    with pytest.raises(clones.RefsError, match="--base-ref 'nope': no such branch, tag or commit in "):
        clones.prepare(str(caller), "nope", "pr-tail", root)
    with pytest.raises(clones.RefsError, match="share no history"):
        clones.prepare(str(caller), "main", "elsewhere", root)
    with pytest.raises(clones.RefsError, match="changes nothing"):
        clones.prepare(str(caller), "pr-tail", "main", root)
    with pytest.raises(clones.RefsError, match="cannot clone file://"):
        clones.prepare(f"file://{tmp_path}/missing.git", "main", "pr-tail", root)
    with pytest.raises(clones.RefsError, match="neither an existing repository path nor a git URL"):
        clones.prepare(str(tmp_path / "missing"), "main", "pr-tail", root)
    with pytest.raises(clones.RefsError, match="a branch, tag, pull ref or commit id"):
        clones.prepare(str(caller), "main", "pr-tail~1", root)
    with pytest.raises(clones.RefsError) as refused:
        clones.prepare("https://kv:s3cret-token@127.0.0.1:1/x.git", "main", "pr-tail", root)
    assert "s3cret" not in str(refused.value) and "https://127.0.0.1:1/x.git" in str(refused.value)
    assert caller_state(caller) == before


def test_the_callers_gc_a_stale_tree_and_a_git_dir_in_the_environment_change_nothing(caller, tmp_path, monkeypatch):
    root = tmp_path / "clones"
    branch(caller, "pr-gone", {"README.md": "soon deleted\n"}, "short-lived PR")
    first = clones.prepare(str(caller), "main", "pr-gone", root)
    # the caller deletes the PR branch and prunes its objects: the private clone must not depend on them
    git(caller, "branch", "-D", "pr-gone")
    git(caller, "reflog", "expire", "--expire=now", "--all")
    git(caller, "gc", "-q", "--prune=now")
    (first.worktree / "kernels" / "junk.py").write_text("left by a killed run\n")  # a stale, dirty tree
    # run from a git hook: GIT_DIR names the caller's repository, which must still not be written
    monkeypatch.setenv("GIT_DIR", str(caller / ".git"))
    before = caller_state(caller)
    second = clones.prepare(str(caller), "main", "pr-tail", root)
    assert caller_state(caller) == before
    assert second.worktree == first.worktree
    monkeypatch.delenv("GIT_DIR")
    assert git(second.worktree, "status", "--porcelain", "--ignored") == ""
    assert second.head_oid == git(caller, "rev-parse", "pr-tail").strip()


# -- whole validations -----------------------------------------------------------------------------

PRS = {"clean": {"README.md": "docs\n"}, "tail": {"kernels/scale.py": KERNEL_TAIL_BUG},
       "loose": {"tests/test_scale.py": TESTS.replace("atol=1e-6", "atol=1e-1")}}


def batch(home, manifest: dict, path) -> dict[str, dict]:
    path.write_text(json.dumps({"target": "tests/test_scale.py", "no_perf": True, **manifest}))
    doit(home, "batch", f"manifest={path}")
    return {label: json.loads((home / "reports" / label / "validation_report.json").read_text()) for label in PRS}


def judged(report: dict) -> tuple:
    return report["verdict"], sorted((f["severity"], f["stage"]) for f in report["findings"] if f["severity"] != "note")


def test_a_dirty_clone_by_refs_gets_the_verdicts_of_the_same_prs_by_patch_and_runs_base_once(tmp_path, idle_gpu):
    base = kernel_repo(tmp_path / "base")
    patches = {label: make_patch(base, files, tmp_path / f"{label}.patch") for label, files in PRS.items()}
    by_patch = batch(tmp_path / "home-patch", {"repo": str(base), "prs": [
        {"label": label, "patch": str(patch)} for label, patch in patches.items()]}, tmp_path / "by-patch.json")

    caller = tmp_path / "caller"
    subprocess.run(["git", "clone", "-q", str(base), str(caller)], check=True, capture_output=True)
    for label, files in PRS.items():
        branch(caller, f"pr-{label}", files, label)
    (caller / "kernels" / "scale.py").write_text("# half-done local edit\n")
    (caller / "scratch.txt").write_text("untracked\n")
    before = caller_state(caller)
    home = tmp_path / "home-refs"
    by_refs = batch(home, {"repo": str(caller), "base_ref": "main", "prs": [
        {"label": label, "head_ref": f"pr-{label}"} for label in PRS]}, tmp_path / "by-refs.json")

    assert {label: judged(report) for label, report in by_refs.items()} == \
        {label: judged(report) for label, report in by_patch.items()}
    assert by_refs["tail"]["verdict"] == "BLOCK" and by_refs["loose"]["verdict"] == "BLOCK"
    assert list(base_runs_per_key(home).values()) == [1]  # three PRs against one tip: one base run
    repo = by_refs["tail"]["repo"]
    assert (repo["source"], repo["base_ref"], repo["head_ref"]) == (str(caller), "main", "pr-tail")
    assert repo["head"] == git(caller, "rev-parse", "pr-tail").strip()
    assert repo["worktree"].startswith(str(home / "clones"))
    assert by_patch["tail"]["repo"]["source"] is None
    assert caller_state(caller) == before


def test_a_forge_url_with_pull_refs_and_a_pr_behind_base_that_conflicts(repo, home, tmp_path, capsys, idle_gpu):
    git(repo, "checkout", "-q", "-b", "old-main")
    bug = branch(repo, "bug", {"kernels/scale.py": KERNEL_TAIL_BUG}, "tail bug")
    behind = branch(repo, "behind", {"kernels/scale.py": KERNEL.replace("TILE = 8", "TILE = 4")}, "smaller tile",
                    start="old-main")
    write_files(repo, {"kernels/scale.py": KERNEL.replace("TILE = 8", "TILE = 16")})
    git(repo, "commit", "-qam", "base moves on")
    forge = tmp_path / "forge.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(forge)], check=True)
    git(forge, "update-ref", "refs/pull/7/head", bug)
    git(forge, "update-ref", "refs/pull/8/head", behind)

    def validate(head_ref: str, label: str) -> dict:
        out = tmp_path / f"{label}.json"
        cli.main(["--repo", f"file://{forge}", "--base-ref", "main", "--head-ref", head_ref,
                  "--target", "tests/test_scale.py", "--label", label, "--out", str(out), "--quiet"])
        return json.loads(out.read_text())

    tail = validate("pull/7/head", "pr-7")
    assert tail["verdict"] == "BLOCK" and tail["stages"]["merge_sim"]["status"] == "pass"
    assert tail["stages"]["correctness_repo_tests"]["status"] == "fail"
    conflict = validate("pull/8/head", "pr-8")
    assert conflict["verdict"] == "BLOCK" and conflict["stages"]["merge_sim"]["status"] == "fail"
    assert [f["stage"] for f in conflict["findings"] if f["severity"] == "blocker"] == ["merge_sim"]


@pytest.mark.parametrize("flags, said", [
    (["--base-ref", "main", "--head-ref", "no-such-pr"], "--head-ref 'no-such-pr': no such branch, tag or commit in "),
    (["--base-ref", "main"], "--base-ref and --head-ref go together"),
    (["--base-ref", "main", "--head-ref", "main", "--head-sha", "a" * 40], "either by refs"),
])
def test_refs_usage_errors_exit_64_with_one_line_and_no_report(flags, said, repo, home, tmp_path, capsys):
    out = tmp_path / "report.json"
    before = caller_state(repo)
    code = cli.main(["--repo", str(repo), "--target", "tests/test_scale.py", "--out", str(out), "--quiet", *flags])
    lines = capsys.readouterr().err.splitlines()
    assert code == 64 and len(lines) == 1 and said in lines[0] and lines[0].startswith("validate-kernel-pr: error:")
    assert "couldn't find remote ref" not in lines[0]  # git's words for it are not the user's
    assert not out.exists() and caller_state(repo) == before


def test_a_tree_another_validator_holds_is_not_handed_out_again(caller, tmp_path):
    root = tmp_path / "clones"
    first = clones.prepare(str(caller), "main", "pr-tail", root)
    held = locks.try_hold(state_dir(first.worktree) / "validator.lock")  # as a running validator holds it
    try:
        second = clones.prepare(str(caller), "main", "pr-tail", root)
    finally:
        os.close(held)
    assert second.worktree != first.worktree and second.base_oid == first.base_oid
    assert git(second.worktree, "rev-parse", "HEAD").strip() == first.base_oid
    assert clones.prepare(str(caller), "main", "pr-tail", root).worktree == first.worktree  # free again: reused


def _age(path, days: float) -> None:
    """Make `path` look last used `days` ago."""
    then = os.path.getmtime(path) - days * 86400
    os.utime(path, (then, then))


def test_gc_removes_trees_and_clones_unused_for_longer_than_its_age_and_never_one_in_use(caller, tmp_path, home):
    root = home / "clones"
    before = caller_state(caller)
    busy = clones.prepare(str(caller), "main", "pr-tail", root)
    held = locks.try_hold(state_dir(busy.worktree) / "validator.lock")  # a validator runs in it
    try:
        idle = clones.prepare(str(caller), "main", "pr-tail", root)  # the second slot, free
        other = kernel_repo(tmp_path / "other")
        branch(other, "pr", {"kernels/scale.py": KERNEL_TAIL_BUG}, "tail bug")
        unused = clones.prepare(str(other), "main", "pr", root)
        for tree in (busy.worktree, idle.worktree, unused.worktree):
            _age(tree, 40)
        for change in (busy, unused):
            _age(change.clone.parent / "clone.lock", 40)
        recent = doit(home, "cache-gc", "older=60d")
        assert "removed 0 trees and 0 clones unused for longer than 60d" in recent.stdout, recent.stderr
        assert all(change.worktree.is_dir() for change in (busy, idle, unused))
        gone = doit(home, "cache-gc", "older=30d")
        assert "removed 2 trees and 1 clones unused for longer than 30d; 1 trees in use kept" in gone.stdout, gone.stderr
        assert busy.worktree.is_dir() and not idle.worktree.exists() and not unused.worktree.exists()
        assert git(busy.worktree, "status", "--porcelain", "--ignored") == ""  # the held tree is whole
        assert busy.clone.is_dir()  # its clone is in use through it
        assert not unused.clone.exists() and not unused.patch.exists()
        assert sorted(path.name for path in unused.clone.parent.iterdir()) == ["clone.lock"]
        assert "worktrees" not in os.listdir(busy.clone) or os.listdir(busy.clone / "worktrees") == \
            [busy.worktree.name]  # git forgot the removed tree
    finally:
        os.close(held)
    assert caller_state(caller) == before and git(other, "status", "--porcelain") == ""
    # once free, an unused tree goes too, and a later PR gets a fresh checkout of its clone
    assert "removed 1 trees and 1 clones" in doit(home, "cache-gc", "older=30d").stdout
    again = clones.prepare(str(caller), "main", "pr-tail", root)
    assert git(again.worktree, "rev-parse", "HEAD").strip() == busy.base_oid


def test_gc_skips_a_clone_a_front_door_is_preparing(caller, tmp_path):
    root = tmp_path / "clones"
    change = clones.prepare(str(caller), "main", "pr-tail", root)
    _age(change.worktree, 40)
    _age(change.clone.parent / "clone.lock", 40)
    preparing = locks.try_hold(change.clone.parent / "clone.lock")
    try:
        assert collect(root, 86400) == Collected([], [], [])
    finally:
        os.close(preparing)
    assert change.worktree.is_dir()
    collected = collect(root, 86400)
    assert collected.trees == [change.worktree] and collected.clones == [change.clone.parent]


def test_gc_keeps_a_tree_whose_lend_is_open_without_a_validator_lock(caller, tmp_path, home):
    # a fleet node lends a tree without the validator lock; a guardian recovers one under the tree lock
    lent = clones.prepare(str(caller), "main", "pr-tail", home / "clones")
    Worktree(lent.worktree, None).journal.open(lent.worktree)
    _age(lent.worktree, 40)
    kept = doit(home, "cache-gc", "older=30d")
    assert "0 trees and 0 clones" in kept.stdout and "1 trees in use kept" in kept.stdout, kept.stdout
    assert lent.worktree.is_dir()
    Worktree(lent.worktree, None).journal.end()
    assert "removed 1 trees" in doit(home, "cache-gc", "older=30d").stdout
