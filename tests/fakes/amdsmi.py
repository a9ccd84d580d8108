"""Test double for amdsmi: the calls kvtasks uses, driven by the JSON file $KVTASKS_FAKE_AMDSMI.

{"init": "ok" | "raise", "handles": "ok" | "raise",
 "devices": [{"hip_id": 57, "bdf": "...", "market_name": "...", "target_graphics_version": "gfx-test",
              "gfx_activity": [0, 1] | "N/A" | "raise", "vram_total": 65536, "vram_used": 100}]}
Handles are returned in list order; hip_id may differ from that order, as on real hosts.
"""
import json
import os

print("fake amdsmi banner on stdout, as the real library prints")  # kvtasks must keep stdout clean


class AmdSmiException(Exception):
    pass


_calls = {}


def _config():
    path = os.environ.get("KVTASKS_FAKE_AMDSMI")
    if not path:
        raise AmdSmiException("no fake AMD SMI configured")
    with open(path) as handle:
        return json.load(handle)


def amdsmi_init(*_flags):
    if _config().get("init") == "raise":
        raise AmdSmiException("AMDSMI_STATUS_INIT_ERROR")
    print("fake amdsmi init chatter")


def amdsmi_shut_down():
    pass


def amdsmi_get_processor_handles():
    config = _config()
    if config.get("handles") == "raise":
        raise AmdSmiException("AMDSMI_STATUS_DRM_ERROR")
    return [f"handle-{position}" for position in range(len(config["devices"]))]


def _device(handle):
    return _config()["devices"][int(handle.split("-")[1])]


def amdsmi_get_gpu_enumeration_info(handle):
    return {"hip_id": _device(handle)["hip_id"], "drm_render": 128}


def amdsmi_get_gpu_device_bdf(handle):
    return _device(handle)["bdf"]


def amdsmi_get_gpu_asic_info(handle):
    device = _device(handle)
    return {"market_name": device["market_name"], "target_graphics_version": device["target_graphics_version"]}


def amdsmi_get_gpu_activity(handle):
    activity = _device(handle)["gfx_activity"]
    if activity == "raise":
        raise AmdSmiException("AMDSMI_STATUS_UNEXPECTED_DATA")
    if activity == "N/A":
        return {"gfx_activity": "N/A", "umc_activity": "N/A", "mm_activity": "N/A"}
    count = _calls.get(handle, 0)
    _calls[handle] = count + 1
    return {"gfx_activity": activity[count % len(activity)], "umc_activity": 0, "mm_activity": 0}


def amdsmi_get_gpu_vram_usage(handle):
    device = _device(handle)
    return {"vram_total": device["vram_total"], "vram_used": device["vram_used"]}
