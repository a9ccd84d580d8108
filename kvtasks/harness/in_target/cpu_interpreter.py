"""The Triton CPU tier's interpreter hooks: kernels that are JIT functions, libdevice forwarded to the
interpreter's own math, loop indices and float arguments as the compiler types them (cpu_tier says
what each does)."""
from .cpu_state import STATE


# -- kernels that are JIT functions ------------------------------------------------------------------

def install_jit_functions(interpreter):
    """`triton.jit` under the interpreter returns an InterpretedFunction, which is no JITFunction: a
    wrapper that unwraps `.fn` until it reaches one (an operator library's kernel cache does) walks
    past it into the plain function. Each kernel defined from now on is an InterpretedFunction that is
    also a JITFunction, with a JITFunction's fields (params, arg_names, constexprs, ...) set as the
    compiler would set them, while running, calling and indexing stay the interpreter's."""
    from triton.runtime.jit import JITFunction

    interpreted = interpreter.InterpretedFunction

    class InterpretedJITFunction(interpreted, JITFunction):
        # JITFunction's __init__ sets __name__, which InterpretedFunction answers from the kernel
        __name__ = property(lambda self: self.fn.__name__, lambda self, _value: None)

        def __init__(self, fn, **kwargs):
            JITFunction.__init__(self, fn, **kwargs)
            interpreted.__init__(self, fn, **kwargs)
            STATE.kernel_functions.add(fn)

    # triton.jit imports InterpretedFunction from the interpreter at each decoration
    interpreter.InterpretedFunction = InterpretedJITFunction


# -- libdevice ---------------------------------------------------------------------------------------

# libdevice names the interpreter can compute, by the numpy function its own tl.math equivalent uses
# (exp, sqrt, rsqrt, ...) or, where tl.math has none, the numpy function of the same meaning.
_LIBDEVICE = {
    "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "cos": "cos", "sin": "sin", "sqrt": "sqrt",
    "sqrt_rn": "sqrt", "rsqrt": "rsqrt", "rsqrt_rn": "rsqrt", "abs": "abs", "fabs": "abs", "floor": "floor",
    "ceil": "ceil", "erf": "erf", "fma": "fma", "div_rn": "divide", "fast_dividef": "divide",
    "fast_expf": "exp", "fast_logf": "log", "fast_log2f": "log2", "fast_sinf": "sin", "fast_cosf": "cos",
    "tanh": "tanh", "fast_tanhf": "tanh", "sinh": "sinh", "cosh": "cosh", "tan": "tan", "fast_tanf": "tan",
    "asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2", "asinh": "arcsinh",
    "acosh": "arccosh", "atanh": "arctanh", "expm1": "expm1", "log1p": "log1p", "log10": "log10",
    "fast_log10f": "log10", "exp10": "exp10", "fast_exp10f": "exp10", "pow": "power", "fast_powf": "power",
    "hypot": "hypot", "trunc": "trunc", "rint": "rint", "nearbyint": "rint", "copysign": "copysign",
    "fmod": "fmod", "cbrt": "cbrt", "isnan": "isnan", "isinf": "isinf", "finitef": "isfinite",
    "isfinited": "isfinite", "signbit": "signbit", "fmin": "fmin", "fmax": "fmax", "nextafter": "nextafter",
}


def _numpy_function(name):
    import math

    import numpy as np

    special = {"rsqrt": lambda x: 1 / np.sqrt(x), "fma": lambda x, y, z: x * y + z,
               "exp10": lambda x: np.power(10.0, x), "erf": np.vectorize(math.erf, otypes=[float])}
    chosen = _LIBDEVICE.get(name)
    return None if chosen is None else special.get(chosen) or getattr(np, chosen)


def _libdevice_name(symbol: str) -> str:
    """__nv_tanhf / __nv_fast_tanhf / __ocml_tanh_f32 -> the libdevice function's name."""
    name = symbol.removeprefix("__nv_").removeprefix("__ocml_")
    for suffix in ("_f32", "_f64", "_f16"):
        name = name.removesuffix(suffix)
    return name if name in _LIBDEVICE or not name.endswith("f") else name[:-1]


def _count(table: str, name: str) -> None:
    counts = STATE.libdevice_forwarded if table == "forwarded" else STATE.libdevice_without_equivalent
    counts[name] = counts.get(name, 0) + 1


def _unavailable(name: str) -> NotImplementedError:
    _count("without_equivalent", name)
    return NotImplementedError(f"kvtasks CPU tier: libdevice.{name} has no equivalent in the Triton interpreter")


