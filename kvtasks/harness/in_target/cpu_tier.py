"""The Triton CPU tier, inside the target process: interpreter hooks the package installs.

On a run on the CPU tier the package installs them (`install(settings)`) as it loads, before the
target starts, with TRITON_INTERPRET=1 already in the environment; its modules are cpu_sanitizer,
cpu_interpreter, cpu_lacks, cpu_bf16, cpu_devices, cpu_dispatch and cpu_crashes. It installs these:

- a bounds sanitizer: every active lane of every interpreted load, store and atomic must fall
  inside the allocation (the tensor argument's storage) it points into; otherwise it raises,
  naming the kernel, the argument, the element offset and the allocation's extent. Without it an
  unmasked tail reads or writes raw heap memory and the same test passes once and crashes next.
  A pointer carries the allocation it was derived from (pointer arithmetic, splat, broadcast and
  expand_dims pass it on), so an access that lands inside a neighbouring tensor is caught too, and a
  wrapped 32-bit offset is blamed on the right argument, whatever the heap layout of this run.
- a device redirect: device="cuda", .cuda(), .to("cuda") and the torch.cuda queries kernel
  repositories make at import or collection (capability, properties, name, memory, streams and
  events, the device context) behave as one CPU device, so tests written for a GPU run here. The
  compute capability has no honest CPU answer and decides which kernel paths a repository takes: it
  is the `device_capability` setting (--cpu-device-capability), and the report says it was assumed.
  So are the device's name (--cpu-device-name; by default one naming NVIDIA, whose capabilities
  those are), by which libraries pick their vendor backend, and torch.version.cuda, which a CPU
  build of torch leaves None and capability checks read as "no CUDA".
- kernels that are JIT functions: a kernel the interpreter wraps is also a triton JITFunction, so a
  library's wrapper that unwraps `.fn` until it reaches one stops at the kernel.
- what the interpreter lacks that compiled code has (cpu_lacks): pointer arguments that are no
  tensors, device functions whose module never names triton.language, unsigned all-ones values,
  `dtype.value` on a constexpr dtype; and bf16 arithmetic, constants, casts and reductions computed
  on values, not on the integers of their bits (cpu_bf16).
- CUDA registrations made the CPU's: an operator implementation registered with torch.library for
  the CUDA (or AutogradCUDA) key is registered for the CPU key too, for as long as the library that
  made it lives, so the tier's tensors reach the library's kernel instead of torch's CPU kernel.
- libdevice on the interpreter: `triton.language.extra.libdevice` functions are stubs that return
  None there, and the CUDA/HIP libdevice modules' extern calls raise; both are forwarded to the
  interpreter's own math (the `tl.math` equivalent, or the numpy function the interpreter would
  use). A function with no equivalent raises naming itself, and the receipt lists it.
- autotune on the interpreter: every config runs once per kernel and autotune key (Triton's own
  cache decides when a key is new); configs that differ only in num_warps, num_stages or other
  launch options the interpreter ignores run once. There is no GPU timer, all tie, the first config
  is kept; the sanitizer checks each. The receipt records the sweeps and what they cost. The disk
  cache of timings (`cache_results=True`) is never read or written: the interpreter's kernels are
  not JIT functions, so Triton cannot key it, and interpreter timings are worth nothing.
- scalars as the compiler sees them: the interpreter runs `for i in range(...)` (and tl.range,
  tl.static_range) over plain Python ints, where compiled code has int32 scalars; a loop index there
  is an int that also answers `.to(dtype)`, and so is arithmetic on it, so `(i * BLOCK).to(tl.int64)`
  runs as it compiles. `and`, `or` and `not` on tensors act lane by lane (logical_and, logical_or,
  logical not), as compiled code has them: Python's operators ask the interpreter for a tensor's
  truth, which is True for a tensor of several lanes, so `rows < M and cols < N` was `cols < N`
  alone and `not t` was False. A float kernel argument (not constexpr) is an fp32 scalar, as
  compiled code has it, where the interpreter passes a Python float (`eps.to(tl.float32)`).
- a sparse grid: a launch of more than `sparse_programs` programs runs only the first and last
  program of each axis, so a > 2^31-element shape runs in seconds on tensors whose untouched pages
  are never committed. A test that ran a sparse launch claims only what the sanitizer checked: if it
  does not raise, the test is reported skipped.

The hooks are built for Triton 3.3 to 3.9 (cpu_state.TRITON_RELEASES); `install` refuses any other
release with one message, and where the interpreter's internals differ inside that range the hooks
detect the difference (they say which release changed what).

Everything it saw goes into the run's receipt under "cpu_tier" through `report()`: the kernel
launches each test made (a test that launched none and called no route tested no kernel), and each
test or collection the tier itself could not run (`crashes`): an exception raised inside the
interpreter, Triton's runtime, these hooks or torch.cuda, an interpreter value that lacks what
compiled code has, a failure on an object the tier put where compiled code has another (wherever it
is raised), or a CUDA query a CPU build cannot answer. A bounds violation or an assertion is a test
outcome, never a crash.
"""
import os

