"""What the Triton CPU tier could not do: an exception that ended a test or collection, told apart from
a test outcome (an assertion, a bounds violation, an error of the repository's own code)."""
import os
import sys

from .cpu_interpreter import CompilerRefusal
from .cpu_sanitizer import BoundsViolation
from .cpu_state import STATE

_HERE = os.path.dirname(os.path.abspath(__file__))
# the tier's own modules: a crash raised in one is the tier's
HOOKS = tuple(os.path.join(_HERE, name) for name in ("cpu_bf16.py", "cpu_crashes.py", "cpu_devices.py",
                                                      "cpu_dispatch.py", "cpu_interpreter.py", "cpu_lacks.py",
                                                      "cpu_sanitizer.py", "cpu_state.py", "cpu_tier.py"))


# -- tier crashes ----------------------------------------------------------------------------------

# said by torch or a test helper when the CUDA build it expects is absent, wherever it is raised
_NO_CUDA = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "no CUDA GPUs are available",
            "has no attribute '_cuda_", "CUDA driver", "libcuda",
            "Cannot access accelerator device when none is available")  # torch's C++ accelerator query
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


# what compiled code, or a CUDA build of torch, has where these hooks put their own objects: a missing
# attribute is the tier's lack only when that counterpart has it (a typo fails on a GPU too)
_COUNTERPARTS = {"InterpretedJITFunction": "triton.runtime.jit:JITFunction",
                 "LaunchedKernel": "triton.compiler.compiler:CompiledKernel", "_Stream": "torch.cuda:Stream",
                 "_Event": "torch.cuda:Event", "_DeviceContext": "torch.cuda:device",
                 "LoopIndex": "triton.language:tensor", "InterpreterDriver": "triton.backends.nvidia.driver:CudaDriver"}
# what a compiled kernel and torch.cuda.get_device_properties() hold per object (set by their __init__)
_COMPILED_KERNEL_FIELDS = {"metadata", "packed_metadata", "src", "hash", "name", "asm", "kernel", "module",
                           "function", "n_regs", "n_spills", "n_max_threads", "launch_enter_hook",
                           "launch_exit_hook"}
_CUDA_PROPERTIES = {"name", "major", "minor", "total_memory", "multi_processor_count", "is_integrated",
                    "is_multi_gpu_board", "L2_cache_size", "max_threads_per_multi_processor", "regs_per_multiprocessor",
                    "warp_size", "gcnArchName", "uuid", "pci_bus_id", "pci_device_id", "pci_domain_id",
                    "shared_memory_per_block", "shared_memory_per_block_optin", "shared_memory_per_multiprocessor",
                    "clock_rate", "memory_clock_rate", "memory_bus_width"}


def _jit_function_has(name: str) -> bool:
    from triton.runtime.jit import JITFunction

    return name in STATE.jit_fields or hasattr(JITFunction, name)


def _counterpart_has(kind: type, name: str) -> bool:
    if kind.__name__ == "DeviceProperties":
        return name in _CUDA_PROPERTIES
    if kind.__name__ == "InterpretedJITFunction" and _jit_function_has(name):
        return True
    if kind.__name__ == "LaunchedKernel" and name in _COMPILED_KERNEL_FIELDS:
        return True
    module_name, _, class_name = _COUNTERPARTS.get(kind.__name__, ":").partition(":")
    try:
        counterpart = getattr(__import__(module_name, fromlist=[class_name]), class_name)
    except (ImportError, AttributeError, ValueError):
        return False
    return hasattr(counterpart, name)


def _replaced(root: BaseException) -> str | None:
    """What the tier put where the failing code expected another object, when `root` is an attribute
    missing from such an object: the interpreter's own (compiled code has the compiler's there), one
    of these hooks' whose counterpart has the attribute, or a kernel's plain function asked for what
    a JITFunction has. Decided by the object alone, wherever it is raised."""
    obj, name = getattr(root, "obj", None), getattr(root, "name", None)
    if not isinstance(root, AttributeError) or obj is None or not name:
        return None
    kind = type(obj)
    path = os.path.abspath(getattr(sys.modules.get(kind.__module__), "__file__", None) or "")
    if path.endswith(os.path.join("triton", "runtime", "interpreter.py")):
        return f"the interpreter's {kind.__name__}, where compiled code has the compiler's"
    if path in HOOKS and _counterpart_has(kind, name):
        return f"the tier's {kind.__name__}, which lacks what compiled code or a CUDA build has"
    try:
        kernel = obj in STATE.kernel_functions
    except TypeError:  # an unhashable object is no kernel's function
        kernel = False
    if kernel and _jit_function_has(name):
        return (f"the plain function of the interpreted kernel {getattr(obj, '__name__', '?')}, where compiled "
                "code has a JITFunction")
    return None


def crash_cause(exc: BaseException) -> str | None:
    """What the tier could not do when `exc` ended a test or collection, or None when `exc` is a test
    outcome (an assertion, a bounds violation, an error of the repository's own code)."""
    root = _root_cause(exc)
    if isinstance(root, (BoundsViolation, CompilerRefusal)) or isinstance(exc, BoundsViolation):
        return None
    message = str(root).strip().splitlines()[0][:300] if str(root).strip() else ""
    said = f"{type(root).__name__}: {message}" if message else type(root).__name__
    if any(marker in message for marker in _NO_CUDA):
        return f"an unanswered CUDA query ({said})"
    where = _innermost(root) or ""
    if isinstance(root, AssertionError) and "torch" + os.sep + "cuda" not in where:
        return None
    replaced = _replaced(root)
    if replaced is not None:
        return f"an object the tier replaced ({said}: {replaced})"
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
