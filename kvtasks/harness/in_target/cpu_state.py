"""What the Triton CPU tier saw, shared by its modules: the one TierState of the process."""
from dataclasses import dataclass, field
from typing import Any

from .configuration import TierSettings

_BF16 = {"bf16", "bfloat16", "torch.bfloat16"}
BF16_REASON = "interpreter limitation: bf16 arithmetic is wrong in the Triton interpreter"

DEFAULT_CAPABILITY = "8.0"  # Ampere: the oldest architecture current Triton kernel repositories target


def is_bf16(value) -> bool:
    return str(value).strip().lower() in _BF16


def capability_of(settings: TierSettings) -> tuple[int, int]:
    major, _, minor = str(settings.device_capability or DEFAULT_CAPABILITY).partition(".")
    return int(major), int(minor or 0)


@dataclass
class TierState:
    settings: TierSettings = field(default_factory=TierSettings)
    launch: Any = None  # the kernel launch running (cpu_sanitizer's Launch)
    test: str | None = None
    launches: int = 0
    redirected: int = 0  # device arguments and .cuda() calls sent to the CPU
    # what the receipt lists, each entry as it is written there
    violations: list[dict] = field(default_factory=list)
    sparse: list[dict] = field(default_factory=list)
    autotune: dict[str, dict] = field(default_factory=dict)
    bf16_skipped: list[str] = field(default_factory=list)
    crashes: list[dict] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    cuda_queries: dict[str, int] = field(default_factory=dict)
    libdevice_forwarded: dict[str, int] = field(default_factory=dict)
    libdevice_without_equivalent: dict[str, int] = field(default_factory=dict)


STATE = TierState()
