"""Fault injection: a validator killed at its fault points or at random moments, then run again.

Every time: the worktree ends byte-identical to what was supplied, the journal is cleared, and a
report exists only if it is a complete one.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from kvtasks.worktree import Worktree
from tests.conftest import IDLE_AMD
from tests.kernel_repos import KERNEL_TAIL_BUG, late_writer_pr, make_patch, snapshot, wait_past_the_late_write

# every tree these destructive scenarios lend sits among repositories kvtasks was never given
pytestmark = pytest.mark.usefixtures("bystanders")

SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


def validator(repo, patch, out, home, **environ):
    return subprocess.Popen([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch),
                             "--target", "tests/test_scale.py", "--out", str(out), "--quiet", "--no-perf"],
                            env={**os.environ, "KVTASKS_HOME": str(home), **environ}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


# one kill of each signal at each kind of moment, in turn against one workspace: the tree lent with the
# patch applied, a target running on it, and a report about to be published (random moments, many
# of them: bench/killed_anywhere.py)
KILL_POINTS = [(signal.SIGTERM, "apply"), (signal.SIGINT, "launch"), (signal.SIGKILL, "report")]


def test_killed_at_each_kind_of_fault_point_the_next_run_hands_everything_back(repo, home, tmp_path, idle_gpu):
    from tests.processes import wait_for_marker

    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG,
                              "tests/test_added.py": "def test_added():\n    pass\n"}, tmp_path / "pr.patch")
    supplied = snapshot(repo)
    for sig, point in KILL_POINTS:
        out, marker = tmp_path / f"killed-{point}.json", tmp_path / f"at-{point}"
        killed = validator(repo, patch, out, home, KVTASKS_FAULT_POINT=point, KVTASKS_FAULT_MARKER=str(marker))
        assert wait_for_marker(marker, killed) == killed.pid
        killed.send_signal(sig)
        killed.communicate(timeout=120)
        assert not out.exists(), f"{sig.name} at {point}"  # stopped before it published: never a partial report
        if sig != signal.SIGKILL:
            assert snapshot(repo) == supplied, f"{sig.name} at {point} left the tree changed"
            assert Worktree(repo, None).journal.pending() is None
    rerun = tmp_path / "rerun.json"
    code = validator(repo, patch, rerun, home).wait(timeout=120)
    assert snapshot(repo) == supplied and Worktree(repo, None).journal.pending() is None
    report = json.loads(rerun.read_text())
    assert report["verdict"] == "BLOCK" and code == 1, "the rerun blamed the caller"
    assert report["stages"]["merge_sim"]["status"] == "pass"


def test_a_sigkilled_run_is_recovered_and_said_so(repo, home, tmp_path, idle_gpu):
    """The target leaves a grandchild that would write into the tree after the validator died:
    the target dies with its validator, the next run kills the grandchild before touching the tree.
    Its guardian is killed first, as a reboot or an OOM killer taking both would (with the
    guardian alive, see test_guardian.py)."""
    from tests.processes import alive, guardians

    delay_s = 6
    patch, marker, pid_file = late_writer_pr(repo, tmp_path, delay_s=delay_s)
    supplied = snapshot(repo)
    proc = subprocess.Popen([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch),
                             "--target", "tests/test_slow.py", "--quiet", "--out", str(tmp_path / "r.json")],
                            env={**os.environ, "KVTASKS_HOME": str(home)}, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    watching = guardians(repo)
    assert len(watching) == 1
    os.kill(watching[0], signal.SIGKILL)
    assert not alive(watching[0])
    proc.kill()
    proc.wait()
    late = int(pid_file.read_text())
    assert alive(late, settle_s=0)  # the orphan outlived its validator
    assert (repo / "tests/test_slow.py").exists()  # SIGKILL left the patch applied
    assert Worktree(repo, None).journal.pending()["groups"]
    # another KVTASKS_HOME and TMPDIR: the journal lives with the worktree, not with the evidence
    done = subprocess.run([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch),
                           "--target", "tests/test_scale.py", "--no-perf", "--quiet", "--out",
                           str(tmp_path / "again.json")],
                          env={**os.environ, "KVTASKS_HOME": str(tmp_path / "other-home"), "TMPDIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert "was killed with patch" in done.stderr
    report = json.loads((tmp_path / "again.json").read_text())
    assert report["recovered_run"]["patch_reversed"] is True
    assert late in report["recovered_run"]["killed_processes"] and not alive(late)
    assert report["stages"]["merge_sim"]["status"] == "pass"  # never blamed on the caller
    assert any("was not dirtied by the caller" in f["detail"] for f in report["findings"])
    wait_past_the_late_write(marker, delay_s)
    assert not (repo / "tests/late.txt").exists()
    assert snapshot(repo) == supplied


def test_a_hanging_target_with_a_sleeping_grandchild_times_out_and_leaves_nothing(repo, validate, tmp_path,
                                                                                   monkeypatch):
    from tests.processes import alive

    pid_file = tmp_path / "grandchild.pid"
    hanging = ("import subprocess, sys, time\n\n\ndef test_hangs():\n"
               "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
               f"    open({str(pid_file)!r}, 'w').write(str(child.pid))\n    time.sleep(300)\n")
    patch = make_patch(repo, {"tests/test_hang.py": hanging}, tmp_path / "pr.patch")
    monkeypatch.setenv("TIMEOUT", "3")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_hang.py", "--runner", "pytest")
    head = result.stage("correctness_repo_tests")
    assert head["timed_out"] is True and head["exit"] is None and "timed out after 3s" in head["note"]
    assert not alive(int(pid_file.read_text()))


def test_credentials_in_the_validator_environment_never_reach_the_target(repo, validate, tmp_path, monkeypatch):
    dump = tmp_path / "env.json"
    printing = (f"import json, os\n\n\ndef test_env():\n    json.dump(dict(os.environ), open({str(dump)!r}, 'w'))\n")
    for name in ("GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "SSH_AUTH_SOCK", "NPM_TOKEN",
                 "DATABASE_PASSWORD", "OPENAI_API_KEY", "CUDA_LAUNCH_TOKEN"):
        monkeypatch.setenv(name, "secret-value")
    patch = make_patch(repo, {"tests/test_env.py": printing}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_env.py")
    seen = json.loads(dump.read_text())
    assert "secret-value" not in seen.values()
    assert not {name for name in seen if "TOKEN" in name or "SECRET" in name or "KEY" in name}
    assert result.report["isolation"]["target_environment"]["passed_through"]


def test_a_parallel_batch_killed_anywhere_hands_everything_back_and_resumes(tmp_path, home, idle_gpu):
    """Seeded kill points in a `doit -n 2` batch: whatever is killed, the next batch finds the tree
    as supplied (a dead worker's lend recovered), and its verdicts are the batch's own."""
    from tests.batches import PROJECT, eight_prs, reports, write_manifest
    from tests.kernel_repos import tiled_repo

    tiled = tiled_repo(tmp_path / "tiled")
    prs = {label: pr for label, pr in eight_prs(tiled, tmp_path / "patches").items()
           if label in ("docs-1", "tail", "loose")}
    manifest = write_manifest(tiled, prs, tmp_path / "three.json")
    supplied = snapshot(tiled)
    command = [sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "-n", "2", "batch", f"manifest={manifest}"]
    env = {**os.environ, "KVTASKS_HOME": str(home)}
    rng = random.Random(20261203)
    for sig, delay in [(rng.choice(SIGNALS), rng.uniform(1.0, 12.0)) for _ in range(2)]:
        batch = subprocess.Popen(command, cwd=PROJECT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        batch.send_signal(sig)
        batch.wait(timeout=120)
    done = subprocess.run(command, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600)
    assert snapshot(tiled) == supplied, done.stderr[-2000:]
    assert Worktree(tiled, None).journal.pending() is None
    verdicts = {label: report["verdict"] for label, report in reports(home, prs).items()}
    assert verdicts["tail"] == "BLOCK" and verdicts["loose"] == "BLOCK" and verdicts["docs-1"] != "BLOCK"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_picker_ends_the_validator_at_once_and_leaves_nothing(sig, repo, home, tmp_path, idle_gpu,
                                                                                  private_gpu_locks):
    from kvtasks.system import locks
    from kvtasks.worktree import held_by_a_validator
    from tests.processes import alive, children, wait_for_marker

    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    supplied = snapshot(repo)
    out, marker = tmp_path / "report.json", tmp_path / "at-the-picker"
    proc = validator(repo, patch, out, home, KVTASKS_FAULT_POINT="picker", KVTASKS_FAULT_MARKER=str(marker))
    assert wait_for_marker(marker, proc) == proc.pid
    helpers = children(proc.pid)  # the GPU lease owner
    assert helpers
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 15, f"{sig.name} took {time.monotonic() - sent:.1f}s to end the validator"
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {sig.name} while no tree was lent" in err and "Traceback" not in err
    assert not any(alive(pid) for pid in helpers)
    assert snapshot(repo) == supplied and not out.exists() and not held_by_a_validator(repo)
    claim = locks.try_hold(private_gpu_locks / f"gpu-{IDLE_AMD['hip_id']}.lock")
    assert claim is not None  # the GPU claim went with the validator
    os.close(claim)


def test_sigterm_during_a_picker_override_kills_what_the_picker_started(repo, home, tmp_path):
    """A PICKER override dies with the validator as its direct child; its own children only when
    the validator lives to kill its group."""
    from tests.processes import alive

    pid_file = tmp_path / "picker-child.pid"
    picker = tmp_path / "slow-picker"
    picker.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}.tmp\nmv {pid_file}.tmp {pid_file}\nwait\n")
    picker.chmod(0o755)
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    proc = validator(repo, patch, tmp_path / "report.json", home, PICKER=str(picker))
    deadline = time.monotonic() + 60
    while not pid_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not alive(int(pid_file.read_text()))
