"""perf, the stage: base against head on the claimed GPU, interleaved, judged by `stats`.

On by default; a skip means "not measured", never "no regression". Owns the rounds and the
payload: rounds alternate base, head, base, head ... (PERF_REPEAT per side) in one lend of the
tree, so drift cancels; whatever a bench writes into the tree is removed between runs. Never
writes the report and never launches a bench itself (kvtasks.harness does).
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from kvtasks.stages import Context, Stage, StageResult, StageSpec, cpu_tier, gpu_claim, repo_tests, result
from kvtasks.stages.launches import Timing
from kvtasks.stages.payloads import GpuClaim, RepoTests, RuntimeCompat
from kvtasks.stages.target_runs import gate
from kvtasks.stages.perf.entry import choose_entry
from kvtasks.stages.perf.scrape import scrape
from kvtasks.stages.perf.stats import METHOD, Column, Comparison, Row, best_round, compare
from kvtasks.worktree import GitFailed

NAME = "perf"


class Repeats(BaseModel):
    base: int
    head: int
    order: str
    reduction: str


class Perf(Stage):
    """What was timed, how, and what the rounds showed; absent fields were not reached."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = None
    target_basis: Literal["declared-by-caller", "same-as-correctness-target", "discovered-bench"] | None = None
    target_basis_reason: str | None = None
    command: str | None = None
    threshold: float | None = None
    min_rows: int | None = None
    baseline_method: Literal["patch-reversed-same-worktree", "target-transplant"] | None = None
    bench_artifacts: list[str] | None = None  # what the bench wrote into the tree, removed between runs
    base_log: str | None = None
    head_log: str | None = None
    repeats: Repeats | None = None
    statistics: str | None = None
    matched_rows: int | None = None
    columns: dict[str, Column] | None = None
    rows: list[Row] | None = None
    control_column: str | None = None
    control_ratio: float | None = None
    control_note: str | None = None
    worst_column: str | None = None
    median_ratio: float | None = None  # the headline: the worst eligible column's median ratio
    interval: list[float] | None = None
    interval_confidence: float | None = None
    noise_floor: float | None = None
    regressed_rows: list[Row] | None = None
    evidence_tier: str | None = None  # set by the report when the Triton CPU tier ran


def _skip(note: str, **fields) -> StageResult:
    stage = result(NAME, "skip", note, **fields)
    return stage.finding("perf.not-compared", "note", f"no perf comparison was made: {note}")


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if request.no_perf:
        return result(NAME, "skip", "disabled with --no-perf: perf was not measured")
    if cpu_tier.active(ctx):
        return _skip("not measured: kernels ran in the Triton interpreter on the CPU, whose timings are never "
                     "perf evidence")
    blocked = gate(ctx)
    if blocked:
        return _skip(blocked)
    if not request.has_patch:
        return _skip("no patch: there is no base to time against")
    head = ctx.result_of(repo_tests.RepoTests)
    if head is None or head.stage.status != "pass":
        return _skip("the head repo tests did not pass; timing a kernel that fails says nothing")
    claim = ctx.result_of(gpu_claim.GpuClaim)
    if claim is None or claim.stage.status != "pass":
        return _skip("no GPU was claimed: timings without a locked device would not describe the kernel")
    entry = choose_entry(ctx)
    if isinstance(entry, str):
        return _skip(entry)
    on_base = ctx.worktree.exists_on_base(entry.file)
    fields = {"target": entry.file, "target_basis": entry.basis, "target_basis_reason": entry.reason,
              "command": " ".join(["python", entry.file, *entry.argv]), "threshold": request.host.perf_threshold,
              "min_rows": request.host.perf_min_rows}
    transplant = None
    if not on_base:
        if not request.perf_control_column:
            return _skip(f"{entry.file} is added by the PR: timing base would need a transplanted baseline, "
                         "which needs --perf-control-column", **fields)
        transplant = ctx.head_text(entry.file)
    fields["baseline_method"] = "target-transplant" if transplant is not None else "patch-reversed-same-worktree"

    logs: dict[str, list] = {"base": [], "head": []}
    runs, artifacts = [], []
    with ctx.worktree.lend("base"):
        for round_number in range(1, request.host.perf_repeat + 1):
            for side in ("base", "head"):
                try:
                    artifacts += ctx.worktree.switch(side)
                    if side == "base" and transplant is not None:
                        ctx.worktree.write_file(entry.file, transplant)
                except GitFailed as exc:  # PatchRefused on head; on base, a transplant git would not place
                    return _skip(f"{exc} (perf round {round_number}, {side})", **fields)
                ctx.say(f"perf: round {round_number}/{request.host.perf_repeat}, {side}")
                timing = ctx.launch(Timing(label=f"{side}-perf-{round_number}", side=side, file=entry.file,
                                           argv=tuple(entry.argv)))
                runs.append(timing)
                logs[side].append(timing)
        artifacts += ctx.worktree.to_base()
    fields.update(bench_artifacts=sorted(set(artifacts)), base_log=logs["base"][0].log, head_log=logs["head"][0].log,
                  repeats={"base": len(logs["base"]), "head": len(logs["head"]), "order": "interleaved base/head",
                           "reduction": "best round per side"}, statistics=METHOD)
    failed = [f"{t.label} exit {t.exit}{' (timed out)' if t.timed_out else ''}" for t in runs if not t.passed]
    if failed:
        stage = _skip(f"a failed repeat poisons its side (a truncated run can look fast): {', '.join(failed)}", **fields)
        stage.runs = runs
        return stage
    comparison = compare([scrape(_read(t.log)) for t in logs["base"]], [scrape(_read(t.log)) for t in logs["head"]],
                         request.host.perf_threshold, request.host.perf_min_rows)
    stage = _compose(ctx, comparison, fields, transplant is not None)
    stage.runs = runs
    return stage


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as log:
            return log.read()
    except OSError:
        return ""


