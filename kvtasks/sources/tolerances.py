"""Comparison callees and their documented default tolerances (CALLEES: a keyword head passes
where base passed none is compared with these), which parameters are tolerances, and which way is
looser.

A table, not a reader: it must never walk a tree.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Callee:
    """A comparison callee: its positional parameters and the documented default of each tolerance."""

    positional: tuple[str, ...]
    defaults: dict[str, float | dict[str, float]]
    # where the defaults are documented (the report names it beside a widening)
    source: str = ""
    # a repository's helper that makes a strict comparison: a call of it counts as one
    strict: bool = False


_NUMPY_CLOSE = Callee(("a", "b", "rtol", "atol"), {"rtol": 1e-5, "atol": 1e-8}, "numpy: rtol=1e-05, atol=1e-08")
_TORCH_CLOSE = Callee(("input", "other", "rtol", "atol"), {"rtol": 1e-5, "atol": 1e-8}, "torch: rtol=1e-05, atol=1e-08")
# torch.testing.assert_close: the defaults depend on the dtype compared (its documented table)
TORCH_ASSERT_CLOSE = {
    "float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7),
    "quint8": (1.3e-6, 1e-5), "quint2x4": (1.3e-6, 1e-5), "quint4x2": (1.3e-6, 1e-5), "qint8": (1.3e-6, 1e-5),
    "qint32": (1.3e-6, 1e-5),
}
_ALMOST_EQUAL = Callee(("first", "second", "places", "msg", "delta"), {"places": 7, "delta": 0.5e-7},
                       "unittest: places=7 (|a-b| < 5e-8)")

CALLEES: dict[str, Callee] = {
    "numpy.testing.assert_allclose": Callee(("actual", "desired", "rtol", "atol"), {"rtol": 1e-7, "atol": 0.0},
                                            "numpy.testing.assert_allclose: rtol=1e-07, atol=0"),
    "numpy.testing.assert_array_almost_equal": Callee(("x", "y", "decimal"), {"decimal": 6},
                                                      "numpy.testing.assert_array_almost_equal: decimal=6"),
    "numpy.testing.assert_almost_equal": Callee(("actual", "desired", "decimal"), {"decimal": 7},
                                                "numpy.testing.assert_almost_equal: decimal=7"),
    "numpy.allclose": _NUMPY_CLOSE,
    "numpy.isclose": _NUMPY_CLOSE,
    "torch.allclose": _TORCH_CLOSE,
    "torch.isclose": _TORCH_CLOSE,
    "torch.testing.assert_close": Callee(("actual", "expected"), {
        "rtol": {dtype: pair[0] for dtype, pair in TORCH_ASSERT_CLOSE.items()},
        "atol": {dtype: pair[1] for dtype, pair in TORCH_ASSERT_CLOSE.items()}},
        "torch.testing.assert_close: per-dtype defaults"),
    "pytest.approx": Callee(("expected", "rel", "abs"), {"rel": 1e-6, "abs": 1e-12}, "pytest.approx: rel=1e-06, "
                                                                                    "abs=1e-12"),
    "unittest.TestCase.assertAlmostEqual": _ALMOST_EQUAL,
}
# methods called on a test case (`self.assertAlmostEqual`), whatever the receiver is named
METHOD_CALLEES = {"assertAlmostEqual": _ALMOST_EQUAL, "assertAlmostEquals": _ALMOST_EQUAL,
                  "failUnlessAlmostEqual": _ALMOST_EQUAL}
# the tolerance parameters; for two of them (FEWER_IS_LOOSER) fewer means looser
TOLERANCE_PARAMETERS = {"atol", "rtol", "rel", "abs", "delta", "places", "decimal"}
# parametrize columns read as tolerances, by argname (and any argname containing "tol")
TOLERANCE_ARGNAMES = TOLERANCE_PARAMETERS | {"tol", "eps", "epsilon", "tolerance"}
FEWER_IS_LOOSER = {"places", "decimal"}


def is_tolerance_argname(name: str) -> bool:
    return name.lower() in TOLERANCE_ARGNAMES or "tol" in name.lower()


def callee_for(name: str) -> Callee | None:
    if name in CALLEES:
        return CALLEES[name]
    return METHOD_CALLEES.get(name.rsplit(".", 1)[-1]) if "." in name else None


def looser(parameter: str, head: float, base: float) -> bool:
    return head < base if parameter in FEWER_IS_LOOSER else head > base
