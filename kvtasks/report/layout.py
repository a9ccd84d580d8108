"""A pipeline's report layout: which stage objects a report has, in what order, typed by each
stage's payload; which of them the verdict needs passing; what each stage requires of a PASS.

The pipeline (kvtasks.run.pipeline) makes its one Layout from its rows; the report package knows no
stage by name, so a new stage is one module and one row there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from pydantic import BaseModel, ConfigDict, SerializeAsAny, create_model

from kvtasks.report.model import SCHEMA_ID, Report, Stage

# what PASS requires of a stage, read off the composed report: each missing piece named ([] when it holds)
Requirement = Callable[[Report], list[str]]
# which architecture the runs credit with runtime coverage, and why: (arch -> coverage, arch -> basis)
Coverage = Callable[[dict[str, Stage]], tuple[dict[str, str], dict[str, str]]]


@dataclass(frozen=True)
class Entry:
    """One stage object of a report."""

    name: str
    payload: type[Stage] = Stage
    required: bool = False  # the verdict needs it passing
    tiered: bool = False  # the Triton CPU tier changes its runs, so it says evidence_tier


@dataclass(frozen=True)
class Layout:
    entries: tuple[Entry, ...]
    # what PASS requires beyond every required stage passing, in the pipeline's order: (stage, requirement)
    requirements: tuple[tuple[str, Requirement], ...] = ()
    coverage: Coverage = field(default=lambda stages: ({}, {}))

    @cached_property
    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]

    @cached_property
    def required(self) -> list[str]:
        return [entry.name for entry in self.entries if entry.required]

    @cached_property
    def tiered(self) -> list[str]:
        return [entry.name for entry in self.entries if entry.tiered]

    def payload(self, name: str) -> type[Stage]:
        return next((entry.payload for entry in self.entries if entry.name == name), Stage)

    @cached_property
    def stages_model(self) -> type[BaseModel]:
        """Every stage object, in the order the pipeline runs them; the required ones are exactly the
        fields without a default."""
        fields = {entry.name: (SerializeAsAny[entry.payload], ...) if entry.required
                  else (SerializeAsAny[entry.payload] | None, None) for entry in self.entries}
        return create_model("Stages", __config__=ConfigDict(extra="allow"), **fields)

    @cached_property
    def model(self) -> type[Report]:
        """The report this layout writes and reads."""
        return create_model("Report", __base__=Report, stages=(self.stages_model, ...))

    def json_schema(self) -> dict:
        schema = self.model.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = SCHEMA_ID
        schema["title"] = "validation_report"
        return schema
