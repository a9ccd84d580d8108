import json
import os
import sys
from pathlib import Path

import pytest

from kvtasks.front import cli
from tests.kernel_repos import Bystander, kernel_repo, snapshot

FAKES = Path(__file__).parent / "fakes"
# The kernel repositories the tests build compute on a few elements, and OpenBLAS (numpy's) starts
# a thread per core in every process that imports numpy, which then spins waiting for work: a
# twentieth of the suite's CPU, in targets, runtime probes and workers. The variable passes
# through to targets as any caller's would (harness.environment).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
IDLE_AMD = {"hip_id": 57, "bdf": "0000:c1:00.0", "market_name": "Fake Instinct MI-T",
            "target_graphics_version": "gfx-test", "gfx_activity": [0, 1], "vram_total": 196608, "vram_used": 300}


@pytest.hookimpl(optionalhook=True)  # xdist's hook: the suite still runs with -p no:xdist
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the cores. Most tests wait on the processes they start
    (targets, git, doit, Ray, a browser), so with a worker per core the cores sit idle a fifth of
    the time; on two cores a third worker took the suite from 356 s to 320 s (a fourth: 329 s)."""
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n` steals work where it would load (xdist's default, so `--dist load` too). Load hands each
    worker a queue early and never moves it: a suite ran its last 44 s on one worker of three, a
    sixth of its wall time. Stealing moves half a busy worker's queue to one that runs dry."""
    if config.getvalue("dist") == "load":
        from xdist.scheduler import WorkStealingScheduling
        return WorkStealingScheduling(config, log)
    return None


@pytest.fixture(autouse=True)
def private_gpu_locks(tmp_path, monkeypatch):
    """Every test gets its own lock and scratch folders and a fast sampling window; none touches
    real locks."""
    locks = tmp_path / "locks"
    locks.mkdir()
    monkeypatch.setenv("KVTASKS_LOCK_DIR", str(locks))
    monkeypatch.setenv("KVTASKS_SCRATCH", str(tmp_path / "scratch"))  # runs' scratch goes with the test
    monkeypatch.setenv("KVTASKS_IDLE_SAMPLES", "2")
    monkeypatch.setenv("KVTASKS_IDLE_INTERVAL_S", "0")
    for name in ("PICKER", "KVTASKS_FAKE_AMDSMI", "KVTASKS_FAKE_NVML"):
        monkeypatch.delenv(name, raising=False)
    # The kernel repos the tests build never use hypothesis; its pytest plugin (installed with the
    # test extra) would otherwise add a second of imports to every target run.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    return locks


@pytest.fixture
def torch():
    """torch, for a test that mixes it in: imported by the worker that runs the test, not by every
    worker's collection (a second and a half each)."""
    return pytest.importorskip("torch")


@pytest.fixture
def bystanders(tmp_path):
    """Repositories with work in progress around every tree the test makes: the test's own folder
    (so its trees sit inside one), one beside it and one below it; each byte-identical at the end."""
    placed = [Bystander(tmp_path), Bystander(tmp_path.parent / f"{tmp_path.name}-beside"),
              Bystander(tmp_path / "below" / "bystander")]
    yield placed
    for bystander in placed:
        assert bystander.state() == bystander.placed, f"a repository kvtasks was not given changed: {bystander.path}"


@pytest.fixture
def gpu_host(tmp_path, monkeypatch):
    """Put fake amdsmi/pynvml first on the path (here and for child validators) with given devices."""
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")])))

    def configure(amd: list | None = None, nvidia: list | None = None, **amd_options) -> None:
        for variable, devices, extra in (("KVTASKS_FAKE_AMDSMI", amd, amd_options), ("KVTASKS_FAKE_NVML", nvidia, {})):
            if devices is None:
                monkeypatch.delenv(variable, raising=False)
                continue
            config = tmp_path / f"{variable.lower()}.json"
            config.write_text(json.dumps({"devices": devices, **extra}))
            monkeypatch.setenv(variable, str(config))

    yield configure
    for module in ("amdsmi", "pynvml"):
        sys.modules.pop(module, None)


@pytest.fixture
def idle_gpu(gpu_host):
    gpu_host(amd=[IDLE_AMD])


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private kvtasks workspace (cache/ and reports/) for one test."""
    root = tmp_path / "kvtasks-home"
    monkeypatch.setenv("KVTASKS_HOME", str(root))
    return root


@pytest.fixture
def repo(tmp_path):
    return kernel_repo(tmp_path / "kernels-repo")


class Validation:
    def __init__(self, code: int, out: Path):
        self.code = code
        self.out = out
        self.report = json.loads(out.read_text()) if out.exists() else None

    @property
    def verdict(self):
        return self.report["verdict"]

    def stage(self, name):
        return self.report["stages"][name]

    def findings(self, severity):
        return [f for f in self.report["findings"] if f["severity"] == severity]


@pytest.fixture
def validate(home, tmp_path, idle_gpu):
    """Run the flag CLI in-process and check the worktree is handed back byte-identical."""
    def run(repo: Path, *flags: str, check_handback: bool = True) -> Validation:
        out = tmp_path / "out" / "validation_report.json"
        before = snapshot(repo)
        code = cli.main(["--repo", str(repo), "--out", str(out), "--quiet", *flags])
        if check_handback:
            assert snapshot(repo) == before, "the worktree was not handed back as supplied"
        return Validation(code, out)
    return run
