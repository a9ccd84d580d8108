"""The lent tree: `Worktree.lend(side)` gives a stage base or head and takes it back as supplied."""
import os
import signal
import subprocess
import sys
import time

import pytest

from kvtasks.system import processes
from kvtasks.worktree import GitFailed, Interrupted, NotClean, PatchRefused, Worktree
from tests.kernel_repos import make_patch, make_repo, snapshot

# every tree these destructive scenarios lend sits among repositories kvtasks was never given
pytestmark = pytest.mark.usefixtures("bystanders")


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


def test_an_interrupt_wins_over_a_restore_that_fails_and_the_next_run_recovers(repo, tmp_path, monkeypatch, capfd):
    patch = make_patch(repo, {"kernel.py": "SCALE = 2\n"}, tmp_path / "pr.patch")
    supplied = snapshot(repo)
    tree = Worktree(repo, str(patch))

    def failing(*_args, **_kwargs):
        raise GitFailed("worktree could not be restored: ['kernel.py']")

    monkeypatch.setattr(tree, "restore", failing)
    with pytest.raises(Interrupted) as interrupted:  # never the GitFailed: a caller's except Exception would go on
        with tree.lend("head"):
            raise Interrupted(signal.SIGTERM)
    assert interrupted.value.code == 128 + signal.SIGTERM
    said = capfd.readouterr().err
    assert "interrupted by SIGTERM; the worktree was not handed back" in said and "was restored" not in said
    assert tree.journal.pending()["patch"]  # left for the next run
    monkeypatch.undo()
    assert Worktree(repo, None).recover()["patch_reversed"] is True and snapshot(repo) == supplied


def test_a_signal_during_the_restore_or_swallowed_on_the_way_up_still_ends_the_run(repo, monkeypatch, capfd):
    supplied = snapshot(repo)
    tree = Worktree(repo, None)
    with pytest.raises(Interrupted):
        with tree.lend("base"):
            (repo / "out.log").write_text("x")
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except SystemExit:
                pass  # a broad except (or a finalizer) ate the handler's raise
    assert snapshot(repo) == supplied and "interrupted by SIGTERM; the worktree was restored" in capfd.readouterr().err
    restore = tree.restore

    def signalled_while_restoring(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # held back until the tree is back
        return restore(*args, **kwargs)

    monkeypatch.setattr(tree, "restore", signalled_while_restoring)
    with pytest.raises(Interrupted) as interrupted:
        with tree.lend("base"):
            (repo / "out.log").write_text("x")
    assert interrupted.value.signum == signal.SIGINT and snapshot(repo) == supplied
    assert "interrupted by SIGINT; the worktree was restored" in capfd.readouterr().err


def test_nothing_launched_in_a_lend_outlives_it(repo):
    with Worktree(repo, None).lend("base"):
        escaped = processes.popen([sys.executable, "-c", "import time; time.sleep(60)"], track=True)
    assert escaped.wait(timeout=10) == -signal.SIGKILL


def test_a_signal_whose_interrupt_python_swallowed_still_ends_the_validator():
    """A handler's exception lands wherever the main thread is; inside a finalizer (or an at-fork
    callback) Python prints 'Exception ignored' and goes on, so the kernel ends the process."""
    script = ("import os, signal, time\n"
              "from kvtasks.worktree import signals\n"
              "signals.ESCALATE_S = 1.0\n"
              "signals.install()\n"
              "class Swallows:\n"
              "    def __del__(self):\n"
              "        os.kill(os.getpid(), signal.SIGTERM)\n"
              "        time.sleep(0.2)\n"
              "Swallows()\n"
              "print('swallowed', flush=True)\n"
              "time.sleep(20)\n"
              "print('ran on', flush=True)\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["swallowed"] and "Exception ignored" in done.stderr
    assert done.returncode == -signal.SIGALRM and time.monotonic() - started < 15


def test_a_recovery_restores_the_committed_files_a_dead_run_changed(repo, tmp_path):
    patch = make_patch(repo, {"kernel.py": "SCALE = 2\n"}, tmp_path / "pr.patch")
    supplied = snapshot(repo)
    tree = Worktree(repo, str(patch))
    tree.journal.open(repo)
    tree.apply(str(patch))
    (repo / "tests/test_kernel.py").write_text("def test(): assert True  # rewritten by the run\n")
    (repo / "written.log").write_text("a run wrote this")
    tree.journal._update(pid=2 ** 22 + 1, pid_start=1)  # its validator died without handing the tree back
    recovered = Worktree(repo, None).recover()
    assert recovered["patch_reversed"] is True and recovered["still_dirty"] == 0
    assert set(recovered["removed"]) == {"tests/test_kernel.py", "written.log"}
    assert snapshot(repo) == supplied and tree.journal.pending() is None


def test_base_files_read_together_are_what_git_show_gives_one_by_one(tmp_path):
    files = {"crlf.py": "a = 1\r\nb = 2\rc = 3\n", "pkg/mod.py": "x = 'é'\n", "with space.py": "",
             "empty.txt": "", "no newline.py": "tail"}
    repo = make_repo(tmp_path / "r", files)
    (repo / "latin1.py").write_bytes(b"s = '\xe9'\n")
    (repo / "line\nbreak.py").write_text("odd = True\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "more"], cwd=repo, check=True)
    paths = [*files, "latin1.py", "line\nbreak.py", "pkg", "gone.py", "pkg/gone.py"]
    shown = {path: done.stdout if (done := subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True,
                                                          text=True, errors="surrogateescape")).returncode == 0
             else None for path in paths}
    shown["pkg"] = None  # a folder is no file
    read = Worktree(repo, None).read_base_many(paths)
    assert read == shown
    assert read["latin1.py"].encode("utf-8", "surrogateescape") == b"s = '\xe9'\n"
    tree = Worktree(repo, None)
    assert [tree.read_base(path) for path in paths] == list(shown.values())
    assert tree.exists_on_base("pkg/mod.py") and not tree.exists_on_base("pkg") and not tree.exists_on_base("gone.py")


def test_a_tree_with_anything_uncommitted_is_never_lent_and_is_left_as_it_is(repo):
    # the hand-back removes everything uncommitted, so the lend itself refuses, whoever asks for it
    (repo / "notes.txt").write_text("precious\n")
    (repo / "kernel.py").write_text("SCALE = 3  # being edited\n")
    supplied = snapshot(repo)
    with pytest.raises(NotClean, match=r"not clean \(2 entries: M kernel.py, \?\? notes.txt\); it was not lent"):
        with Worktree(repo, None).lend("base"):
            pytest.fail("a dirty tree was lent")
    assert snapshot(repo) == supplied
