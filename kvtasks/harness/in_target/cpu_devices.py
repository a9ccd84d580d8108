"""The Triton CPU tier's device redirect: "cuda" is the one CPU device, and torch.cuda's queries are
answered for it (cpu_tier says what it does)."""
import os
import time
import types

from .cpu_state import ANSWERED_CUDA, STATE, capability_of, device_name_of


# -- the device redirect ---------------------------------------------------------------------------

def install_device_redirect():
    import torch
    import triton
    from torch.overrides import TorchFunctionMode

    def on_cpu(device):
        if isinstance(device, int) and not isinstance(device, bool):
            return "cpu"
        if isinstance(device, str) and device.split(":")[0] == "cuda":
            return "cpu"
        if isinstance(device, torch.device) and device.type == "cuda":
            return torch.device("cpu")
        return device

    is_cuda = torch.Tensor.is_cuda

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                STATE.redirected += 1
                return args[0]
            if getattr(func, "__self__", None) is is_cuda:  # the property's getter: a fresh wrapper each time
                return True
            if "device" in kwargs and on_cpu(kwargs["device"]) is not kwargs["device"]:
                kwargs["device"] = on_cpu(kwargs["device"])
                STATE.redirected += 1
            if func is torch.Tensor.to:
                args = (args[0], *(on_cpu(arg) for arg in args[1:]))
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()  # for the life of the process
    _answer_cuda_queries(torch)

    capability = capability_of(STATE.settings)

    class InterpreterDriver:
        utils = types.SimpleNamespace(get_device_properties=lambda *_: _triton_properties())

        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_current_device(self):
            return 0

        def get_current_stream(self, *_):
            return 0

        def get_device_interface(self):
            return torch.cuda

        def get_benchmarker(self):
            # Triton 3.3's Autotuner.__init__ asks for it (later releases only when benchmarking); the
            # tier's autotune hook (cpu_sanitizer.install_autotune) benches in its place on every release
            from triton.testing import do_bench
            return do_bench

        def get_current_target(self):
            from triton.backends.compiler import GPUTarget

            STATE.cuda_queries["get_current_target"] = STATE.cuda_queries.get("get_current_target", 0) + 1
            return GPUTarget("cuda", capability[0] * 10 + capability[1], 32)

    triton.runtime.driver.set_active(InterpreterDriver())


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory: the CPU device's memory."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), total
    except (ValueError, OSError):
        return total, total


def _triton_properties() -> dict:
    return {"multiprocessor_count": os.cpu_count() or 1, "max_shared_mem": 166912, "max_num_regs": 65536,
            "warpSize": 32, "sm_clock_rate": 0, "mem_clock_rate": 0, "mem_bus_width": 0}


class _Stream:
    """A CUDA stream on the one CPU device: work is already done when it is queued."""

    cuda_stream = 0
    device = "cpu"
    device_index = 0

    def __init__(self, *_, **__):
        pass

    def synchronize(self):
        pass

    def wait_stream(self, *_):
        pass

    def wait_event(self, *_):
        pass

    def record_event(self, event=None):
        event = event or _Event()
        event.record(self)
        return event

    def query(self):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


class _Event:
    """A CUDA event on the CPU: it records the host clock, so elapsed_time is wall time in ms."""

    def __init__(self, *_, **__):
        self.at = None

    def record(self, *_):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, *_):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return ((end.at or 0.0) - (self.at or 0.0)) * 1000.0


class DeviceProperties(types.SimpleNamespace):
    """torch.cuda.get_device_properties() of the one CPU device: what a CUDA build's answer holds."""


class _DeviceContext:
    def __init__(self, *_):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


def _answer_cuda_queries(torch):
    """Every torch.cuda query a kernel repository makes at import or collection, answered for one
    CPU device; each answer is counted, so the receipt says which were asked."""
    cuda = torch.cuda
    capability = capability_of(STATE.settings)
    total = _host_memory()[1]
    properties = DeviceProperties(
        name=device_name_of(STATE.settings), major=capability[0], minor=capability[1], total_memory=total,
        multi_processor_count=os.cpu_count() or 1, is_integrated=False, is_multi_gpu_board=False,
        warp_size=32, max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536,
        L2_cache_size=0, gcnArchName="", uuid="kvtasks-cpu-tier")

    def counted(name, function):
        def query(*args, **kwargs):
            STATE.cuda_queries[name] = STATE.cuda_queries.get(name, 0) + 1
            return function(*args, **kwargs)
        return query

    def answered(name, value):
        return counted(name, lambda *_, **__: value() if callable(value) else value)

    answers = {
        "is_available": True, "device_count": 1, "current_device": 0, "is_initialized": True,
        "synchronize": None, "set_device": None, "init": None, "empty_cache": None, "ipc_collect": None,
        "get_device_name": properties.name, "get_device_capability": capability,
        "get_device_properties": properties, "get_arch_list": [f"sm_{capability[0]}{capability[1]}"],
        "is_bf16_supported": capability >= (8, 0), "mem_get_info": lambda: _host_memory(),
        "memory_allocated": 0, "max_memory_allocated": 0, "memory_reserved": 0, "max_memory_reserved": 0,
        "reset_peak_memory_stats": None, "reset_max_memory_allocated": None,
        "reset_accumulated_memory_stats": None, "memory_stats": lambda: {}, "memory_summary": "",
        "current_stream": lambda: _Stream(), "default_stream": lambda: _Stream(),
        "get_rng_state": lambda: torch.get_rng_state(),
    }
    for name, value in answers.items():
        setattr(cuda, name, answered(name, value))
    cuda.set_rng_state = lambda state, *_, **__: torch.set_rng_state(state)
    # tensors made on "cuda" come from the CPU generator here, so seeding the device seeds it; torch's
    # own seeding goes through _lazy_call, which runs at once (CUDA reports initialised) and asks
    # torch._C for a CUDA device a CPU build does not have
    generator = torch.default_generator

    def seed_with(seed, *_, **__):
        generator.manual_seed(int(seed))

    seeding = {"manual_seed": seed_with, "manual_seed_all": seed_with,
               "seed": lambda *_, **__: generator.seed() and None, "seed_all": lambda *_, **__: generator.seed() and None,
               "initial_seed": lambda *_, **__: generator.initial_seed(),
               "get_rng_state_all": lambda *_, **__: [torch.get_rng_state()]}
    for name, function in seeding.items():
        setattr(cuda, name, counted(name, function))
    cuda.set_rng_state_all = lambda states, *_, **__: torch.set_rng_state(list(states)[0])
    cuda.default_generators = (generator,)
    # torch's own helpers that reach torch._C for the current device; torch._C._cuda_getDeviceCount is
    # left absent, since torch (and torch._dynamo at import) reads its presence as a CUDA build
    if not hasattr(torch._C, "_cuda_getDevice"):
        torch._C._cuda_getDevice = answered("_cuda_getDevice", 0)
    cuda.Stream, cuda.Event, cuda.device = _Stream, _Event, _DeviceContext
    cuda.stream = lambda stream=None: stream if stream is not None else _DeviceContext()
    # torch.accelerator (which a CPU build says it has none of) is the CUDA device too
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        for name, value in {"is_available": True, "current_accelerator": lambda: torch.device("cuda"),
                            "device_count": 1, "current_device_index": 0, "current_device_idx": 0,
                            "synchronize": None, "set_device_index": None, "set_device_idx": None}.items():
            setattr(accelerator, name, answered(f"accelerator.{name}", value))
    # the tier's device is a CUDA device (Triton's target is "cuda"): torch's CUDA release is asked too
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        torch.version.cuda = ANSWERED_CUDA
