"""The Triton CPU tier, inside the target process: interpreter hooks installed by the route probe.

kvtasks copies this file next to the probe (under a random name) when a run is on the CPU tier;
the probe imports it and calls `install(settings)` before the target starts, with TRITON_INTERPRET=1
already in the environment. It installs these:

- a bounds sanitizer: every active lane of every interpreted load, store and atomic must fall
  inside the allocation (the tensor argument's storage) it points into; otherwise it raises,
  naming the kernel, the argument, the element offset and the allocation's extent. Without it an
  unmasked tail reads or writes raw heap memory and the same test passes once and crashes next.
  A pointer carries the allocation it was derived from (pointer arithmetic, splat, broadcast and
  expand_dims pass it on), so an access that lands inside a neighbouring tensor is caught too, and a
  wrapped 32-bit offset is blamed on the right argument, whatever the heap layout of this run.
- a device redirect: device="cuda", .cuda(), .to("cuda") and the torch.cuda queries kernel
  repositories make at import or collection (capability, properties, name, memory, streams and
  events, the device context) behave as one CPU device, so tests written for a GPU run here. The
  compute capability has no honest CPU answer and decides which kernel paths a repository takes: it
  is the `device_capability` setting (--cpu-device-capability), and the report says it was assumed.
- libdevice on the interpreter: `triton.language.extra.libdevice` functions are stubs that return
  None there, and the CUDA/HIP libdevice modules' extern calls raise; both are forwarded to the
  interpreter's own math (the `tl.math` equivalent, or the numpy function the interpreter would
  use). A function with no equivalent raises naming itself, and the receipt lists it.
- autotune on the interpreter: every config runs once per kernel and autotune key (Triton's own
  cache decides when a key is new); configs that differ only in num_warps, num_stages or other
  launch options the interpreter ignores run once. There is no GPU timer, all tie, the first config
  is kept; the sanitizer checks each. The receipt records the sweeps and what they cost. The disk
  cache of timings (`cache_results=True`) is never read or written: the interpreter's kernels are
  not JIT functions, so Triton cannot key it, and interpreter timings are worth nothing.
- scalars as the compiler sees them: the interpreter runs `for i in range(...)` (and tl.range,
  tl.static_range) over plain Python ints, where compiled code has int32 scalars; a loop index there
  is an int that also answers `.to(dtype)`, and so is arithmetic on it, so `(i * BLOCK).to(tl.int64)`
  runs as it compiles. A float kernel argument (not constexpr) is an fp32 scalar, as compiled code
  has it, where the interpreter passes a Python float (`eps.to(tl.float32)`).
- a sparse grid: a launch of more than `sparse_programs` programs runs only the first and last
  program of each axis, so a > 2^31-element shape runs in seconds on tensors whose untouched pages
  are never committed. A test that ran a sparse launch claims only what the sanitizer checked: if it
  does not raise, the test is reported skipped.

Everything it saw goes into the run's receipt under "cpu_tier" through `report()`, with each test
or collection the tier itself could not run (`crashes`): an exception raised inside the interpreter,
Triton's runtime, these hooks or torch.cuda, an interpreter value that lacks what compiled code has,
or a CUDA query a CPU build cannot answer. A bounds violation or an assertion is a test outcome, never
a crash.
"""
import os
import time
import types

_BF16 = {"bf16", "bfloat16", "torch.bfloat16"}
BF16_REASON = "interpreter limitation: bf16 arithmetic is wrong in the Triton interpreter"

DEFAULT_CAPABILITY = "8.0"  # Ampere: the oldest architecture current Triton kernel repositories target

_state = {"settings": {}, "launch": None, "test": None, "violations": [], "sparse": [], "autotune": {},
          "bf16_skipped": [], "crashes": [], "redirected": 0, "launches": 0, "versions": {}, "cuda_queries": {},
          "libdevice": {"forwarded": {}, "without_equivalent": {}}}


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


# -- libdevice ---------------------------------------------------------------------------------------

