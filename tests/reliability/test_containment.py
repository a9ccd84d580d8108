"""No process outlives its launch: a daemon a kernel starts at import is ended and named, with and
without --sandbox; a run that plants a git hook is a blocker and the hook is gone; in a batch, one
PR's daemon is dead before the next PR runs; a log past its ceiling is stored cut."""
import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from kvtasks.front import cli
from kvtasks.system import cgroups, containment
from kvtasks.harness.launch import launch
from kvtasks.worktree import run_git
from tests.kernel_repos import DAEMON_AT_IMPORT, KERNEL, TESTS, kernel_repo, make_patch, snapshot

def daemon_kernel(beat: Path) -> str:
    return DAEMON_AT_IMPORT.format(beat=str(beat)) + KERNEL


def assert_stopped_beating(beat: Path, own_pids: bool = True) -> None:
    """Nothing writes the heartbeat any more, and its last writer is gone (where the pid it wrote is
    one of this host's: under the sandbox it is its PID namespace's)."""
    assert beat.is_file(), "the daemon never started: the test shows nothing"
    size = beat.stat().st_size
    time.sleep(0.3)
    assert beat.stat().st_size == size, "the daemon still beats after the tree was handed back"
    last = int(beat.read_text().split()[-1])
    assert not own_pids or not psutil.pid_exists(last) or psutil.Process(last).status() == psutil.STATUS_ZOMBIE


def survivors_of(report: dict) -> list[dict]:
    return [survivor for launch in report["containment"]["survivors"] for survivor in launch["survivors"]]


def _validate_daemon_pr(repo, tmp_path, validate, *flags):
    beat = tmp_path / "heartbeat"
    patch = make_patch(repo, {"kernels/scale.py": daemon_kernel(beat)}, tmp_path / "daemon.patch")
    done = validate(repo, "--target", "tests/test_scale.py", "--patch", str(patch), "--no-perf", *flags)
    assert_stopped_beating(beat, own_pids="--sandbox" not in flags)
    report = done.report
    assert any(survivor["command"] for survivor in survivors_of(report))
    should_fix = [f for f in report["findings"] if f["rule"] == "containment.head-left-processes"]
    assert should_fix and should_fix[0]["severity"] == "should-fix", report["findings"]
    assert not any(launch["launch"].startswith("base-") for launch in report["containment"]["survivors"])
    assert report["verdict"] != "PASS"
    return report


def test_a_daemon_a_kernel_starts_at_import_is_ended_and_named(repo, tmp_path, validate):
    report = _validate_daemon_pr(repo, tmp_path, validate)
    assert {survivor["found_as"] for survivor in survivors_of(report)} & {"orphan", "descendant", "cgroup"}


def test_a_daemon_under_the_sandbox_ends_with_its_pid_namespace(repo, tmp_path, validate):
    # never skipped: a host where unshare works runs it (this one, and CI's), and --sandbox refuses
    # with a usage error where it cannot
    report = _validate_daemon_pr(repo, tmp_path, validate, "--sandbox")
    assert {survivor["found_as"] for survivor in survivors_of(report)} == {"pid namespace"}


def test_a_run_that_plants_a_git_hook_is_blocked_and_the_hook_is_gone(repo, tmp_path, validate):
    hook = repo / ".git" / "hooks" / "post-checkout"
    config = (repo / ".git" / "config").read_text()
    planting = TESTS + ('\n\ndef test_plants():\n    import pathlib\n'
                        '    hook = pathlib.Path(".git/hooks/post-checkout")\n'
                        '    hook.write_text("#!/bin/sh\\ntouch /tmp/kvtasks-hook-ran\\n")\n    hook.chmod(0o755)\n'
                        '    with open(".git/config", "a") as config:\n'
                        '        config.write("[core]\\n\\tfsmonitor = touch /tmp/kvtasks-fsmonitor-ran\\n")\n')
    patch = make_patch(repo, {"tests/test_scale.py": planting}, tmp_path / "hook.patch")
    done = validate(repo, "--target", "tests/test_scale.py", "--patch", str(patch), "--no-perf")
    assert not hook.exists()
    assert (repo / ".git" / "config").read_text() == config
    blockers = [f for f in done.findings("blocker") if f["rule"] == "containment.git-changed-by-run"]
    assert {path for f in blockers for path in (".git/hooks/post-checkout", ".git/config") if path in f["detail"]} \
        == {".git/hooks/post-checkout", ".git/config"}
    assert done.verdict == "BLOCK"


def test_in_a_batch_one_pr_s_daemon_is_dead_before_the_next_pr_runs(repo, tmp_path, home, idle_gpu):
    beat = tmp_path / "heartbeat"
    daemon = make_patch(repo, {"kernels/scale.py": daemon_kernel(beat)}, tmp_path / "daemon.patch")
    # the next PR's test fails if anything still beats while it runs
    watching = TESTS + (f'\n\ndef test_nothing_beats():\n    import os, time\n    path = {str(beat)!r}\n'
                        '    size = os.path.getsize(path) if os.path.exists(path) else 0\n    time.sleep(0.2)\n'
                        '    assert (os.path.getsize(path) if os.path.exists(path) else 0) == size\n')
    watcher = make_patch(repo, {"tests/test_scale.py": watching}, tmp_path / "watcher.patch")
    manifest = tmp_path / "batch.json"
    manifest.write_text(json.dumps({"repo": str(repo), "target": "tests/test_scale.py", "no_perf": True, "prs": [
        {"label": "daemon", "patch": str(daemon), "head_sha": "a" * 40},
        {"label": "watcher", "patch": str(watcher), "head_sha": "b" * 40}]}))
    before = snapshot(repo)
    cli.main(["batch", "--manifest", str(manifest), "--quiet"])
    assert snapshot(repo) == before
    assert_stopped_beating(beat)
    watched = json.loads((home / "reports" / "watcher" / "validation_report.json").read_text())
    assert watched["stages"]["correctness_repo_tests"]["status"] == "pass", watched["stages"]["correctness_repo_tests"]
    assert watched["containment"]["survivors"] == []


