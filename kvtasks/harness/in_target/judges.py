"""The judging calls: the tolerance each comparison of the checkout's code really received.

A tolerance can be spelt anywhere (a constant in the kernel's own package, `finfo(ACC_DTYPE).eps *
84`), so reading the test file says little; what the judging function was called with says it all.
Each judging function below is wrapped where its module is loaded, in every run alike (ordinary,
corrupted, base, head); a call made from the checkout's code records the test it ran in, its
caller's file:line, its ordinal among that caller's calls in that test, and the effective rtol,
atol, equal_nan and check_dtype (defaults resolved to numbers, `assert_close`'s by dtype from
torch's documented table). The wrapper records and calls through; recording never fails the call.
A hand-written comparison (`(a - b).abs().max() < tol`) calls none of them and stays unseen.
"""
import functools
import sys
import weakref

from . import loads, state
from .receipt import Judgment

RECORDED = 4000  # judging calls a receipt lists; later ones are counted as dropped
# the wrappers made: a module loaded twice is not wrapped twice. Keyed in the order they were made (a
# WeakSet's order follows addresses, so a view of it would differ between two runs of one session)
_WRAPPERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# torch.testing.assert_close's documented defaults (rtol, atol) by dtype; any other dtype: (0, 0)
_TORCH_DEFAULTS = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
                   "float64": (1e-7, 1e-7), "complex32": (1e-3, 1e-5), "complex64": (1.3e-6, 1e-5),
                   "complex128": (1e-7, 1e-7), "quint8": (1.3e-6, 1e-5), "quint2x4": (1.3e-6, 1e-5),
                   "quint4x2": (1.3e-6, 1e-5), "qint8": (1.3e-6, 1e-5), "qint32": (1.3e-6, 1e-5)}
_PYTHON_DTYPES = {float: "float64", int: "int64", complex: "complex128", bool: "bool"}


