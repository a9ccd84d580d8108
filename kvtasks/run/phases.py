"""The work behind the graph's tasks: one group of the pipeline run for one PR and its results
stored (prepare also computes the content keys), and a report composed from stored evidence and
published. It never knows doit (graph.py) and never judges (kvtasks.report).

A group never dies without evidence: a stage that crashes ends its group with the crash as a
finding, and the report publishes that (INCONCLUSIVE).
"""
from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from kvtasks import report
from kvtasks.evidence import keys
from kvtasks.report import pages
from kvtasks.run import executor
from kvtasks.run.pipeline import compose as compose_report, run_group
from kvtasks.report import comment
from kvtasks.request import Request
from kvtasks.report import ReusedEvidence
from kvtasks.stages import Context, StageResult, baseline_control, gpu_claim, run_facts, sensitivity
from kvtasks.records import Facts, Repo, Selection, merged
from kvtasks.harness import isolation
from kvtasks.evidence.store import Store
from kvtasks.evidence.workspace import Workspace
from kvtasks.worktree import Worktree


def _keys(request: Request, results: list[StageResult]) -> dict:
    latest = {result.name: result for result in results}
    facts = merged(Facts, (result.facts for result in results))
    selected = merged(Selection, (result.selection for result in results))
    base_oid = facts.repo.base
    claim = latest.get(gpu_claim.NAME)
    claimed = claim.stage if claim is not None and claim.stage.status == "pass" else None
    runtime = keys.runtime_hash(request, facts.runtime_fingerprint, claimed, facts.cpu_tier, facts.gpu_driver)
    base = keys.base_key(request, base_oid, selected, runtime, facts.target_environment_values)
    patch = facts.repo.patch_sha256
    return {"base_oid": base_oid, "patch_sha256": patch, "runtime_hash": runtime, "base_key": base,
            "head_key": keys.head_key(base, patch, request)}


def run_prepare(request: Request, workspace: Workspace) -> None:
    """Prepare one PR: the prepare group, its evidence stored under the label, and the keys its
    base and head groups are stored under."""
    store = workspace.store
    for path in workspace.report_paths(request):
        # a run owns its output paths: a stale report must never stand in for this run's
        path.unlink(missing_ok=True)
        path.with_name("summary.md").unlink(missing_ok=True)
    (workspace.reports / request.label / pages.PAGE).unlink(missing_ok=True)
    scratch = store.scratch_dir("prepare", request.label)
    ctx = Context(request=request, worktree=Worktree(request.repo, request.patch), run_dir=scratch,
                  grid_secret=store.grid_secret(request.host.grid_secret), launcher=executor.launch)
    recovered = None
    try:
        recovered = ctx.worktree.recover()
        results = run_group(ctx, "prepare")
    except Exception as exc:  # an Interrupted (SystemExit) still ends the run with no report
        results = _crashed("prepare", exc, ctx)
    recovered = recovered or ctx.worktree.recovered
    if recovered is not None:
        facts = next(result for result in results if result.name == run_facts.NAME)
        facts.facts.recovered_run = recovered
        facts.finding("run.recovered", "note", recovery_note(recovered))
        print(f"kvtasks: {recovery_note(recovered)}", file=sys.__stderr__)  # even under --quiet
    learned = merged(Facts, (result.facts for result in results))
    record = {"halted": learned.halt, "base_key": None, "head_key": None, "finished_utc": None,
              "base_oid": learned.repo.base if learned.repo else None, "prepared_at": time.time()}
    if not learned.halt:
        record.update(_keys(request, results))
    store.write("prepare", request.label, results, label=request.label, base_oid=record["base_oid"], scratch=scratch)
    store.record_launches("prepare", request.label, request.label, launched(results))
    store.set_label(request.label, record)


def launched(results: list[StageResult]) -> list[str]:
    """The labels of the target launches a group's results hold: a merged session's parts are read
    from its launch, and a run adopted from another group is that group's launch."""
    return [run.label for result in results for run in result.runs if run.session is None and not run.adopted_from]


