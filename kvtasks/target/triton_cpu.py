"""The Triton CPU tier, inside the target process: interpreter hooks installed by the route probe.

kvtasks copies this file next to the probe (under a random name) when a run is on the CPU tier;
the probe imports it and calls `install(settings)` before the target starts, with TRITON_INTERPRET=1
already in the environment. It installs four things:

- a bounds sanitizer: every active lane of every interpreted load, store and atomic must fall
  inside the allocation (the tensor argument's storage) it points into; otherwise it raises,
  naming the kernel, the argument, the element offset and the allocation's extent. Without it an
  unmasked tail reads or writes raw heap memory and the same test passes once and crashes next.
  A pointer carries the allocation it was derived from (pointer arithmetic, splat, broadcast and
  expand_dims pass it on), so an access that lands inside a neighbouring tensor is caught too, and a
  wrapped 32-bit offset is blamed on the right argument, whatever the heap layout of this run.
- a device redirect: device="cuda", .cuda(), .to("cuda") and the common torch.cuda queries
  behave as one CPU device, so tests written for a GPU run here.
- autotune on the interpreter: every config runs once (there is no GPU timer), all tie, the first
  config is kept; the sanitizer checks each.
- a sparse grid: a launch of more than `sparse_programs` programs runs only the first and last
  program of each axis, so a > 2^31-element shape runs in seconds on tensors whose untouched pages
  are never committed. A test that ran a sparse launch claims only what the sanitizer checked: if it
  does not raise, the test is reported skipped.

Everything it saw goes into the run's receipt under "cpu_tier" through `report()`.
"""
import os
import types

_BF16 = {"bf16", "bfloat16", "torch.bfloat16"}
BF16_REASON = "interpreter limitation: bf16 arithmetic is wrong in the Triton interpreter"

_state = {"settings": {}, "launch": None, "test": None, "violations": [], "sparse": [], "autotune": {},
          "bf16_skipped": [], "redirected": 0, "launches": 0, "versions": {}}


class BoundsViolation(IndexError):
    """An interpreted memory access outside every allocation the launch was given."""


# -- the sanitizer ---------------------------------------------------------------------------------

class _Launch:
    """One kernel launch: its name and the allocations its tensor arguments point into."""

    def __init__(self, kernel, named_args):
        import numpy as np

        self.kernel = kernel
        seen = {}
        for name, value in named_args:
            for tensor in _tensors(value):
                storage = tensor.untyped_storage()
                start, size = storage.data_ptr(), storage.nbytes()
                if size and start not in seen:
                    seen[start] = (start, start + size, name)
        rows = sorted(seen.values())
        self.starts = np.array([row[0] for row in rows], dtype=np.uint64)
        self.ends = np.array([row[1] for row in rows], dtype=np.uint64)
        self.names = [row[2] for row in rows]
        self.program = (0, 0, 0)
        self.grid = (1, 1, 1)
        self.sparse_grid = None


def _tensors(value):
    if hasattr(value, "untyped_storage"):
        return [value]
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in _tensors(item)]
    base = getattr(value, "base", None)  # a tensor descriptor
    return [base] if hasattr(base, "untyped_storage") else []


_OWNER = "kvtasks_allocation"


def _containing(launch, address):
    """The index of the allocation holding `address`, or None."""
    import numpy as np

    index = int(np.searchsorted(launch.starts, np.uint64(address), side="right")) - 1
    return index if index >= 0 and address < int(launch.ends[index]) else None


def _owner(handle):
    """The allocation a pointer handle was derived from, as far as the launch can tell."""
    launch = _state["launch"]
    if launch is None or not hasattr(handle, "attr"):
        return None
    if _OWNER not in handle.attr and getattr(handle.data, "size", 0):
        handle.attr[_OWNER] = _containing(launch, int(handle.data.flat[0]))
    return handle.attr.get(_OWNER)


