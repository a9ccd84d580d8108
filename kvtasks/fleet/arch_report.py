"""A PR's report over the architectures a fleet batch requested: each arch's run composed and judged
as a validation of its own (kvtasks.report), merged here into `arch_runs`, `arch_coverage` over every
arch, and the worst verdict. It runs nothing and reads no evidence (the driver hands it reports).
"""
from __future__ import annotations

from kvtasks import report
from kvtasks.report import comment, pages
from kvtasks.run import phases
from kvtasks.report import EXIT_CODES, ArchRun, Finding, Report, Retry
from kvtasks.evidence.workspace import Workspace

# the PR's verdict is the worst of its archs' in this order; PASS needs every requested arch
WORST_FIRST = ("BLOCK", "NEEDS_WORK", "INCONCLUSIVE", "PASS")


def arch_run(composed: Report, node: str | None, runtime_hash: str | None, report_path: str,
             retried: list[Retry] = ()) -> ArchRun:
    claim = composed.stages.gpu_claim
    return ArchRun(verdict=composed.verdict, node=node, retried=list(retried),
                   gpu_model=getattr(claim, "model", None), runtime_hash=runtime_hash, report=report_path,
                   stages={name: stage.status for name, stage in composed.stages if stage is not None},
                   findings=composed.findings)


def not_run(arch: str, why: str, retried: list[Retry] = ()) -> ArchRun:
    """An arch with no result: INCONCLUSIVE, named, never dropped and never the PR's fault."""
    return ArchRun(verdict="INCONCLUSIVE", retried=list(retried),
                   findings=[Finding(rule="fleet.arch-not-run", severity="note", stage="fleet", detail=f"{arch}: {why}")])


def merge(label: str, composed: dict[str, Report], runs: dict[str, ArchRun]) -> Report:
    """The PR's report: the worst arch's report as its body, every arch's run beside it, every
    finding named with its arch, and the worst verdict."""
    verdict = min((run.verdict for run in runs.values()), key=WORST_FIRST.index)
    worst_arch = min(runs, key=lambda arch: WORST_FIRST.index(runs[arch].verdict))
    body = composed.get(worst_arch) or next(iter(composed.values()), None)
    findings = [Finding(rule=f.rule, severity=f.severity, stage=f.stage, detail=f"[{arch}] {f.detail}")
                for arch, run in runs.items() for f in run.findings]
    runtimes = {arch: run.runtime_hash for arch, run in runs.items() if run.runtime_hash}
    if len(set(runtimes.values())) > 1:
        # the runtime hash is part of the base key: these archs could not share base evidence
        findings.append(Finding(rule="fleet.different-runtimes", severity="note", stage="fleet", detail="the archs ran on different runtimes ("
                                + ", ".join(f"{arch}: {runtime[:12]}" for arch, runtime in runtimes.items())
                                + "), so each has base evidence of its own"))
    coverage = {arch: "not-covered" for arch in runs}
    basis: dict[str, str] = {}
    for arch, report in composed.items():
        coverage[arch] = "runtime" if runs[arch].node and runs[arch].stages.get("gpu_claim") == "pass" else \
            report.arch_coverage.get(arch, "not-covered")
        basis.update({arch: f"ran on {runs[arch].node} ({runs[arch].gpu_model})"} if coverage[arch] == "runtime"
                     else {})
    for arch, run in runs.items():
        if arch not in composed:
            basis[arch] = "; ".join(f.detail for f in run.findings)
    if body is None:
        raise ValueError(f"{label}: no architecture produced a report to merge")
    merged = body.model_copy(update={"label": label, "arch_runs": runs, "arch_coverage": coverage,
                                     "arch_coverage_basis": basis, "findings": findings, "verdict": verdict,
                                     "process_exit_code": EXIT_CODES[verdict]})
    merged.decided_by = comment.decided_by(merged.model_dump(mode="json"), merged.required_stages())
    return merged


def regenerate(workspace: Workspace, label: str, fleet: dict) -> None:
    """Rebuild a fleet PR's report from the driver's store: each arch's run composed again from its
    stored evidence, the node that ran it as recorded; runs nothing."""
    composed, runs = {}, {}
    for arch, arch_label in fleet["archs"].items():
        stored = ArchRun.model_validate(fleet["runs"][arch])
        if arch_label is None:
            runs[arch] = stored
            continue
        composed[arch] = phases.compose(workspace, arch_label)
        runs[arch] = arch_run(composed[arch], stored.node, stored.runtime_hash, stored.report or "", stored.retried)
    merged = merge(label, composed, runs)
    folder = workspace.reports / label
    report.publish(merged, [folder / pages.REPORT])
    pages.write_report_page(folder, merged.required_stages())
    print(f"{label}: {merged.verdict}")
