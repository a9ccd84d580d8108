"""Stages: each stage module declares a StageSpec, whose entry point returns a StageResult; none
writes the report.

A spec says, checked when the pipeline is built (kvtasks.run.pipeline) and as the stage runs: the
stage's name, its payload model (the stage object the report shows; extra fields forbidden), the
records it reads (`ctx.get(GpuClaim)`, `ctx.get(Plan)`: by type, never by stage name) and the
typed records it sets in the run's facts, its entry point, and what PASS requires of it.

A result carries the stage object, the findings the stage established, the test_selection and facts
it learned (kvtasks.records) and the target runs it made. Results are stored as evidence by
phases.py and composed and judged by kvtasks.report alone; the pipeline table says which stage
runs when.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, TypeVar

from pydantic import BaseModel, SerializeAsAny, field_validator

from kvtasks import sources
from kvtasks.system import progress
from kvtasks.records import Facts, Selection, merged
from kvtasks.report.model import Finding, Report, Severity, Stage, Status
from kvtasks.request import Request
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages.launches import Asked, Launcher
from kvtasks.worktree import HeadView, Worktree

# the payload model of each stage, by name: a StageSpec registers it, so stored evidence of that
# stage is read back into it
PAYLOADS: dict[str, type[Stage]] = {}


class StageResult(BaseModel):
    name: str
    stage: SerializeAsAny[Stage] | None = None  # None for selection-only steps that publish no stage object
    findings: list[Finding] = []
    selection: Selection = Selection()
    facts: Facts = Facts()
    runs: list[TargetRun] = []
    # evidence of the base alone that this stage made (base's corrupted runs): stored under keys of
    # their own beside the group's, so every later PR against the same base reuses it
    base_evidence: list["StageResult"] = []

    @field_validator("stage", mode="before")
    @classmethod
    def _declared_payload(cls, value: Any, info) -> Any:
        model = PAYLOADS.get(info.data.get("name", ""))
        if model is not None and isinstance(value, dict):
            return model.model_validate(value)
        return value

    def finding(self, rule: str, severity: Severity, detail: str) -> "StageResult":
        self.findings.append(Finding(rule=rule, severity=severity, stage=self.name, detail=detail))
        return self


def result(name: str, status: Status, note: str = "", **fields: Any) -> StageResult:
    return StageResult(name=name, stage=PAYLOADS.get(name, Stage)(status=status, note=note, **fields))


# what PASS requires of a stage, read off the composed report (kvtasks.report.layout)
Requirement = Callable[[Report], list[str]]
T = TypeVar("T", bound=BaseModel)
# the typed records a stage may set in a run's facts (each one Facts field of that type)
FACT_RECORDS: dict[type[BaseModel], str] = {
    field.annotation.__args__[0]: name for name, field in Facts.model_fields.items()
    if isinstance(getattr(field.annotation, "__args__", (None,))[0], type)
    and issubclass(field.annotation.__args__[0], BaseModel)}


@dataclass(frozen=True)
class StageSpec:
    """What a stage module declares about itself."""

    name: str
    run: Callable[["Context"], StageResult | None]  # None: nothing to do for this PR
    payload: type[Stage] | None = None  # the stage object it reports; None: a step that shows none
    requires: tuple[type[BaseModel], ...] = ()  # the payloads and fact records it reads (an earlier row provides each)
    reads_if_present: tuple[type[BaseModel], ...] = ()  # what it reads when an earlier row made it (none may have)
    provides: tuple[type[BaseModel], ...] = ()  # the fact records it sets (FACT_RECORDS)
    sets: tuple[str, ...] = ()  # the other Facts and Selection fields it sets, first
    # fields an earlier row set that this stage answers again from its own runs; nothing else may set a
    # field twice but a row that amends the earlier stage (kvtasks.run.pipeline checks both)
    updates: tuple[str, ...] = ()
    passes: Requirement | None = None  # what PASS requires of it (None: nothing beyond passing)

    def __post_init__(self):
        if self.payload is not None:
            if self.payload.model_config.get("extra") != "forbid":
                raise TypeError(f"stage {self.name}: its payload {self.payload.__name__} must forbid extra fields")
            PAYLOADS.setdefault(self.name, self.payload)
        unknown = [kind.__name__ for kind in self.provides if kind not in FACT_RECORDS]
        if unknown:
            raise TypeError(f"stage {self.name} provides {unknown}, which are no fact records ({sorted(k.__name__ for k in FACT_RECORDS)})")
        fields = set(Facts.model_fields) | set(Selection.model_fields)
        unknown = [name for name in self.sets + self.updates if name not in fields]
        if unknown:
            raise TypeError(f"stage {self.name} sets {unknown}, which are no Facts or Selection fields")

    def written(self) -> set[str]:
        """The fields this stage sets first: its `sets` and the fields of the records it provides."""
        return set(self.sets) | {FACT_RECORDS[kind] for kind in self.provides}

    def owns(self, produced: StageResult) -> list[str]:
        """The Facts and Selection fields a result of this stage set that its spec does not declare."""
        declared = self.written() | set(self.updates)
        written = produced.facts.model_fields_set | produced.selection.model_fields_set
        return sorted(written - declared)


@dataclass
class Context:
    """What a stage may see: the request, the worktree, its private scratch folder (outside the
    evidence store; the graph keeps what is evidence), earlier results."""

    request: Request
    worktree: Worktree
    run_dir: Path
    earlier: dict[str, StageResult] = field(default_factory=dict)
    # where each phase keeps its private caches, so timing shares them with that phase's runs
    phase_roots: dict[str, Path] = field(default_factory=dict)
    # the workspace's secret the default grid's drawn dimensions come from (Store.grid_secret)
    grid_secret: str = ""
    # base's corrupted runs stored by other PRs against this base, by their stored name (sensitivity)
    base_evidence: dict[str, StageResult] = field(default_factory=dict)
    # the stage running now: what it reads must be among what its spec declares
    running: StageSpec | None = None
    # what runs the launches a stage asks for (kvtasks.run.executor; a recording one in unit tests)
    launcher: Launcher | None = None

    def launch(self, asked: Asked):
        """What `asked` gave, launched in the tree lent now (kvtasks.stages.launches.Launcher)."""
        if self.launcher is None:
            raise RuntimeError(f"nothing launches here: {type(asked).__name__} {getattr(asked, 'label', '')} was asked for")
        return self.launcher(self, asked)

    def result_of(self, payload: type[Stage]) -> StageResult | None:
        """The latest result whose stage object is a `payload` (the stage's runs and findings too)."""
        self._declared(payload)
        return next((stage_result for stage_result in reversed(self.earlier.values())
                     if isinstance(stage_result.stage, payload)), None)

    def get(self, kind: type[T]) -> T | None:
        """An earlier stage's payload, or a record of the run's facts, by its type."""
        if kind in FACT_RECORDS:
            self._declared(kind)
            return getattr(self.facts, FACT_RECORDS[kind])
        found = self.result_of(kind)
        return found.stage if found is not None else None

    def _declared(self, kind: type) -> None:
        if self.running is not None and kind not in self.running.requires + self.running.reads_if_present:
            raise LookupError(f"stage {self.running.name} reads {kind.__name__} without declaring it in its requires")

    @cached_property
    def head_view(self) -> HeadView | None:
        if not self.request.has_patch:
            return None
        return self.worktree.head_view(self.request.patch)

    def head_text(self, path: str) -> str | None:
        """A file as the merged head has it, from git objects only: the tree may be lent out."""
        if self.head_view is not None and path in self.head_view.changes:
            return self.head_view.read(path)
        return self.worktree.read_base(path)

    def head_texts(self, paths: Iterable[str]) -> dict[str, str | None]:
        """`head_text` of each path, the base ones read together."""
        paths = list(paths)
        changed = self.head_view.changes if self.head_view is not None else {}
        texts = self.worktree.read_base_many(path for path in paths if path not in changed)
        return {path: self.head_view.read(path) if path in changed else texts[path] for path in paths}

    def target_deleted(self) -> bool:
        """Whether the PR deletes the target: base's file is then what the base run and the base
        oracle run (held at base), and what the channel and the runner are read from."""
        return self.head_view is not None and self.head_view.changes.get(self.request.target_path) == "D"

    def target_text(self) -> str | None:
        """The target as the runs judge with it: head's, or base's where the PR deletes it."""
        if self.target_deleted():
            return self.worktree.read_base(self.request.target_path)
        return self.head_text(self.request.target_path)

    def target_sources(self) -> list[str]:
        """The target, the conftest.py files pytest would load for it, and checkout modules it imports
        (as candidate paths; a path that does not exist reads as None)."""
        path = PurePosixPath(self.request.target_path)
        paths = [str(path)] + [str(parent / "conftest.py") for parent in path.parents]
        for name in sources.imported_modules(sources.parse(self.target_text())):
            paths += sources.module_files(name)
        return list(dict.fromkeys(paths))

    def suite_sources(self) -> list[str]:
        """The target, its conftest.py files and the checkout modules it imports (head or base), also
        where pytest's rootdir insertion finds them beside the target and through relative imports."""
        paths = self.target_sources()
        target_path = self.request.target_path
        folder = PurePosixPath(target_path).parent
        for text in (self.head_text(target_path), self.worktree.read_base(target_path)):
            paths += sources.imported_files(sources.parse(text), folder)
        return list(dict.fromkeys(path.removeprefix("./") for path in paths))

    def route_files(self) -> set[str]:
        """The files that hold the expected routes' modules (the code under test, never a test helper)."""
        return {file for route in self.request.routes for file in route.files()}

    @property
    def facts(self) -> Facts:
        """What the earlier results learned, laid over each other in the order they ran."""
        return merged(Facts, (stage_result.facts for stage_result in self.earlier.values()))

    @property
    def selection(self) -> Selection:
        """The test_selection the earlier results made, laid over each other in the order they ran."""
        return merged(Selection, (stage_result.selection for stage_result in self.earlier.values()))

    def say(self, line: str) -> None:
        progress.say(line)

