"""The doit task graph: the only module that knows doit.

Per PR (label L):  prepare:L -> base:<base key> -> head:<head key> -> report:L
- prepare:L always runs: merge_sim, runner selection, grid channel, test_policy, gpu_claim,
  runtime_compat and the gpu-requirement probe; it computes the content keys (kvtasks.keys).
- base:<key> is up to date when evidence of a completed baseline for that key exists, so PRs
  against the same base, target and runtime share one base run, across runs and in a batch.
- head:<key> and report:L always run. The base/head/report tasks are created by a delayed creator
  once prepare has run, because their names are keys that prepare computes.
`doit report` rebuilds reports from stored evidence only; it runs no target and no git.
Exit codes: the report task turns the verdict into doit's result (PASS 0, BLOCK and NEEDS_WORK
fail = 1, INCONCLUSIVE error = 2), so `doit validate` exits with the verdict's code.
"""
from __future__ import annotations

import json
import multiprocessing.util
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator

from doit import create_after
from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.exceptions import TaskError, TaskFailed

from kvtasks import clones, gpu, keys, pages, processes, report, harness, worktree
from kvtasks.gpu import lease, picker
from kvtasks.request import Request
from kvtasks.stages import (Context, StageResult, base_oracle, correctness, cpu_tier, gpu_claim, grid, merge_sim,
                            perf, receipt, runtime_compat, selection, sensitivity, test_policy, timed)
from kvtasks.store import Store
from kvtasks.worktree import Worktree


@dataclass(frozen=True)
class Workspace:
    """Where a front door keeps evidence (cache/), private clones (clones/) and publishes reports (reports/)."""

    root: Path

    @cached_property
    def store(self) -> Store:
        return Store(self.root / "cache")

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def clones(self) -> Path:
        """kvtasks' private clones of repositories validated by refs (kvtasks.clones), apart from
        the evidence: deleting them loses no evidence."""
        return self.root / "clones"

    def report_paths(self, request: Request) -> list[Path]:
        paths = [self.reports / request.label / pages.REPORT]
        if request.out:
            paths.append(Path(request.out))
        return paths

    def doit_config(self) -> dict:
        (self.root / "cache").mkdir(parents=True, exist_ok=True)
        return {"dep_file": str(self.root / "cache" / "doit.sqlite3"), "backend": "sqlite3",
                "default_tasks": ["validate"]}


# -- the stage groups ------------------------------------------------------------------------------

def _prepare(ctx: Context) -> list[StageResult]:
    facts = StageResult(name="run", facts={"started_utc": report.utc_now(),
                                           "isolation": harness.isolation_facts(ctx.request),
                                           # inputs of the base key that describe the host, as this run saw them
                                           "gpu_driver": gpu.driver_versions(),
                                           "target_environment_values": harness.passed_through_values()})
    merged = timed(ctx, merge_sim.NAME, merge_sim.run)
    if "halt" in merged.facts:
        return [facts, merged]
    results = [facts, merged, timed(ctx, selection.NAME, selection.run), timed(ctx, grid.CHANNEL, grid.channel),
               timed(ctx, test_policy.NAME, test_policy.run), timed(ctx, gpu_claim.NAME, gpu_claim.run),
               timed(ctx, runtime_compat.NAME, runtime_compat.run), timed(ctx, cpu_tier.NAME, cpu_tier.run)]
    # on the CPU tier the target runs without a GPU by construction: there is nothing to ask it
    probed = gpu_claim.requirement(ctx) if runtime_compat.established(ctx) and not cpu_tier.active(ctx) else None
    return results if probed is None else [*results, probed]


def _base(ctx: Context) -> list[StageResult]:
    return [timed(ctx, correctness.BASELINE, correctness.baseline_control)]


def _head(ctx: Context) -> list[StageResult]:
    results = [timed(ctx, correctness.REPO_TESTS, correctness.repo_tests), timed(ctx, grid.NAME, grid.head),
               timed(ctx, base_oracle.NAME, base_oracle.run), timed(ctx, sensitivity.NAME, sensitivity.run),
               timed(ctx, receipt.NAME, receipt.run), timed(ctx, perf.NAME, perf.run)]
    after = gpu_claim.after_run(ctx)
    return results if after is None else [*results, after]


