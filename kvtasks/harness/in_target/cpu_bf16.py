"""bf16 arithmetic as compiled code does it (cpu_tier): the interpreter stores bfloat16 as the uint16 of
its bits and hands those integers to numpy, so `a * b + a` on two bf16 loads multiplied bit patterns
(1.0 * 1.0 gave 2.7e+30), `tl.dot` of bf16 tiles summed integers, `sum`/`max` reduced them, and a
bf16 constant (`builder.get_bf16`, before 3.9) did not exist. Every release from 3.3 to 3.9 has it.

Here each float operation of the builder that meets a bf16 operand computes on the operands widened
to fp32 (exact) and rounds a bf16 result back to nearest even, as the hardware's conversion does; so
do casts between fp32 and bf16 (the interpreter truncated: 1.005859375 became 1.0 where compiled code
gives 1.0078125) and the reductions and scans numpy runs directly. A comparison's booleans stay
booleans; an fma rounds once. Conversions between bf16 and fp16 or fp8 go through fp32 with numpy's
or torch's rounding, keeping NaN and inf. Bit moves (loads, stores, splats, reshapes, selects,
bitcasts) keep the bits. A sum or scan of bf16 adds in fp32 and rounds once, where compiled code may
round as it goes: the tier's result can be the closer one. An atomic on bf16 memory is left as the
interpreter has it.
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

    def rounded_once(exact):
        """float64 values to bf16 in one rounding (torch would go through fp32, rounding twice)."""
        _, exponent = np.frexp(exact)
        quantum = np.ldexp(1.0, np.maximum(exponent, -125) - 8)  # 8 significant bits; subnormals below 2^-126
        with np.errstate(over="ignore", invalid="ignore"):
            nearest = np.where(np.isfinite(exact), np.rint(exact / quantum) * quantum, exact)
            return rounded(nearest.astype(np.float32))  # exact: already a bf16 value, or inf

    def on_fp32(operation):
        def operate(self, *args, **kwargs):
            if not any(is_bf16(arg) for arg in (*args, *kwargs.values())):
                return operation(self, *args, **kwargs)
            # the result is bf16 where compiled code's would be: every float operand was bf16
            narrow = not any(isinstance(arg, handle) and arg.dtype == tl.float32 for arg in (*args, *kwargs.values()))
            done = operation(self, *(widened(arg) if is_bf16(arg) else arg for arg in args),
                             **{name: widened(arg) if is_bf16(arg) else arg for name, arg in kwargs.items()})
            if not (narrow and isinstance(done, handle) and done.dtype == tl.float32):
                return done
            if not np.issubdtype(done.data.dtype, np.floating):  # a comparison's booleans, labelled as before
                return handle(done.data, tl.bfloat16)
            return handle(rounded(done.data), tl.bfloat16)
        return operate

    def create_fma(self, x, y, z):
        # compiled code rounds an fma once: the product of two bf16 values is exact in float64, and so,
        # all but always, is its sum with a third
        if not all(is_bf16(operand) for operand in (x, y, z)):
            return fma(self, x, y, z)
        exact = [widened(operand).data.astype(np.float64) for operand in (x, y, z)]
        return handle(rounded_once(exact[0] * exact[1] + exact[2]), tl.bfloat16)

    for name in dir(builder):
        if _FLOAT_OPERATIONS.match(name):
            setattr(builder, name, on_fp32(getattr(builder, name)))
    fma, builder.create_fma = builder.create_fma, create_fma

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
            if target == tl.float32:
                return widened(src)
            if target == tl.float16 and rounding_mode in nearest_even:  # numpy rounds to even, overflows to inf
                return handle(widened(src).data.astype(np.float16), tl.float16)
            return convert(self, widened(src), dst_type, rounding_mode)  # fp8: through torch (cpu_lacks)
        if target == tl.bfloat16 and source != tl.bfloat16 and rounding_mode in nearest_even:
            if source == tl.float16:
                return handle(rounded(src.data.astype(np.float32)), tl.bfloat16)
            wide = src if source == tl.float32 else convert(self, src, tl.float32, None)  # fp8: through torch
            return handle(rounded(wide.data), tl.bfloat16)
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

    def on_values(method):
        def apply(self, input, *args, **kwargs):
            tensor = input[0] if isinstance(input, tuple) else input
            if tensor.dtype.scalar != tl.bfloat16:
                return method(self, input, *args, **kwargs)
            wide = tl.core.tensor(widened(tensor.handle), typed(tl.float32, tensor))
            done = method(self, (wide, *input[1:]) if isinstance(input, tuple) else wide, *args, **kwargs)
            return narrowed(done)
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
                setattr(owner, name, on_values(getattr(owner, name)))
