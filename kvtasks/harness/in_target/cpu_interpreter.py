"""The Triton CPU tier's interpreter hooks: kernels that are JIT functions, libdevice forwarded to the
interpreter's own math, loop indices, `and`/`or`/`not` and float arguments as the compiler reads
them (cpu_tier says what each does)."""
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
            launch = self.run

            def run(*args, **kwargs):
                launch(*args, **kwargs)
                return LaunchedKernel(self, args, kwargs)
            self.run = run
            STATE.kernel_functions.add(fn)
            STATE.jit_fields.update(vars(self))

        @property
        def cache_key(self):
            # JITFunction's walks the globals the kernel uses, which on the tier hold the interpreter's
            # and the hooks' functions, and refuses them; the interpreter compiles nothing, so where the
            # kernel lives and its code key it (not the @jit helpers it calls: a cache keyed by it outlives
            # an edit of a helper alone, which on the tier costs nothing but a stale key)
            import hashlib
            import inspect

            try:
                code = inspect.getsource(self.fn).encode()
            except (OSError, TypeError):  # a kernel made at run time has no source file
                code = self.fn.__code__.co_code
            return hashlib.sha256(f"{self.fn.__module__}.{self.fn.__qualname__}\n".encode() + code).hexdigest()

    # triton.jit imports InterpretedFunction from the interpreter at each decoration
    interpreter.InterpretedFunction = InterpretedJITFunction


class LaunchedKernel:
    """What an interpreted kernel's run returns, as a JIT function's returns the kernel it compiled: a
    kernel cache keeps it and indexes it by a grid to launch again, passing every argument (releases
    before 3.7) or only those that are no constexprs, which compiled code has built in: those are the
    ones of the launch it came from."""

    def __init__(self, kernel, args, kwargs):
        constexprs = {param.name for param in kernel.params if param.is_constexpr}
        given = {**dict(zip(kernel.arg_names, args)), **kwargs}
        self.kernel = kernel
        self.constexprs = {name: value for name, value in given.items() if name in constexprs}
        self.arguments = [name for name in kernel.arg_names if name not in constexprs]

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if len(args) + len(kwargs) >= len(self.kernel.arg_names):
                return self.kernel[grid](*args, **kwargs)
            return self.kernel[grid](**{**self.constexprs, **dict(zip(self.arguments, args)), **kwargs})
        return launch


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


# -- `and`, `or` and `not` as the compiler reads them ------------------------------------------------

def boolean_operation(name, *operands):
    """`a and b` / `a or b` in an interpreted kernel as Triton compiles it (its code generator's
    visit_BoolOp): each operand (a thunk) in turn; a Python value short-circuits or drops out, and the
    tensors combine lane by lane. Python's own operator asks the interpreter for a tensor's truth,
    True for a tensor of several lanes: `rows < M and cols < N` was `cols < N` alone, and a mask the
    compiled kernel applies was lost."""
    import triton.language as tl

    tensors, value = [], None
    for operand in operands:
        value = operand()
        if isinstance(value, tl.tensor):
            tensors.append(value)
        elif bool(value) is (name == "or"):
            return value
    if not tensors:
        return value
    while len(tensors) >= 2:
        right, left = tensors.pop(), tensors.pop()
        tensors.append(_combined(name, left, right))
    return tensors[0]


def _combined(name, left, right):
    """logical_and / logical_or of two tensors. Of two masks (int1) that is `&` / `|`, which every
    release's interpreter runs (3.3's builder lacks the int1 type logical_and asks for)."""
    import triton.language as tl

    if left.dtype == tl.int1 and right.dtype == tl.int1:
        return left & right if name == "and" else left | right
    return left.logical_and(right) if name == "and" else left.logical_or(right)


def logical_not(operand):
    """`not x` in an interpreted kernel: a tensor's lanes negated, as compiled code has it (of a mask,
    `== 0`, which every release's interpreter runs)."""
    import triton.language as tl

    if not isinstance(operand, tl.tensor):
        return not operand
    return operand == 0 if operand.dtype == tl.int1 else operand.__not__()


_BOOLEAN_OPERATION, _LOGICAL_NOT = "_interpreter_boolean_operation", "_interpreter_logical_not"


class CompilerRefusal(Exception):
    """Kernel source Triton's compiler refuses: the code's failure, on a GPU too, never the tier's."""


def install_kernel_source(interpreter):
    """Kernel source as the compiler reads it: loop indices that answer `.to(dtype)`; `and`, `or` and
    `not` on tensors lane by lane; a chained comparison refused where the compiler refuses it (before
    3.9, whose interpreter and compiler both run it)."""
    import ast
    import inspect

    base = interpreter.ASTTransformer
    chains_compare = hasattr(base, "visit_Compare")
    # 3.9's visit_Assign visits the assigned value itself; earlier releases' leave it as it is
    visits_value = "self.visit(node.value)" in inspect.getsource(base.visit_Assign)

    def call(name, *args):
        return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])

    def thunk(expression):
        return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                          body=expression)

    class CompiledSemantics(base):
        def visit_For(self, node):
            self.generic_visit(node)
            node.iter = call(_LOOP_INDICES, node.iter)
            return node

        def visit_Assign(self, node):
            if not visits_value:
                node.value = self.visit(node.value)
            return super().visit_Assign(node)

        def visit_Compare(self, node):
            if chains_compare:
                return super().visit_Compare(node)
            if len(node.ops) > 1:
                raise CompilerRefusal(f"simultaneous multiple comparison is not supported: {ast.unparse(node)} "
                                      "(Triton's compiler before 3.9 refuses it)")
            return self.generic_visit(node)

        def visit_BoolOp(self, node):
            self.generic_visit(node)
            name = "and" if isinstance(node.op, ast.And) else "or"
            return call(_BOOLEAN_OPERATION, ast.Constant(value=name), *(thunk(value) for value in node.values))

        def visit_UnaryOp(self, node):
            self.generic_visit(node)
            return call(_LOGICAL_NOT, node.operand) if isinstance(node.op, ast.Not) else node

    # the rewriter adds the interpreter module's globals to the kernel's globals (when absent there)
    for name, function in ((_LOOP_INDICES, loop_indices), (_BOOLEAN_OPERATION, boolean_operation),
                           (_LOGICAL_NOT, logical_not)):
        setattr(interpreter, name, function)
    interpreter.FunctionRewriter.ast_transformer = CompiledSemantics()
