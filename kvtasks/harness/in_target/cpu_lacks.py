"""What the Triton interpreter lacks that compiled code has, found on operator libraries (cpu_tier
says what the tier is; each hook here says which release's interpreter lacks what):

- a pointer argument that is no tensor: compiled code takes any object with data_ptr() and dtype
  (an operator library's strided buffer); the interpreter copies tensors only. Such an object that
  also says where its storage lies becomes a tensor viewing the same memory.
- a device function whose module never names triton.language (it calls `triton.language.x` through
  `triton`, or reaches `tl` from elsewhere): compiled code does not care; the interpreter asserts it
  sees `tl` in the function's globals to patch it. It patches the one `tl` the process has instead.
- the all-ones value of an unsigned type (`~x`, `x ^ -1` on uint32): the interpreter before 3.9 fills
  -1 into an unsigned array, which numpy 2 refuses; and `~mask` on int1 under 3.3, whose builder has no
  int1 type and no all-ones value for booleans.
- `dtype.value` on a dtype passed as a constexpr: compiled code hands the function a tl.constexpr,
  whose value is the dtype; the interpreter hands it the dtype itself.
- fp8 conversions as the hardware rounds them: the interpreter's own float-to-fp8 rounding adds the
  cut-off bit without a tie to even or a carry into the exponent (1.0625 became 1.125 in e4m3, 1.96875
  became 1.0). Conversions between fp32/fp16 and the fp8 types torch has run through torch's, which
  round to nearest even and saturate to the largest finite value, as compiled code's `satfinite` does.
"""


def install(interpreter):
    _install_buffers(interpreter)
    _install_language_scope(interpreter)
    _install_unsigned_all_ones(interpreter)
    _install_constexpr_dtypes()
    _install_int1_type(interpreter)
    _install_fp8_conversions(interpreter)


def _install_buffers(interpreter):
    import torch

    unwrap = interpreter._unwrap_tensor

    def _unwrap_tensor(arg):
        arg = unwrap(arg)
        if isinstance(arg, torch.Tensor) or not all(hasattr(arg, name) for name in (
                "data_ptr", "dtype", "untyped_storage", "size", "stride")):
            return arg
        storage = arg.untyped_storage()
        offset, misaligned = divmod(arg.data_ptr() - storage.data_ptr(), arg.dtype.itemsize)
        if misaligned:
            return arg
        view = torch.empty(0, dtype=arg.dtype, device="cpu")
        view.set_(storage, offset, tuple(arg.size()), tuple(arg.stride()))
        return view

    interpreter._unwrap_tensor = _unwrap_tensor


def _install_language_scope(interpreter):
    import types

    import triton.language as tl

    patch_lang = interpreter._patch_lang

    def _patch_lang(fn):
        if not any(value is tl or value is tl.core for value in fn.__globals__.values()):
            fn = types.SimpleNamespace(__globals__={"tl": tl})
        return patch_lang(fn)

    interpreter._patch_lang = _patch_lang


def _install_unsigned_all_ones(interpreter):
    import numpy as np

    builder = interpreter.InterpreterBuilder
    all_ones = builder.get_all_ones_value

    def get_all_ones_value(self, type):
        np_type = interpreter._get_np_dtype(type)
        if np.issubdtype(np_type, np.unsignedinteger):
            return interpreter.TensorHandle(np.full(1, np.iinfo(np_type).max, dtype=np_type), type.scalar)
        if np_type == np.bool_:  # int1's all-ones is True (3.3 refused the type)
            return interpreter.TensorHandle(np.full(1, True), type.scalar)
        return all_ones(self, type)

    builder.get_all_ones_value = get_all_ones_value


def _install_constexpr_dtypes():
    import triton.language as tl

    if not hasattr(tl.dtype, "value"):
        tl.dtype.value = property(lambda self: self)


def _install_int1_type(interpreter):
    import triton.language as tl

    if not hasattr(interpreter.InterpreterBuilder, "get_int1_ty"):
        interpreter.InterpreterBuilder.get_int1_ty = lambda self: tl.int1


# Triton's fp8 types and torch's of the same layout
_TORCH_FP8 = {"fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b8": "float8_e4m3fnuz",
              "fp8e5b16": "float8_e5m2fnuz"}


def _install_fp8_conversions(interpreter):
    import numpy as np
    import torch
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    convert = builder.create_fp_to_fp
    nearest_even = (None, interpreter._ir.ROUNDING_MODE.RTNE)
    wide = {tl.float32: torch.float32, tl.float16: torch.float16}

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        source, target = src.dtype.scalar, dst_type.scalar
        into = getattr(torch, _TORCH_FP8.get(getattr(target, "name", ""), ""), None)
        out_of = getattr(torch, _TORCH_FP8.get(getattr(source, "name", ""), ""), None)
        data = np.ascontiguousarray(src.data)
        if into is not None and source in wide and rounding_mode in nearest_even:
            converted = torch.from_numpy(data).to(into).view(torch.uint8)
        elif out_of is not None and target in wide:
            converted = torch.from_numpy(data).view(out_of).to(wide[target])
        else:
            return convert(self, src, dst_type, rounding_mode)
        return interpreter.TensorHandle(converted.numpy(), target)

    builder.create_fp_to_fp = create_fp_to_fp