GROUPS: dict[str, Callable[[Context], list[StageResult]]] = {"prepare": _prepare, "base": _base, "head": _head}


def _keys(request: Request, results: list[StageResult]) -> dict:
    latest = {result.name: result for result in results}
    facts = {k: v for result in results for k, v in result.facts.items()}
    selected = {k: v for result in results for k, v in result.selection.items()}
    base_oid = facts["repo"]["base"]
    claim = latest.get(gpu_claim.NAME)
    claimed = claim.stage.model_dump() if claim is not None and claim.stage.status == "pass" else None
    runtime = keys.runtime_hash(request, facts.get("runtime_fingerprint"), claimed, facts.get("cpu_tier"),
                                facts.get("gpu_driver"))
    base = keys.base_key(request, base_oid, selected, runtime, facts.get("target_environment_values"))
    patch = facts["repo"].get("patch_sha256")
    return {"base_oid": base_oid, "patch_sha256": patch, "runtime_hash": runtime, "base_key": base,
            "head_key": keys.head_key(base, patch, request)}


def run_prepare(request: Request, workspace: Workspace, quiet: bool) -> None:
    """Prepare one PR. It never dies without a report: a stage that crashes halts the PR with the
    crash as a finding, and the report task publishes that (INCONCLUSIVE)."""
    store = workspace.store
    for path in workspace.report_paths(request):
        # a run owns its output paths: a stale report must never stand in for this run's
        path.unlink(missing_ok=True)
        path.with_name("summary.md").unlink(missing_ok=True)
    (workspace.reports / request.label / pages.PAGE).unlink(missing_ok=True)
    scratch = store.scratch_dir("prepare", request.label)
    ctx = Context(request=request, worktree=Worktree(request.repo, request.patch), run_dir=scratch, quiet=quiet)
    recovered = None
    try:
        recovered = ctx.worktree.recover()
        results = _prepare(ctx)
    except Exception as exc:  # an Interrupted (SystemExit) still ends the run with no report
        results = _crashed("prepare", exc, ctx)
    recovered = recovered or ctx.worktree.recovered
    if recovered is not None:
        results[0].facts["recovered_run"] = recovered
        results[0].finding("note", _recovery_note(recovered))
        print(f"kvtasks: {_recovery_note(recovered)}", file=sys.__stderr__)  # even under --quiet
    halted = next((r.facts["halt"] for r in results if "halt" in r.facts), None)
    record = {"halted": halted, "base_key": None, "head_key": None, "finished_utc": None,
              "base_oid": next((r.facts["repo"].get("base") for r in results if "repo" in r.facts), None)}
    if not halted:
        record.update(_keys(request, results))
    store.write("prepare", request.label, results, label=request.label, base_oid=record["base_oid"], scratch=scratch)
    store.record_launches("prepare", request.label, request.label, [run.label for r in results for run in r.runs])
    store.set_label(request.label, record)


def _crashed(group: str, exc: Exception, ctx: Context, loaded: dict | None = None) -> list[StageResult]:
    """What a group that raised leaves as evidence: the stages it finished (not the earlier
    groups' results it was given), and the crash."""
    detail = f"kvtasks' {group} crashed: {type(exc).__name__}: {exc}"
    print(f"kvtasks: {detail}", file=sys.__stderr__)
    done = [result for name, result in ctx.earlier.items() if (loaded or {}).get(name) is not result]
    crash = StageResult(name="run" if group == "prepare" else f"{group}_crash", facts={"halt": detail})
    if group == "prepare":
        crash.facts.update(started_utc=report.utc_now(), isolation=harness.isolation_facts(ctx.request))
    if group == "prepare" and not any("repo" in r.facts for r in done):
        crash.facts["repo"] = {"worktree": str(ctx.worktree.path), "base": None, "head": ctx.request.head_sha,
                               "kind": "unknown", "patch_sha256": None}
    crash.finding("note", f"{detail}; no verdict rests on this run")
    return [crash, *done] if group == "prepare" else [*done, crash]


