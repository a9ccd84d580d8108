"""What the Triton CPU tier could not do: an exception that ended a test or collection, told apart from
a test outcome (an assertion, a bounds violation, an error of the repository's own code)."""
import os
import sys

from .cpu_sanitizer import BoundsViolation
from .cpu_state import STATE

_HERE = os.path.dirname(os.path.abspath(__file__))
# the tier's own modules: a crash raised in one is the tier's
HOOKS = tuple(os.path.join(_HERE, name) for name in ("cpu_crashes.py", "cpu_devices.py", "cpu_dispatch.py",
                                                      "cpu_interpreter.py", "cpu_sanitizer.py", "cpu_state.py",
                                                      "cpu_tier.py"))


# -- tier crashes ----------------------------------------------------------------------------------

# said by torch or a test helper when the CUDA build it expects is absent, wherever it is raised
_NO_CUDA = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "no CUDA GPUs are available",
            "has no attribute '_cuda_", "CUDA driver", "libcuda")
# an interpreter value (a Python scalar where compiled code has a tensor) missing a tensor's method
_INTERPRETER_VALUE = ("'int' object has no attribute", "'float' object has no attribute",
                      "'bool' object has no attribute", "'NoneType' object has no attribute")


def _tier_folders() -> list[str]:
    """Where code that is the tier's, not the repository's, lives: Triton's runtime and backends
    (the interpreter, the autotuner, the driver), torch.cuda and these hooks."""
    import torch
    import triton

    triton_root = os.path.dirname(triton.__file__)
    return [os.path.join(triton_root, "runtime"), os.path.join(triton_root, "backends"),
            os.path.dirname(torch.cuda.__file__), *HOOKS]


def _root_cause(exc: BaseException) -> BaseException:
    """The exception under Triton's InterpreterError wrappers (raised `from` the kernel's own)."""
    seen = set()
    while exc.__cause__ is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__
    return exc


def _innermost(exc: BaseException) -> str | None:
    """The file of the innermost frame `exc` passed through, the device redirect's pass-through left
    out: a torch operation the code under test called raises from there, and is the code's own."""
    frames, traceback = [], exc.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame.f_code)
        traceback = traceback.tb_next
    for code in reversed(frames):
        path = os.path.abspath(code.co_filename)
        if not (path in HOOKS and code.co_name == "__torch_function__"):
            return path
    return None


def _tier_module(name: str) -> bool:
    """Whether a module is the interpreter or one of these hooks: the objects of its classes stand
    where compiled code, or a CUDA build of torch, has others."""
    path = os.path.abspath(getattr(sys.modules.get(name), "__file__", None) or "")
    return path in HOOKS or path.endswith(os.path.join("triton", "runtime", "interpreter.py"))


def _tier_class_names() -> set[str]:
    return {name for module_name, module in list(sys.modules.items()) if _tier_module(module_name)
            for name, value in vars(module).items() if isinstance(value, type) and value.__module__ == module_name}


def _replaced(root: BaseException, message: str) -> str | None:
    """What the tier put where the failing code expected another object, when `root` is about one:
    the code fails in its own file, but on an object only the tier would have given it."""
    if isinstance(root, AttributeError) and getattr(root, "obj", None) is not None:
        obj = root.obj
        try:
            kernel = obj in STATE.kernel_functions
        except TypeError:  # an unhashable object is no kernel's function
            kernel = False
        if kernel:
            return (f"the plain function of the interpreted kernel {getattr(obj, '__name__', '?')}, reached past "
                    "the interpreter's kernel object, where compiled code has a JITFunction")
        if _tier_module(type(obj).__module__):
            return f"the tier's {type(obj).__name__}, where compiled code has another object"
    for name in _tier_class_names():
        if f"'{name}' object" in message:
            return f"the tier's {name}, where compiled code has another object"
    return None


def crash_cause(exc: BaseException) -> str | None:
    """What the tier could not do when `exc` ended a test or collection, or None when `exc` is a test
    outcome (an assertion, a bounds violation, an error of the repository's own code)."""
    root = _root_cause(exc)
    if isinstance(root, BoundsViolation) or isinstance(exc, BoundsViolation):
        return None
    message = str(root).strip().splitlines()[0][:300] if str(root).strip() else ""
    said = f"{type(root).__name__}: {message}" if message else type(root).__name__
    if any(marker in message for marker in _NO_CUDA):
        return f"an unanswered CUDA query ({said})"
    replaced = _replaced(root, message)
    if replaced is not None:
        return f"an object the tier replaced ({said}: {replaced})"
    where = _innermost(root) or ""
    if isinstance(root, AssertionError) and "torch" + os.sep + "cuda" not in where:
        return None
    for folder in _tier_folders():
        if where == folder or where.startswith(folder + os.sep):
            shown = where.split("site-packages" + os.sep)[-1] if folder not in HOOKS else "kvtasks hooks"
            return f"{said} (in {shown})"
    if any(marker in message for marker in _INTERPRETER_VALUE):
        return f"an interpreter value lacks what compiled code has ({said})"
    return None


def record_crash(test, exc) -> None:
    cause = crash_cause(exc)
    if cause is not None:
        STATE.crashes.append({"test": test, "cause": cause})