def _crashed(group: str, exc: Exception, ctx: Context, loaded: dict | None = None) -> list[StageResult]:
    """What a group that raised leaves as evidence: the stages it finished (not the earlier
    groups' results it was given), and the crash. In prepare the crash is said by the run's facts
    (made here when the crash came before them)."""
    detail = f"kvtasks' {group} crashed: {type(exc).__name__}: {exc}"
    print(f"kvtasks: {detail}", file=sys.__stderr__)
    done = [result for name, result in ctx.earlier.items() if (loaded or {}).get(name) is not result]
    if group != "prepare":
        crash = StageResult(name=f"{group}_crash", facts=Facts(halt=detail))
        return [*done, crash.finding("run.crashed", "note", f"{detail}; no verdict rests on this run")]
    crash = next((result for result in done if result.name == run_facts.NAME), None)
    if crash is None:
        crash = StageResult(name=run_facts.NAME, facts=Facts(started_utc=run_facts.utc_now(),
                                                             isolation=isolation.isolation_facts(ctx.request)))
        done = [crash, *done]
    crash.facts.halt = detail
    if not any(r.facts.repo for r in done):
        # what is known without merge_sim: no base OID, so unvalidated (kvtasks.records.Repo)
        crash.facts.repo = Repo.model_construct(worktree=str(ctx.worktree.path), base=None, head=ctx.request.head_sha,
                                                kind="unknown", patch_sha256=None)
    crash.finding("run.crashed", "note", f"{detail}; no verdict rests on this run")
    return done


def recovery_note(recovered: dict) -> str:
    if recovered.get("patch_reversed") is None:
        what = "was killed while it had the tree (no patch applied)"
    else:
        what = (f"was killed with patch {recovered['patch_sha256'][:12]} applied; kvtasks "
                + ("reversed it" if recovered["patch_reversed"] else "could not reverse it"))
    return (f"a previous kvtasks run on this worktree (pid {recovered['pid']}) {what}, killed the "
            f"{len(recovered.get('killed_processes', []))} processes it had left running and removed "
            f"{len(recovered['removed'])} files it had written before this run; the tree was not dirtied by the caller")


def _earlier(store: Store, kinds: list[tuple[str, str]]) -> dict[str, StageResult]:
    return {result.name: result for kind, key in kinds for result in store.read(kind, key)}


def run_side(request: Request, workspace: Workspace, kind: str) -> None:
    """Run the base or head group for one PR, given the earlier groups' stored results (for head
    also the base evidence other PRs against its base made, marked reused)."""
    store = workspace.store
    record = store.label(request.label)
    key = record[f"{kind}_key"]
    sources = [("prepare", request.label)] + ([("base", record["base_key"])] if kind == "head" else [])
    scratch = store.scratch_dir(kind, key)
    earlier = _earlier(store, sources)
    base_evidence = base_evidence_keys(request, record["base_key"]) if kind == "head" else {}
    stored_base_evidence = {result.name: result for evidence_key in base_evidence.values()
                            for result in _marked_if_reused(store, sensitivity.BASE_EVIDENCE, evidence_key, request.label,
                                                            record.get("prepared_at"))}
    ctx = Context(request=request, worktree=Worktree(request.repo, request.patch), run_dir=scratch,
                  earlier=earlier, base_evidence=stored_base_evidence, launcher=executor.launch,
                  phase_roots={"base": store.scratch_dir("base", record["base_key"]),
                               "head": store.scratch_dir("head", record["head_key"])})
    loaded = dict(ctx.earlier)
    try:
        results = run_group(ctx, kind)
    except Exception as exc:
        results = _crashed(kind, exc, ctx, loaded)
    store.write(kind, key, results, label=request.label, base_oid=record["base_oid"], scratch=scratch)
    store.record_launches(kind, key, request.label, launched(results))
    keep_base_evidence(store, results, base_evidence, request.label, record["base_oid"], scratch)


