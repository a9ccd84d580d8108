"""What the Triton CPU tier saw, shared by its modules: the one TierState of the process."""
import weakref
from dataclasses import dataclass, field
from typing import Any

from .configuration import TierSettings

_BF16 = {"bf16", "bfloat16", "torch.bfloat16"}
BF16_REASON = "interpreter limitation: bf16 arithmetic is wrong in the Triton interpreter"

DEFAULT_CAPABILITY = "8.0"  # Ampere: the oldest architecture current Triton kernel repositories target


# The Triton releases the hooks are written and tested against, first and last minor release included:
# they reach into triton.runtime.interpreter, jit and autotuner, whose internals change between minor
# releases (each hook says where it detects a difference); any other release is refused, never guessed at.
TRITON_RELEASES = ((3, 3), (3, 9))


def release(version: str | None) -> tuple[int, ...]:
    """'3.5.0+git1234' -> (3, 5, 0); () where nothing numeric leads."""
    parts = []
    for part in (version or "").split("+")[0].split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def unsupported_triton(version: str | None) -> str | None:
    """Why the tier's hooks cannot run on this triton release, or None."""
    (first, last) = TRITON_RELEASES
    if first <= release(version)[:2] <= last:
        return None
    known = "{}.{} to {}.{}".format(*first, *last)
    return (f"triton {version} is outside the releases the CPU tier's hooks are built for ({known}): they patch "
            f"the interpreter's internals, which change between minor releases; install a triton from {known}")


def is_bf16(value) -> bool:
    return str(value).strip().lower() in _BF16


def capability_of(settings: TierSettings) -> tuple[int, int]:
    major, _, minor = str(settings.device_capability or DEFAULT_CAPABILITY).partition(".")
    return int(major), int(minor or 0)


# the CUDA release torch.version.cuda answers: a CPU build says None, which capability checks read as
# "no CUDA" (an `is_sm_at_least_90()` is then False whatever the capability says)
ANSWERED_CUDA = "12.8"


def device_name_of(settings: TierSettings) -> str:
    """What torch.cuda.get_device_name() answers: the name given, else one naming the vendor whose
    compute capabilities --cpu-device-capability speaks of (libraries pick their vendor backend by it)."""
    if settings.device_name:
        return settings.device_name
    return "NVIDIA GPU (compute capability {}.{}, Triton interpreter on the CPU)".format(*capability_of(settings))


@dataclass
class TierState:
    settings: TierSettings = field(default_factory=TierSettings)
    launch: Any = None  # the kernel launch running (cpu_sanitizer's Launch)
    test: str | None = None
    launches: int = 0
    launches_by_test: dict[str, int] = field(default_factory=dict)  # kernel launches, by the test that ran them
    items_elsewhere: bool = False  # an xdist controller: the items, and their launches, are its workers'
    # the plain functions of the interpreter's kernels: what a `.fn` chain reaches past an InterpretedFunction
    kernel_functions: Any = field(default_factory=weakref.WeakSet)
    jit_fields: set[str] = field(default_factory=set)  # what a JITFunction's __init__ sets on a kernel
    redirected: int = 0  # device arguments and .cuda() calls sent to the CPU
    # what the receipt lists, each entry as it is written there
    violations: list[dict] = field(default_factory=list)
    sparse: list[dict] = field(default_factory=list)
    autotune: dict[str, dict] = field(default_factory=dict)
    bf16_skipped: list[str] = field(default_factory=list)
    crashes: list[dict] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    cuda_queries: dict[str, int] = field(default_factory=dict)
    cuda_registrations: dict[str, int] = field(default_factory=dict)  # CUDA-key torch.library impls made CPU's too
    cuda_registrations_kept: dict[str, str] = field(default_factory=dict)  # ... not, and why
    libdevice_forwarded: dict[str, int] = field(default_factory=dict)
    libdevice_without_equivalent: dict[str, int] = field(default_factory=dict)


STATE = TierState()
