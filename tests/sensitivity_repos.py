"""A small numpy kernel repository whose test files can and cannot fail when the kernel is wrong."""
from __future__ import annotations

from pathlib import Path

from tests.kernel_repos import make_repo

OPS = '''import numpy as np


def scale(x, factor):
    M, N = x.shape
    return x * factor


def scale_into(out, x, factor):
    M, N = x.shape
    np.multiply(x, factor, out=out)


def histogram(x):
    M, N = x.shape
    return np.bincount(x.ravel())
'''

HELPERS = '''import numpy as np


def check(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-6)


def lenient_check(got, want):
    try:
        np.testing.assert_allclose(got, want, rtol=1e-6)
    except AssertionError:
        pass  # mismatches are printed by the benchmark instead
'''
# the same helper after a PR that "recomputes the reference": the good suite can no longer fail, and
# no tolerance or comparison count moved, so the static test policy sees nothing
HELPERS_SELF_REFERENCE = HELPERS.replace("def check(got, want):\n", "def check(got, want):\n    want = np.asarray(got)\n")
OPS_REFACTORED = OPS.replace("    return x * factor\n", "    return np.multiply(x, factor)\n")

HEADER = '''import os

import numpy as np
import pytest

from helpers import check, lenient_check
from kernels.ops import histogram, scale, scale_into


def shapes():
    spec = os.environ.get("SENS_SHAPES")
    if not spec:
        return [(4, 8)]
    return [tuple(int(cell) for cell in row.split(",")) for row in spec.split(";")]


@pytest.mark.parametrize("M,N", shapes())
'''
INPUT = "    x = np.linspace(0, 1, M * N, dtype=np.float32).reshape(M, N)\n"
TESTS = {
    "good": "def test_scale(M, N):\n" + INPUT + "    check(scale(x, 2.0), x * 2.0)\n",
    "self": "def test_scale(M, N):\n" + INPUT + "    np.testing.assert_allclose(scale(x, 2.0), scale(x, 2.0))\n",
    "swallow": "def test_scale(M, N):\n" + INPUT + "    lenient_check(scale(x, 2.0), x * 2.0)\n",
    "loose": "def test_scale(M, N):\n" + INPUT + "    np.testing.assert_allclose(scale(x, 2.0), x * 2.0, atol=10)\n",
    "shape": "def test_scale(M, N):\n" + INPUT + "    assert scale(x, 2.0).shape == x.shape\n",
    "into": ("def test_scale_into(M, N):\n" + INPUT + "    out = np.empty_like(x)\n    scale_into(out, x, 2.0)\n"
             "    check(out, x * 2.0)\n"),
    "hist": ("def test_histogram(M, N):\n    x = np.arange(M * N).reshape(M, N) % 3\n"
             "    assert histogram(x).tolist() == np.bincount(x.ravel()).tolist()\n"),
}


def sensitivity_repo(path: Path) -> Path:
    return make_repo(path, {"kernels/__init__.py": "", "kernels/ops.py": OPS, "tests/helpers.py": HELPERS,
                            **{f"tests/test_{name}.py": HEADER + body for name, body in TESTS.items()}})
