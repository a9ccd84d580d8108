"""The NaN/Inf watch: each route call's floating outputs (what it returns: an array or tensor, alone or
in a tuple, list or dict) are checked per cell (the pytest test, else the captured shape). numpy and
torch are never imported here: a value is recognised through the module it came from, which is loaded."""
import sys

from .receipt import RouteOutput

LARGEST_CHECKED = 2**26  # elements: a larger output (a sparse-grid tensor) is counted, never scanned


def normalise(value) -> str:
    """A shape var's value as the receipt spells it: "float16", not "torch.float16"."""
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    text = str(value)
    for prefix in ("torch.", "flydsl."):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _held(frame_locals, name: str):
    """A local's value, or for `arg.shape[i]` (a dimension the route names nowhere) that dimension."""
    if name in frame_locals:
        return frame_locals[name]
    argument, _, rest = name.partition(".shape[")
    if not rest.endswith("]") or not rest[:-1].isdigit() or argument not in frame_locals:
        raise KeyError(name)
    return tuple(frame_locals[argument].shape)[int(rest[:-1])]


def shape_of(frame_locals, names) -> str | None:
    """The shape vars' values at a route's return, comma-joined; None unless all are there."""
    if not names or not frame_locals:
        return None
    try:
        return ",".join(normalise(_held(frame_locals, name)) for name in names)
    except (KeyError, IndexError, AttributeError, TypeError):
        return None


def floating_outputs(value, where="return"):
    """(where, array) for every floating tensor or array in a route's return value."""
    if isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from floating_outputs(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from floating_outputs(item, f"{where}[{key!r}]")
    elif hasattr(value, "dtype") and hasattr(value, "shape"):
        kind = str(value.dtype)
        if "float" in kind or "complex" in kind:
            yield where, value


def nonfinite(array) -> list[str]:
    """Which of nan, inf the array holds; its module (torch or numpy) is already loaded by the target."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(array, torch.Tensor):
        array = array.detach()
        if bool(torch.isfinite(array).all()):
            return []
        return [kind for kind, test in (("nan", torch.isnan), ("inf", torch.isinf)) if bool(test(array).any())]
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return []
    array = numpy.asarray(array)
    if bool(numpy.isfinite(array).all()):
        return []
    return [kind for kind, test in (("nan", numpy.isnan), ("inf", numpy.isinf)) if bool(test(array).any())]


def size_of(array) -> int:
    size = 1
    for extent in getattr(array, "shape", ()):
        size *= int(extent)
    return size


def watch_outputs(run, route, value, frame_locals=None):
    """Record, per route and cell (the pytest test, else the captured shape), whether the route's
    floating outputs held NaN or Inf; a test's assertions cannot hide what the route returned."""
    cell = run.test or shape_of(frame_locals, run.configuration.shape_vars) or "(whole run)"
    for where, array in floating_outputs(value):
        try:
            kinds = nonfinite(array) if size_of(array) <= LARGEST_CHECKED else None
        except Exception:  # an output the array library cannot scan (a meta tensor): counted, not judged
            kinds = None
        with run.lock:
            entry = run.outputs.setdefault((route, cell), RouteOutput(route, cell))
            if kinds is None:
                entry.unchecked += 1
                continue
            entry.checked += 1
            for kind in kinds:
                if f"{kind} in {where}" not in entry.nonfinite:
                    entry.nonfinite.append(f"{kind} in {where}")


