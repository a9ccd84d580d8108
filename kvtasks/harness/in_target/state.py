"""What one run saw, as it goes: the one Run of this process, `current`, once a configuration was read."""
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from .capture import Capture
from .configuration import Configuration
from .receipt import Judgment, RouteOutput


@dataclass
class PartCounts:
    """Route calls and shapes of one part of a merged session."""
    calls: dict[str, int] = field(default_factory=dict)
    shapes: list[str] = field(default_factory=list)


@dataclass
class SessionNotes:
    """What a merged session noted that can make it unusable as a stand-in for its parts."""
    merged_marks: int = 0
    maxfail_dropped: int | None = None
    session_stopped: str | None = None
    exit_rewritten: str | None = None
    session_hooks: list[str] | None = None
    report_hooks: list[str] | None = None
    xdist: str | None = None


@dataclass
class PytestLoaded:
    config_file: str | None
    rootdir: str | None
    plugins: list[str]
    plugin_distributions: list[str]


@dataclass(frozen=True)
class Corruption:
    """The closures of a launch's corruption (corruption.make): the settings live only in them."""
    after_call: Callable[[Any, tuple, dict, Any], Any]
    outcome: Callable[[Any], None]
    receipt: Callable[[], Any]
    failure: Callable[[str, Any], None]
    judged: Callable[[tuple, dict, Any], None]


@dataclass(repr=False)
class Run:
    configuration: Configuration
    corruption: Corruption
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: dict[str, int] = field(default_factory=dict)
    routed_tests: set[str] = field(default_factory=set)  # the pytest items that called a route
    shapes: list[str] = field(default_factory=list)
    parts: dict[str, PartCounts] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)
    outputs: dict[tuple[str, str], RouteOutput] = field(default_factory=dict)
    written_arguments: dict[str, list[str]] = field(default_factory=dict)
    judges_replaced: set[str] = field(default_factory=set)
    # the judging calls of the checkout's code (judges.py), and per (test, caller) how many it made
    judgments: list[Judgment] = field(default_factory=list)
    judging_ordinals: dict[tuple[str, str], int] = field(default_factory=dict)
    judgments_dropped: int = 0
    # each module's first import with what was running then ("route-import", "route-call", ""), the
    # phases now running, and the files a route's import or call opened
    imports: list[tuple[str, str]] = field(default_factory=list)
    during: list[str] = field(default_factory=list)
    opened: list[tuple[str, str]] = field(default_factory=list)
    test: str = ""  # the pytest item running
    # the grid: the marks the plugin made (mark, its leading repository cells), per test function the
    # argname its items index that mark by, and per node id the grid row it runs / its part
    replaced: list[tuple[Any, int]] = field(default_factory=list)
    grid_functions: dict[str, tuple[str, int]] = field(default_factory=dict)
    cells: dict[str, int] = field(default_factory=dict)
    added: dict[str, str] = field(default_factory=dict)
    added_teardown_failed: list[str] = field(default_factory=list)
    session: SessionNotes = field(default_factory=SessionNotes)
    pytest_loaded: PytestLoaded | None = None
    tier: Any = None  # the Triton CPU tier's module, once installed
    capture: Capture | None = None  # the route calls kept for the replay: the configuration's
    installed: bool = False
    written: bool = False
    exit: int | None = None
    routed_test: str | None = None  # the item whose route call the progress file last noted
    # the impact map's probe (impact.py): per item the routes it called, and its parametrize values
    impact_calls: dict[str, dict[str, dict]] = field(default_factory=dict)
    impact_params: dict[str, dict] = field(default_factory=dict)
    route_modules: frozenset | None = None  # the modules of the routes, once asked
    impact_root: str = ""  # pytest's rootdir below the checkout ("python/"), which the map's node ids get

    def __post_init__(self):
        if self.capture is None:
            self.capture = Capture(self.configuration.captures)

    def progress(self, line: str) -> None:
        """Note, as it happens, that an item started or reached the route: the receipt is written at
        the end, so a process that dies (a signal, an abort, an exit mid-session) leaves only this
        to say it reached the route and in which item. Opened for each line, so no descriptor of it
        stays open for the process to find."""
        if not self.configuration.receipt:
            return
        fd = os.open(self.configuration.receipt + ".progress", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, (line.replace("\n", " ") + "\n").encode(errors="replace"))
        finally:
            os.close(fd)

    def part(self) -> PartCounts | None:
        """What a merged session's receipt counts this call under (None outside a merged session): the
        part of the item that runs, "repo" for the repository's own items and calls outside any test."""
        if not self.configuration.merged:
            return None
        return self.parts.setdefault(self.added.get(self.test, "repo"), PartCounts())


current: Run | None = None
