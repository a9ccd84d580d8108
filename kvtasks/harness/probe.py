"""The route probe: runs inside the target process and writes its execution receipt.

kvtasks copies this file, under a random module name, into a folder of its own for each launch,
placed first on the target's PYTHONPATH, with its configuration beside it: `<name>.json` (routes,
shape vars, receipt path, nonce, grid) and `<name>.seal` (what to corrupt, if anything). The
process starts as `python -m <name>`: it runs pytest with itself as a plugin (`--pytest ARGS...`)
or a script (`FILE ARGS...`, which executes FILE under runpy with run_name="__main__"), so both
runners produce a receipt. The receipt is written on every exit path: session finish, the
script's `finally`, and atexit.

Nothing in the process can tell a corrupted run from the ordinary run it repeats: the seal is read
and removed as the probe loads, before pytest reads its configuration (whose addopts may name a
plugin of the repository's, loaded before any `-p` of the command line) and before any conftest or
script runs, and what it said lives only in
the closure of the one function every route call passes through; the probe's module attributes,
hooks, files, argv and environment are the same in both. The items the probe adds to a pytest run
carry ids pytest generates for their values and no mark; the probe tells them apart by their
index into the parametrize mark it made, and the validator learns which is which from the receipt.
Code that inspects the route's wrapper, walks the stack, scans `gc` or finds this module by its
code can still read what it holds (the README's trust model says so).

Cheap by design: only the route is wrapped, when its module is imported; the wrapper counts the
call and profiles only for its duration to read the locals at return. No other function pays
anything. Standard library only; on the Triton CPU tier it also loads the tier's hooks (a sibling
module, named in the configuration) as it is imported.

In a corrupted run the wrapper changes what the route hands back: each floating array or tensor
it returns (alone, or in a tuple or list) that it produced is replaced by a copy whose last
element is 2*x + 1, or x plus a relative error E, or all NaN; a returned value that is one of the
call's inputs or shares memory with one is never corrupted, and the receipt names each output
corrupted or left alone; with an output argument named, that argument is corrupted in place after
the call. numpy and torch are never imported here: a value is recognised through the module it
came from, which is loaded.

Each route call's floating outputs (what it returns: an array or tensor, alone or in a tuple, list
or dict) are checked for NaN and Inf, per cell (the pytest test, else the captured shape), and the
receipt's route_outputs says what was seen (a corrupted run's receipt leaves them out: it corrupts
outputs on purpose).
"""
import os
import sys


def _unseal():
    """What this launch corrupts (mode, error, output; nothing for an ordinary run), read from the
    seal beside this module and removed, before any other import: the checkout is on the path ahead
    of the standard library, so a module of its own may stand in for one the probe imports."""
    seal = os.path.splitext(os.path.abspath(__file__))[0] + ".seal"
    try:
        with open(seal) as handle:
            lines = handle.read().splitlines()
        os.unlink(seal)
    except OSError:
        return {}
    sealed = dict(line.split("=", 1) for line in lines if "=" in line)
    if "error" in sealed:
        sealed["error"] = float(sealed["error"])
    return sealed


_sealed = _unseal()

import atexit  # noqa: E402 (the seal is read first)
import functools  # noqa: E402
import hashlib  # noqa: E402
import inspect  # noqa: E402 (loaded in every run: a corrupted run needs it, and must not be told by it)
import json  # noqa: E402
import math  # noqa: E402
import threading  # noqa: E402

if __name__ == "__main__" and sys.argv[1:2] == ["--pytest"]:
    import pytest  # this module starts pytest itself, so its hooks below are defined for it


_NOTHING_WATCHED = {"routes": [], "shape_vars": [], "receipt": "", "nonce": "", "grid_argnames": [], "grid_rows": [],
                    "poisoned_row": [], "merged": False, "cpu_tier": {}}


def _configuration():
    """This launch's configuration, from the file beside this module. Imported by kvtasks itself
    (for its coercion of cells), it has none and watches nothing."""
    try:
        with open(os.path.splitext(os.path.abspath(__file__))[0] + ".json") as handle:
            return {**_NOTHING_WATCHED, **json.load(handle)}
    except FileNotFoundError:
        return dict(_NOTHING_WATCHED)


_config = _configuration()

# what the run loads: each module's first import in order (a cached import never reaches a finder),
# with what was running then: "route-import" while a route's module executes, "route-call" during a
# route call, "" otherwise
_loads = {"imports": [], "during": []}


class _FirstImports:
    """Records every first import and finds nothing: the import goes on through the finders after it."""

    def find_spec(self, name, path=None, target=None):
        _loads["imports"].append((name, _loads["during"][-1] if _loads["during"] else ""))
        return None


def _opened(event, args):
    """Files a route's import or call opens (a kernel's config or data): the route reads them too."""
    if event != "open" or not _loads["during"] or not isinstance(args[0], str):
        return
    path, mode = args[0], args[1] if isinstance(args[1], str) else "r"
    # read, not written; modules (and their cached bytecode) are what the imports record
    if not set(mode) & set("wax+") and not path.endswith((".py", ".pyc")) and "__pycache__" not in path:
        _loads["opened"].append((path, _loads["during"][-1]))


if _config["receipt"]:
    sys.meta_path.insert(0, _FirstImports())
    _loads["opened"] = []
    sys.addaudithook(_opened)
_checkout = os.path.realpath(os.getcwd()) + os.sep  # a target starts in its checkout