def _compose(ctx: Context, comparison: Comparison, fields: dict, transplanted: bool) -> StageResult:
    fields = {**fields, "matched_rows": comparison.matched_rows, "columns": comparison.columns, "rows": comparison.rows}
    if transplanted and comparison.status != "insufficient":
        control = next((name for name in comparison.columns if ctx.request.perf_control_column.lower() in name.lower()),
                       None)
        tolerance = ctx.request.host.perf_control_tol
        if control is None:
            return _skip(f"the control column {ctx.request.perf_control_column!r} is not in both logs; the "
                         "transplanted baseline is not believed", **fields)
        ratio = comparison.columns[control].median_ratio
        fields.update(control_column=control, control_ratio=ratio)
        if abs(ratio - 1) > tolerance:
            return _skip(f"the control column {control} moved {abs(ratio - 1):.1%} across the two trees "
                         f"(PERF_CONTROL_TOL {tolerance:.0%}); the transplanted baseline is not believed", **fields)
        fields["control_note"] = f"the control column {control} reproduced within {abs(ratio - 1):.1%}"
    if comparison.status == "insufficient":
        return _skip(comparison.reason, **fields)
    fields.update(worst_column=comparison.worst_column, median_ratio=comparison.headline,
                  interval=list(comparison.interval),
                  interval_confidence=comparison.columns[comparison.worst_column].interval_confidence,
                  noise_floor=comparison.noise_floor)
    if comparison.status == "regression":
        worst = sorted((r for r in comparison.rows if r.column == comparison.worst_column), key=lambda r: r.ratio)
        fields["regressed_rows"] = [r for r in worst if r.ratio < ctx.request.host.perf_threshold][:5]
        stage = result(NAME, "fail", comparison.reason, **fields)
        shown = "; ".join(f"{r.row}: {best_round(r.base, r.kind):g} -> {best_round(r.head, r.kind):g}"
                          for r in worst[:3])
        return stage.finding("perf.slower", "should-fix", f"head is slower than base on the same locked GPU: {comparison.reason} "
                                           f"({shown})")
    return result(NAME, "pass", comparison.reason, **fields)


STAGE = StageSpec(NAME, run, payload=Perf, requires=(GpuClaim, RepoTests, RuntimeCompat))