# libdevice names the interpreter can compute, by the numpy function its own tl.math equivalent uses
# (exp, sqrt, rsqrt, ...) or, where tl.math has none, the numpy function of the same meaning.
_LIBDEVICE = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "cos": "cos", "sin": "sin", "sqrt": "sqrt",
    "sqrt_rn": "sqrt", "rsqrt": "rsqrt", "rsqrt_rn": "rsqrt", "abs": "abs", "fabs": "abs", "floor": "floor",
    "ceil": "ceil", "erf": "erf", "fma": "fma", "div_rn": "divide", "fast_dividef": "divide",
    "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2", "fast_sinf": "sin", "fast_cosf": "cos",
    "tanh": "tanh", "fast_tanhf": "tanh", "sinh": "sinh", "cosh": "cosh", "tan": "tan", "fast_tanf": "tan",
    "asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2", "asinh": "arcsinh",
    "acosh": "arccosh", "atanh": "arctanh", "expm1": "expm1", "log1p": "log1p", "log10": "log10",
    "fast_log10f": "log10", "exp10": "exp10", "fast_exp10f": "exp10", "pow": "power", "fast_powf": "power",
    "hypot": "hypot", "trunc": "trunc", "rint": "rint", "nearbyint": "rint", "copysign": "copysign",
    "fmod": "fmod", "cbrt": "cbrt", "isnan": "isnan", "isinf": "isinf", "finitef": "isfinite",
    "isfinited": "isfinite", "signbit": "signbit", "fmin": "fmin", "fmax": "fmax", "nextafter": "nextafter",
}


def _numpy_function(name):
    import math

    import numpy as np

    special = {"rsqrt": lambda x: 1 / np.sqrt(x), "fma": lambda x, y, z: x * y + z,
               "exp10": lambda x: np.power(10.0, x), "erf": np.vectorize(math.erf, otypes=[float])}
    chosen = _LIBDEVICE.get(name)
    return None if chosen is None else special.get(chosen) or getattr(np, chosen)


def _libdevice_name(symbol: str) -> str:
    """__nv_tanhf / __nv_fast_tanhf / __ocml_tanh_f32 -> the libdevice function's name."""
    name = symbol.removeprefix("__nv_").removeprefix("__ocml_")
    for suffix in ("_f32", "_f64", "_f16"):
        name = name.removesuffix(suffix)
    return name if name in _LIBDEVICE or not name.endswith("f") else name[:-1]


def _count(table: str, name: str) -> None:
    _state["libdevice"][table][name] = _state["libdevice"][table].get(name, 0) + 1


def _unavailable(name: str) -> NotImplementedError:
    _count("without_equivalent", name)
    return NotImplementedError(f"kvtasks CPU tier: libdevice.{name} has no equivalent in the Triton interpreter")


def _install_libdevice(interpreter):
    import inspect

    import numpy as np
    from triton.language.extra import libdevice

    def create_extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):
        name = _libdevice_name(symbol)
        function = _numpy_function(name)
        if function is None:
            raise _unavailable(name)
        _count("forwarded", name)
        scalar = getattr(ret_type, "scalar", ret_type)
        with np.errstate(all="ignore"):  # a GPU returns inf/nan here too, without a warning
            data = function(*(getattr(arg, "data", arg) for arg in args))
        return interpreter.TensorHandle(np.asarray(data).astype(interpreter._get_np_dtype(scalar)), scalar)

    interpreter.InterpreterBuilder.create_extern_elementwise = create_extern_elementwise

    # triton.language.extra.libdevice holds stubs (they return None outside the compiler): each becomes
    # the CUDA libdevice builtin of the same name, which the interpreter's extern call above computes
    try:
        from triton.language.extra.cuda import libdevice as cuda_libdevice
    except ImportError:
        return
    interpreter._patch_builtin(cuda_libdevice, interpreter.interpreter_builder)
    for name, stub in inspect.getmembers(libdevice, inspect.isfunction):
        if stub.__module__ != libdevice.__name__:
            continue
        forward = getattr(cuda_libdevice, name, None)
        if forward is None or _LIBDEVICE.get(name) is None:
            setattr(libdevice, name, _refusing(name))
        else:
            setattr(libdevice, name, forward)


def _refusing(name):
    def unavailable(*_, **__):
        raise _unavailable(name)
    unavailable.__name__ = name
    return unavailable


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


def _autotune_record(autotuner) -> dict:
    kernel = getattr(getattr(autotuner, "base_fn", None), "__name__", "kernel")
    return _state["autotune"].setdefault(kernel, {"keys": 0, "configs_run": 0, "duplicates_skipped": 0,
                                                  "seconds": 0.0})


def _program(config) -> tuple:
    """What the interpreter runs for a config: its meta-parameters and pre-hook; num_warps,
    num_stages and the other launch options change nothing there."""
    return tuple(sorted((name, repr(value)) for name, value in config.kwargs.items())), config.pre_hook


