"""Parallel batches, GPU leases, locks and stale baselines: `-n K` and killed validators change nothing."""
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtasks import worktree
from kvtasks.gpu import lease, picker
from kvtasks.evidence.store import Store
from tests.batches import FIVE, base_runs_per_key, reports
from tests.kernel_repos import ENV_TEST, TILED_TAIL_BUG, git, make_patch, tiled_repo


@pytest.fixture
def tiled(tmp_path):
    return tiled_repo(tmp_path / "tiled")


BENCH = Path(__file__).resolve().parent.parent / "bench" / "parallel_batch.py"


def test_a_parallel_batch_on_one_gpu_matches_the_sequential_one(tmp_path):
    # bench/parallel_batch.py's smoke run: tests/batches.py's FIVE PRs on one (fake) GPU, once in turn and once
    # with `doit -n 2`, the repository and both workspaces kept here to judge
    done = subprocess.run([sys.executable, str(BENCH), "--smoke", "--keep", str(tmp_path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "sequential: exit 1"
    # the parallel batch's verdicts are the sequential one's, no worker took another's lend for a crash, no base
    # key ran twice, and the tree came back byte-identical after both
    assert lines[1].startswith("run 1: exit 1, verdict mismatches 0, recovered_run 0, extra base runs 0, "
                               "tree changed False"), lines[1]
    sequential, parallel = tmp_path / "sequential", tmp_path / "parallel-1"
    one, two = reports(sequential, FIVE), reports(parallel, FIVE)
    assert not [f for f in one["docs-1"]["findings"] if f["severity"] in ("blocker", "should-fix")]
    assert one["tail"]["verdict"] == "BLOCK" and one["loose"]["verdict"] == "BLOCK"
    index = (sequential / "reports" / "batch" / "index.md").read_text()
    assert "| tail | BLOCK |" in index and "| loose | BLOCK |" in index
    assert {label: r["verdict"] for label, r in two.items()} == {label: r["verdict"] for label, r in one.items()}
    assert two["tail"]["verdict"] == "BLOCK" and two["tail-wide"]["verdict"] == "BLOCK"
    assert all(r["recovered_run"] is None for r in two.values())
    assert all(r["stages"]["gpu_claim"]["status"] == "pass" for r in two.values())  # one GPU, shared, never none
    for workspace in (sequential, parallel):
        keys = {Store(workspace / "cache").label(label)["base_key"] for label in FIVE}
        assert len(keys) == 2 and base_runs_per_key(workspace) == {key: 1 for key in keys}


def test_a_timed_out_base_is_inconclusive_and_never_a_baseline(tiled, validate, home, tmp_path, monkeypatch):
    """A base cut short says nothing about the PR, and is never reused (under the same key it runs
    again: the next test; under another TIMEOUT the key differs: tests/test_keys.py)."""
    # the target is slow on both sides: TIMEOUT=2 cuts base short
    slow = ENV_TEST + "\n\ndef test_slow():\n    import time\n    time.sleep(4)\n"
    (tiled / "tests" / "test_env.py").write_text(slow)
    git(tiled, "commit", "-qam", "a slow test")
    patch = make_patch(tiled, {"kernels/tiled.py": TILED_TAIL_BUG}, tmp_path / "tail.patch")
    monkeypatch.setenv("TIMEOUT", "2")
    short = validate(tiled, "--patch", str(patch), "--target", "tests/test_env.py", "--shape-env", "TILED_SHAPES",
                     "--grid", "64,2000,f32", "--no-perf", "--label", "short")
    base = short.stage("baseline_control")
    assert base["repo_tests"]["timed_out"] is True and "not a baseline for later PRs" in base["reuse"]
    assert short.verdict == "INCONCLUSIVE"
    assert not any("red on both sides" in f["detail"] for f in short.report["findings"])


def test_a_timed_out_baseline_under_the_same_key_is_run_again(tiled, validate, home, tmp_path):
    from kvtasks.evidence import workspace as workspaces
    from kvtasks.run import phases
    from kvtasks.stages import baseline_control

    patch = make_patch(tiled, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    validate(tiled, "--patch", str(patch), "--target", "tests/test_env.py", "--no-perf", "--label", "a")
    store, key = Store(home / "cache"), Store(home / "cache").label("a")["base_key"]
    workspace = workspaces.Workspace(home)
    assert phases.base_done(workspace, key)
    stored = store.read("base", key)
    baseline = next(r for r in stored if r.name == baseline_control.NAME)
    baseline.runs[0].timed_out, baseline.runs[0].exit = True, None
    store.write("base", key, stored, label="a", base_oid=None)
    assert baseline_control.reusable(baseline) == "base-repo timed out"
    assert not phases.base_done(workspace, key)


def test_the_lease_owner_keeps_a_claim_after_the_worker_that_took_it_exits(private_gpu_locks):
    lease.start(private_gpu_locks)
    try:
        worker = os.fork()
        if worker == 0:  # a doit -n worker: claims through the owner, then exits
            os._exit(0 if picker.try_lock(7) is not None else 1)
        assert os.waitpid(worker, 0)[1] == 0
        assert [claim.index for claim in picker.held()] == [7]
        assert picker.try_lock(7) is not None  # another worker of this validator shares it
        fd = os.open(private_gpu_locks / "gpu-7.lock", os.O_RDWR)
        with pytest.raises(BlockingIOError):  # another validator does not get it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        picker.release_all()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        lease.stop()
    assert not lease.running()


def test_a_worker_waits_its_turn_on_the_gpu_and_says_so(private_gpu_locks):
    lease.start(private_gpu_locks)
    said = []
    try:
        holder = os.fork()
        if holder == 0:
            with lease.turn({"HIP_VISIBLE_DEVICES": "7"}, bound_s=30):
                time.sleep(1.5)
            os._exit(0)
        time.sleep(0.3)
        started = time.monotonic()
        with lease.turn({"HIP_VISIBLE_DEVICES": "7"}, bound_s=30, say=said.append):
            waited = time.monotonic() - started
        os.waitpid(holder, 0)
        assert waited > 0.8
        holder = os.fork()
        if holder == 0:
            with lease.turn({"HIP_VISIBLE_DEVICES": "7"}, bound_s=30):
                time.sleep(3)
            os._exit(0)
        time.sleep(0.3)
        with pytest.raises(TimeoutError, match="no target ran without it"):
            with lease.turn({"HIP_VISIBLE_DEVICES": "7"}, bound_s=0.5):
                pass
        os.waitpid(holder, 0)
    finally:
        lease.stop()


def test_a_lock_another_user_owns_reads_as_busy_in_one_line(tiled, monkeypatch):
    real_open = os.open

    def refusing(path, flags, *mode):
        if str(path).endswith("validator.lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *mode)

    monkeypatch.setattr(worktree.os, "open", refusing)
    with pytest.raises(worktree.WorktreeBusy) as refused:
        worktree.hold_exclusively(tiled)
    assert "is busy" in str(refused.value) and "\n" not in str(refused.value)


def test_lock_and_journal_live_in_the_worktrees_git_dir(tiled, tmp_path):
    linked = tmp_path / "linked"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(linked)], cwd=tiled, check=True)
    own = worktree.state_dir(linked)
    assert own.parent.parent.name == "worktrees" and own != worktree.state_dir(tiled)
    tree = worktree.Worktree(linked, None)
    with tree.lend("base"):
        entry = tree.journal.pending()
        assert entry["pid"] == os.getpid() and tree.journal.entry.parent == own
    assert tree.journal.pending() is None


def test_a_second_validator_with_another_tmpdir_and_home_is_still_refused(tiled, tmp_path):
    worktree.hold_exclusively(tiled)
    try:
        done = subprocess.run([sys.executable, "-m", "kvtasks", "--repo", str(tiled), "--target", "tests/test_env.py",
                               "--out", str(tmp_path / "r.json")], capture_output=True, text=True,
                              env={**os.environ, "KVTASKS_HOME": str(tmp_path / "other-home"),
                                   "TMPDIR": str(tmp_path), "KVTASKS_LOCK_DIR": str(tmp_path)})
    finally:
        worktree.release_exclusive(tiled)
    assert done.returncode == 64 and "is busy" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_crashing_group_still_writes_a_report_and_a_crashed_base_is_not_reused(tiled, validate, home, tmp_path,
                                                                                  monkeypatch):
    from dataclasses import replace

    from kvtasks.run import phases
    from kvtasks.run.pipeline import PIPELINE
    from kvtasks.evidence.workspace import Workspace

    def crash(ctx):
        raise RuntimeError("simulated defect")

    def crashing(patched, group: str, stage: str) -> None:
        patched.setitem(PIPELINE, group, tuple(replace(row, spec=replace(row.spec, run=crash)) if row.name == stage
                                               else row for row in PIPELINE[group]))

    patch = make_patch(tiled, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    flags = ["--patch", str(patch), "--target", "tests/test_env.py", "--no-perf"]
    with monkeypatch.context() as patched:
        crashing(patched, "prepare", "test_policy")
        prepare = validate(tiled, *flags, "--label", "prepare-crash")
    assert prepare.code == 2 and prepare.verdict == "INCONCLUSIVE"
    assert any("prepare crashed: RuntimeError: simulated defect" in f["detail"] for f in prepare.report["findings"])
    with monkeypatch.context() as patched:
        crashing(patched, "base", "baseline_control")
        base = validate(tiled, *flags, "--label", "base-crash")
    assert base.code == 2 and base.verdict == "INCONCLUSIVE"
    assert any("base crashed: RuntimeError" in f["detail"] for f in base.report["findings"])
    assert not phases.base_done(Workspace(home), Store(home / "cache").label("base-crash")["base_key"])


def test_a_runtime_probe_that_hangs_is_killed_and_recorded(tiled, validate, tmp_path, monkeypatch):
    patch = make_patch(tiled, {"kernels/slow_import.py": "import time\ntime.sleep(30)\n"}, tmp_path / "slow.patch")
    monkeypatch.setenv("TIMEOUT", "2")
    result = validate(tiled, "--patch", str(patch), "--target", "tests/test_env.py", "--no-perf",
                      "--runtime-module", "kernels.slow_import")
    stage = result.stage("runtime_compat")
    assert stage["status"] == "skip" and "timed out after 2s" in stage["note"], stage["note"]
    assert json.dumps(result.report).count("process group was killed") >= 1
