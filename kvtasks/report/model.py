"""What a report is made of: its stage objects, findings, test selection and the report's own
fields. Data only: composing and judging are kvtasks.report.compose and kvtasks.report.judge."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from kvtasks import __version__, rules
from kvtasks.records import ARTIFACT_FIELDS, CpuTier, Repo, RuntimeIdentity, Selection, Survivor, TargetEnvironment

# the report's shape for its consumers; bumped when a field is removed or changes meaning, together
# with its snapshot in tests/report_schemas/ (1: the first versioned report, with schema_version,
# kvtasks_version and every finding's rule; 2: containment, isolation.processes, and died on the
# repo tests' and grid's stage objects)
# a semantic version: MAJOR when a field is removed or its meaning changes, MINOR when one is added,
# PATCH when only descriptions change (docs/reference.md keeps the changelog)
SCHEMA_VERSION = "4.4.0"
SCHEMA_ID = f"urn:kvtasks:validation-report:{SCHEMA_VERSION}"
Verdict = Literal["PASS", "NEEDS_WORK", "BLOCK", "INCONCLUSIVE"]
Status = Literal["pass", "fail", "skip", "info"]
Severity = Literal["blocker", "should-fix", "note"]
EXIT_CODES = {"PASS": 0, "NEEDS_WORK": 1, "BLOCK": 1, "INCONCLUSIVE": 2}


# the report fields that differ between two validations of one PR on one base whatever the store
# held before: when it ran, which stored evidence it reused, where its artifacts (logs, JUnit files,
# receipts) are kept, a receipt's digest (it covers the launch's nonce), a log's size (it carries
# pytest's timings) and a survivor's pid. Everything else is the same cold, warm, or warm from
# another PR's evidence (tests/test_cache_independence.py)
RUN_SPECIFIC = ARTIFACT_FIELDS | {"started_utc", "finished_utc", "duration_s", "reused_from", "log_bytes",
                                  "receipt_sha256", "pid"}


def comparable(report: Any) -> Any:
    """A report's JSON without its RUN_SPECIFIC fields, at any depth."""
    if isinstance(report, dict):
        return {key: comparable(value) for key, value in report.items() if key not in RUN_SPECIFIC}
    if isinstance(report, list):
        return [comparable(item) for item in report]
    return report


class ReusedEvidence(BaseModel):
    """Stored evidence a report reuses: its content key, when it was written and for which label."""

    evidence: str  # "<group>:<key>", the content key (base OID, runtime hash...; and the patch for head)
    written_utc: str
    written_by: str | None = None


class Stage(BaseModel):
    """One stage object in the report: a status, a reason, and the stage's own fields.

    A stage declares its fields by subclassing this as its payload (kvtasks.stages.StageSpec; extra
    fields forbidden there); a stage without a declared payload still carries its fields as extras.
    Only the fields a stage set are written, so a declared field with a default adds no key to a report."""

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


class Isolation(BaseModel):
    level: str
    container: bool
    network: str = ""
    sandbox: str = ""  # whether targets could write the evidence store (--sandbox: read-only mount)
    processes: str = ""  # what ends every process a launch started (kvtasks.system.containment)
    reason: str = ""
    target_environment: TargetEnvironment | None = None


class LaunchSurvivors(BaseModel):
    launch: str  # the run's label: base-repo, head-grid, ...
    survivors: list[Survivor]


class LogCut(BaseModel):
    launch: str
    written_bytes: int  # what the target wrote in all
    cut_bytes: int  # what was left out between its first and last parts


# the docstring is the published schema's description (tests/report_schemas/3.json), kept as published:
# its kvtasks.containment is the module kvtasks.system.containment now
class Containment(BaseModel):
    """What the launches left alive once their leaders had exited (every one ended before the tree
    was handed back; kvtasks.containment), and whose output passed the log ceiling."""

    survivors: list[LaunchSurvivors] = []
    logs_cut: list[LogCut] = []


# the report's own test_selection fields, always written (in this order), before what stages set
_SHOWN = ("target", "shape_env", "shape_arg", "shape_argnames", "grid", "expected_route", "shape_vars", "runner",
          "runner_reason", "runner_basis", "test_provenance", "test_provenance_reason")


class TestSelection(Selection):
    """The stages' Selection record as the report shows it: the report's own fields always, with
    their defaults where no stage set them, then every other field a stage set."""

    __test__ = False  # not a pytest test class
    model_config = ConfigDict(extra="allow")

    target: str
    shape_env: str = ""
    shape_arg: str = ""
    shape_argnames: str = ""
    grid: str = ""
    expected_route: str = ""
    shape_vars: str = ""
    runner: Literal["pytest", "script", "none", "unresolved"] = "unresolved"
    runner_reason: str = Field(default="runner selection did not run", min_length=1)
    runner_basis: str = ""
    test_provenance: Literal["pre-existing", "pr-added", "pr-modified", "unknown", "none"] = "unknown"
    test_provenance_reason: str = "provenance was not established"

    @model_serializer(mode="wrap")
    def _only_what_was_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        shown = {key: data[key] for key in _SHOWN}
        kept = self.model_fields_set | set(self.model_extra or {})
        return {**shown, **{key: value for key, value in data.items() if key in kept and key not in shown}}


class Retry(BaseModel):
    """An attempt of a fleet task that did not finish, so the (PR, arch) ran again."""

    node: str  # the node the attempt ran on
    task: str  # prepare, base or head
    why: str


class ArchRun(BaseModel):
    """One architecture's run of a PR in a fleet batch (kvtasks.fleet)."""

    verdict: Verdict
    node: str | None = None  # the node that ran it (host:Ray node id); None when no node of the arch ran it
    retried: list[Retry] = []  # the attempts lost before it, oldest first
    gpu_model: str | None = None
    runtime_hash: str | None = None
    stages: dict[str, str] = {}  # stage -> status
    findings: list[Finding] = []
    report: str | None = None  # this arch's own validation_report.json


class Report(BaseModel):
    """A validation report. `stages` is typed per pipeline by its Layout (kvtasks.report.layout),
    which makes the report model each pipeline writes and reads."""

    schema_version: str = SCHEMA_VERSION
    kvtasks_version: str = __version__  # the kvtasks that composed this report
    label: str
    started_utc: str
    finished_utc: str
    isolation: Isolation
    arch_coverage: dict[str, Literal["runtime", "compile-only", "not-covered"]] = {}
    arch_coverage_basis: dict[str, str] = {}
    # a fleet batch: the PR's run on each requested architecture (the verdict is the worst of them)
    arch_runs: dict[str, ArchRun] | None = None
    degraded_mode: Literal["NO_GPU"] | None = None
    # set when Triton kernels ran in the interpreter on the CPU: what ran them, and with what checks
    cpu_tier: CpuTier | None = None
    repo: Repo
    runtime_identity: RuntimeIdentity | None = None
    # set when this run first undid what a killed earlier run left in the worktree
    recovered_run: dict[str, Any] | None = None
    containment: Containment = Containment()
    # each launch's log by its label, published as a path relative to the reports folder
    # (`<label>/logs/<launch>.log`), where a copy of it travels with the report (a CI artifact)
    logs: dict[str, str] = {}
    test_selection: TestSelection
    stages: BaseModel
    findings: list[Finding]
    verdict: Verdict
    # what decided the verdict, in one line: the rules behind a BLOCK or NEEDS_WORK, what withheld a
    # PASS, or the required stages short of pass (the comment, summary and page lead with it)
    decided_by: str = ""
    process_exit_code: Literal[0, 1, 2]

    def stage_of(self, kind: type[Stage]) -> Stage | None:
        """The stage object whose payload is a `kind` (a stage reads its own by type, not by name)."""
        return next((stage for _, stage in self.stages if isinstance(stage, kind)), None)

    def required_stages(self) -> list[str]:
        """The stages this report's verdict needed passing: its stages model's fields without a default."""
        return [name for name, field in type(self.stages).model_fields.items() if field.is_required()]
