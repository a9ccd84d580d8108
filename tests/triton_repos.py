"""Small Triton kernel repositories for the CPU tier: real kernels, real tail and overflow bugs.

They need torch and triton (the kvtasks[triton-cpu] extra). Their tests hard-code device="cuda",
as GPU kernel repositories do; on the CPU tier the validator's redirect runs them on the CPU.
"""
from __future__ import annotations

import importlib.util
import os
import re
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
    """Skip without the kvtasks[triton-cpu] extra; in CI (.ci/run installs it) fail instead."""
    missing = [name for name in ("torch", "triton") if importlib.util.find_spec(name) is None]
    if missing:
        why = f"the Triton CPU tier needs {' and '.join(missing)} (pip install -e '.[triton-cpu]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}: .ci/run installs it")
        pytest.skip(why)


# A repository laid out the way real ones are: the package under src/ (pyproject says so), a
# benchmark/ package beside it, pytest addopts that need pytest-cov, a CUDA capability query at
# import and a properties query at collection, libdevice.rsqrt, and autotune configs that differ
# only in num_warps (which the interpreter cannot tell apart).
PACKAGED_PYPROJECT = '''[project]
name = "tiny-kernels"
version = "0.1.0"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
addopts = "--cov=tiny_kernels --cov-report=term"
'''

PACKAGED_INIT = '''import torch

from tiny_kernels.norm import rms_norm

# which kernel paths this package takes follows the GPU's architecture
TF32 = torch.cuda.get_device_capability()[0] >= 8
'''

RMS_NORM = '''import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.autotune(configs=[triton.Config({"BLOCK": block}, num_warps=warps) for block in (32, 64) for warps in (2, 4, 8)],
                 key=["n_cols"])
@triton.jit
def rms_norm_kernel(out_ptr, in_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
        acc += x * x
    inverse = libdevice.rsqrt(tl.sum(acc, 0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
        tl.store(out_ptr + row * n_cols + offs, x * inverse, mask=offs < n_cols)


def rms_norm(x, eps=1e-6):
    M, N = x.shape
    out = torch.empty_like(x)
    rms_norm_kernel[(M,)](out, x, N, eps)
    return out
'''

# The bug direction: the store loses its mask, so the last row's tail is written past the output.
RMS_NORM_UNMASKED_STORE = RMS_NORM.replace("tl.store(out_ptr + row * n_cols + offs, x * inverse, mask=offs < n_cols)",
                                           "tl.store(out_ptr + row * n_cols + offs, x * inverse)")

PACKAGED_TEST = '''import pytest
import torch

from tiny_kernels import rms_norm

MULTIPROCESSORS = torch.cuda.get_device_properties(0).multi_processor_count  # asked at collection


@pytest.mark.parametrize("M,N", [(4, 100), (2, 64)])
def test_rms_norm(M, N):
    x = torch.randn(M, N, device="cuda")
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms_norm(x), expected, rtol=1e-5, atol=1e-5)
'''


def packaged_repo(path: Path, kernel: str = RMS_NORM) -> Path:
    return make_repo(path, {"pyproject.toml": PACKAGED_PYPROJECT, "src/tiny_kernels/__init__.py": PACKAGED_INIT,
                            "src/tiny_kernels/norm.py": kernel, "benchmark/__init__.py": "",
                            "benchmark/bench_norm.py": "from tiny_kernels import rms_norm\n",
                            "tests/test_norm.py": PACKAGED_TEST})


