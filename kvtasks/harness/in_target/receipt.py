"""The execution receipt: what the in-target package writes and the validator reads back, one
definition for both (kvtasks.harness.receipts validates a receipt against it when it reads one)."""
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SCHEMA_VERSION = 1
MECHANISM = "import-hook wrapper"


@dataclass
class RouteOutput:
    """Whether a route's floating outputs held NaN or Inf, in one cell (a pytest test, else a shape)."""
    route: str
    cell: str
    checked: int = 0
    unchecked: int = 0
    nonfinite: list[str] = field(default_factory=list)  # "nan in return[0]"


@dataclass
class LoadedFile:
    path: str  # relative to the checkout
    during: str  # "route-import", "route-call" or "" (anything else)


@dataclass
class Loaded:
    """The checkout's modules the run imported and files a route opened; on pytest, its configuration."""
    modules: list[LoadedFile] = field(default_factory=list)
    opened: list[LoadedFile] = field(default_factory=list)
    config_file: str | None = None
    rootdir: str | None = None
    plugins: list[str] | None = None
    plugin_distributions: list[str] | None = None


@dataclass
class Judgment:
    """One judging call of the checkout's code: where, and the tolerance it really received."""
    test: str  # the pytest item it ran in ("" outside any)
    caller: str  # "path:line" of the checkout's code that called it
    ordinal: int  # its place among that caller's calls in that test
    function: str  # "numpy.testing.assert_allclose"
    rtol: float | None = None
    atol: float | None = None
    equal_nan: bool | None = None
    check_dtype: bool | None = None
    dtypes: list[str] | None = None  # what assert_close's defaults were read by


@dataclass
class PartReceipt:
    """One part of a merged session ("repo", "grid", "proof") as a receipt of its own would say it."""
    route: str
    kernel_symbols: list[str]
    route_calls: dict[str, int]
    executed_shapes: list[str]


@dataclass
class OutcomeCounts:
    tests_failed: list[str]  # failed on a comparison that read a corrupted value (reads.py)
    tests_failed_count: int
    tests_green: list[str]
    tests_green_count: int
    tests_failed_elsewhere: list[str] = field(default_factory=list)  # failed on anything else
    tests_failed_elsewhere_count: int = 0


@dataclass
class SensitivityPart(OutcomeCounts):
    corrupted_calls: int = 0


@dataclass
class SensitivityReceipt(OutcomeCounts):
    """What a corrupted run corrupted, and which tests that saw it went red."""
    mode: str = "tail"
    error: float | None = None
    output: str = ""
    corrupted_calls: int = 0
    max_relative_error: float | None = None
    nan_elements: int = 0
    not_corrupted: dict[str, int] = field(default_factory=dict)
    outputs_corrupted: dict[str, int] = field(default_factory=dict)
    outputs_left_alone: dict[str, str] = field(default_factory=dict)
    tests_corrupted: int = 0
    parts: dict[str, SensitivityPart] = field(default_factory=dict)
    corrupted_outside_tests: int = 0


@dataclass
class Receipt:
    nonce: str
    route: str  # the routes called, comma-joined
    kernel_symbols: list[str]
    route_calls: dict[str, int]
    unresolved_routes: list[str]
    executed_shapes: list[str]
    shape_vars: list[str]
    exit_status: int | None
    route_outputs: list[RouteOutput]  # empty in a corrupted run: it corrupts outputs on purpose
    loaded: Loaded
    judges_replaced: list[str]
    written_arguments: dict[str, list[str]]
    schema_version: int = SCHEMA_VERSION
    mechanism: str = MECHANISM
    # with a grid: node id -> the grid row it ran
    cells: dict[str, int] | None = None
    # a merged session: its parts, and what could make it unusable as a stand-in for them
    parts: dict[str, PartReceipt] | None = None
    merged_marks: int | None = None
    added: dict[str, str] | None = None  # node id -> "grid" or "proof"
    maxfail_dropped: int | None = None
    session_stopped: str | None = None
    exit_rewritten: str | None = None
    session_hooks: list[str] | None = None
    report_hooks: list[str] | None = None
    xdist: str | None = None
    added_teardown_failed: list[str] | None = None
    cpu_tier: dict[str, Any] | None = None  # the Triton CPU tier's report
    sensitivity: SensitivityReceipt | None = None  # a corrupted run's
    judgments: list[Judgment] = field(default_factory=list)  # the first RECORDED judging calls
    judgments_dropped: int = 0  # judging calls beyond those
    captured_calls: int = 0  # route calls kept for the replay (capture.py)
    not_captured: dict[str, int] = field(default_factory=dict)  # calls sampled and not kept, by why
    routed_tests: list[str] = field(default_factory=list)  # the pytest items that called a route


def to_json(receipt: Receipt) -> dict:
    """The receipt as the JSON object it is written as: fields that do not apply left out (a run
    without a grid has no cells)."""
    optional = {item.name for kind in (Receipt, Loaded) for item in fields(kind) if item.default is None}
    written = asdict(receipt)
    written["loaded"] = {key: value for key, value in written["loaded"].items()
                         if not (value is None and key in optional)}
    return {key: value for key, value in written.items() if not (value is None and key in optional)}
