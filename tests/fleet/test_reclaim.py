"""A fleet node's base or head task takes again the GPU its prepare claimed, waiting while another
validator on the node holds it, up to a deadline: past it the task fails as an infrastructure
failure. The clock is injected: no test waits."""
import os

import pytest

from kvtasks.system import locks
from kvtasks.errors import InfrastructureError
from kvtasks.fleet import node
from kvtasks.gpu import picker
from kvtasks.stages import gpu_claim


def prepared(status: str = "pass", index: int | None = 0) -> node.GroupRun:
    claim = {"name": gpu_claim.NAME, "stage": {"status": status, "hip_index": index}}
    return node.GroupRun(kind="prepare", key="pr", results=[claim], record={}, logs={}, run_root="", node="n:1",
                         runtime_hash=None)


class Clock:
    """Time that passes only when the claim sleeps; `on_sleep` runs at each sleep."""

    def __init__(self, on_sleep=lambda sleeps: None):
        self.now, self.sleeps, self.on_sleep = 100.0, 0, on_sleep

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        self.on_sleep(self.sleeps)


@pytest.fixture
def held_by_another(tmp_path, monkeypatch):
    """GPU 0's lock held by another validator on the node (its own open file: flock tells them apart)."""
    monkeypatch.setenv("KVTASKS_LOCK_DIR", str(tmp_path))
    fd = locks.try_hold(tmp_path / "gpu-0.lock")
    yield fd
    picker.release_all()
    try:
        os.close(fd)
    except OSError:  # the test released it already
        pass


def test_a_gpu_held_past_the_deadline_fails_the_task_as_infrastructure(held_by_another):
    clock = Clock()
    with pytest.raises(InfrastructureError, match=r"GPU 0, which prepare claimed on this node, stayed held by "
                                                  r"another validator for 2 s \(KVTASKS_GPU_RECLAIM_S\)"):
        node.claim_again(prepared(), 2, clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.sleeps == 2 / node.RECLAIM_POLL_S


def test_a_gpu_freed_before_the_deadline_is_claimed(held_by_another):
    clock = Clock(on_sleep=lambda sleeps: os.close(held_by_another) if sleeps == 3 else None)
    node.claim_again(prepared(), 60, clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.sleeps == 3 and [claim.index for claim in picker.held()] == [0]


@pytest.mark.parametrize("status, index", [("fail", 0), ("pass", None)])
def test_a_task_whose_prepare_claimed_no_gpu_waits_for_none(status, index, held_by_another):
    clock = Clock()
    node.claim_again(prepared(status, index), 0, clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.sleeps == 0 and picker.held() == []


def test_the_deadline_is_the_hosts_setting():
    from kvtasks.host import HostSettings

    assert HostSettings.from_environ({}).gpu_reclaim_s == 3600
    assert HostSettings.from_environ({"KVTASKS_GPU_RECLAIM_S": "90"}).gpu_reclaim_s == 90
