"""Test double for nvidia-ml-py (pynvml), driven by the JSON file $KVTASKS_FAKE_NVML.

{"devices": [{"bus_id": "00000000:3B:00.0", "name": "...", "cc": [9, 0], "util": 0 | "raise",
              "total": bytes, "used": bytes}]}  -- listed in NVML enumeration order.
"""
import json
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _config():
    path = os.environ.get("KVTASKS_FAKE_NVML")
    if not path:
        raise NVMLError("NVML Shared Library Not Found")
    with open(path) as handle:
        return json.load(handle)


def nvmlInit():
    _config()


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return len(_config()["devices"])


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetPciInfo(handle):
    return SimpleNamespace(busId=_config()["devices"][handle]["bus_id"].encode())


def nvmlDeviceGetName(handle):
    return _config()["devices"][handle]["name"]


def nvmlDeviceGetCudaComputeCapability(handle):
    return tuple(_config()["devices"][handle]["cc"])


def nvmlDeviceGetUtilizationRates(handle):
    util = _config()["devices"][handle]["util"]
    if util == "raise":
        raise NVMLError("Not Supported")
    return SimpleNamespace(gpu=util, memory=0)


def nvmlDeviceGetMemoryInfo(handle):
    device = _config()["devices"][handle]
    return SimpleNamespace(total=device["total"], used=device["used"], free=device["total"] - device["used"])