# The gaps real repositories fell into on the tier, one feature each, every one with a tail bug behind it:
# `tiny/scale.py` masks its store, `tiny/scale_tail.py` does not, so the last row writes past the output.
GAP_KERNEL = '''import os

import torch
import triton
import triton.language as tl

{switch}

{decorators}@triton.autotune(configs=[triton.Config({{"BT": 16}}), triton.Config({{"BT": 32}})], key=["n"]{cache})
@triton.jit
def scale_kernel(out_ptr, in_ptr, n, factor, BT: tl.constexpr):
    row = tl.program_id(0)
    for i_t in range(tl.cdiv(n, BT)):
        offs = {start} + tl.arange(0, BT)
        x = tl.load(in_ptr + row * n + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + row * n + offs, x * {factor}, mask=offs < n)


def scale_rows(x, factor):
    M, N = x.shape
    out = torch.empty_like(x)
    scale_kernel[(M,)](out, x, N, factor)
    return out
'''
MASKED_STORE = ", mask=offs < n)\n\n\ndef scale_rows"  # the store's mask, the last thing in the kernel
UNMASKED_STORE = ")\n\n\ndef scale_rows"

GAP_TEST = '''import pytest
import torch

{seeding}from {package}.scale import scale_rows
from {package}.scale_tail import scale_rows as scale_rows_tail


@pytest.mark.parametrize("M,N", [(4, 100)])
def test_fixed(M, N):
    x = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(scale_rows(x, 2.0), x * 2)


@pytest.mark.parametrize("M,N", [(4, 100)])
def test_tail_bug(M, N):
    x = torch.randn(M, N, device="cuda")
    torch.testing.assert_close(scale_rows_tail(x, 2.0), x * 2)
'''

WRAPPER = '''from triton.language.extra import libdevice


class LibEntry(triton.KernelInterface):
    """A kernel cache as operator libraries keep one: it unwraps .fn down to the JIT function."""

    def __init__(self, fn):
        self.fn = fn
        jit_function = fn
        while not isinstance(jit_function, triton.runtime.JITFunction):
            jit_function = jit_function.fn
        self.arg_names, self.params = jit_function.arg_names, jit_function.params
        self.key = jit_function.cache_key  # what its on-disk cache is keyed by

        self.kernels = {}

    def run(self, *args, grid, warmup, **kwargs):
        kernel = self.kernels.get(args[2:])
        if kernel is None:  # a new key: through the autotuner, which returns the kernel it launched
            kernel = self.kernels[args[2:]] = self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)
        # every call launches the kept kernel, as compiled code's is: its constexprs are its own
        return kernel[grid](*args)
'''
REGISTRATION = '''import contextlib


@contextlib.contextmanager
def use_tiny():
    """torch's multiplication runs this module's kernel on CUDA tensors, inside the context."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("mul.Tensor", lambda a, b: scale_rows(a, float(b)), "CUDA")
    try:
        yield
    finally:
        lib._destroy()
'''
REGISTRATION_TEST = '''import pytest
import torch

from tiny.scale import use_tiny
from tiny.scale_tail import use_tiny as use_tiny_tail


@pytest.mark.parametrize("M,N", [(4, 100)])
def test_fixed(M, N):
    x = torch.randn(M, N, device="cuda")
    reference = x.cpu() * 2
    with use_tiny():
        out = x * 2
    torch.testing.assert_close(out, reference)


@pytest.mark.parametrize("M,N", [(4, 100)])
def test_tail_bug(M, N):
    x = torch.randn(M, N, device="cuda")
    reference = x.cpu() * 2
    with use_tiny_tail():
        out = x * 2
    torch.testing.assert_close(out, reference)
'''

# a tile kernel whose store mask is `rows < M and not cols >= N`: compiled, lane by lane; with Python's
# operators (a tensor of several lanes is true) it was `not cols >= N`, False: nothing stored; with
# `not` alone rewritten it was `cols < N`, and the rows past M stored past the output
AND_MASK = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(out_ptr, in_ptr, M, N, factor, BM: tl.constexpr, BN: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    cols = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    x = tl.load(in_ptr + rows * N + cols, mask=(rows < M) & (cols < N), other=0.0)
    tl.store(out_ptr + rows * N + cols, x * factor, mask=rows < M and not cols >= N)


def scale_rows(x, factor):
    M, N = x.shape
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(M, 8), triton.cdiv(N, 32))](out, x, M, N, factor, BM=8, BN=32)
    return out