@functools.lru_cache(maxsize=None)
def _installed():
    import sysconfig

    return tuple(os.path.realpath(folder) + os.sep for key, folder in sysconfig.get_paths().items()
                 if key in ("purelib", "platlib", "stdlib", "platstdlib"))


@functools.lru_cache(maxsize=4096)
def _in_checkout(source):
    """A file's path relative to the checkout, or None for anything else: installed packages (even in
    a virtual environment inside the checkout) and kvtasks' own files are not the checkout's."""
    path = os.path.realpath(source or "/")
    if not path.startswith(_checkout) or path.startswith(_installed()) \
            or os.path.dirname(path) == os.path.dirname(os.path.realpath(__file__)):
        return None
    return path[len(_checkout):]


def _during(phase, call, *args, **kwargs):
    _loads["during"].append(phase)
    try:
        return call(*args, **kwargs)
    finally:
        _loads["during"].pop()


def _loaded_modules():
    """The checkout's modules this process imported, in the order they entered sys.modules, each with
    the phase the finder saw its first import in (pytest's own finder, ahead of it, loads test files
    and conftest.py files: they are never a route's)."""
    phases = dict(reversed(_loads["imports"]))  # a name's first import wins
    found = {}
    for name, module in list(sys.modules.items()):
        path = _in_checkout(getattr(module, "__file__", None))
        if path is not None:
            found.setdefault(path, phases.get(name, ""))
    return [{"path": path, "during": during} for path, during in found.items()]


def _opened_files():
    """The checkout's files a route's import or call opened, each with the phase it first did."""
    found = {}
    for name, during in list(_loads.get("opened", ())):
        path = _in_checkout(os.path.abspath(name))
        if path is not None:
            found.setdefault(path, during)
    return [{"path": path, "during": during} for path, during in found.items()]


# the functions tests judge with: one replaced by the checkout's code (or bound to other arguments)
# judges nothing, whoever replaced it
_JUDGES = {"numpy.testing": ("assert_allclose", "assert_array_equal", "assert_array_almost_equal",
                             "assert_almost_equal", "assert_equal", "assert_array_less"),
           "numpy": ("allclose", "isclose", "array_equal"), "torch.testing": ("assert_close",),
           "torch": ("allclose", "isclose", "equal"), "pytest": ("approx", "raises", "skip", "fail"),
           "unittest.case": ("TestCase.assertEqual", "TestCase.assertAlmostEqual", "TestCase.assertTrue"),
           "builtins": ("abs", "all", "any", "isinstance", "max", "min", "round", "sum")}


def _judges_replaced():
    """The judging functions now bound to code of the checkout, or to a functools.partial."""
    found = []
    for module_name, names in _JUDGES.items():
        module = sys.modules.get(module_name)
        for name in names if module is not None else ():
            value = module
            for part in name.split("."):
                value = getattr(value, part, None)
            code = getattr(value, "__code__", None) or getattr(getattr(type(value), "__call__", None), "__code__", None)
            source = _in_checkout(code.co_filename) if code is not None else None
            if source is not None or type(value).__name__ == "partial":
                found.append(f"{module_name}.{name} ({'by ' + source if source else 'a functools.partial'})")
    return found


_state = {"calls": {}, "shapes": [], "parts": {}, "added": {}, "cells": {}, "grid_functions": {}, "replaced": [],
          "added_teardown_failed": [], "unresolved": [], "written": False, "exit": None, "installed": False,
          "test": "", "outputs": {}, "judges_replaced": set(), "written_arguments": {}}
_LARGEST_CHECKED = 2**26  # elements: a larger output (a sparse-grid tensor) is counted, never scanned
# the first calls of each route whose array arguments are read before and after the call (later, one in
# eight): enough to see which arguments a route writes into, few enough to keep the copies cheap
_WRITES_WATCHED_CALLS = 8
_WRITES_SAMPLED, _WRITES_TAIL = 2**20, 2**16  # elements of a larger argument read: evenly spaced, and its tail
_lock = threading.Lock()


def _normalise(value):
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    text = str(value)
    for prefix in ("torch.", "flydsl."):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _part():
    """What a merged session's receipt counts this call under (None outside a merged session): the
    part of the item that runs, "repo" for the repository's own items and calls outside any test."""
    if not _config["merged"]:
        return None
    part = _state["added"].get(_state["test"], "repo")
    return _state["parts"].setdefault(part, {"calls": {}, "shapes": []})


def _capture(frame_locals):
    names = _config["shape_vars"]
    if not names or not all(name in frame_locals for name in names):
        return False
    shape = ",".join(_normalise(frame_locals[name]) for name in names)
    with _lock:
        _state["shapes"].append(shape)
        part = _part()
        if part is not None:
            part["shapes"].append(shape)
    return True


def _count(route):
    with _lock:
        _state["calls"][route] = _state["calls"].get(route, 0) + 1
        part = _part()
        if part is not None:
            part["calls"][route] = part["calls"].get(route, 0) + 1