def _number(value):
    """A tolerance as one number: an array of them as its largest (what the loosest element gets)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        pass
    try:
        return float(value.max())
    except Exception:
        return None


def _dtype(value) -> str:
    kind = _PYTHON_DTYPES.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, (list, tuple)) and value:  # assert_close compares a sequence item by item
        return _dtype(value[0])
    dtype = getattr(value, "dtype", None)
    return str(dtype).replace("torch.", "") if dtype is not None else type(value).__name__


def _rtol_atol(rtol="rtol", atol="atol", equal_nan="equal_nan", check_dtype=None):
    def read(bound):
        return {"rtol": _number(bound[rtol]), "atol": _number(bound[atol]),
                "equal_nan": bool(bound[equal_nan]) if equal_nan else None,
                "check_dtype": bool(bound[check_dtype]) if check_dtype else None}
    return read


def _decimal(bound):
    return {"rtol": 0.0, "atol": 1.5 * 10.0 ** -_number(bound["decimal"])}


def _assert_close(bound):
    rtol, atol = bound["rtol"], bound["atol"]
    dtypes = [_dtype(bound["actual"]), _dtype(bound["expected"])]
    if rtol is None or atol is None:
        defaults = [_TORCH_DEFAULTS.get(kind, (0.0, 0.0)) for kind in dtypes]
        rtol = max(pair[0] for pair in defaults) if rtol is None else rtol
        atol = max(pair[1] for pair in defaults) if atol is None else atol
    return {"rtol": _number(rtol), "atol": _number(atol), "equal_nan": bool(bound["equal_nan"]),
            "check_dtype": bool(bound["check_dtype"]), "dtypes": dtypes}


def _approx(bound):
    rel, absolute = bound["rel"], bound["abs"]
    # pytest's ApproxScalar: an absolute tolerance alone means no relative one
    rtol = rel if rel is not None else (0.0 if absolute is not None else 1e-6)
    return {"rtol": _number(rtol), "atol": _number(absolute if absolute is not None else 1e-12),
            "equal_nan": bool(bound["nan_ok"])}


def _places(bound):
    if bound["delta"] is not None:
        return {"rtol": 0.0, "atol": _number(bound["delta"])}
    places = bound["places"] if bound["places"] is not None else 7
    return {"rtol": 0.0, "atol": 0.5 * 10.0 ** -_number(places)}


_CLOSE = (("a", "b", "rtol", "atol", "equal_nan"), {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False})
_TENSOR_CLOSE = (("self", "other", "rtol", "atol", "equal_nan"), {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False})
# module -> attribute -> (parameter names in order, their defaults, how the tolerance reads)
JUDGES = {
    "numpy.testing": {
        "assert_allclose": (("actual", "desired", "rtol", "atol", "equal_nan"),
                            {"rtol": 1e-7, "atol": 0.0, "equal_nan": True}, _rtol_atol()),
        "assert_array_almost_equal": (("x", "y", "decimal"), {"decimal": 6}, _decimal),
        "assert_almost_equal": (("actual", "desired", "decimal"), {"decimal": 7}, _decimal),
    },
    "numpy": {"allclose": (*_CLOSE, _rtol_atol()), "isclose": (*_CLOSE, _rtol_atol())},
    "torch.testing": {
        "assert_close": (("actual", "expected"), {"rtol": None, "atol": None, "equal_nan": False, "check_dtype": True},
                         _assert_close),
    },
    "torch": {"allclose": (("input", "other", "rtol", "atol", "equal_nan"), _CLOSE[1], _rtol_atol()),
              "isclose": (("input", "other", "rtol", "atol", "equal_nan"), _CLOSE[1], _rtol_atol()),
              "Tensor.allclose": (*_TENSOR_CLOSE, _rtol_atol()), "Tensor.isclose": (*_TENSOR_CLOSE, _rtol_atol())},
    "pytest": {"approx": (("expected", "rel", "abs", "nan_ok"), {"rel": None, "abs": None, "nan_ok": False}, _approx)},
    "math": {"isclose": (("a", "b"), {"rel_tol": 1e-9, "abs_tol": 0.0},
                         _rtol_atol("rel_tol", "abs_tol", equal_nan=None))},
    "unittest.case": {"TestCase.assertAlmostEqual": (("self", "first", "second", "places", "msg", "delta"),
                                                     {"places": None, "msg": None, "delta": None}, _places)},
}


def _bound(names, defaults, args, kwargs) -> dict:
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    return bound


def _record(function, spec, args, kwargs, caller) -> None:
    run = state.current
    where = loads.in_checkout(caller.f_code.co_filename)
    if run is None or where is None:  # a library's own use of the function judges nothing of the checkout's
        return
    names, defaults, read = spec
    try:
        effective = read(_bound(names, defaults, args, kwargs))
    except Exception:  # a call the function itself will refuse: its error is the test's to see
        return
    key = (run.test, f"{where}:{caller.f_lineno}")
    with run.lock:
        ordinal = run.judging_ordinals.get(key, 0)
        run.judging_ordinals[key] = ordinal + 1
        if len(run.judgments) >= RECORDED:
            run.judgments_dropped += 1
            return
        run.judgments.append(Judgment(test=key[0], caller=key[1], ordinal=ordinal, function=function, **effective))


def _wrapped(original, function, spec):
    @functools.wraps(original)
    def judging_call(*args, **kwargs):
        try:
            _record(function, spec, args, kwargs, sys._getframe(1))
        except Exception:  # recording never fails the comparison it watches
            pass
        value = original(*args, **kwargs)
        run = state.current
        if run is not None:  # a comparison answering no, not raising: the corruption asks what it read
            run.corruption.judged(args, kwargs, value)
        return value

    _WRAPPERS[judging_call] = True
    return judging_call


def wrap(module) -> None:
    """Wrap the judging functions `module` holds (one of JUDGES' modules, just loaded)."""
    for attribute, spec in JUDGES.get(module.__name__, {}).items():
        owner_name, _, name = attribute.rpartition(".")
        owner = getattr(module, owner_name, None) if owner_name else module
        original = getattr(owner, name, None) if owner is not None else None
        if original is None or original in _WRAPPERS:
            continue
        setattr(owner, name, _wrapped(original, f"{module.__name__}.{attribute}", spec))


def install(after_import) -> None:
    """Wrap the judges of the modules already loaded now, the rest as they load."""
    for name in JUDGES:
        if name in sys.modules:
            wrap(sys.modules[name])
    pending = set(JUDGES) - set(sys.modules)
    if pending:
        after_import(pending, wrap)