def _recovery_note(recovered: dict) -> str:
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


def run_side(request: Request, workspace: Workspace, kind: str, quiet: bool) -> None:
    store = workspace.store
    record = store.label(request.label)
    key = record[f"{kind}_key"]
    sources = [("prepare", request.label)] + ([("base", record["base_key"])] if kind == "head" else [])
    scratch = store.scratch_dir(kind, key)
    ctx = Context(request=request, worktree=Worktree(request.repo, request.patch), run_dir=scratch,
                  earlier=_earlier(store, sources), quiet=quiet,
                  phase_roots={"base": store.scratch_dir("base", record["base_key"]),
                               "head": store.scratch_dir("head", record["head_key"])})
    loaded = dict(ctx.earlier)
    try:
        results = GROUPS[kind](ctx)
    except Exception as exc:
        results = _crashed(kind, exc, ctx, loaded)
    store.write(kind, key, results, label=request.label, base_oid=record["base_oid"], scratch=scratch)
    store.record_launches(kind, key, request.label, [run.label for r in results for run in r.runs])


def base_done(workspace: Workspace, key: str) -> bool:
    """Up to date when this base key already has a baseline that really ran to its end: a gated
    skip, a crash, a timed-out or killed base run is never a baseline to reuse."""
    stored = {result.name: result for result in workspace.store.read("base", key)}
    baseline = stored.get(correctness.BASELINE)
    return baseline is not None and baseline.stage.status == "pass" and correctness.reusable(baseline) is None


def compose(workspace: Workspace, label: str) -> report.Report:
    store = workspace.store
    record = store.label(label)
    if record is None:
        raise KeyError(f"no stored evidence for label {label!r}")
    results = store.read("prepare", label)
    if not record.get("halted"):
        results += store.read("base", record["base_key"]) + store.read("head", record["head_key"])
    return report.compose(label, results, finished_utc=record.get("finished_utc"))


def publish(request: Request, workspace: Workspace, quiet: bool, verdict_is_result: bool):
    store = workspace.store
    store.set_label(request.label, {"finished_utc": report.utc_now()})
    composed = compose(workspace, request.label)
    paths = workspace.report_paths(request)
    report.publish(composed, paths)
    page = pages.write_report_page(paths[0].parent)
    if verdict_is_result:  # a batch draws the index once, after its last PR
        pages.write_index(workspace.reports)
    store.set_label(request.label, {"verdict": composed.verdict, "exit": composed.process_exit_code,
                                    "report": str(paths[0])})
    if not quiet:
        print(report.summary_markdown(composed))
        print(f"report: {paths[-1]}")
        print(f"page: {page}")
    if not verdict_is_result:
        return None
    message = f"verdict {composed.verdict} (exit {composed.process_exit_code}): {paths[-1]}"
    if composed.process_exit_code == 1:
        return TaskFailed(message)
    if composed.process_exit_code == 2:
        return TaskError(message)
    return None


# -- task creators ---------------------------------------------------------------------------------

def prepare_tasks(requests: list[Request], workspace: Workspace, quiet: bool) -> Iterator[dict]:
    for request in requests:
        yield {"basename": "prepare", "name": request.label, "actions": [(run_prepare, [request, workspace, quiet])],
               "uptodate": [False], "verbosity": 2, "doc": f"merge, policy, GPU claim, runtime for {request.label}"}