'''

# what an operator library's kernels do that the interpreter lacked: a pointer argument that is a
# strided buffer of its own, a device function from a module that never names triton.language, the
# all-ones value of an unsigned type, `dtype.value` on a constexpr dtype
LIBRARY_KERNEL = '''import torch
import triton
import triton.language as tl

from tiny.helpers import times


class Buffer:
    """A strided buffer of the library's own: a pointer argument that is no tensor."""

    def __init__(self, tensor):
        self.tensor, self.dtype = tensor, tensor.dtype

    def data_ptr(self):
        return self.tensor.data_ptr()

    def untyped_storage(self):
        return self.tensor.untyped_storage()

    def size(self):
        return self.tensor.size()

    def stride(self):
        return self.tensor.stride()


@triton.jit
def cast_to(x, dtype: tl.constexpr):
    return x.to(dtype.value)


@triton.jit
def scale_kernel(out_ptr, in_ptr, n, factor, BT: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BT)
    every_lane = ~tl.zeros([BT], dtype=tl.uint32) != 0
    for start in range(0, n, BT):
        cols = start + offs
        x = cast_to(tl.load(in_ptr + row * n + cols, mask=(cols < n) & every_lane, other=0.0), tl.float32)
        tl.store(out_ptr + row * n + cols, times(x, factor), mask=cols < n)


def scale_rows(x, factor):
    M, N = x.shape
    out = torch.empty_like(x)
    scale_kernel[(M,)](Buffer(out), x, N, factor, BT=32)
    return out