def _install_autotune():
    from triton.runtime import autotuner

    prune = autotuner.Autotuner.prune_configs

    def prune_configs(self, kwargs):
        # Triton calls this once per new autotune key, just before it runs the configs
        configs, seen, kept = prune(self, kwargs), set(), []
        for config in configs:
            if _program(config) not in seen:
                seen.add(_program(config))
                kept.append(config)
        record = _autotune_record(self)
        record["keys"] += 1
        record["configs_run"] += len(kept)
        record["duplicates_skipped"] += len(configs) - len(kept)
        return kept

    def run_each_config_once(self):
        record = _autotune_record(self)

        def bench(kernel_call, quantiles=None, **_):
            started = time.perf_counter()
            try:
                kernel_call()
            finally:
                record["seconds"] = round(record["seconds"] + time.perf_counter() - started, 3)
            return [0.0] * len(quantiles) if quantiles else 0.0
        return bench

    def check_disk_cache(self, tuning_key, configs, bench_fn):
        # Triton keys the cache on the JIT function under the autotuner, which the interpreter replaces
        # with a plain function ('function' object has no attribute 'fn'); all configs tie anyway
        bench_fn()
        return False

    autotuner.Autotuner.prune_configs = prune_configs
    autotuner.Autotuner.do_bench = property(run_each_config_once)
    autotuner.Autotuner.check_disk_cache = check_disk_cache


# -- loop indices ----------------------------------------------------------------------------------

class LoopIndex(int):
    """A loop index in an interpreted kernel: the int the interpreter iterates over, with the
    `.to(dtype)` a compiled int32 scalar has; arithmetic with ints stays a LoopIndex."""

    def to(self, dtype, *args, **kwargs):
        from triton.runtime.interpreter import interpreter_semantic

        return interpreter_semantic.to_tensor(int(self), False).to(dtype, *args, **kwargs)


def _closed(name):
    method = getattr(int, name)

    def arithmetic(self, *args):
        value = method(self, *args)
        return LoopIndex(value) if type(value) is int else value
    arithmetic.__name__ = name
    return arithmetic


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__",
              "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__neg__", "__pos__", "__abs__"):
    setattr(LoopIndex, _name, _closed(_name))


def loop_indices(iterable):
    """What `for` in an interpreted kernel iterates over: ints become LoopIndex, the rest stay."""
    for item in iterable:
        yield LoopIndex(item) if type(item) is int else item


_LOOP_INDICES = "kvtasks_loop_indices"


def _install_scalar_arguments(interpreter):
    import numpy as np

    implicit = interpreter._implicit_cvt

    def _implicit_cvt(arg):
        if type(arg) is float:  # bool and int are the interpreter's own; a float was left a Python float
            return interpreter.tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32),
                                                                  interpreter.tl.float32), interpreter.tl.float32)
        return implicit(arg)

    interpreter._implicit_cvt = _implicit_cvt


def _install_loop_indices(interpreter):
    import ast

    class LoopIndexTransformer(interpreter.ASTTransformer):
        def visit_For(self, node):
            self.generic_visit(node)
            node.iter = ast.Call(func=ast.Name(id=_LOOP_INDICES, ctx=ast.Load()), args=[node.iter], keywords=[])
            return node

    # the rewriter adds the interpreter module's globals to the kernel's globals (when absent there)
    setattr(interpreter, _LOOP_INDICES, loop_indices)
    interpreter.FunctionRewriter.ast_transformer = LoopIndexTransformer()


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
    _answer_cuda_queries(torch)

    capability = capability_of(_state["settings"])

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

        def get_current_target(self):
            from triton.backends.compiler import GPUTarget

            _state["cuda_queries"]["get_current_target"] = _state["cuda_queries"].get("get_current_target", 0) + 1
            return GPUTarget("cuda", capability[0] * 10 + capability[1], 32)

    triton.runtime.driver.set_active(InterpreterDriver())


def capability_of(settings) -> tuple[int, int]:
    major, _, minor = str(settings.get("device_capability") or DEFAULT_CAPABILITY).partition(".")
    return int(major), int(minor or 0)


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
    capability = capability_of(_state["settings"])
    total = _host_memory()[1]
    properties = types.SimpleNamespace(
        name="Triton interpreter (CPU)", major=capability[0], minor=capability[1], total_memory=total,
        multi_processor_count=os.cpu_count() or 1, is_integrated=False, is_multi_gpu_board=False,
        warp_size=32, max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536,
        L2_cache_size=0, gcnArchName="", uuid="kvtasks-cpu-tier")

    def counted(name, function):
        def query(*args, **kwargs):
            _state["cuda_queries"][name] = _state["cuda_queries"].get(name, 0) + 1
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


