"""Stages: each module's entry point returns a StageResult; none writes the report.

A result carries the stage object the report will show (its payload, declared per stage with
`@payload`), the findings the stage established, the test_selection and facts it learned (typed
records, kvtasks.stages.records), and the target runs it made. Results are stored as evidence by
phases.py and composed and judged by report.py alone; the pipeline table says which stage runs when.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SerializeAsAny, SerializerFunctionWrapHandler, field_validator, model_serializer

from kvtasks import rules, sources
from kvtasks.stages.records import Facts, Selection, merged
from kvtasks.request import Request
from kvtasks.harness.launch import TargetRun
from kvtasks.worktree import HeadView, Worktree

Status = Literal["pass", "fail", "skip", "info"]
Severity = Literal["blocker", "should-fix", "note"]


class ReusedEvidence(BaseModel):
    """Stored evidence a report reuses: its content key, when it was written and for which label."""

    evidence: str  # "<group>:<key>", the content key (base OID, runtime hash...; and the patch for head)
    written_utc: str
    written_by: str | None = None


class Stage(BaseModel):
    """One stage object in the report: a status, a reason, and the stage's own fields.

    A stage module declares its fields by subclassing this under `@payload(NAME)` (extra fields
    forbidden there); a stage without a declared payload still carries its fields as extras. Only
    the fields a stage set are written, so a declared field with a default adds no key to a report."""

    model_config = ConfigDict(extra="allow")

    status: Status
    note: str = ""
    # set when the report rests on this stage's stored evidence from an earlier validation, not this run's
    reused_from: ReusedEvidence | None = None

    @model_serializer(mode="wrap")
    def _only_what_was_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        kept = {"status", "note"} | self.model_fields_set | set(self.model_extra or {})
        return {key: value for key, value in data.items() if key in kept}


PAYLOADS: dict[str, type[Stage]] = {}


def payload(name: str):
    """Declare the payload model of stage `name`: `result(name, ...)` builds it and stored evidence
    of that stage is read back into it."""
    def register(model: type[Stage]) -> type[Stage]:
        PAYLOADS[name] = model
        return model
    return register


class Finding(BaseModel):
    # the stable id of what was found (kvtasks.rules): consumers match on it, never on the wording
    rule: str
    severity: Severity
    stage: str
    detail: str

    @field_validator("rule")
    @classmethod
    def _listed(cls, rule: str) -> str:
        return rules.known(rule)


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


@dataclass
class Context:
    """What a stage may see: the request, the worktree, its private scratch folder (outside the
    evidence store; the graph keeps what is evidence), earlier results."""

    request: Request
    worktree: Worktree
    run_dir: Path
    earlier: dict[str, StageResult] = field(default_factory=dict)
    quiet: bool = False
    # where each phase keeps its private caches, so timing shares them with that phase's runs
    phase_roots: dict[str, Path] = field(default_factory=dict)
    # the workspace's secret the default grid's drawn dimensions come from (Store.grid_secret)
    grid_secret: str = ""

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

    def target_sources(self) -> list[str]:
        """The target, the conftest.py files pytest would load for it, and checkout modules it imports
        (as candidate paths; a path that does not exist reads as None)."""
        path = PurePosixPath(self.request.target_path)
        paths = [str(path)] + [str(parent / "conftest.py") for parent in path.parents]
        for name in sources.imported_modules(sources.parse(self.head_text(str(path)))):
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
        files = set()
        for route in self.request.routes:
            stem = "/".join(route.partition(":")[0].split("."))
            for prefix in ("", "python/"):
                files |= {f"{prefix}{stem}.py", f"{prefix}{stem}/__init__.py"}
        return files

    @property
    def facts(self) -> Facts:
        """What the earlier results learned, laid over each other in the order they ran."""
        return merged(Facts, (stage_result.facts for stage_result in self.earlier.values()))

    @property
    def selection(self) -> Selection:
        """The test_selection the earlier results made, laid over each other in the order they ran."""
        return merged(Selection, (stage_result.selection for stage_result in self.earlier.values()))

    def say(self, line: str) -> None:
        if not self.quiet:
            print(f"[kvtasks] {line}", file=sys.stderr, flush=True)