from . import cpu_bf16, cpu_devices, cpu_dispatch, cpu_interpreter, cpu_lacks, cpu_sanitizer
from .configuration import TierSettings
from .cpu_crashes import crash_cause, record_crash
from .cpu_sanitizer import BoundsViolation
from .cpu_state import (BF16_REASON, DEFAULT_CAPABILITY, STATE, capability_of, device_name_of, is_bf16,
                        unsupported_triton)


class _Plugin:
    """bf16 cells become skips with the interpreter's reason; a sparse test that the sanitizer
    passed becomes a skip, since its outputs were never computed in full."""

    def __init__(self, pytest):
        self.pytest = pytest

    def pytest_collection_modifyitems(self, items):
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if any(is_bf16(value) for value in params.values()):
                item.add_marker(self.pytest.mark.skip(reason=BF16_REASON))
                STATE.bf16_skipped.append(item.nodeid)

    def pytest_runtest_setup(self, item):
        STATE.test = item.nodeid

    def pytest_runtest_logfinish(self, nodeid, location):
        STATE.test = None  # a launch outside any test's setup, call and teardown is no test's

    def pytest_exception_interact(self, node, call, report):
        # a failing test or collection (pytest calls it for neither skips nor xfails)
        if call.excinfo is not None:
            record_crash(getattr(node, "nodeid", None) or None, call.excinfo.value)


def _sparse_outcome(item, call):
    """A passing sparse test the sanitizer found nothing in becomes a skip."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or report.skipped:
        return
    sparse = any(entry["test"] == item.nodeid for entry in STATE.sparse)
    violated = any(entry["test"] == item.nodeid for entry in STATE.violations)
    if sparse and not violated:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           "Skipped: sparse grid: only the first and last programs ran; the bounds sanitizer "
                           "found nothing, and outputs were not computed in full")


def install(settings: TierSettings) -> None:
    STATE.settings = settings
    import numpy
    import torch
    import triton
    from triton.runtime import interpreter

    refused = unsupported_triton(triton.__version__)
    if refused:  # the validator refuses it before the run (stages.cpu_tier.known_bad); this is the target's own word
        raise RuntimeError(f"kvtasks CPU tier: {refused}")
    STATE.versions = {"triton": triton.__version__, "torch": torch.__version__, "numpy": numpy.__version__,
                      "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "")}
    cpu_interpreter.install_jit_functions(interpreter)
    cpu_sanitizer.install_sanitizer(interpreter)
    cpu_sanitizer.install_launches(interpreter)
    cpu_interpreter.install_libdevice(interpreter)
    cpu_sanitizer.install_autotune()
    cpu_interpreter.install_kernel_source(interpreter)
    cpu_interpreter.install_scalar_arguments(interpreter)
    cpu_lacks.install(interpreter)
    cpu_bf16.install(interpreter)
    cpu_devices.install_device_redirect()
    cpu_dispatch.install_cuda_registrations()


def register_pytest(config) -> None:
    import pytest

    plugin = _Plugin(pytest)
    # an xdist controller runs no item: its workers' launches never reach this process's receipt
    STATE.items_elsewhere = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    plugin.pytest_runtest_makereport = pytest.hookimpl(hookwrapper=True)(_sparse_outcome)
    config.pluginmanager.register(plugin)


def _torch_cuda() -> str | None:
    import torch

    return torch.version.cuda


def report() -> dict:
    return {"interpreter": "triton", "sanitizer": "on", "device_redirect": "cuda->cpu",
            "device_capability": "{}.{}".format(*capability_of(STATE.settings)),
            "device_name": device_name_of(STATE.settings), "torch_version_cuda": _torch_cuda(),
            "autotune": "every config once per kernel and autotune key, first kept",
            "sparse_programs": STATE.settings.sparse_programs,
            "versions": STATE.versions, "launches": STATE.launches, "launches_by_test": None if STATE.items_elsewhere else STATE.launches_by_test,
            "violations": STATE.violations,
            "sparse_launches": STATE.sparse, "autotuned": STATE.autotune,
            "bf16_skipped": STATE.bf16_skipped, "crashes": STATE.crashes, "redirected_device_calls": STATE.redirected,
            "cuda_queries": STATE.cuda_queries, "cuda_registrations": STATE.cuda_registrations,
            "cuda_registrations_kept": STATE.cuda_registrations_kept,
            "libdevice": {"forwarded": STATE.libdevice_forwarded,
                          "without_equivalent": STATE.libdevice_without_equivalent}}


__all__ = ["BF16_REASON", "DEFAULT_CAPABILITY", "BoundsViolation", "capability_of", "crash_cause", "install",
           "is_bf16", "record_crash", "register_pytest", "report"]
