import subprocess
import sys

import pytest

from kvtasks.gpu import picker
from tests.conftest import IDLE_AMD
from tests.processes import lock_held_elsewhere

BUSY = {**IDLE_AMD, "hip_id": 3, "bdf": "0000:03:00.0", "gfx_activity": [0, 40]}
HELD = {**IDLE_AMD, "hip_id": 4, "bdf": "0000:04:00.0", "vram_used": 8192}
FULL = {**IDLE_AMD, "hip_id": 5, "bdf": "0000:05:00.0", "vram_total": 8192}
NO_ACTIVITY = {**IDLE_AMD, "hip_id": 6, "bdf": "0000:06:00.0", "gfx_activity": "raise"}
NA_ACTIVITY = {**IDLE_AMD, "hip_id": 7, "bdf": "0000:07:00.0", "gfx_activity": "N/A"}


def test_a_busy_peak_inside_the_window_disqualifies(gpu_host):
    gpu_host(amd=[BUSY, IDLE_AMD])
    chosen = picker.pick(picker.IdleSettings(samples=2, interval_s=0))
    assert chosen.code == picker.CHOSEN
    assert [w.device.index for w in chosen.ranked] == [57]
    verdicts = {w.device.index: w.verdict for w in chosen.windows}
    assert verdicts[3] == "BUSY peaked 40%"


def test_one_reading_would_have_missed_the_busy_peak(gpu_host):
    gpu_host(amd=[BUSY])
    assert picker.pick(picker.IdleSettings(samples=1, interval_s=0)).code == picker.CHOSEN
    assert picker.pick(picker.IdleSettings(samples=2, interval_s=0)).code == picker.NONE_IDLE


def test_vram_thresholds(gpu_host):
    gpu_host(amd=[HELD, FULL])
    chosen = picker.pick(picker.IdleSettings(samples=2, interval_s=0))
    assert chosen.code == picker.NONE_IDLE
    assert {w.verdict.split()[0] for w in chosen.windows} == {"HELD", "FULL"}


@pytest.mark.parametrize("device", [NO_ACTIVITY, NA_ACTIVITY])
def test_unavailable_activity_is_unknown_never_zero(gpu_host, device):
    gpu_host(amd=[device])
    chosen = picker.pick(picker.IdleSettings(samples=3, interval_s=0))
    assert chosen.code == picker.CHOSEN and chosen.basis == "vram-only"
    assert chosen.ranked[0].peak is None and chosen.ranked[0].readings == [None, None, None]


def test_measured_devices_rank_before_unknown_ones(gpu_host):
    quiet = {**IDLE_AMD, "hip_id": 9, "bdf": "0000:09:00.0", "gfx_activity": [0]}
    gpu_host(amd=[NO_ACTIVITY, IDLE_AMD, quiet])
    chosen = picker.pick(picker.IdleSettings(samples=2, interval_s=0))
    assert [w.device.index for w in chosen.ranked] == [9, 57, 6]


def test_hip_index_comes_from_hip_id_not_handle_order(gpu_host):
    first = {**IDLE_AMD, "hip_id": 1, "bdf": "0000:a1:00.0", "market_name": "second by HIP"}
    second = {**IDLE_AMD, "hip_id": 0, "bdf": "0000:a2:00.0", "market_name": "first by HIP", "gfx_activity": [0]}
    gpu_host(amd=[first, second])
    device, backend = picker.find_device(0)
    backend.close()
    assert (device.smi_index, device.bdf, device.model) == (1, "0000:a2:00.0", "first by HIP")


def test_exit_codes_no_gpus_and_unqueryable(gpu_host):
    gpu_host(amd=[])
    assert picker.pick().code == picker.NO_GPUS
    gpu_host(amd=[IDLE_AMD], handles="raise")
    unqueryable = picker.pick()
    assert unqueryable.code == picker.UNQUERYABLE and "amdsmi_get_processor_handles failed" in unqueryable.message


def test_this_host_without_libraries_reports_no_gpus():
    chosen = picker.pick()
    assert chosen.code == picker.NO_GPUS and "not importable" in chosen.message


def test_command_prints_only_indices_on_stdout(gpu_host):
    gpu_host(amd=[NO_ACTIVITY, IDLE_AMD])
    done = subprocess.run([sys.executable, "-m", "kvtasks.gpu.picker", "--samples", "2", "--interval", "0",
                           "--quiet", "--all"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.split() == ["57", "6"]  # the fake's import banner never reaches stdout
    assert "idleness-basis: activity+vram" in done.stderr


def test_command_exit_code_when_none_idle(gpu_host):
    gpu_host(amd=[BUSY])
    done = subprocess.run([sys.executable, "-m", "kvtasks.gpu.picker", "--samples", "2", "--interval", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == "" and "BUSY" in done.stderr


def test_a_lock_taken_by_another_process_is_not_granted(private_gpu_locks):
    with lock_held_elsewhere(private_gpu_locks / "gpu-57.lock"):
        assert picker.try_lock(57) is None
        lease = picker.try_lock(58)
        assert lease is not None and lease in picker.held()
        picker.release(lease)


def test_importing_kvtasks_never_imports_vendor_libraries():
    code = ("import sys, kvtasks, kvtasks.front.cli, kvtasks.front.graph, kvtasks.gpu.picker, kvtasks.stages.gpu_claim\n"
            "print(sorted(m for m in ('amdsmi', 'pynvml') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