def side_tasks(requests: list[Request], workspace: Workspace, quiet: bool, batch: bool) -> Iterator[dict]:
    """base/head/report tasks, named by the keys prepare stored; a key shared by PRs is one task."""
    created: set[str] = set()
    for request in requests:
        record = workspace.store.label(request.label)
        report_deps = []
        if record and not record.get("halted"):
            base, head = record["base_key"], record["head_key"]
            if f"base:{base}" not in created:
                created.add(f"base:{base}")
                yield {"basename": "base", "name": base, "actions": [(run_side, [request, workspace, "base", quiet])],
                       "uptodate": [(base_done, [workspace, base])], "verbosity": 2,
                       "doc": f"baseline control for {request.label} (shared by every PR with this key)"}
            if f"head:{head}" not in created:
                created.add(f"head:{head}")
                yield {"basename": "head", "name": head, "actions": [(run_side, [request, workspace, "head", quiet])],
                       "task_dep": [f"base:{base}"], "uptodate": [False], "verbosity": 2,
                       "doc": f"head correctness, grid, sensitivity and receipt for {request.label}"}
            report_deps = [f"head:{head}"]
        yield {"basename": "report", "name": request.label, "task_dep": report_deps, "uptodate": [False],
               "actions": [(publish, [request, workspace, quiet, not batch])], "verbosity": 2,
               "doc": f"compose, judge and publish the report for {request.label}"}


def loader_namespace(requests: list[Request], workspace: Workspace, quiet: bool, batch_name: str | None = None) -> dict:
    """The task creators for validating `requests` (one: validate; several: a batch)."""
    # --sandbox mounts this workspace (evidence and reports) read-only for every target
    requests = [request.model_copy(update={"readonly": (str(workspace.root),)}) if request.sandbox else request
                for request in requests]
    def task_prepare():
        yield from prepare_tasks(requests, workspace, quiet)

    @create_after(executed="prepare", creates=["base", "head", "report"])
    def task_sides():
        yield from side_tasks(requests, workspace, quiet, batch=batch_name is not None)

    namespace = {"task_prepare": task_prepare, "task_sides": task_sides, "DOIT_CONFIG": workspace.doit_config()}
    if batch_name is None:
        namespace["task_validate"] = lambda: {"actions": None, "task_dep": ["report"], "doc": "validate one PR"}
    else:
        def task_batch():
            return {"actions": [(write_index, [requests, workspace, batch_name])], "task_dep": ["report"],
                    "uptodate": [False], "verbosity": 2, "doc": "validate every PR of a manifest against one base"}
        namespace["task_batch"] = task_batch
    return namespace


FRONT_DOORS = {
    "validate": "validate one PR (no variables: the embedded demo; demo=NAME picks another demo PR)",
    "batch": "validate every PR of manifest=FILE against one base",
    "report": "rebuild reports from stored evidence (label=L for one); runs no target, no git",
    "cache": "list stored evidence: kind, key, labels, size, age (base=OID: only that commit's)",
    "cache-gc": "remove stored evidence older than older=AGE (e.g. 30d); nothing else",
}


def catalogue() -> dict:
    """Task creators that only describe the front doors, for doit's own commands (list, help, info,
    forget, ...): loading them builds no demo repository, takes no worktree and runs nothing."""
    def described(name: str, doc: str):
        return lambda: {"basename": name, "actions": None, "doc": doc}

    return {f"task_{name.replace('-', '_')}": described(name, doc) for name, doc in FRONT_DOORS.items()}


class _Workers:
    """doit -n workers are multiprocessing forks: each dies with the validator, as its targets die
    with it, so a killed validator leaves no worker holding its locks or running its stages."""

    def __init__(self):
        multiprocessing.util.register_after_fork(self, _Workers.forked)

    @staticmethod
    def forked(_self) -> None:
        processes.die_with_parent()


_WORKERS: _Workers | None = None


def hold_worktrees(requests: list[Request]) -> None:
    """Take each worktree for this validator before anything runs (a busy one is refused at
    once), and start the validator's GPU lease owner before any worker forks."""
    global _WORKERS
    for repo in dict.fromkeys(request.repo for request in requests):
        try:
            worktree.hold_exclusively(repo)
        except (worktree.WorktreeBusy, worktree.GitFailed) as exc:
            fail_usage(str(exc))
    _WORKERS = _WORKERS or _Workers()
    lease.start(picker.lock_dir())