# -- tier crashes ----------------------------------------------------------------------------------

# said by torch or a test helper when the CUDA build it expects is absent, wherever it is raised
_NO_CUDA = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "no CUDA GPUs are available",
            "has no attribute '_cuda_", "CUDA driver", "libcuda")
# an interpreter value (a Python scalar where compiled code has a tensor) missing a tensor's method
_INTERPRETER_VALUE = ("'int' object has no attribute", "'float' object has no attribute",
                      "'bool' object has no attribute", "'NoneType' object has no attribute")


def _tier_folders() -> list[str]:
    """Where code that is the tier's, not the repository's, lives: Triton's runtime and backends
    (the interpreter, the autotuner, the driver), torch.cuda and these hooks."""
    import torch
    import triton

    triton_root = os.path.dirname(triton.__file__)
    return [os.path.join(triton_root, "runtime"), os.path.join(triton_root, "backends"),
            os.path.dirname(torch.cuda.__file__), os.path.abspath(__file__)]


def _root_cause(exc: BaseException) -> BaseException:
    """The exception under Triton's InterpreterError wrappers (raised `from` the kernel's own)."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


def _innermost(exc: BaseException) -> str | None:
    """The file of the innermost frame `exc` passed through, the device redirect's pass-through left
    out: a torch operation the code under test called raises from there, and is the code's own."""
    frames, traceback = [], exc.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame.f_code)
        traceback = traceback.tb_next
    hooks = os.path.abspath(__file__)
    for code in reversed(frames):
        path = os.path.abspath(code.co_filename)
        if not (path == hooks and code.co_name == "__torch_function__"):
            return path
    return None


def crash_cause(exc: BaseException) -> str | None:
    """What the tier could not do when `exc` ended a test or collection, or None when `exc` is a test
    outcome (an assertion, a bounds violation, an error of the repository's own code)."""
    root = _root_cause(exc)
    if isinstance(root, BoundsViolation) or isinstance(exc, BoundsViolation):
        return None
    message = str(root).strip().splitlines()[0][:300] if str(root).strip() else ""
    said = f"{type(root).__name__}: {message}" if message else type(root).__name__
    if any(marker in message for marker in _NO_CUDA):
        return f"an unanswered CUDA query ({said})"
    where = _innermost(root) or ""
    if isinstance(root, AssertionError) and "torch" + os.sep + "cuda" not in where:
        return None
    for folder in _tier_folders():
        if where == folder or where.startswith(folder + os.sep):
            shown = where.split("site-packages" + os.sep)[-1] if folder != os.path.abspath(__file__) else "kvtasks hooks"
            return f"{said} (in {shown})"
    if any(marker in message for marker in _INTERPRETER_VALUE):
        return f"an interpreter value lacks what compiled code has ({said})"
    return None


def record_crash(test, exc) -> None:
    cause = crash_cause(exc)
    if cause is not None:
        _state["crashes"].append({"test": test, "cause": cause})


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

    def pytest_exception_interact(node, call, report):
        # a failing test or collection (pytest calls it for neither skips nor xfails)
        if call.excinfo is not None:
            record_crash(getattr(node, "nodeid", None) or None, call.excinfo.value)

    return types.SimpleNamespace(pytest_collection_modifyitems=pytest_collection_modifyitems,
                                 pytest_runtest_setup=pytest_runtest_setup,
                                 pytest_exception_interact=pytest_exception_interact,
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
    _install_libdevice(interpreter)
    _install_autotune()
    _install_loop_indices(interpreter)
    _install_scalar_arguments(interpreter)
    _install_device_redirect()


def register_pytest(config):
    import pytest

    config.pluginmanager.register(_pytest_plugin(pytest), "kvtasks-triton-cpu")


def report():
    return {"interpreter": "triton", "sanitizer": "on", "device_redirect": "cuda->cpu",
            "device_capability": "{}.{}".format(*capability_of(_state["settings"])),
            "autotune": "every config once per kernel and autotune key, first kept",
            "sparse_programs": _state["settings"].get("sparse_programs"),
            "versions": _state["versions"], "launches": _state["launches"], "violations": _state["violations"],
            "sparse_launches": _state["sparse"], "autotuned": _state["autotune"],
            "bf16_skipped": _state["bf16_skipped"], "crashes": _state["crashes"], "redirected_device_calls": _state["redirected"],
            "cuda_queries": _state["cuda_queries"], "libdevice": _state["libdevice"]}
