"""bf16 arithmetic as compiled code does it (cpu_tier): the interpreter stores bfloat16 as the uint16 of
its bits and hands those integers to numpy, so `a * b + a` on two bf16 loads multiplied bit patterns
(1.0 * 1.0 gave 2.7e+30), `tl.dot` of bf16 tiles summed integers, `sum`/`max` reduced them, and a
bf16 constant (`builder.get_bf16`, before 3.9) did not exist. Every release from 3.3 to 3.9 has it.

Here each float operation of the builder that meets a bf16 operand computes on the operands widened
to fp32 (exact) and rounds a bf16 result back to nearest even, as the hardware's conversion does; so
do casts between fp32 and bf16 (the interpreter truncated: 1.00390625 became 1.0 where compiled code
gives 1.0078125) and the reductions and scans numpy runs directly. Bit moves (loads, stores, splats,
reshapes, selects, bitcasts) keep the bits. A sum or scan of bf16 adds in fp32 and rounds once, where
compiled code may round as it goes: the tier's result can be the closer one. An atomic on bf16
memory is left as the interpreter has it.
"""
import re

# the builder's float operations: arithmetic, math, comparisons, min/max and dot (casts apart)
_FLOAT_OPERATIONS = re.compile(r"create_(f(add|sub|mul|div|rem|ma|abs|neg)|fcmp\w+"
                               r"|(minimum|minnum|maximum|maxnum|clamp)f|exp2?|log2?|cos|sin|sqrt|rsqrt|floor|ceil|erf"
                               r"|precise_(divf|sqrt)|approx_divf|dot)$")


def install(interpreter):
    import numpy as np
    import torch
    import triton.language as tl

    handle, builder = interpreter.TensorHandle, interpreter.InterpreterBuilder

    def is_bf16(value) -> bool:
        return isinstance(value, handle) and value.dtype == tl.bfloat16

    def widened(value):
        bits = np.ascontiguousarray(value.data).view(np.uint16)
        return handle((bits.astype(np.uint32) << 16).view(np.float32), tl.float32)

    def rounded(data):
        wide = torch.from_numpy(np.ascontiguousarray(np.asarray(data, dtype=np.float32)))
        return wide.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)

    def on_fp32(operation):
        def operate(self, *args, **kwargs):
            if not any(is_bf16(arg) for arg in (*args, *kwargs.values())):
                return operation(self, *args, **kwargs)
            # the result is bf16 where compiled code's would be: every float operand was bf16
            narrow = not any(isinstance(arg, handle) and arg.dtype == tl.float32 for arg in (*args, *kwargs.values()))
            done = operation(self, *(widened(arg) if is_bf16(arg) else arg for arg in args),
                             **{name: widened(arg) if is_bf16(arg) else arg for name, arg in kwargs.items()})
            if narrow and isinstance(done, handle) and done.dtype == tl.float32:
                return handle(rounded(done.data), tl.bfloat16)
            return done
        return operate

    for name in dir(builder):
        if _FLOAT_OPERATIONS.match(name):
            setattr(builder, name, on_fp32(getattr(builder, name)))

    cast = builder.cast_impl

    def cast_impl(self, src, dst_type):
        source, target = src.dtype.scalar, dst_type.scalar
        if source == tl.bfloat16 and target != tl.bfloat16:
            return cast(self, widened(src), dst_type)
        if target == tl.bfloat16 and source != tl.bfloat16:
            wide = src if source == tl.float32 else cast(self, src, tl.float32)
            return handle(rounded(wide.data), tl.bfloat16)
        return cast(self, src, dst_type)

    builder.cast_impl = cast_impl  # the builder's casts (fp_ext, fp_trunc, si_to_fp ...) call self.cast_impl

    convert = builder.create_fp_to_fp
    nearest_even = (None, interpreter._ir.ROUNDING_MODE.RTNE)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        source, target = src.dtype.scalar, dst_type.scalar
        if source == tl.bfloat16 and target != tl.bfloat16:
            return convert(self, widened(src), dst_type, rounding_mode) if target != tl.float32 else widened(src)
        if target == tl.bfloat16 and source == tl.float32 and rounding_mode in nearest_even:
            return handle(rounded(src.data), tl.bfloat16)
        return convert(self, src, dst_type, rounding_mode)

    builder.create_fp_to_fp = create_fp_to_fp
    builder.get_bf16 = lambda self, value: handle(rounded(np.array([value], dtype=np.float32)), tl.bfloat16)
    _install_reductions(interpreter, widened, rounded, tl)


def _install_reductions(interpreter, widened, rounded, tl):
    """numpy's own reductions and scans (sum, min, max, argmin/argmax, cumsum, cumprod) on the widened
    values; the user's combine functions run through the builder above."""
    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps

    def typed(dtype, like):  # like's type with dtype's elements (3.3's block_type has no with_element_ty)
        return tl.block_type(dtype, list(like.type.shape)) if like.type.is_block() else dtype

    def on_values(method, results_bf16):
        def apply(self, input, *args, **kwargs):
            tensor = input[0] if isinstance(input, tuple) else input
            if tensor.dtype.scalar != tl.bfloat16:
                return method(self, input, *args, **kwargs)
            wide = tl.core.tensor(widened(tensor.handle), typed(tl.float32, tensor))
            done = method(self, (wide, *input[1:]) if isinstance(input, tuple) else wide, *args, **kwargs)
            return results_bf16(done)
        return apply

    def narrowed(value):
        if isinstance(value, (list, tuple)):
            return type(value)(narrowed(item) for item in value)
        if isinstance(value, tl.core.tensor) and value.dtype.scalar == tl.float32:
            data = interpreter.TensorHandle(rounded(value.handle.data), tl.bfloat16)
            return tl.core.tensor(data, typed(tl.bfloat16, value))
        return value

    for owner, names in ((reduce_ops, ("sum", "min_max")), (scan_ops, ("cumsum", "cumprod"))):
        for name in names:
            if hasattr(owner, name):
                setattr(owner, name, on_values(getattr(owner, name), narrowed))