def install_libdevice(interpreter):
    import inspect

    import numpy as np
    from triton.language.extra import libdevice

    def create_extern_elementwise(self, lib_name, lib_path, symbol, args, ret_type, is_pure):
        name = _libdevice_name(symbol)
        function = _numpy_function(name)
        if function is None:
            raise _unavailable(name)
        _count("forwarded", name)
        scalar = getattr(ret_type, "scalar", ret_type)
        with np.errstate(all="ignore"):  # a GPU returns inf/nan here too, without a warning
            data = function(*(getattr(arg, "data", arg) for arg in args))
        return interpreter.TensorHandle(np.asarray(data).astype(interpreter._get_np_dtype(scalar)), scalar)

    interpreter.InterpreterBuilder.create_extern_elementwise = create_extern_elementwise

    # triton.language.extra.libdevice holds stubs (they return None outside the compiler): each becomes
    # the CUDA libdevice builtin of the same name, which the interpreter's extern call above computes
    try:
        from triton.language.extra.cuda import libdevice as cuda_libdevice
    except ImportError:
        return
    _bind_builtins(interpreter, cuda_libdevice)
    for name, stub in inspect.getmembers(libdevice, inspect.isfunction):
        if stub.__module__ != libdevice.__name__:
            continue
        forward = getattr(cuda_libdevice, name, None)
        if forward is None or _LIBDEVICE.get(name) is None:
            setattr(libdevice, name, _refusing(name))
        else:
            setattr(libdevice, name, forward)


def _bind_builtins(interpreter, module):
    """Bind a module's builtins to the interpreter's builder for the life of the process. Triton 3.6
    gave _patch_builtin a third argument, a _LangPatchScope that each launch restores when it ends (it
    patches triton.language anew at the next); a scope of our own that nothing restores keeps the
    binding, as releases before 3.6 did."""
    import inspect

    patch = interpreter._patch_builtin
    if "scope" in inspect.signature(patch).parameters:  # triton >= 3.6
        patch(module, interpreter.interpreter_builder, interpreter._LangPatchScope())
    else:
        patch(module, interpreter.interpreter_builder)


def _refusing(name):
    def unavailable(*_, **__):
        raise _unavailable(name)
    unavailable.__name__ = name
    return unavailable



# -- loop indices ----------------------------------------------------------------------------------

class LoopIndex(int):
    """A loop index in an interpreted kernel: the int the interpreter iterates over, with the
    `.to(dtype)` a compiled int32 scalar has; arithmetic with ints stays a LoopIndex."""

    def to(self, dtype, *args, **kwargs):
        return _int32_scalar(int(self)).to(dtype, *args, **kwargs)


def _int32_scalar(value):
    """`value` as the interpreter's scalar tensor (int32 where it fits, as to_tensor types it). Triton
    3.4 added interpreter.interpreter_semantic (TritonSemantic); 3.3 has the triton.language.semantic
    module, whose functions take the builder."""
    from triton.runtime import interpreter

    semantic = getattr(interpreter, "interpreter_semantic", None)
    if semantic is not None:  # triton >= 3.4
        return semantic.to_tensor(value, False)
    from triton.language import semantic
    return semantic.to_tensor(value, interpreter.interpreter_builder, False)


def _closed(name):
    method = getattr(int, name)

    def arithmetic(self, *args):
        value = method(self, *args)
        return LoopIndex(value) if type(value) is int else value
    arithmetic.__name__ = name
    return arithmetic


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__",
              "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__neg__", "__pos__", "__abs__"):
    setattr(LoopIndex, _name, _closed(_name))


def loop_indices(iterable):
    """What `for` in an interpreted kernel iterates over: ints become LoopIndex, the rest stay."""
    for item in iterable:
        yield LoopIndex(item) if type(item) is int else item


_LOOP_INDICES = "_interpreter_loop_indices"


def install_scalar_arguments(interpreter):
    import numpy as np

    implicit = interpreter._implicit_cvt

    def _implicit_cvt(arg):
        if type(arg) is float:  # bool and int are the interpreter's own; a float was left a Python float
            return interpreter.tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32),
                                                                  interpreter.tl.float32), interpreter.tl.float32)
        return implicit(arg)

    interpreter._implicit_cvt = _implicit_cvt


def install_loop_indices(interpreter):
    import ast

    class LoopIndexTransformer(interpreter.ASTTransformer):
        def visit_For(self, node):
            self.generic_visit(node)
            node.iter = ast.Call(func=ast.Name(id=_LOOP_INDICES, ctx=ast.Load()), args=[node.iter], keywords=[])
            return node

    # the rewriter adds the interpreter module's globals to the kernel's globals (when absent there)
    setattr(interpreter, _LOOP_INDICES, loop_indices)
    interpreter.FunctionRewriter.ast_transformer = LoopIndexTransformer()