'''
LIBRARY_HELPERS = "import triton\n\n\n@triton.jit\ndef times(x, factor):\n    return x * factor\n"

# what each gap adds to the kernel module, the test and the repository
GAPS = {
    # flash-linear-attention turns the autotune disk cache on by default
    "autotune_cache": {"cache": ", cache_results=True"},
    # int64 indexing fixes cast loop indices, and kernels cast float arguments; the interpreter has both
    # as Python numbers
    "scalar_casts": {"start": "(i_t * BT).to(tl.int64) + i_t.to(tl.int64) * 0", "factor": "factor.to(tl.float32)"},
    # test utilities that seed the device at import, through torch's _lazy_call
    "cuda_seeding": {"seeding": "from seeding import SEED\n",
                     # and torch._dynamo, which reads torch._C's CUDA entry points at import
                     "files": {"tests/seeding.py": "import torch\nimport torch._dynamo.device_interface\n\nSEED = 42\n"
                                                   "torch.cuda.manual_seed(SEED)\ntorch.cuda.manual_seed_all(SEED)\n"
                                                   "assert torch.cuda.initial_seed() == SEED\n"}},
    # a repository switch its kernels need, which only --env passes to the target
    "env_switch": {"switch": 'BACKEND = os.environ["TINY_BACKEND"]  # KeyError without the switch'},
    # an operator library's kernel cache unwraps `.fn` until it reaches the JIT function
    # (its kernels call libdevice, which the tier forwards to the interpreter's math)
    "wrapped_kernel": {"switch": WRAPPER, "decorators": "@LibEntry\n", "factor": "libdevice.sqrt(factor * factor)"},
    # an operator library picks its vendor backend by the device's name
    "vendor_name": {"switch": 'VENDOR = torch.cuda.get_device_name(0).split(" ")[0].lower()\n'
                              'if VENDOR not in ("nvidia", "amd"):\n'
                              '    raise RuntimeError("No device were detected on your machine")'},
    # a capability check that asks torch's CUDA release (None on a CPU build) skips everything
    "cuda_version": {"seeding": "if torch.version.cuda is None:\n"
                                "    pytest.skip('needs a CUDA build of torch', allow_module_level=True)\n"},
    # FlagGems' masks: `and` and `not` on tensors, which compiled code applies lane by lane
    "and_mask": {"files": {"tiny/scale.py": AND_MASK,
                           "tiny/scale_tail.py": AND_MASK.replace("rows < M and not cols >= N", "rows < M")}},
    "operator_library": {"files": {"tiny/scale.py": LIBRARY_KERNEL, "tiny/helpers.py": LIBRARY_HELPERS,
                                   "tiny/scale_tail.py": LIBRARY_KERNEL.replace(", mask=cols < n)\n", ")\n")}},
    # an operator library registers its kernels for the CUDA key of aten's operators, for a context
    "cuda_registration": {"switch": REGISTRATION, "files": {"tests/test_scale.py": REGISTRATION_TEST}},
}


def gap_kernel(gap: str = "", masked: bool = True, **features: str) -> str:
    chosen = {"switch": "", "decorators": "", "cache": "", "start": "i_t * BT", "factor": "factor",
              **{k: v for k, v in GAPS.get(gap, {}).items()
                 if k in ("switch", "decorators", "cache", "start", "factor")},
              **features}
    kernel = GAP_KERNEL.format(**chosen)
    return kernel if masked else kernel.replace(MASKED_STORE, UNMASKED_STORE)


def gap_files(gap: str) -> dict[str, str]:
    """One gap's files, its package `tiny_<gap>` and its test module `tests/test_<gap>.py`, which runs the
    fixed kernel and the tail bug: every gap's files sit side by side in one repository."""
    spec, package = GAPS[gap], f"tiny_{gap}"
    files = {"tiny/__init__.py": "", "tiny/scale.py": gap_kernel(gap), "tiny/scale_tail.py": gap_kernel(gap, masked=False),
             "tests/test_scale.py": GAP_TEST.format(seeding=spec.get("seeding", ""), package="tiny"),
             **spec.get("files", {})}
    # the templates name the package `tiny` and the test module test_scale
    renamed = {path.replace("tiny/", f"{package}/").replace("tests/test_scale.py", f"tests/test_{gap}.py"):
               text.replace("from tiny.", f"from {package}.") for path, text in files.items()}
    left = [path for path, text in renamed.items() if re.search(r"\btiny\b", path + text)]
    assert not left, f"{gap}: the package is still named tiny in {left}"  # another spelling of the import
    return renamed


def gaps_repo(path: Path, gaps) -> Path:
    return make_repo(path, {name: text for gap in gaps for name, text in gap_files(gap).items()})


def autotune_has_disk_cache() -> bool:
    """Whether the installed triton.autotune takes cache_results (triton 3.4 and later): on 3.3 there is
    no disk cache, so no gap to close, and a kernel that passes it fails at import, on a GPU too."""
    import inspect

    import triton

    return "cache_results" in inspect.signature(triton.autotune).parameters


def all_gaps_kernel() -> str:
    """Every gap the installed triton has, at once, in one kernel module."""
    gaps = ("autotune_cache", "scalar_casts", "env_switch") if autotune_has_disk_cache() else ("scalar_casts",
                                                                                             "env_switch")
    return gap_kernel(**{k: v for gap in gaps for k, v in GAPS[gap].items()})


# Every gap at once in a src layout whose package is a namespace package (no __init__.py anywhere) and
# no packaging file: src/ and the runtime module are found from the tree alone.
ALL_GAPS_TEST = '''import torch

import seeding  # noqa: F401 - seeds the device at import
from tiny_ns.scale import scale_rows


def test_scale_rows():
    x = torch.randn(4, 100, device="cuda")
    torch.testing.assert_close(scale_rows(x, 2.0), x * 2)
'''


def namespace_repo(path: Path, kernel: str | None = None) -> Path:
    return make_repo(path, {"src/tiny_ns/scale.py": kernel or all_gaps_kernel(),
                            "tests/test_scale.py": ALL_GAPS_TEST, **GAPS["cuda_seeding"]["files"]})
