"""A launch's configuration: written by the validator as JSON, read back here once."""
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class TierSettings:
    """The Triton CPU tier's settings: launches of more programs than `sparse_programs` run sparse
    (0: never); `device_capability` and `device_name` are what torch.cuda answers ("" for the default)."""
    sparse_programs: int = 0
    device_capability: str = ""
    device_name: str = ""

    @classmethod
    def of(cls, settings: dict) -> "TierSettings":
        """From the validator's settings, where either may be None (its default)."""
        return cls(sparse_programs=int(settings.get("sparse_programs") or 0),
                   device_capability=str(settings.get("device_capability") or ""),
                   device_name=str(settings.get("device_name") or ""))


@dataclass(frozen=True)
class Sensitivity:
    """What a corrupted run does to the routes' outputs: `mode` "tail" (the last element becomes
    2*x + 1, or x plus the relative `error`) or "nan"; with `output`, that argument in place."""
    mode: str = "tail"
    error: float | None = None
    output: str = ""


@dataclass(frozen=True)
class Configuration:
    routes: list[str] = field(default_factory=list)
    shape_vars: list[str] = field(default_factory=list)
    receipt: str = ""
    nonce: str = ""
    grid_argnames: list[str] = field(default_factory=list)
    grid_rows: list[list[str]] = field(default_factory=list)
    poisoned_row: list[str] = field(default_factory=list)
    cpu_tier: TierSettings | None = None
    captures: str = ""  # where the route calls this run captures go (capture.py)
    impact: str = ""  # where the impact map's probe writes which item called which route (impact.py)

    @property
    def merged(self) -> bool:
        """A merged session: the repository's tests, the grid's cells and the poisoned cell in one."""
        return bool(self.poisoned_row)


def encode(configuration: Configuration, sensitivity: Sensitivity | None) -> str:
    return json.dumps({"configuration": asdict(configuration),
                       "sensitivity": asdict(sensitivity) if sensitivity is not None else None})


def decode(text: str) -> tuple[Configuration, Sensitivity | None]:
    loaded = json.loads(text)
    fields = dict(loaded["configuration"])
    if fields.get("cpu_tier") is not None:
        fields["cpu_tier"] = TierSettings(**fields["cpu_tier"])
    sensitivity = loaded.get("sensitivity")
    return Configuration(**fields), Sensitivity(**sensitivity) if sensitivity is not None else None