def test_a_log_past_its_ceiling_is_stored_cut(tmp_path):
    chatty = tmp_path / "chatty.py"
    chatty.write_text("import sys\nsys.stdout.write('first line\\n' + 'x' * (3 << 20) + '\\nlast line\\n')\n")
    done = launch(label="chatty", runner="script", target=str(chatty), cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                  python_bin=sys.executable, run_dir=tmp_path / "runs", timeout_s=60, probe=None,
                  log_ceiling=1 << 20)
    kept = Path(done.log).read_bytes()
    assert done.exit == 0 and done.log_written_bytes > 3 << 20
    assert done.log_cut_bytes == done.log_written_bytes - (1 << 20)
    assert len(kept) < (1 << 20) + 200
    assert kept.startswith(b"first line\n") and kept.endswith(b"last line\n") and b"bytes of output cut here" in kept


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "subreaper-only"])
def test_a_launch_s_orphans_are_reaped_by_pid_and_nothing_else_of_the_launcher_is_touched(tmp_path, monkeypatch,
                                                                                           cgroup):
    if not cgroup:  # a host that delegates no cgroup: the subreaper alone finds the daemon
        monkeypatch.setattr(cgroups, "_CGROUP_ROOT", [None])
    elif cgroups.cgroup_root() is None:
        pytest.skip("this host delegates no cgroup v2 to the validator")
    # a child of the launcher started before the launch is no orphan of it, and stays alive
    bystander = psutil.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        beat = tmp_path / "heartbeat"
        script = tmp_path / "daemon.py"
        script.write_text(DAEMON_AT_IMPORT.format(beat=str(beat)) + "import time\ntime.sleep(0.3)\n")
        done = containment.run([sys.executable, str(script)], timeout_s=60)
        assert done.returncode == 0 and done.survivors
        expected = {"cgroup"} if cgroup else {"orphan", "descendant"}
        assert {survivor.found_as for survivor in done.survivors} <= expected
        assert_stopped_beating(beat)
        assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE
    finally:
        bystander.kill()
        bystander.wait()


def test_kvtasks_git_runs_no_command_a_run_could_set_in_the_repository_s_config(repo, tmp_path):
    ran = tmp_path / "ran"
    with open(repo / ".git" / "config", "a") as config:
        config.write(f"[core]\n\tfsmonitor = touch {ran}\n\thooksPath = {tmp_path}\n")
    (tmp_path / "post-index-change").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (tmp_path / "post-index-change").chmod(0o755)
    assert run_git(repo, "status", "--porcelain").ok and run_git(repo, "update-index", "--refresh").ok
    assert not ran.exists()


def test_held_files_a_run_makes_unreadable_or_that_redirect_git_are_named_removed_and_never_read(tmp_path):
    from kvtasks.worktree.held import MOST_READ, HeldFiles

    repo = kernel_repo(tmp_path / "kernels")
    git_dir = repo / ".git"
    held = HeldFiles(git_dir, repo)
    os.mkfifo(git_dir / "info" / "fifo")  # a read of it would block for ever
    with open(git_dir / "hooks" / "huge", "wb") as huge:  # sparse: large, never read whole
        huge.truncate(64 * MOST_READ)
    (git_dir / "commondir").write_text(str(tmp_path / "elsewhere") + "\n")  # git would read another config
    assert held.restore() == [".git/commondir", ".git/hooks/huge", ".git/info/fifo"]
    assert not (git_dir / "info" / "fifo").exists() and not (git_dir / "commondir").exists()
    assert held.restore() == []


def test_a_helper_that_ends_by_itself_after_its_parent_is_no_survivor_and_nothing_is_left_unreaped():
    # multiprocessing's resource tracker and the like end once their parent's pipe closes, not before it
    helper = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.3)'])\n"
    done = containment.run([sys.executable, "-c", helper], timeout_s=60)
    assert done.returncode == 0 and done.survivors == []
    assert not [child for child in psutil.Process().children() if child.status() == psutil.STATUS_ZOMBIE]


def test_a_run_that_replaces_the_tree_s_git_dir_stops_every_git_call_on_it(tmp_path):
    from kvtasks.worktree.held import HeldFiles, ReplacedGitDir

    repo = kernel_repo(tmp_path / "kernels")
    held = HeldFiles(repo / ".git", repo)
    (repo / ".git").rename(tmp_path / "moved")
    (repo / ".git").write_text(f"gitdir: {tmp_path / 'elsewhere'}\n")  # git would read a repository of the run's
    with pytest.raises(ReplacedGitDir):
        held.restore()