def _floating_outputs(value, where="return"):
    """(where, array) for every floating tensor or array in a route's return value."""
    if isinstance(value, (tuple, list)):
        for index, item in enumerate(value):
            yield from _floating_outputs(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _floating_outputs(item, f"{where}[{key!r}]")
    elif hasattr(value, "dtype") and hasattr(value, "shape"):
        kind = str(value.dtype)
        if "float" in kind or "complex" in kind:
            yield where, value


def _nonfinite(array) -> list[str]:
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


def _fingerprint(value):
    """A digest of an array argument's elements (of a large one: elements at an odd stride, so every
    column of a power-of-two row is among them, and its whole tail, where a tail tile writes); None
    for anything else, or what cannot be read: watching must never fail the route's call."""
    try:
        if not (hasattr(value, "dtype") and hasattr(value, "shape")) or isinstance(value, type):
            return None
        size = 1
        for extent in value.shape:
            size *= int(extent)
        stride = (size // _WRITES_SAMPLED) | 1
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            flat = value.detach().reshape(-1)
            if size > _WRITES_SAMPLED:
                flat = torch.cat([flat[::stride], flat[-_WRITES_TAIL:]])
            data = flat.cpu().contiguous().view(torch.uint8).numpy().tobytes()
        else:
            flat = value.reshape(-1)
            if size > _WRITES_SAMPLED:
                flat = sys.modules["numpy"].concatenate([flat[::stride], flat[-_WRITES_TAIL:]])
            data = flat.tobytes()
        if not isinstance(data, bytes):
            return None
        return hashlib.blake2b(data, digest_size=16).digest()
    except Exception:  # a meta tensor, a stand-in with an array's names, a library without bytes: not watched
        return None


def _arrays_before(route, function, args, kwargs):
    """(name, argument, digest) of the call's array arguments: for a route's first calls, then for one
    call in eight drawn at random, so a route cannot count its way past the watching."""
    if _state["calls"].get(route, 0) > _WRITES_WATCHED_CALLS and os.urandom(1)[0] >= 32:
        return []
    found = []
    for name, value in _arguments(function, args, kwargs):
        digest = _fingerprint(value)
        if digest is not None:
            found.append((name, value, digest))
    return found


def _note_written(route, before):
    """The arguments a call wrote into: callers' inputs overwritten, or a reference computed from an
    input after the call that now holds the route's own output."""
    written = [name for name, value, digest in before if _fingerprint(value) != digest]
    if written:
        with _lock:
            known = _state["written_arguments"].setdefault(route, [])
            known += [name for name in written if name not in known]


def _watch_outputs(route, value, frame_locals=None):
    """Record, per route and cell (the pytest test, else the captured shape), whether the route's
    floating outputs held NaN or Inf; a test's assertions cannot hide what the route returned."""
    names = _config["shape_vars"]
    shape = ",".join(_normalise(frame_locals[n]) for n in names) if frame_locals and names and \
        all(n in frame_locals for n in names) else None
    cell = _state["test"] or shape or "(whole run)"
    for where, array in _floating_outputs(value):
        size = 1
        for extent in getattr(array, "shape", ()):
            size *= int(extent)
        try:
            kinds = _nonfinite(array) if size <= _LARGEST_CHECKED else None
        except Exception:  # an output the array library cannot scan (a meta tensor): counted, not judged
            kinds = None
        with _lock:
            entry = _state["outputs"].setdefault(f"{route}|{cell}", {"route": route, "cell": cell, "checked": 0,
                                                                     "unchecked": 0, "nonfinite": []})
            if kinds is None:
                entry["unchecked"] += 1
                continue
            entry["checked"] += 1
            for kind in kinds:
                if f"{kind} in {where}" not in entry["nonfinite"]:
                    entry["nonfinite"].append(f"{kind} in {where}")


def _resolve(module, qualname):
    """Where the route lives (owner, attribute) and the code object that really runs: through
    Class.method and functools.wraps chains."""
    owner, obj = module, module
    for part in qualname.split("."):
        owner, obj = obj, getattr(obj, part)
    inner = getattr(obj, "__func__", obj)  # staticmethod / classmethod / bound method
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    return owner, qualname.split(".")[-1], getattr(inner, "__code__", None)


def _watch_with_wrapper(route, owner, attribute, code, after_call):
    """Replace the route by a wrapper that counts the call, reads its shape vars at return, watches
    its outputs and hands them to `_after_call`: the one path of every run, corrupted or not."""
    raw = owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute)
    descriptor = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    target = raw.__func__ if descriptor else raw

    seen = {}

    def read_return(frame, event, _arg):
        if event == "return" and frame.f_code is code:
            _capture(frame.f_locals)
            seen["locals"] = dict(frame.f_locals)

    @functools.wraps(target)
    def route_call(*args, **kwargs):
        _count(route)
        before = _arrays_before(route, target, args, kwargs)
        if not _config["shape_vars"]:
            value = _during("route-call", target, *args, **kwargs)
        else:
            previous = sys.getprofile()
            sys.setprofile(read_return)
            try:
                value = _during("route-call", target, *args, **kwargs)
            finally:
                sys.setprofile(previous)
        _note_written(route, before)
        _watch_outputs(route, value, seen.pop("locals", None))
        return after_call(target, args, kwargs, value)

    setattr(owner, attribute, descriptor(route_call) if descriptor else route_call)


def _instrument(module, after_call):
    for route in _config["routes"]:
        module_name, _, qualname = route.partition(":")
        if module_name != module.__name__:
            continue
        try:
            owner, attribute, code = _resolve(module, qualname)
        except AttributeError:
            _state["unresolved"].append(route)
            continue
        if code is None:
            _state["unresolved"].append(route)
        else:
            _watch_with_wrapper(route, owner, attribute, code, after_call)


# -- the corrupted run: corrupt what the route produced --------------------------------------------

class _NotCorruptible(Exception):
    """Why one value cannot be corrupted (its kind, in words)."""


def _loaded(module, kind):
    """module.kind when `module` is already imported, else None: a value of it proves it loaded."""
    found = sys.modules.get(module)
    return getattr(found, kind, None) if found is not None else None


def _corrupt_element(element, read, write, scale, error):
    """Replace one element; return the relative error injected (its change over |x|, or over the
    output's largest finite magnitude where x is 0 or not finite)."""
    old = read(element)
    finite = math.isfinite(old)
    reference = abs(old) if finite and old != 0 else (scale() or 1.0)
    if not finite:
        new = 0.0
    elif error is not None:
        new = old + error * reference
    else:
        new = 2 * old + 1 if old != -1 else 1.0  # -1 is 2*x + 1's fixed point
    write(element, new)
    realized = read(element)
    if not math.isfinite(realized):  # 2*x + 1 overflowed the dtype: a sign flip is as wrong and representable
        write(element, -old)
        realized = read(element)
    return 1.0 if not finite else abs(realized - old) / reference


def _corrupt_one(value, in_place, settings):
    """One array, tensor or float corrupted: (the corrupted value, relative error, NaN elements
    written), or raise _NotCorruptible. `in_place` None: in place where it can be written (the
    object the route produced stays that object, its layout and attributes kept), else a copy of
    the same layout."""
    mode, error = settings.get("mode", "tail"), settings.get("error")
    ndarray, floating = _loaded("numpy", "ndarray"), _loaded("numpy", "floating")
    tensor = _loaded("torch", "Tensor")
    if ndarray is not None and isinstance(value, ndarray):
        numpy = sys.modules["numpy"]
        if not numpy.issubdtype(value.dtype, numpy.floating):
            raise _NotCorruptible(f"{value.dtype} ndarray")
        if value.size == 0:
            raise _NotCorruptible("empty ndarray")
        if in_place and not value.flags.writeable:
            raise _NotCorruptible("read-only ndarray")
        out = value if in_place or (in_place is None and value.flags.writeable) else value.copy(order="K")
        if mode == "nan":
            out[...] = numpy.nan
            return out, None, int(out.size)

        def scale():
            finite = numpy.abs(out[numpy.isfinite(out)])
            return float(finite.max()) if finite.size else 0.0

        index = (-1,) * out.ndim
        return out, _corrupt_element(index, lambda i: float(out[i]), lambda i, v: out.__setitem__(i, v), scale,
                                     error), 0
    if tensor is not None and isinstance(value, tensor):
        if not value.is_floating_point():
            raise _NotCorruptible(f"{str(value.dtype).replace('torch.', '')} tensor")
        if value.numel() == 0:
            raise _NotCorruptible("empty tensor")
        out = value if in_place is not False else value.clone()
        if mode == "nan":
            out.data.fill_(float("nan"))
            return out, None, int(out.numel())

        def scale():
            flat = out.detach().float().abs()
            finite = flat[flat.isfinite()]
            return float(finite.max()) if finite.numel() else 0.0

        index = (-1,) * out.dim()
        return out, _corrupt_element(index, lambda i: float(out.data[i]), lambda i, v: out.data.__setitem__(i, v),
                                     scale, error), 0
    if in_place:
        raise _NotCorruptible(type(value).__name__)
    if floating is not None and isinstance(value, floating) or isinstance(value, float):
        if mode == "nan":
            return type(value)(float("nan")), None, 1
        box = [float(value)]
        realized = _corrupt_element(0, lambda i: box[i], lambda i, v: box.__setitem__(i, float(type(value)(v))),
                                    lambda: abs(box[0]), error)
        return type(value)(box[0]), realized, 0
    raise _NotCorruptible("nothing (None)" if value is None else type(value).__name__)


def _arguments(function, args, kwargs):
    """(name, value) of each argument of a call, and of each item of an argument that is a list,
    tuple or dict: what a returned value may be, or share memory with, without being produced."""
    try:
        named = list(inspect.signature(function).bind_partial(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        named = [(f"#{index}", arg) for index, arg in enumerate(args)] + list(kwargs.items())
    found = []
    for name, arg in named:
        found.append((name, arg))
        if isinstance(arg, (list, tuple)):
            found += [(f"{name}[{index}]", item) for index, item in enumerate(arg)]
        elif isinstance(arg, dict):
            found += [(f"{name}[{key!r}]", item) for key, item in arg.items()]
    return found


def _storage(tensor):
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:  # a tensor without storage (meta, sparse): never the same as an input's
        return None


def _input_shared(value, arguments):
    """The argument `value` is, is a view of, or shares memory with; None when the route produced it."""
    ndarray, tensor = _loaded("numpy", "ndarray"), _loaded("torch", "Tensor")
    for name, arg in arguments:
        if arg is value:
            return name
        if ndarray is not None and isinstance(value, ndarray) and isinstance(arg, ndarray) \
                and sys.modules["numpy"].may_share_memory(value, arg):
            return name
        if tensor is not None and isinstance(value, tensor) and isinstance(arg, tensor):
            mine = _storage(value)
            if mine and mine == _storage(arg):
                return name
    return None


def _corrupt_returned(value, settings, where, arguments, tally):
    """What the route returned with each floating value it produced corrupted; each output is
    counted in the tally as corrupted or, with why, left alone."""
    if isinstance(value, (tuple, list)) and value:
        items, errors, nans, kinds = [], [], 0, []
        for index, item in enumerate(value):
            try:
                item, error, written = _corrupt_returned(item, settings, f"{where}[{index}]", arguments, tally)
                errors.append(error or 0.0)
                nans += written
            except _NotCorruptible as why:
                kinds.append(str(why))
            items.append(item)
        if not errors:
            raise _NotCorruptible(f"{type(value).__name__} of {', '.join(dict.fromkeys(kinds))}")
        rebuilt = type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        return rebuilt, (max(errors) if settings.get("mode") != "nan" else None), nans
    try:
        shared = _input_shared(value, arguments)
        if shared is not None:
            raise _NotCorruptible(f"an input (argument {shared}, or memory shared with it)")
        corrupted = _corrupt_one(value, None, settings)
    except _NotCorruptible as why:
        tally["outputs_left_alone"][where] = str(why)
        raise
    tally["outputs_corrupted"][where] = tally["outputs_corrupted"].get(where, 0) + 1
    return corrupted


def _output_argument(function, args, kwargs, name):
    try:
        bound = inspect.signature(function).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        bound = None
    if bound is None or name not in bound.arguments:
        raise _NotCorruptible(f"a call without an argument named {name!r}")
    return bound.arguments[name]


def _corruption(settings):
    """(after_call, outcome, receipt) of this launch: with the sealed settings (mode, error, output)
    after_call corrupts what each route call produced; without them it hands the value back. The
    settings and what the corruption did live only in these closures."""
    tally = {"corrupted_calls": 0, "max_relative_error": 0.0, "nan_elements": 0, "not_corrupted": {},
             "outputs_corrupted": {}, "outputs_left_alone": {}, "tests": set(), "failed": [], "green": [],
             "outside_tests": 0, "calls_by_part": {}}

    def refused(reason):
        with _lock:
            tally["not_corrupted"][reason] = tally["not_corrupted"].get(reason, 0) + 1

    def after_call(function, args, kwargs, value):
        if not settings:
            return value
        output = settings.get("output")
        try:
            if output:
                _, error, written = _corrupt_one(_output_argument(function, args, kwargs, output), True, settings)
                where = f"argument {output}"
                tally["outputs_corrupted"][where] = tally["outputs_corrupted"].get(where, 0) + 1
            else:
                value, error, written = _corrupt_returned(value, settings, "return",
                                                          _arguments(function, args, kwargs), tally)
        except _NotCorruptible as why:
            refused(f"argument {output}: {why}" if output else f"returned {why}")
            return value
        except Exception as exc:  # a value that refuses the write (an inference tensor, a view of a constant)
            refused(f"the write failed: {type(exc).__name__}: {exc}"[:200])
            return value
        with _lock:
            tally["corrupted_calls"] += 1
            part = _state["added"].get(_state["test"], "repo")
            tally["calls_by_part"][part] = tally["calls_by_part"].get(part, 0) + 1
            tally["nan_elements"] += written
            if error is not None:
                tally["max_relative_error"] = max(tally["max_relative_error"], error)
            if _state["test"]:
                tally["tests"].add(_state["test"])
            else:
                tally["outside_tests"] += 1
        return value

    def outcome(report):
        """Which tests saw a corrupted route call, and whether they went red."""
        nodeid = report.nodeid
        if nodeid not in tally["tests"]:
            return
        if report.failed and nodeid not in tally["failed"]:
            tally["failed"].append(nodeid)
        elif report.when == "call" and report.passed:  # a skipped test is neither red nor green
            tally["green"].append(nodeid)

    def receipt():
        if not settings:
            return None
        listed = 50  # names beyond this are counted, not listed

        def tests(part):
            """The outcome counts of one part's tests (None: every test but the poisoned cell's)."""
            mine = {key: [test for test in tally[key] if (_state["added"].get(test, "repo") == part if part
                                                          else _state["added"].get(test) != "proof")]
                    for key in ("failed", "green")}
            return {"tests_failed": mine["failed"][:listed], "tests_failed_count": len(mine["failed"]),
                    "tests_green": mine["green"][:listed], "tests_green_count": len(mine["green"])}

        return {
            "mode": settings.get("mode", "tail"), "error": settings.get("error"),
            "output": settings.get("output") or "",
            "corrupted_calls": tally["corrupted_calls"],
            "max_relative_error": tally["max_relative_error"] if settings.get("mode") != "nan" else None,
            "nan_elements": tally["nan_elements"], "not_corrupted": dict(tally["not_corrupted"]),
            "outputs_corrupted": dict(tally["outputs_corrupted"]),
            "outputs_left_alone": dict(tally["outputs_left_alone"]),
            "tests_corrupted": len(tally["tests"]), **tests(None),
            "parts": {part: {**tests(part), "corrupted_calls": tally["calls_by_part"].get(part, 0)}
                      for part in ("repo", "grid")} if _config["merged"] else {},
            "corrupted_outside_tests": tally["outside_tests"],
        }

    return after_call, outcome, receipt


# handed only to the code that uses them, as arguments and defaults (no module attribute holds
# them, so no code in the process can call them to ask what this run corrupts), then dropped
_after_call, _corrupted_outcome, _corruption_receipt = _corruption(_sealed)
del _sealed


def _route_module_finder(modules, after_call):
    """A finder that instruments each route module right after it executes, before anyone takes an alias."""

    class InstrumentingLoader:
        def __init__(self, inner):
            self.inner = inner

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            _during("route-import", self.inner.exec_module, module)
            _instrument(module, after_call)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    class RouteModuleFinder:
        def find_spec(self, name, path, target=None):
            if name not in modules:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = InstrumentingLoader(spec.loader)
            return spec

    return RouteModuleFinder()


def _cpu_tier():
    """The Triton CPU tier's in-target hooks (a sibling module kvtasks copied), loaded once."""
    settings = _config["cpu_tier"]
    if settings and "tier" not in _state:
        import importlib

        _state["tier"] = importlib.import_module(settings["module"])
        _state["tier"].install(settings)
    return _state.get("tier")


def install(_after_call=_after_call):
    if _state["installed"]:
        return
    _state["installed"] = True
    modules = {route.partition(":")[0] for route in _config["routes"]}
    for name in modules:
        if name in sys.modules:
            _instrument(sys.modules[name], _after_call)
    pending = modules - set(sys.modules)
    if pending:
        sys.meta_path.insert(0, _route_module_finder(pending, _after_call))
    atexit.register(write_receipt)


def write_receipt(exit_status=None, _corruption_receipt=_corruption_receipt):
    with _lock:
        if _state["written"] or not _config["receipt"]:
            return
        _state["written"] = True
        observed = sorted(route for route, count in _state["calls"].items() if count)
        corrupted = _corruption_receipt()
        _state["judges_replaced"].update(_judges_replaced())
        receipt = {
            "schema_version": 1,
            "nonce": _config["nonce"],
            "route": ",".join(observed),
            "kernel_symbols": observed,
            "route_calls": dict(_state["calls"]),
            "unresolved_routes": _state["unresolved"],
            "executed_shapes": list(_state["shapes"]),
            "shape_vars": _config["shape_vars"],
            "exit_status": exit_status if exit_status is not None else _state["exit"],
            "mechanism": "import-hook wrapper",
            # a run that corrupts outputs on purpose proves nothing about them
            "route_outputs": list(_state["outputs"].values()) if corrupted is None else [],
            "loaded": {"modules": _loaded_modules(), "opened": _opened_files(), **_state.get("pytest_loaded", {})},
            "judges_replaced": sorted(_state["judges_replaced"]),
            "written_arguments": {route: list(names) for route, names in _state["written_arguments"].items()},
        }
        if _config["grid_argnames"]:
            receipt["cells"] = dict(_state["cells"])  # node id -> the grid row it ran
        if _config["merged"]:
            # each part of the session as a receipt of its own would say it
            receipt["parts"] = {name: {"route": ",".join(sorted(r for r, n in part["calls"].items() if n)),
                                       "kernel_symbols": sorted(r for r, n in part["calls"].items() if n),
                                       "route_calls": dict(part["calls"]), "executed_shapes": list(part["shapes"])}
                                for name, part in _state["parts"].items()}
            receipt["merged_marks"] = _state.get("merged_marks", 0)
            receipt["added"] = dict(_state["added"])  # node id -> "grid" or "proof"
            for key in ("maxfail_dropped", "session_stopped", "exit_rewritten", "session_hooks", "report_hooks",
                        "xdist"):
                if key in _state:
                    receipt[key] = _state[key]
            if _state["added_teardown_failed"]:
                receipt["added_teardown_failed"] = list(_state["added_teardown_failed"])
        if _state.get("tier") is not None:
            receipt["cpu_tier"] = _state["tier"].report()
        if corrupted is not None:
            receipt["sensitivity"] = corrupted
    temporary = _config["receipt"] + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(receipt, handle)
    os.replace(temporary, _config["receipt"])


def _pytest_loaded(config):
    """pytest's configuration file, rootdir and plugins: the checkout's plugin modules (conftest.py
    files, `-p` modules) and the installed distributions' plugins (entry points)."""
    rootdir = _in_checkout(str(config.rootpath) + os.sep + "x")
    plugins = sorted({path for _, plugin in config.pluginmanager.list_name_plugin()
                      if (path := _in_checkout(getattr(plugin, "__file__", None))) is not None})
    distributions = sorted({dist.project_name for _, dist in config.pluginmanager.list_plugin_distinfo()})
    return {"config_file": _in_checkout(str(config.inipath)) if config.inipath else None,
            "rootdir": None if rootdir is None else os.path.dirname(rootdir) or ".",
            "plugins": plugins, "plugin_distributions": distributions}


def pytest_configure(config):
    install()
    if _config["merged"]:
        if getattr(config.option, "maxfail", 0):
            # the poisoned cell fails on purpose: -x or --maxfail must not end the session at it, nor
            # at a failing repository test before the grid's cells ran
            _state["maxfail_dropped"] = config.option.maxfail
            config.option.maxfail = 0
        if getattr(config.option, "numprocesses", None):
            # the items run in xdist's workers, whose route calls this controller's receipt never sees
            _state["xdist"] = f"-n {config.option.numprocesses}"
    if _state.get("tier") is not None:
        _state["tier"].register_pytest(config)


def _coerce(cell):
    """Grid cells arrive as text; "False" is truthy, so literals become what they spell, and a
    tuple-valued cell, "(2049,2)", becomes the tuple."""
    literals = {"True": True, "False": False, "None": None}
    if cell in literals:
        return literals[cell]
    if cell[:1] in "([":
        import ast

        try:
            return ast.literal_eval(cell)
        except (ValueError, SyntaxError):
            return cell
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell


def _grid_marks(metafunc):
    """The parametrize marks the grid replaces, as (node, mark, argnames): those binding exactly the
    grid's argnames; else stacked marks that each bind only grid argnames and together all of them."""
    wanted = set(_config["grid_argnames"])
    exact, inside = [], []
    node = metafunc.definition
    while node is not None:
        for mark in getattr(node, "own_markers", []):
            if mark.name != "parametrize" or not mark.args:
                continue
            names = mark.args[0]
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
            if set(names) == wanted:
                exact.append((node, mark, names))
            elif set(names) < wanted:
                inside.append((node, mark, names))
        node = getattr(node, "parent", None)
    if exact:
        return [[found] for found in exact]
    covered = sorted(name for _, _, names in inside for name in names)
    return [inside] if len(inside) > 1 and covered == sorted(wanted) else []


def _grid_rows(names):
    """The grid's rows as values, in the order of `names` (a mark's own order of the grid argnames)."""
    order = [_config["grid_argnames"].index(name) for name in names]
    return [tuple(_coerce(row[i]) for i in order) for row in _config["grid_rows"]], order


def _replace_mark(node, mark, replacement):
    """`replacement` where `mark` was, on the node and on the object it came from (`pytestmark`), so
    neither the item's markers nor its function, class or module show the mark as written; None
    removes it (a stacked mark the grid's rows replace)."""
    held = getattr(getattr(node, "obj", None), "pytestmark", None)
    for marks in (node.own_markers, held if isinstance(held, list) else []):
        for index in reversed([i for i, item in enumerate(marks)
                               if item is mark or getattr(item, "mark", None) is mark or item == mark]):
            if replacement is None:
                del marks[index]
            else:
                marks[index] = replacement


def _made(metafunc, replacement, first_name, own):
    """Record the mark the probe made (its `own` leading cells are the repository's) and that this
    test's items index into it by `first_name`."""
    _state["replaced"].append((replacement, own))
    _state["grid_functions"][metafunc.definition.nodeid] = (first_name, own)


def _replaced_before(metafunc, mark, names):
    """Whether `mark` is one the probe already made (a class or module mark is seen by each of its
    tests); if so, this test's items index into it as the first test's did."""
    own = next((own for replacement, own in _state["replaced"] if replacement is mark), None)
    if own is not None:
        _state["grid_functions"][metafunc.definition.nodeid] = (names[0], own)
    return own is not None


if _config["cpu_tier"]:
    _cpu_tier()  # as the probe loads (pytest plugin or python -m): before any conftest.py or script touches torch

def _hookwrapper(**options):
    """pytest.hookimpl(hookwrapper=True) where pytest loaded the probe; a script run has no hooks."""
    if "pytest" not in sys.modules:
        return lambda function: function
    import pytest

    return pytest.hookimpl(hookwrapper=True, **options)


if "pytest" in sys.modules and _config["grid_argnames"]:
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_generate_tests(metafunc):
        """Replace the cells of the parametrize mark (or the stacked marks) binding the grid's argnames
        with the grid; in a merged session, add the grid's cells and the poisoned cell beside the
        mark's own cells instead, which keep their values, ids and marks.

        Each grid row is a tuple of cell values, one per name. The names go to pytest as a list,
        never as one "a,b" string: a string naming one argument makes pytest take each row whole
        as that argument's value (a 1-tuple), while a list always unpacks a row into its names.
        No id is given: pytest makes each one from its values, as it does for the repository's.
        """
        if _config["merged"]:
            _merge_grid(metafunc)
            return
        for marks in _grid_marks(metafunc):
            node, mark, _ = marks[0]
            names = [name for _, _, bound in marks for name in bound]
            if len(marks) == 1 and _replaced_before(metafunc, mark, names):
                continue
            rows, _ = _grid_rows(names)
            replacement = pytest.mark.parametrize(list(names), rows).mark
            _replace_mark(node, mark, replacement)
            for node, mark, _ in marks[1:]:  # stacked marks: the grid's rows carry all their names
                _replace_mark(node, mark, None)
            _made(metafunc, replacement, names[0], 0)

    def _merge_grid(metafunc):
        """The exact mark's own cells, then the grid's and the poisoned one, added once per mark."""
        for marks in _grid_marks(metafunc):
            node, mark, names = marks[0]
            if len(marks) != 1 or _replaced_before(metafunc, mark, names):
                continue  # stacked marks' cells are a product: a joint row cannot be added to them
            rows, order = _grid_rows(names)
            poisoned = _config["poisoned_row"]
            added = [pytest.param(*row) for row in rows] + [pytest.param(*(poisoned[i] for i in order))]
            own = list(mark.args[1]) if len(mark.args) > 1 else list(mark.kwargs.get("argvalues", []))
            kwargs = {key: value for key, value in mark.kwargs.items() if key not in ("argnames", "argvalues")}
            ids = kwargs.get("ids")
            if ids is not None and not callable(ids):
                kwargs["ids"] = [*list(ids), *([None] * len(added))]
            replacement = pytest.mark.parametrize(mark.args[0] if mark.args else mark.kwargs["argnames"],
                                                  own + added, **kwargs).mark
            _replace_mark(node, mark, replacement)
            _made(metafunc, replacement, names[0], len(own))
            _state["merged_marks"] = _state.get("merged_marks", 0) + 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(session, config, items):
        """Which items are the grid's (and in a merged session, the poisoned cell's), by their index
        into the mark the probe made, never by their ids; in a merged session the repository's own
        tests run first, then the grid's cells, the poisoned cell last: a cell that breaks the
        process (a CUDA context an out-of-bounds store poisoned) cannot touch the repository's
        tests, and the order within each part stays pytest's."""
        rows = len(_config["grid_rows"])
        for item in items:
            spec = getattr(item, "callspec", None)
            made = _state["grid_functions"].get(item.nodeid.partition("[")[0])
            if spec is None or made is None or made[0] not in spec.indices or spec.indices[made[0]] < made[1]:
                continue
            index = spec.indices[made[0]] - made[1]
            if index < rows:
                _state["cells"][item.nodeid] = index
            if _config["merged"]:
                _state["added"][item.nodeid] = "grid" if index < rows else "proof"
        if _config["merged"]:
            rank = {"repo": 0, "grid": 1, "proof": 2}
            items[:] = sorted(items, key=lambda item: rank[_state["added"].get(item.nodeid, "repo")])


def pytest_runtest_logstart(nodeid, location):
    _state["test"] = nodeid


def pytest_runtest_logfinish(nodeid, location):
    _state["test"] = ""
    _state["judges_replaced"].update(_judges_replaced())  # after teardown: a test's own monkeypatch is undone


def pytest_runtest_logreport(report, _corrupted_outcome=_corrupted_outcome):
    if _config["merged"] and report.when == "teardown" and report.failed and report.nodeid in _state["added"]:
        # a teardown failing on an added item is a higher-scoped fixture's, reported on the last item
        # that used it: alone, the repository's run would have reported it on one of its own
        _state["added_teardown_failed"].append(report.nodeid)
    _corrupted_outcome(report)


# the repository's hooks that see the whole session's outcome (in a merged session the poisoned cell
# makes it a failure), and those that can rewrite an item's report or outcome, or run its test
# function their own way (and so treat the items kvtasks added apart from the repository's)
_SESSION_HOOKS = ("pytest_sessionfinish", "pytest_terminal_summary", "pytest_unconfigure")
_REPORT_HOOKS = ("pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_report_teststatus",
                 "pytest_runtest_protocol", "pytest_runtest_call", "pytest_pyfunc_call")


def _repository_hooks(config, names):
    """The implementations of `names` in the repository's own code: a conftest.py, a plugin module or
    an object a plugin registered, from under the rootdir or the checkout; pytest's own and installed
    packages' plugins (even in a virtual environment inside the checkout) are not the repository's."""
    here = os.path.dirname(os.path.realpath(__file__))
    roots = {os.path.realpath(str(config.rootpath)) + os.sep, os.path.realpath(os.getcwd()) + os.sep}
    found = []
    for name in names:
        for impl in getattr(config.hook, name).get_hookimpls():
            plugin = impl.plugin
            source = getattr(plugin, "__file__", None) or getattr(sys.modules.get(type(plugin).__module__), "__file__",
                                                                 None)
            module = os.path.realpath(source or "/")
            if any(module.startswith(root) for root in roots) and not module.startswith(_installed()) \
                    and os.path.dirname(module) != here:
                found.append(f"{os.path.relpath(module, os.path.realpath(str(config.rootpath)))}: {name}")
    return found


@_hookwrapper(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Outermost: the receipt is written after every other plugin finished; in a merged session it
    also says whether anything stopped the session early or rewrote its exit status."""
    if _config["merged"]:
        # a session told to stop (-x re-set by a conftest, a plugin's shouldstop) did not run every part
        stopped = session.shouldfail or session.shouldstop
        if stopped:
            _state["session_stopped"] = str(stopped)
        for key, names in (("session_hooks", _SESSION_HOOKS), ("report_hooks", _REPORT_HOOKS)):
            hooks = _repository_hooks(session.config, names)
            if hooks:
                _state[key] = hooks
    _state["pytest_loaded"] = _pytest_loaded(session.config)
    before = session.exitstatus
    yield
    if _config["merged"] and session.exitstatus != before:
        _state["exit_rewritten"] = f"{int(before)} -> {int(session.exitstatus)}"
    write_receipt(int(session.exitstatus))


def run_script(argv):
    """Run argv[0] as `python FILE ARGS` would, with the probe installed; return its exit status."""
    import runpy
    path = os.path.abspath(argv[0])
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(path)
    install()
    status = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif isinstance(exc.code, int):
            status = exc.code
        else:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        status = 1
        if _state.get("tier") is not None:
            _state["tier"].record_crash(None, exc)
    finally:
        _state["exit"] = status
        write_receipt(status)
    return status


del _after_call, _corrupted_outcome, _corruption_receipt

if __name__ == "__main__":
    if sys.argv[1:2] == ["--pytest"]:
        # loaded as `-p <name>` under its own name, so pytest-xdist's workers load it too (the seal
        # is gone by then: they never corrupt)
        _name = os.path.splitext(os.path.basename(__file__))[0]
        sys.modules[_name] = sys.modules[__name__]
        install()  # a route module a conftest.py imports is watched from its first import
        sys.exit(pytest.main(["-p", _name, *sys.argv[2:]]))
    sys.exit(run_script(sys.argv[1:]))