def _check(op, pointers, mask):
    """Raise BoundsViolation when an active lane of `pointers` leaves its allocation."""
    launch = _state["launch"]
    if launch is None:
        return
    import numpy as np

    addresses = np.asarray(pointers.data, dtype=np.uint64)
    active = np.ones(addresses.shape, dtype=bool) if mask is None else np.broadcast_to(
        np.asarray(mask.data, dtype=bool), addresses.shape)
    lanes = addresses[active]
    if lanes.size == 0:
        return
    width = max(1, pointers.get_element_ty().primitive_bitwidth // 8)
    owner = pointers.attr.get(_OWNER) if hasattr(pointers, "attr") else None
    if owner is not None:
        inside = (lanes >= launch.starts[owner]) & (lanes + np.uint64(width) <= launch.ends[owner])
        blamed = np.full(lanes.shape, owner)
    elif launch.starts.size:
        below = np.searchsorted(launch.starts, lanes, side="right") - 1
        inside = (below >= 0) & (lanes + np.uint64(width) <= launch.ends[np.clip(below, 0, None)])
        blamed = np.clip(below, 0, None)
    else:
        inside, blamed = np.zeros(lanes.shape, dtype=bool), None
    if inside.all():
        return
    first = int(np.argmin(inside))
    if blamed is None:
        detail = "the launch has no tensor arguments"
        argument, offset, extent = None, None, None
    else:
        index = int(blamed[first])
        start, end = int(launch.starts[index]), int(launch.ends[index])
        signed = (int(lanes[first]) - start + 2**63) % 2**64 - 2**63  # wrapped 32-bit offsets show as negative
        argument, offset, extent = launch.names[index], signed // width, (end - start) // width
        detail = (f"argument {argument}: element offset {offset} (byte {signed}) is outside its allocation of "
                  f"{extent} elements ({end - start} bytes)")
    outside = int((~inside).sum())
    _state["violations"].append({"kernel": launch.kernel, "op": op, "argument": argument, "element_offset": offset,
                                 "extent_elements": extent, "program": list(launch.program),
                                 "lanes_out_of_bounds": outside, "lanes_active": int(lanes.size),
                                 "test": _state["test"]})
    raise BoundsViolation(f"kvtasks bounds sanitizer: {op} out of bounds in kernel {launch.kernel} "
                          f"(program {tuple(launch.program)}): {detail}; {outside} of {lanes.size} active lanes")


def _passes_owner(method, derive):
    """Wrap a builder method whose result is a pointer derived from its first handle argument."""
    def wrapper(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        source = args[derive]
        owner = _owner(source) if hasattr(source, "dtype") and getattr(source.dtype, "is_ptr", lambda: False)() \
            else None
        if owner is not None and hasattr(out, "attr"):
            out.attr[_OWNER] = owner
        return out
    return wrapper


def _install_sanitizer(interpreter):
    builder_class = interpreter.InterpreterBuilder
    load, store = builder_class.create_masked_load, builder_class.create_masked_store
    rmw, cas = builder_class.create_atomic_rmw, builder_class.create_atomic_cas
    set_idx, set_dim = builder_class.set_grid_idx, builder_class.set_grid_dim

    def create_masked_load(self, ptrs, mask, other, *rest, **kwargs):
        _check("load", ptrs, mask)
        return load(self, ptrs, mask, other, *rest, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *rest, **kwargs):
        _check("store", ptrs, mask)
        return store(self, ptrs, value, mask, *rest, **kwargs)

    def create_atomic_rmw(self, op, ptr, val, mask, *rest, **kwargs):
        _check("atomic", ptr, mask)
        return rmw(self, op, ptr, val, mask, *rest, **kwargs)

    def create_atomic_cas(self, ptr, cmp, val, *rest, **kwargs):
        _check("atomic", ptr, None)
        return cas(self, ptr, cmp, val, *rest, **kwargs)

    def set_grid_idx(self, x, y, z):
        launch = _state["launch"]
        if launch is not None:
            if launch.sparse_grid is not None:
                x, y, z = (axis[i] for axis, i in zip(launch.sparse_grid, (x, y, z)))
            launch.program = (x, y, z)
        return set_idx(self, x, y, z)

    def set_grid_dim(self, nx, ny, nz):
        launch = _state["launch"]
        if launch is not None and launch.sparse_grid is not None:
            nx, ny, nz = launch.grid  # the kernel sees the launch it was given, not the sparse subset
        return set_dim(self, nx, ny, nz)

    for name, derive in (("create_addptr", 0), ("create_splat", 1), ("create_broadcast", 0),
                         ("create_expand_dims", 0)):
        setattr(builder_class, name, _passes_owner(getattr(builder_class, name), derive))
    for name, method in (("create_masked_load", create_masked_load), ("create_masked_store", create_masked_store),
                         ("create_atomic_rmw", create_atomic_rmw), ("create_atomic_cas", create_atomic_cas),
                         ("set_grid_idx", set_grid_idx), ("set_grid_dim", set_grid_dim)):
        setattr(builder_class, name, method)


# -- launches and the sparse grid -----------------------------------------------------------------

def _sparse_axes(grid, limit):
    """First and last index of each axis when the launch has more than `limit` programs."""
    total = grid[0] * grid[1] * grid[2]
    if not limit or total <= limit:
        return None
    return [sorted({0, size - 1}) if size > 0 else [] for size in grid]


def _install_launches(interpreter):
    executor = interpreter.GridExecutor
    call, restore = executor.__call__, executor._restore_args_dev

    def __call__(self, *args, **kwargs):
        named = list(zip(self.arg_names, args)) + list(kwargs.items())
        launch = _Launch(getattr(self.fn, "__name__", "kernel"), named)
        original = self.grid

        def grid(meta):
            real = tuple(original(meta) if callable(original) else original)
            launch.grid = real + (1,) * (3 - len(real))
            launch.sparse_grid = _sparse_axes(launch.grid, _state["settings"].get("sparse_programs", 0))
            if launch.sparse_grid is None:
                return real
            ran = len(launch.sparse_grid[0]) * len(launch.sparse_grid[1]) * len(launch.sparse_grid[2])
            _state["sparse"].append({"kernel": launch.kernel, "grid": list(launch.grid), "programs_run": ran,
                                     "test": _state["test"]})
            return tuple(len(axis) for axis in launch.sparse_grid)

        self.grid = grid
        _state["launch"], _state["launches"] = launch, _state["launches"] + 1
        try:
            return call(self, *args, **kwargs)
        finally:
            self.grid, _state["launch"] = original, None

    def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        # On the CPU the "host copies" share the arguments' storage; copying a storage onto itself
        # would only commit every page of a sparse launch's huge tensors.
        shared = all(_shares_storage(dev, hst) for dev, hst in zip([*args_dev, *kwargs.values()],
                                                                   [*args_hst, *kwargs_hst.values()]))
        if not shared:
            restore(self, args_dev, args_hst, kwargs, kwargs_hst)

    executor.__call__, executor._restore_args_dev = __call__, _restore_args_dev


def _shares_storage(dev, hst):
    devs, hsts = _tensors(dev), _tensors(hst)
    return len(devs) == len(hsts) and all(
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for a, b in zip(devs, hsts))


def _install_autotune():
    from triton.runtime import autotuner

    def run_each_config_once(self):
        kernel = getattr(getattr(self, "base_fn", None), "__name__", "kernel")

        def bench(kernel_call, quantiles=None, **_):
            kernel_call()
            _state["autotune"][kernel] = _state["autotune"].get(kernel, 0) + 1
            return [0.0] * len(quantiles) if quantiles else 0.0
        return bench

    autotuner.Autotuner.do_bench = property(run_each_config_once)


# -- the device redirect ---------------------------------------------------------------------------

def _install_device_redirect():
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
                _state["redirected"] += 1
                return args[0]
            if getattr(func, "__self__", None) is is_cuda:  # the property's getter: a fresh wrapper each time
                return True
            if "device" in kwargs and on_cpu(kwargs["device"]) is not kwargs["device"]:
                kwargs["device"] = on_cpu(kwargs["device"])
                _state["redirected"] += 1
            if func is torch.Tensor.to:
                args = (args[0], *(on_cpu(arg) for arg in args[1:]))
            return func(*args, **kwargs)

    CudaOnCpu().__enter__()  # for the life of the process
    cuda = torch.cuda
    for name, value in (("is_available", lambda: True), ("device_count", lambda: 1),
                        ("current_device", lambda: 0), ("synchronize", lambda *a, **k: None),
                        ("set_device", lambda *a, **k: None),
                        ("get_device_name", lambda *a, **k: "Triton interpreter (CPU)")):
        setattr(cuda, name, value)

    class InterpreterDriver:
        def get_active_torch_device(self):
            return torch.device("cpu")

        def get_current_device(self):
            return 0

    triton.runtime.driver.set_active(InterpreterDriver())


# -- pytest: bf16 cells and sparse tests -----------------------------------------------------------

def is_bf16(value) -> bool:
    return str(value).strip().lower() in _BF16


def _pytest_plugin(pytest):
    """bf16 cells become skips with the interpreter's reason; a sparse test that the sanitizer
    passed becomes a skip, since its outputs were never computed in full."""
    def pytest_collection_modifyitems(items):
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if any(is_bf16(value) for value in params.values()):
                item.add_marker(pytest.mark.skip(reason=BF16_REASON))
                _state["bf16_skipped"].append(item.nodeid)

    def pytest_runtest_setup(item):
        _state["test"] = item.nodeid

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when != "call" or report.skipped:
            return
        sparse = any(entry["test"] == item.nodeid for entry in _state["sparse"])
        violated = any(entry["test"] == item.nodeid for entry in _state["violations"])
        if sparse and not violated:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0,
                               "Skipped: sparse grid: only the first and last programs ran; the bounds sanitizer "
                               "found nothing, and outputs were not computed in full")

    return types.SimpleNamespace(pytest_collection_modifyitems=pytest_collection_modifyitems,
                                 pytest_runtest_setup=pytest_runtest_setup,
                                 pytest_runtest_makereport=pytest_runtest_makereport)


# -- entry points ------------------------------------------------------------------------------------

def install(settings):
    _state["settings"] = dict(settings)
    import numpy
    import torch
    import triton
    from triton.runtime import interpreter

    _state["versions"] = {"triton": triton.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
                          "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "")}
    _install_sanitizer(interpreter)
    _install_launches(interpreter)
    _install_autotune()
    _install_device_redirect()


def register_pytest(config):
    import pytest

    config.pluginmanager.register(_pytest_plugin(pytest), "kvtasks-triton-cpu")


def report():
    return {"interpreter": "triton", "sanitizer": "on", "device_redirect": "cuda->cpu",
            "autotune": "every config once, first kept", "sparse_programs": _state["settings"].get("sparse_programs"),
            "versions": _state["versions"], "launches": _state["launches"], "violations": _state["violations"],
            "sparse_launches": _state["sparse"], "autotuned": _state["autotune"],
            "bf16_skipped": _state["bf16_skipped"], "redirected_device_calls": _state["redirected"]}
