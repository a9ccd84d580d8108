"""The Triton CPU tier's bounds sanitizer, launches and sparse grid, and autotune on the interpreter
(cpu_tier says what each does)."""
import time

from .cpu_state import STATE


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


_OWNER = "_interpreter_allocation"


def _containing(launch, address):
    """The index of the allocation holding `address`, or None."""
    import numpy as np

    index = int(np.searchsorted(launch.starts, np.uint64(address), side="right")) - 1
    return index if index >= 0 and address < int(launch.ends[index]) else None


def _owner(handle):
    """The allocation a pointer handle was derived from, as far as the launch can tell."""
    launch = STATE.launch
    if launch is None or not hasattr(handle, "attr"):
        return None
    if _OWNER not in handle.attr and getattr(handle.data, "size", 0):
        handle.attr[_OWNER] = _containing(launch, int(handle.data.flat[0]))
    return handle.attr.get(_OWNER)


def _check(op, pointers, mask):
    """Raise BoundsViolation when an active lane of `pointers` leaves its allocation."""
    launch = STATE.launch
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
    STATE.violations.append({"kernel": launch.kernel, "op": op, "argument": argument, "element_offset": offset,
                                 "extent_elements": extent, "program": list(launch.program),
                                 "lanes_out_of_bounds": outside, "lanes_active": int(lanes.size),
                                 "test": STATE.test})
    raise BoundsViolation(f"kvtasks bounds sanitizer: {op} out of bounds in kernel {launch.kernel} "
                          f"(program {tuple(launch.program)}): {detail}; {outside} of {lanes.size} active lanes")


def _passes_owner(method, handle_class):
    """Wrap a builder method whose result is a pointer derived from its first handle argument (found by
    type: create_splat's order changed in Triton 3.4, from (arg, shape) to (ret_ty, arg))."""
    def wrapper(self, *args, **kwargs):
        out = method(self, *args, **kwargs)
        source = next((arg for arg in args if isinstance(arg, handle_class)), None)
        owner = _owner(source) if source is not None and getattr(source.dtype, "is_ptr", lambda: False)() \
            else None
        if owner is not None and hasattr(out, "attr"):
            out.attr[_OWNER] = owner
        return out
    return wrapper


def install_sanitizer(interpreter):
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
        launch = STATE.launch
        if launch is not None:
            if launch.sparse_grid is not None:
                x, y, z = (axis[i] for axis, i in zip(launch.sparse_grid, (x, y, z)))
            launch.program = (x, y, z)
        return set_idx(self, x, y, z)

    def set_grid_dim(self, nx, ny, nz):
        launch = STATE.launch
        if launch is not None and launch.sparse_grid is not None:
            nx, ny, nz = launch.grid  # the kernel sees the launch it was given, not the sparse subset
        return set_dim(self, nx, ny, nz)

    for name in ("create_addptr", "create_splat", "create_broadcast", "create_expand_dims"):
        setattr(builder_class, name, _passes_owner(getattr(builder_class, name), interpreter.TensorHandle))
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


def install_launches(interpreter):
    executor = interpreter.GridExecutor
    call, restore = executor.__call__, executor._restore_args_dev

    def __call__(self, *args, **kwargs):
        named = list(zip(self.arg_names, args)) + list(kwargs.items())
        launch = _Launch(getattr(self.fn, "__name__", "kernel"), named)
        original = self.grid

        def grid(meta):
            real = tuple(original(meta) if callable(original) else original)
            launch.grid = real + (1,) * (3 - len(real))
            launch.sparse_grid = _sparse_axes(launch.grid, STATE.settings.sparse_programs)
            if launch.sparse_grid is None:
                return real
            ran = len(launch.sparse_grid[0]) * len(launch.sparse_grid[1]) * len(launch.sparse_grid[2])
            STATE.sparse.append({"kernel": launch.kernel, "grid": list(launch.grid), "programs_run": ran,
                                     "test": STATE.test})
            return tuple(len(axis) for axis in launch.sparse_grid)

        self.grid = grid
        STATE.launch, STATE.launches = launch, STATE.launches + 1
        if STATE.test:
            STATE.launches_by_test[STATE.test] = STATE.launches_by_test.get(STATE.test, 0) + 1
        try:
            return call(self, *args, **kwargs)
        finally:
            self.grid, STATE.launch = original, None

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
    return STATE.autotune.setdefault(kernel, {"keys": 0, "configs_run": 0, "duplicates_skipped": 0,
                                                  "seconds": 0.0})


def _program(config) -> tuple:
    """What the interpreter runs for a config: its meta-parameters and pre-hook; num_warps,
    num_stages and the other launch options change nothing there."""
    return tuple(sorted((name, repr(value)) for name, value in config.kwargs.items())), config.pre_hook


def install_autotune():
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
        # interpreter timings are worth nothing, and all configs tie: nothing to read or keep
        bench_fn()
        return False

    autotuner.Autotuner.prune_configs = prune_configs
    # Triton 3.3 assigns self.do_bench in Autotuner.__init__; 3.4 and later read a property: the setter
    # keeps the assignment from failing, and the interpreter's bench is ours on every release
    autotuner.Autotuner.do_bench = property(run_each_config_once, lambda self, value: None)
    autotuner.Autotuner.check_disk_cache = check_disk_cache