def run(request: Request, workspace: Workspace, quiet: bool = False) -> int:
    """Execute the validation graph through doit's Python API; return the verdict's exit code."""
    hold_worktrees([request])
    loader = ModuleTaskLoader(loader_namespace([request], workspace, quiet))
    args = ["run", *(["--verbosity", "0", "--reporter", "zero"] if quiet else []), "validate"]
    try:
        code = DoitMain(loader, extra_config={"GLOBAL": {}}).run(args)
    finally:
        picker.release_all()  # the claim is held until the report is written, and no longer
        lease.stop()
        worktree.release_exclusive(request.repo)
    # doit: 0 success, 1 task failed, 2 task error, 3 could not start; the last is INCONCLUSIVE too
    return code if code in (0, 1, 2) else 2


# -- batch index, regeneration, cache listing ------------------------------------------------------

def write_index(requests: list[Request], workspace: Workspace, name: str):
    picker.release_all()
    store = workspace.store
    rows = ["| PR | verdict | blockers | should-fix | perf headline | report |", "| --- | --- | --- | --- | --- | --- |"]
    codes = []
    for request in requests:
        composed = compose(workspace, request.label)
        codes.append(composed.process_exit_code)
        count = {severity: sum(f.severity == severity for f in composed.findings) for severity in ("blocker",
                                                                                                    "should-fix")}
        perf = composed.stages.perf
        headline = getattr(perf, "median_ratio", None)
        record = store.label(request.label) or {}
        rows.append(f"| {request.label} | {composed.verdict} | {count['blocker']} | {count['should-fix']} | "
                    f"{headline if headline is not None else 'not measured'} | {record.get('report', '')} |")
    index = workspace.reports / name / "index.md"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(f"# kvtasks batch: {name}\n\n" + "\n".join(rows) + "\n")
    print(index.read_text())
    labels = [request.label for request in requests]
    batch_page = pages.write_batch_page(workspace.reports, name, labels, report.utc_now())
    print(f"pages: {batch_page} and {pages.write_index(workspace.reports)}")
    worst = 1 if 1 in codes else 2 if 2 in codes else 0
    if worst:
        return (TaskFailed if worst == 1 else TaskError)(f"batch {name}: exit {worst} ({index})")
    return None


def regenerate(workspace: Workspace, label: str) -> None:
    """Rebuild reports/<label>/ from stored evidence: no target runs, no git."""
    composed = compose(workspace, label)
    folder = workspace.reports / label
    report.publish(composed, [folder / pages.REPORT])
    pages.write_report_page(folder)
    print(f"{label}: {composed.verdict}")


def redraw_tables(workspace: Workspace) -> None:
    pages.rewrite_tables(workspace.reports)
    print(f"index: {workspace.reports / pages.PAGE}")


def report_tasks(workspace: Workspace, label: str | None) -> Iterator[dict]:
    """One regeneration per label; a label whose evidence is gone (cache-gc, or never stored) is
    said in one line: alone it is a usage error (exit 2), among all labels it is skipped."""
    labels = [label] if label else workspace.store.labels()
    for name in labels:
        missing = workspace.store.missing_evidence(name)
        if missing and label:
            fail_usage(f"label {name!r} has no report to rebuild: its stored evidence is gone "
                       f"({', '.join(missing)}; removed by cache-gc, or never stored); validate it again")
        if missing:
            print(f"{name}: skipped, its stored evidence is gone ({', '.join(missing)})", file=sys.stderr)
            continue
        yield {"basename": "report", "name": name, "actions": [(regenerate, [workspace, name])], "uptodate": [False],
               "verbosity": 2, "doc": f"rebuild the report for {name} from stored evidence"}
    # a label starts with a letter or digit, so this name never collides with one
    yield {"basename": "report", "name": "_index", "actions": [(redraw_tables, [workspace])], "uptodate": [False],
           "task_dep": [f"report:{name}" for name in labels], "verbosity": 2,
           "doc": "redraw reports/index.html and every batch page from the published reports"}


