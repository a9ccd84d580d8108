"""Dtype spellings: `f32`, `torch.float32`, `np.float32`, "<class 'numpy.float32'>" are one name.

Spelling only; it must never decide which dtype a test uses.
"""
from __future__ import annotations

import re


_DTYPE_SPELLINGS = {
    "float16": ("f16", "fp16", "half", "float16"), "bfloat16": ("bf16", "bfloat16"),
    "float32": ("f32", "fp32", "float", "float32"), "float64": ("f64", "fp64", "double", "float64"),
    "float8": ("fp8", "f8", "float8_e4m3fn", "float8_e5m2", "fp8_e4m3", "fp8_e5m2"),
}
_CANONICAL_DTYPE = {spelling: name for name, spellings in _DTYPE_SPELLINGS.items() for spelling in spellings}


def canonical_dtype(text: str) -> str | None:
    """`f32`, `torch.float32`, `np.float32`, "<class 'numpy.float32'>" -> float32; None if not a dtype."""
    word = re.sub(r"^<class '|'>$", "", str(text).strip()).rsplit(".", 1)[-1].lower()
    return _CANONICAL_DTYPE.get(word)