def base_evidence_keys(request: Request, base_key: str) -> dict[str, str]:
    """The stored name of each piece of base evidence a head group may make or reuse, and its key."""
    return {sensitivity.base_evidence_name(mode): keys.base_sensitivity_key(base_key, request, mode)
            for mode in request.sensitivity_modes}


def keep_base_evidence(store: Store, results: list[StageResult], evidence_keys: dict[str, str], label: str,
                       base_oid: str | None, scratch: Path | None) -> None:
    """Store the base evidence a head group made under its own keys, for the next PR against its base."""
    for result in results:
        for made in result.base_evidence:
            store.write(sensitivity.BASE_EVIDENCE, evidence_keys[made.name], [made], label=label, base_oid=base_oid,
                        scratch=scratch)


def base_done(workspace: Workspace, key: str) -> bool:
    """Up to date when this base key already has a baseline that really ran to its end: a gated
    skip, a crash, a timed-out or killed base run is never a baseline to reuse."""
    stored = {result.name: result for result in workspace.store.read("base", key)}
    baseline = stored.get(baseline_control.NAME)
    return baseline is not None and baseline.stage.status == "pass" and baseline_control.reusable(baseline) is None


def compose(workspace: Workspace, label: str) -> report.Report:
    store = workspace.store
    record = store.label(label)
    if record is None:
        raise KeyError(f"no stored evidence for label {label!r}")
    results = store.read("prepare", label)
    if not record.get("halted"):
        for kind in ("base", "head"):
            results += _marked_if_reused(store, kind, record[f"{kind}_key"], label, record.get("prepared_at"))
    return compose_report(label, results, finished_utc=record.get("finished_utc"))


def _marked_if_reused(store: Store, kind: str, key: str, label: str, prepared_at: float | None) -> list[StageResult]:
    """A group's stored results; when another label wrote them, or this label before this run began,
    each stage says which evidence it rests on (reused_from)."""
    results = store.read(kind, key)
    written = store.provenance(kind, key) or {}
    earlier = written.get("written_by") != label or (prepared_at is not None and written.get("written", 0) < prepared_at)
    if not written or not earlier:
        return results
    reused = ReusedEvidence(evidence=f"{kind}:{key}", written_by=written.get("written_by"),
                            written_utc=datetime.fromtimestamp(written["written"], timezone.utc).strftime(
                                "%Y-%m-%dT%H:%M:%SZ"))
    for result in results:
        if result.stage is not None:
            result.stage.reused_from = reused
    return results


def publish(request: Request, workspace: Workspace, draw_index: bool) -> report.Report:
    """Compose, judge and publish one PR's report (and its page; the index too unless a batch
    draws it once, after its last PR)."""
    store = workspace.store
    store.set_label(request.label, {"finished_utc": run_facts.utc_now()})
    composed = compose(workspace, request.label)
    paths = workspace.report_paths(request)
    report.publish(composed, paths)
    if draw_index:  # one PR's own run (a batch's PRs, or one PR's targets, are summed up after the last)
        comment.append_to_step_summary((paths[0].parent / comment.COMMENT).read_text())
    pages.write_report_page(paths[0].parent, composed.required_stages())
    if draw_index:
        pages.write_index(workspace.reports)
    store.set_label(request.label, {"verdict": composed.verdict, "exit": composed.process_exit_code,
                                    "report": str(paths[0])})
    return composed


def regenerate(workspace: Workspace, label: str) -> None:
    """Rebuild reports/<label>/ from stored evidence: no target runs, no git."""
    composed = compose(workspace, label)
    folder = workspace.reports / label
    report.publish(composed, [folder / pages.REPORT])
    pages.write_report_page(folder, composed.required_stages())
    print(f"{label}: {composed.verdict}")


def redraw_tables(workspace: Workspace) -> None:
    pages.rewrite_tables(workspace.reports)
    print(f"index: {workspace.reports / pages.PAGE}")