def list_cache(workspace: Workspace, base_oid: str | None = None) -> None:
    """Stored evidence, oldest first; with a base OID, only the evidence about that commit.

    Keys and labels are printed whole, so any of them can be pasted into `doit report label=`;
    each column is as wide as its longest value."""
    wanted = workspace.store.keys_for_base(base_oid) if base_oid else None
    rows = [("kind", "key", "labels", "size", "age")]
    for entry in workspace.store.entries():
        if wanted is None or f"{entry['kind']}:{entry['key']}" in wanted:
            rows.append((entry["kind"], entry["key"], ",".join(entry["labels"]), str(entry["size"]),
                         f"{entry['age_s'] / 86400:.1f}d"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        left = [cell.ljust(width) for cell, width in zip(row[:3], widths)]
        right = [cell.rjust(width) for cell, width in zip(row[3:], widths[3:])]
        print(" ".join(left + right))


def parse_age(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip()
    if not text or text[-1] not in units or not text[:-1].replace(".", "", 1).isdigit():
        fail_usage(f"older= takes a number and a unit (s, m, h, d, w), e.g. older=30d; got {text!r}")
    return float(text[:-1]) * units[text[-1]]


def collect(workspace: Workspace, older: str) -> None:
    removed = workspace.store.gc(parse_age(older))
    print(f"removed {len(removed)} evidence entries older than {older}")


def fail_usage(message: str) -> None:
    print(f"validate-kernel-pr: error: {message}", file=sys.stderr)
    raise SystemExit(2)


_DOIT_OPTIONS_WITH_VALUES = {"-f", "--file", "-d", "--dir", "--db-file", "--backend", "--check_file_uptodate",
                             "-n", "--process", "-P", "--parallel-type", "-r", "--reporter", "-o", "--output-file",
                             "-v", "--verbosity", "--codec-cls", "--seek-file"}


def doit_command(argv: list[str]) -> str:
    """Which doit command or task this invocation names (dodo.py builds only that one's tasks)."""
    words, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _DOIT_OPTIONS_WITH_VALUES:
            skip = True
        elif not arg.startswith("-") and "=" not in arg:
            words.append(arg)
    if words and words[0] == "run":
        words = words[1:]
    return words[0] if words else "validate"


def manifest_requests(path: str, build) -> tuple[str, list[Request]]:
    """A batch manifest (TOML or JSON): shared options at the top, one entry per PR under `prs`."""
    manifest = Path(path).expanduser().resolve()
    try:
        text = manifest.read_text()
    except OSError as exc:
        fail_usage(f"manifest {path!r} is unreadable: {exc.strerror or exc}")
    try:
        if manifest.suffix == ".json":
            data = json.loads(text)
        else:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
    except ValueError as exc:
        fail_usage(f"manifest {path!r} does not parse: {exc}")
    prs = data.pop("prs", None)
    if not isinstance(prs, list) or not prs:
        fail_usage(f"manifest {path!r} has no `prs` list")
    expected_base = data.pop("base", None)
    shared = {key: _relative(manifest, key, value) for key, value in data.items()}
    requests = []
    for entry in prs:
        if not isinstance(entry, dict) or not ({"patch", "head_ref"} & set(entry)) or "label" not in entry:
            fail_usage(f"every entry of `prs` needs `label` and `patch` or `head_ref`: {entry!r}")
        options = {**shared, **{key: _relative(manifest, key, value) for key, value in entry.items()}}
        requests.append(build(options))
    labels = [request.label for request in requests]
    if len(set(labels)) != len(labels):
        fail_usage(f"manifest labels must be unique: {labels}")
    if expected_base:
        actual = Worktree(requests[0].repo, None).head_oid()
        if actual != expected_base:
            fail_usage(f"the manifest's base {expected_base} is not the worktree's HEAD {actual}")
    return manifest.stem, requests


def _relative(manifest: Path, key: str, value):
    if key == "repo" and isinstance(value, str) and clones.is_url(value):
        return value
    if key in ("repo", "patch", "out") and isinstance(value, str) and not Path(value).expanduser().is_absolute():
        return str((manifest.parent / value).resolve())
    return value
