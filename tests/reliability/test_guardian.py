"""The guardian: a SIGKILLed validator's tree comes back with no further run, and a lend that
ends well leaves no guardian behind."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kvtasks.system import processes
from kvtasks.worktree import Worktree, guardian_start
from tests.kernel_repos import KERNEL_TAIL_BUG, late_writer_pr, make_patch, snapshot, wait_past_the_late_write
from tests.processes import alive, guardians, wait_for_marker

# every tree these destructive scenarios lend sits among repositories kvtasks was never given
pytestmark = pytest.mark.usefixtures("bystanders")

HANDED_BACK_S = 30  # the guardian's recovery: kill the groups, reverse the patch, remove what they wrote


def validator(repo, patch, target, home, **environ):
    return subprocess.Popen([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch),
                             "--target", target, "--quiet", "--no-perf", "--out", str(home / "report.json")],
                            env={**os.environ, "KVTASKS_HOME": str(home), **environ}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # a job of its own, as in a shell


def handed_back(repo, supplied) -> bool:
    """Whether the tree is as supplied with its journal settled, waiting (bounded) for the guardian."""
    deadline = time.monotonic() + HANDED_BACK_S
    while time.monotonic() < deadline:
        if Worktree(repo, None).journal.pending() is None and snapshot(repo) == supplied:
            return True
        time.sleep(0.1)
    return False


def test_a_sigkilled_validators_tree_comes_back_with_no_further_run(repo, home, tmp_path, idle_gpu):
    """The head target leaves a grandchild that would write into the tree after the validator
    died; nothing else runs afterwards, yet the grandchild is killed and the patch reversed."""
    delay_s = 4
    patch, marker, pid_file = late_writer_pr(repo, tmp_path, delay_s=delay_s)
    supplied = snapshot(repo)
    proc = validator(repo, patch, "tests/test_slow.py", home)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    watching = guardians(repo)
    assert len(watching) == 1 and os.getsid(watching[0]) not in (os.getsid(proc.pid), os.getsid(0))
    late = int(pid_file.read_text())
    os.killpg(proc.pid, signal.SIGKILL)  # the validator's whole job, as the OOM killer or a kill -9 of it
    _, err = proc.communicate(timeout=60)  # the guardian says what it did on the validator's stderr
    assert handed_back(repo, supplied), err
    assert not alive(late) and not alive(watching[0])
    assert "kvtasks guardian: pid" in err and "its patch reversed" in err
    wait_past_the_late_write(marker, delay_s)
    assert not (repo / "tests/late.txt").exists() and snapshot(repo) == supplied
    assert not list(home.glob("reports/*/validation_report.json")) and not (home / "report.json").exists()


@pytest.mark.parametrize("point", ["apply", "launch"])
def test_sigkill_at_a_fault_point_with_the_tree_lent(point, repo, home, tmp_path, idle_gpu):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG, "tests/test_added.py": "def test_added():\n    pass\n"},
                       tmp_path / "pr.patch")
    supplied = snapshot(repo)
    marker = tmp_path / "at-the-point"
    proc = validator(repo, patch, "tests/test_scale.py", home, KVTASKS_FAULT_POINT=point,
                     KVTASKS_FAULT_MARKER=str(marker))
    assert wait_for_marker(marker, proc) == proc.pid
    assert Worktree(repo, None).journal.pending()["pid"] == proc.pid  # lent right now
    proc.kill()
    _, err = proc.communicate(timeout=60)
    assert handed_back(repo, supplied), err
    assert not guardians(repo)


def test_a_lend_that_ends_well_ends_its_guardian_and_leaves_the_tree_alone(repo, tmp_path):
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG}, tmp_path / "pr.patch")
    supplied = snapshot(repo)
    tree = Worktree(repo, str(patch))
    with tree.lend("head"):
        watching = guardians(repo)
        assert len(watching) == 1 and (repo / "kernels/scale.py").read_text() == KERNEL_TAIL_BUG
    assert not alive(watching[0])
    assert snapshot(repo) == supplied


def test_a_guardian_waits_for_its_lender_to_be_gone_and_only_then_recovers(repo, tmp_path):
    """The pipe closes as the lender exits; a lender that closed it alive (a restore that failed and
    left its journal) is waited for, and its tree recovered once it has gone."""
    lender = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = processes.start_time(lender.pid)
        journal = Worktree(repo, None).journal
        journal.entry.parent.mkdir(exist_ok=True)
        (repo / "left.txt").write_text("written by the lend\n")
        journal.entry.write_text(json.dumps({"worktree": str(repo), "pid": lender.pid, "pid_start": started,
                                             "started": time.time() - 5, "patch": None, "groups": []}))
        guardian_start.watch(repo, lender.pid, started).release()
        watching = guardians(repo)
        assert len(watching) == 1 and os.getppid() != _parent(watching[0])  # no child of its lender
        time.sleep(1)
        assert alive(watching[0], settle_s=0) and (repo / "left.txt").exists()  # its lender still runs
    finally:
        lender.kill()
        lender.wait()
    assert not alive(watching[0], settle_s=HANDED_BACK_S)
    assert not (repo / "left.txt").exists() and journal.pending() is None


def _parent(pid: int) -> int:
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
