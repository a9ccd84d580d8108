"""What `--format json` prints: one document a bot reads, typed, with its own JSON Schema
(`validate-kernel-pr schema --summary`) versioned with the report's."""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kvtasks import __version__
from kvtasks.report import SCHEMA_VERSION, comment
from kvtasks.report.model import Severity, Verdict

SUMMARY_ID = f"urn:kvtasks:machine-summary:{SCHEMA_VERSION}"


class FindingRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rule: str
    severity: Severity
    stage: str


class ReportRun(BaseModel):
    """One report the command wrote."""

    model_config = ConfigDict(extra="forbid")

    label: str
    verdict: Verdict
    exit: int
    decided_by: str
    report: str
    comment: str
    findings: list[FindingRule]


class MachineSummary(BaseModel):
    """The verdicts, exit codes, report paths and findings by rule of one command's reports."""

    model_config = ConfigDict(extra="forbid", title="machine_summary", json_schema_extra={"$id": SUMMARY_ID})

    command: str
    kvtasks_version: str
    schema_version: str
    exit: int
    reports: list[ReportRun]


def machine_summary(command: str, code: int, reports: list[Path]) -> dict:
    """One entry per report written, with its findings by rule."""
    runs = []
    for path in reports:
        if not path.is_file():
            continue
        body = json.loads(path.read_text())
        # a PR nothing of which was validated has a report of one line and no finding
        runs.append(ReportRun(label=body["label"], verdict=body["verdict"], exit=body["process_exit_code"],
                              decided_by=body.get("decided_by", body.get("not_validated", "")), report=str(path),
                              comment=str(path.with_name(comment.COMMENT)),
                              findings=[FindingRule(**{key: finding[key] for key in ("rule", "severity", "stage")})
                                        for finding in body.get("findings", [])]))
    return MachineSummary(command=command, kvtasks_version=__version__, schema_version=SCHEMA_VERSION, exit=code,
                          reports=runs).model_dump(mode="json")


def json_schema() -> dict:
    schema = MachineSummary.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema
