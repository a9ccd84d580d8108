"""The report: composed from stage results, judged, and written. The only writer of a report; it
runs nothing and reads no evidence itself, and its stage list is the pipeline table's.

Verdict rules: any blocker -> BLOCK; else any should-fix -> NEEDS_WORK; else a required stage
short of pass (or no runtime identity) -> INCONCLUSIVE; else PASS, and only if the PASS gate
holds too. Exit codes: PASS 0, BLOCK and NEEDS_WORK 1, INCONCLUSIVE 2.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, create_model

from kvtasks import __version__, comment, faults
from kvtasks.pipeline import REPORTED
from kvtasks.stages import PAYLOADS, Finding, Stage, StageResult
from kvtasks.stages.records import CpuTier, Facts, RuntimeIdentity, Selection, merged
from kvtasks.stages.run_facts import utc_now
from kvtasks.store import write_atomic
from kvtasks.harness.environment import TargetEnvironment
from kvtasks.harness.receipts import PRODUCER

# the report's shape for its consumers; bumped when a field is removed or changes meaning
# (1: the first versioned report, with schema_version, kvtasks_version and every finding's rule)
SCHEMA_VERSION = "1"
Verdict = Literal["PASS", "NEEDS_WORK", "BLOCK", "INCONCLUSIVE"]
EXIT_CODES = {"PASS": 0, "NEEDS_WORK": 1, "BLOCK": 1, "INCONCLUSIVE": 2}

def _stages_model() -> type[BaseModel]:
    """Every stage object of a report, in the order the pipeline runs them, each typed by the
    payload its module declares; the required ones (pipeline.Row.report) are exactly the fields
    without a default."""
    fields = {row.name: (SerializeAsAny[PAYLOADS.get(row.name, Stage)], ...) if row.report == "required"
              else (SerializeAsAny[PAYLOADS.get(row.name, Stage)] | None, None) for row in REPORTED}
    return create_model("Stages", __config__=ConfigDict(extra="allow"), **fields)


Stages = _stages_model()
# the stages whose runs the Triton CPU tier changes; each says so with evidence_tier
TIERED_STAGES = tuple(row.name for row in REPORTED if row.tiered)
REQUIRED_STAGES = [row.name for row in REPORTED if row.report == "required"]
PIPELINE_STAGES = [row.name for row in REPORTED]


class Repo(BaseModel):
    worktree: str
    base: str = Field(pattern=r"^[0-9a-f]{40}$")
    head: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    kind: Literal["aiter", "flydsl", "unknown"]
    patch_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # a PR given by refs: the repository or URL the caller named (`worktree` is then kvtasks' private
    # checkout of the base ref's tip), and the two refs as given; `base` and `head` are their OIDs
    source: str | None = None
    base_ref: str | None = None
    head_ref: str | None = None


class Isolation(BaseModel):
    level: str
    container: bool
    network: str = ""
    sandbox: str = ""  # whether targets could write the evidence store (--sandbox: read-only mount)
    reason: str = ""
    target_environment: TargetEnvironment | None = None


class TestSelection(BaseModel):
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
    test_selection: TestSelection
    stages: Stages
    findings: list[Finding]
    verdict: Verdict
    process_exit_code: Literal[0, 1, 2]


def json_schema() -> dict:
    schema = Report.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "validation_report"
    return schema


def compose(label: str, results: list[StageResult], finished_utc: str | None = None) -> Report:
    """Build and judge the report from stored stage results; runs nothing, reads nothing else."""
    stages: dict[str, Stage] = {}
    findings: list[Finding] = []
    latest = {stage_result.name: stage_result for stage_result in results}  # a later result replaces
    for stage_result in latest.values():
        if stage_result.stage is not None:
            stages[stage_result.name] = stage_result.stage
        findings.extend(stage_result.findings)
    facts = merged(Facts, (stage_result.facts for stage_result in latest.values()))
    selection = merged(Selection, (stage_result.selection for stage_result in latest.values())).model_dump(mode="json")

    for name in PIPELINE_STAGES:
        if name in stages:
            continue
        payload = PAYLOADS.get(name, Stage)
        if facts.halt:
            stages[name] = payload(status="skip", note=f"not run: {facts.halt}")
        else:
            stages[name] = payload(status="skip", note="validator internal error: stage did not record a result")
            findings.append(Finding(rule="report.stage-missing", severity="note", stage=name,
                                    detail="stage result was missing; validation is inconclusive"))

    tier = facts.cpu_tier
    if tier:
        for name in TIERED_STAGES:
            if name in stages and stages[name].evidence_tier is None:
                stages[name].evidence_tier = tier.evidence
    verdict = judge(stages, findings, facts.runtime_identity)
    coverage, coverage_basis = ({}, {}) if tier else arch_coverage(stages)
    report = Report(
        label=label,
        started_utc=facts.started_utc or utc_now(),
        finished_utc=finished_utc or utc_now(),
        isolation=facts.isolation or {"level": "git-worktree + private caches", "container": False},
        arch_coverage=coverage,
        arch_coverage_basis=coverage_basis,
        degraded_mode=facts.degraded_mode,
        cpu_tier=tier,
        repo=facts.repo.model_dump(),
        runtime_identity=facts.runtime_identity,
        recovered_run=facts.recovered_run,
        test_selection=TestSelection(target=selection.pop("target", ""), **selection),
        stages=Stages(**stages),
        findings=findings,
        verdict=verdict,
        process_exit_code=EXIT_CODES[verdict],
    )
    if verdict == "PASS":
        violations = pass_gate(report)
        if violations:
            report.findings.append(Finding(rule="report.pass-withheld", severity="note", stage="report",
                                           detail="PASS withheld: " + "; ".join(violations)))
            report.verdict, report.process_exit_code = "INCONCLUSIVE", 2
    return report


def arch_coverage(stages: dict[str, Stage]) -> tuple[dict[str, str], dict[str, str]]:
    """Credit the claimed architecture with runtime coverage from a run that really executed work.

    Only a passing gpu_claim credits anything. A run credits only when it executed at least one
    test; a script also needs output, and observed_work 0 (a route watched for and never reached)
    credits nothing. Coverage is about exercise, not success: a failing run that executed counts.
    """
    claim = stages.get("gpu_claim")
    arch = claim.arch if claim is not None and claim.status == "pass" else None
    if not arch or arch == "unknown":
        return {}, {}
    for name in ("correctness_grid", "correctness_repo_tests"):
        stage = stages.get(name)
        stats = stage.stats if stage is not None else None
        if stats is None:
            continue
        observed = stats.observed_work
        if not stats.executed or observed == 0:  # 0: a route was watched for and never reached
            continue
        if stats.basis.startswith("script"):
            if not stage.log_bytes:
                continue
            outcome = "script-observed-work" if stage.exit == 0 else "script-nonzero-with-output"
            return {arch: "runtime"}, {arch: f"{outcome}:{observed} ({name}; observed_work from the run's receipt)"}
        return {arch: "runtime"}, {arch: f"pytest-junit-executed:{stats.executed} observed_work:{observed} ({name})"}
    return {}, {}


def judge(stages: dict[str, Stage], findings: list[Finding], runtime_identity: RuntimeIdentity | None) -> Verdict:
    severities = {finding.severity for finding in findings}
    if "blocker" in severities:
        return "BLOCK"
    if "should-fix" in severities:
        return "NEEDS_WORK"
    complete = bool(runtime_identity and runtime_identity.module_path) and all(
        stages[name].status == "pass" for name in REQUIRED_STAGES)
    return "PASS" if complete else "INCONCLUSIVE"


def pass_gate(report: Report) -> list[str]:
    """What a PASS must additionally carry; each missing piece is named."""
    missing = []
    stages, selection = report.stages, report.test_selection
    if not report.arch_coverage:
        missing.append("no architecture was credited with runtime coverage")
    identity = report.runtime_identity.model_fields_set if report.runtime_identity else set()
    for key in ("module", "module_path", "python_executable", "python_version", "native_artifacts"):
        if key not in identity:
            missing.append(f"runtime_identity.{key} missing")
    if not selection.expected_route or not selection.shape_vars:
        missing.append("--expected-route and --shape-vars are required for PASS")
    if selection.runner not in ("pytest", "script"):
        missing.append("no runner")
    claim = stages.gpu_claim
    index = claim.hip_index if claim.hip_index is not None else claim.cuda_index
    if index is None or not claim.arch or not claim.bdf:
        missing.append("gpu_claim lacks a device index, arch or bdf")
    repo_tests = stages.correctness_repo_tests
    stats = repo_tests.stats
    if repo_tests.exit != 0 or stats is None or stats.failures or stats.errors or not stats.executed:
        missing.append("correctness_repo_tests is not a passing run with executed tests")
    sensitivity = stages.sensitivity
    modes = sensitivity.modes or {}
    if sensitivity.status != "pass" or not modes or not all(
            mode.get("status") == "pass" and mode.get("corrupted_calls") for mode in modes.values()):
        missing.append("sensitivity: the suite was not shown to fail with the route's output corrupted")
    if stages.test_policy.reference_from_pr:
        missing.append("the PR adds the target and takes its expected values from code it supplies: "
                       + "; ".join(stages.test_policy.reference_from_pr[:3]))
    changed = stages.test_policy.oracle_required
    oracle = stages.correctness_base_oracle
    if changed and (oracle is None or oracle.status != "pass"):
        missing.append(f"the PR changes the test side ({', '.join(changed[:5])}) and head's code was not shown to pass "
                       f"base's ({oracle.note if oracle is not None else 'the base oracle did not run'})")
    receipt = stages.execution_receipt
    if receipt.producer != PRODUCER or not receipt.route or not receipt.kernel_symbols \
            or not receipt.executed_shapes or not receipt.receipt_sha256:
        missing.append("execution_receipt lacks producer, route, kernel_symbols, executed_shapes or receipt_sha256")
    return missing


def summary_markdown(report: Report) -> str:
    lines = [
        f"## kvtasks validation: **{report.verdict}** (exit {report.process_exit_code})",
        "",
        f"- label: `{report.label}`",
        f"- base: `{report.repo.base}`",
        f"- head: `{report.repo.head or 'null (not matched to a remote PR head)'}`",
        f"- patch sha256: `{report.repo.patch_sha256 or 'none'}`",
        f"- target: `{report.test_selection.target}` (runner: {report.test_selection.runner})",
        f"- degraded mode: {report.degraded_mode or 'none'}",
        f"- evidence tier: {tier_line(report.cpu_tier.model_dump() if report.cpu_tier else None)}",
        "",
        "| stage | status | reason |",
        "| --- | --- | --- |",
    ]
    for name, stage in report.stages:
        if stage is not None:
            lines.append(f"| {name} | {stage.status} | {_cell(stage.note)} |")
    perf = report.stages.perf.model_dump() if report.stages.perf is not None else {}
    if perf.get("rows"):
        lines += ["", f"### Perf: head/base per row (> 1 is better for head; {perf.get('repeats', {}).get('order', '')})",
                  *(["", f"Statistics: {perf['statistics']}."] if perf.get("statistics") else []),
                  "", "| column | row | base rounds | head rounds | head/base (best of n) | round-pair range | "
                      "base spread |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in perf["rows"]:
            lines.append(f"| {_cell(row['column'])} | {_cell(row['row'])} | {_rounds(row['base'])} | "
                         f"{_rounds(row['head'])} | {row['ratio']:.3f} | {_span(row.get('round_range'))} | "
                         f"{row['base_spread']:.3f} |")
        lines += ["", "| column | median head/base | bounds on the median | confidence of each bound | noise floor | "
                      "rows | eligible |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, column in perf.get("columns", {}).items():
            confidence = column.get("interval_confidence")
            lines.append(f"| {_cell(name)} | {column['median_ratio']:.3f} | {_span(column['interval'])} | "
                         f"{'-' if confidence is None else f'{confidence:.1%}'} | {column['noise_floor']:.3f} | "
                         f"{column['samples']} | {column['eligible']} |")
    lines += ["", "### Findings", ""]
    if report.findings:
        lines += [f"- **{f.severity}** ({f.stage}): {_cell(f.detail)}" for f in report.findings]
    else:
        lines.append("- none")
    return "\n".join(lines) + "\n"


def tier_line(tier: dict | None) -> str:
    if not tier:
        return "none (targets ran on their own runtime, not the Triton interpreter)"
    return (f"{tier['evidence']}: triton {tier['triton']}, torch {tier['torch']}, sanitizer {tier['sanitizer']}; "
            "no architecture is credited and PASS needs a claimed GPU")


def _span(bounds: list[float] | None) -> str:
    """low-high; evidence stored before a field existed shows a dash, never a made-up number."""
    return f"{bounds[0]:.3f}-{bounds[1]:.3f}" if bounds else "-"


def _rounds(values: list[float]) -> str:
    return ", ".join(f"{value:g}" for value in values)


def perf_chart(report: Report, path: Path) -> bool:
    """head/base per row with its side's spread and the noise band, as a PNG (matplotlib extra)."""
    perf = report.stages.perf.model_dump() if report.stages.perf is not None else {}
    if not perf.get("rows"):
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return False
    rows = perf["rows"]
    figure, axes = pyplot.subplots(figsize=(max(6, len(rows) * 0.5), 4))
    ratios = [row["ratio"] for row in rows]
    spreads = [row["base_spread"] for row in rows]
    axes.errorbar(range(len(rows)), ratios, yerr=spreads, fmt="o", capsize=3, label="head/base (base spread)")
    noise = perf.get("noise_floor") or 0.0
    axes.axhspan(1 - noise, 1 + noise, alpha=0.2, label="noise band")
    axes.axhline(perf.get("threshold", 0.95), linestyle="--", label="PERF_THRESHOLD")
    axes.set_xticks(range(len(rows)), [f"{row['column']}: {row['row']}" for row in rows], rotation=60, ha="right",
                    fontsize=7)
    axes.set_ylabel("head/base (> 1: head better)")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return True


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _beside(path: Path, name: str) -> Path:
    """summary.md or comment.md beside a report; beside an --out of another name, <stem>.<name>."""
    return path.with_name(name) if path.name == "validation_report.json" else path.with_name(f"{path.stem}.{name}")


def publish(report: Report, destinations: list[Path]) -> None:
    """Write validation_report.json (+ summary.md and comment.md beside it) to each destination
    path."""
    body = json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"
    summary = summary_markdown(report)
    posted = comment.markdown(report.model_dump(mode="json"), comment.page_url(report.label))
    for path in destinations:
        faults.point("report")
        write_atomic(path, body.encode())
        write_atomic(_beside(path, "summary.md"), summary.encode())
        write_atomic(_beside(path, comment.COMMENT), posted.encode())
        perf_chart(report, path.with_name("perf.png"))
