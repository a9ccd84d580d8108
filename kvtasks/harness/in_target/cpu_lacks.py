"""What the Triton interpreter lacks that compiled code has, found on operator libraries (cpu_tier
says what the tier is; each hook here says which release's interpreter lacks what):

- a pointer argument that is no tensor: compiled code takes any object with data_ptr() and dtype
  (an operator library's strided buffer); the interpreter copies tensors only. Such an object that
  also says where its storage lies becomes a tensor viewing the same memory.
- a device function whose module never names triton.language (it calls `triton.language.x` through
  `triton`, or reaches `tl` from elsewhere): compiled code does not care; the interpreter asserts it
  sees `tl` in the function's globals to patch it. It patches the one `tl` the process has instead.
- the all-ones value of an unsigned type (`~x`, `x ^ -1` on uint32): the interpreter before 3.9 fills
  -1 into an unsigned array, which numpy 2 refuses.
- `dtype.value` on a dtype passed as a constexpr: compiled code hands the function a tl.constexpr,
  whose value is the dtype; the interpreter hands it the dtype itself.
"""


def install(interpreter):
    _install_buffers(interpreter)
    _install_language_scope(interpreter)
    _install_unsigned_all_ones(interpreter)
    _install_constexpr_dtypes()


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
        return all_ones(self, type)

    builder.get_all_ones_value = get_all_ones_value


def _install_constexpr_dtypes():
    import triton.language as tl

    if not hasattr(tl.dtype, "value"):
        tl.dtype.value = property(lambda self: self)
