"""Small Triton kernel repositories for the CPU tier: real kernels, real tail and overflow bugs.

They need torch and triton (the kvtasks[triton-cpu] extra). Their tests hard-code device="cuda",
as GPU kernel repositories do; on the CPU tier the validator's redirect runs them on the CPU.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.kernel_repos import make_repo

SOFTMAX_MASKED = '''import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    e = tl.where(mask, e, 0.0)
    tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, 0), mask=mask)


def softmax(x):
    M, N = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(M,)](out, x, N, BLOCK=triton.next_power_of_2(N))
    return out
'''

# The "optimisation" a PR might make: drop the mask. Power-of-two widths still pass; any other
# width reads and writes past the end of the last row.
SOFTMAX_UNMASKED = SOFTMAX_MASKED.replace(
    '''    mask = offs < n_cols
    x = tl.load(in_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    e = tl.where(mask, e, 0.0)
    tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, 0), mask=mask)''',
    '''    x = tl.load(in_ptr + row * n_cols + offs)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, 0))''')

SOFTMAX_TEST = '''import pytest
import torch

from softmax import softmax

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize("M,N,dtype", [(4, 64, "f32"), (8, 128, "f32"), (2, 64, "bf16")])
def test_softmax(M, N, dtype):
    torch.manual_seed(0)
    x = torch.randn(M, N, device="cuda", dtype=DTYPES[dtype])
    assert x.is_cuda and torch.cuda.is_available()
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)
'''


def softmax_repo(path: Path, kernel: str = SOFTMAX_MASKED) -> Path:
    return make_repo(path, {"softmax.py": kernel, "tests/test_softmax.py": SOFTMAX_TEST})


AUTOTUNED = '''import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                 key=["n"])
@triton.jit
def add_kernel(out_ptr, a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def add(a, b):
    out = torch.empty_like(a)
    n = a.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, a, b, n)
    return out
'''

# The tutorials' idiom for the device: the active driver's torch device.
AUTOTUNED_TEST = '''import torch
import triton

from add import add

DEVICE = triton.runtime.driver.active.get_active_torch_device()


def test_add():
    a = torch.randn(1000, device=DEVICE)
    b = torch.randn(1000, device=DEVICE)
    torch.testing.assert_close(add(a, b), a + b)
'''


def autotuned_repo(path: Path) -> Path:
    return make_repo(path, {"add.py": AUTOTUNED, "tests/test_add.py": AUTOTUNED_TEST})


SCALE_INT32 = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(out_ptr, in_ptr, n_cols, factor, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    start = row * n_cols
    x = tl.load(in_ptr + start + offs, mask=mask)
    tl.store(out_ptr + start + offs, x * factor, mask=mask)


def scale_rows(x, factor):
    M, N = x.shape
    out = torch.empty_like(x)
    scale_kernel[(M,)](out, x, N, factor, BLOCK=triton.next_power_of_2(N))
    return out
'''

# 64-bit row offsets: the fix for shapes past 2^31 elements.
SCALE_INT64 = SCALE_INT32.replace("    start = row * n_cols\n", "    start = row.to(tl.int64) * n_cols\n")

# Past 2^31 elements only the first and last rows are touched, so the tensors' other pages are never
# committed: the test checks the rows it can afford to.
SCALE_TEST = '''import pytest
import torch

from scale import scale_rows


@pytest.mark.parametrize("M,N", [(4, 4096)])
def test_scale_rows(M, N):
    x = torch.empty(M, N, device="cuda", dtype=torch.float16)
    x[0].uniform_()
    x[-1].uniform_()
    out = scale_rows(x, 2.0)
    for row in (0, M - 1):
        torch.testing.assert_close(out[row], x[row] * 2)
'''


def scale_repo(path: Path, kernel: str = SCALE_INT32) -> Path:
    return make_repo(path, {"scale.py": kernel, "tests/test_scale.py": SCALE_TEST})


def require_triton_cpu() -> None:
    """Skip without the kvtasks[triton-cpu] extra (.ci/run installs it and checks that it imports)."""
    missing = [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the Triton CPU tier needs {' and '.join(missing)} (pip install -e '.[triton-cpu]')")
