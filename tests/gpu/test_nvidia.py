from kvtasks.gpu import picker

GIB = 2**30
A100 = {"bus_id": "00000000:3B:00.0", "name": "Fake A100", "cc": [8, 0], "util": 0, "total": 80 * GIB, "used": GIB}
H200 = {"bus_id": "00000000:1A:00.0", "name": "Fake H200", "cc": [9, 0], "util": 1, "total": 141 * GIB, "used": GIB}


def test_cuda_index_follows_pci_bus_order_not_nvml_order(gpu_host):
    gpu_host(nvidia=[A100, H200])
    chosen = picker.pick(picker.IdleSettings(samples=2, interval_s=0))
    assert chosen.code == picker.CHOSEN and chosen.vendor == "nvidia"
    by_name = {w.device.model: w.device for w in chosen.windows}
    assert by_name["Fake H200"].index == 0 and by_name["Fake H200"].smi_index == 1
    assert by_name["Fake A100"].index == 1 and by_name["Fake A100"].arch == "sm_80"
    assert by_name["Fake H200"].bdf == "00000000:1a:00.0"


def test_unsupported_utilization_is_vram_only(gpu_host):
    gpu_host(nvidia=[{**A100, "util": "raise"}])
    chosen = picker.pick(picker.IdleSettings(samples=2, interval_s=0))
    assert chosen.code == picker.CHOSEN and chosen.basis == "vram-only"


def test_nvidia_target_sees_cuda_visible_devices_in_bus_order(gpu_host):
    gpu_host(nvidia=[A100])
    device, backend = picker.find_device(0)
    try:
        assert backend.visible_devices(device) == {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    finally:
        backend.close()
