import os

import numpy as np
import pytest

from kernels.checks import TOL
from kernels.tiled_softmax import softmax_rows

DTYPES = {"f32": np.float32, "f16": np.float16}


def shapes():
    spec = os.environ.get("DEMO_SOFTMAX_SHAPES")
    if not spec:
        return [(1, 64, "f32"), (64, 2000, "f32"), (8, 4000, "f16")]
    return [(int(m), int(n), dtype_str.strip()) for m, n, dtype_str in (row.split(",") for row in spec.split(";"))]


@pytest.mark.parametrize("M,N,dtype_str", shapes())
def test_rows_sum_to_one(M, N, dtype_str):
    rng = np.random.default_rng(M * 7919 + N)
    x = rng.standard_normal((M, N)).astype(DTYPES[dtype_str])
    got = softmax_rows(x).astype(np.float64)
    np.testing.assert_allclose(got.sum(axis=1), np.ones(M), atol=TOL[dtype_str])
