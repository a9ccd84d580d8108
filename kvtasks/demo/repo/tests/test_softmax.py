import os

import numpy as np
import pytest

from kernels.tiled_softmax import softmax_rows

TOL = {"f32": 1e-5, "f16": 2e-3}
DTYPES = {"f32": np.float32, "f16": np.float16}

SHAPES = [
    (1, 64, "f32"),
    (16, 128, "f32"),
    (64, 2000, "f32"),
    (8, 100, "f16"),
]


def shapes():
    spec = os.environ.get("DEMO_SOFTMAX_SHAPES")
    if not spec:
        return SHAPES
    rows = []
    for row in spec.split(";"):
        m, n, dtype_str = row.split(",")
        rows.append((int(m), int(n), dtype_str.strip()))
    return rows


def reference(x):
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("M,N,dtype_str", shapes())
def test_softmax_matches_reference(M, N, dtype_str):
    rng = np.random.default_rng(M * 100003 + N)
    x = rng.standard_normal((M, N)).astype(DTYPES[dtype_str])
    got = softmax_rows(x).astype(np.float64)
    np.testing.assert_allclose(got, reference(x), atol=TOL[dtype_str])
