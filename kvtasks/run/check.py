"""validate-kernel-pr check / doit check: what a PR against a checkout could reach, before any PR.

It prepares the checkout as a validation does (runner, grid channel, runtime probe, GPU claim, CPU
tier), runs the target once as a validation's base run would (the tier included; where the grid
merges with the repository's tests, that one session also runs the grid and its poisoned cell),
and says: the runner, whether the route was observed, whether the grid channel was proven, the
tier's crashes with their cause, and what would keep a PR short of PASS. A maintainer onboards a
repository with it; bench/tier_coverage.py classifies its items with it.

It takes the validation's flags (no patch: the checkout as it is) and reads the repository's
`[tool.kvtasks]` as a validation does (`--target NAME` a configured target, its options under the
flags given), writes no report and stores no evidence; `--json FILE` writes what it found for a
program to read, and `-k EXPR` (pytest's) runs only the items it selects.
Exit codes: 0 the target reached a test outcome, 1 it did not (a tier crash, nothing executed, no
run), 64 a usage error.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from kvtasks import worktree
from kvtasks.run import executor
from kvtasks.harness.target_run import TargetRun
from kvtasks.run.phases import recovery_note
from kvtasks.run.pipeline import PIPELINE, run_row
from kvtasks.request import UsageError, build_request, repo_config
from kvtasks.stages.launches import Launch
from kvtasks.stages import Context, cpu_tier, grid, runtime_compat
from kvtasks.stages.grid.plan import plan_of
from kvtasks.stages.payloads import GpuClaim, RuntimeCompat
from kvtasks.stages.grid.proof import poisoned, proves_channel
from kvtasks.stages.grid.runs import run_grid
from kvtasks.stages.target_runs import gate
from kvtasks.worktree import Worktree
from kvtasks.evidence.workspace import Workspace

def request_of(workspace: Workspace, given: dict):
    """The Request a check runs: the options given, on the embedded demo's checkout when no repo is."""
    if given.get("patch") or given.get("base_ref") or given.get("head_ref"):
        raise UsageError("check runs the checkout as it is; give no patch or refs")
    options = {name: value for name, value in given.items() if name not in ("demo", "quiet", "json", "k")}
    if "repo" not in options:
        options = {**demo_options(workspace.store.root), **options}
    else:  # the repository's own configuration, as a validation reads base's: its named targets and defaults
        tree = Path(str(options["repo"])).expanduser()
        config = repo_config.load(tree) if tree.is_dir() else None
        options = config.chosen(options, tree) if config is not None else options
    return build_request(options, clones_root=workspace.clones)


def said(request, json_out: str | None = None, secret: str = "", keyword: str | None = None) -> int:
    """Check, print what was found (and write it as JSON when asked); the exit code."""
    found = check(request, grid_secret=secret, keyword=keyword)
    print("\n".join(lines(found)))
    if json_out:
        Path(json_out).write_text(json.dumps(found, indent=2))
    return 0 if found["reached_outcome"] else 1


def demo_options(root: Path) -> dict:
    """The demo's target and flags, without its PR: check runs the checkout as it is."""
    from kvtasks import demo

    given = demo.options(root)
    return {name: value for name, value in given.items() if name not in ("patch", "head_sha", "label")}


def check(request, grid_secret: str = "", keyword: str | None = None) -> dict:
    """Prepare the checkout, run its target once as a base run would, and say what a PR could reach;
    `grid_secret` is the workspace's (Store.grid_secret), so the cells it runs are a validation's.
    With `keyword` (pytest's -k), every run it makes runs only the items it selects (the channel's
    proof too), and the grid is not merged into the repository's run: a large parametrized suite
    checked a few items at a time; a script target has no items to select, so -k is refused for it."""
    worktree.forget_callers_repository()

    def launcher(ctx: Context, asked):
        if keyword and isinstance(asked, Launch):
            asked = asked.model_copy(update={"argv": (*asked.argv, "-k", keyword)})
        return executor.launch(ctx, asked)

    with tempfile.TemporaryDirectory(prefix="kvtasks-check-") as scratch:
        ctx = Context(request=request, worktree=Worktree(request.repo, None), run_dir=Path(scratch),
                      grid_secret=grid_secret, launcher=launcher)
        # what a killed validation left (its patch, its files) is undone first, as a validation does: never
        # shown to the caller as their own uncommitted work
        recovered = ctx.worktree.recover()
        if recovered is not None:
            print(f"kvtasks: {recovery_note(recovered)}", file=sys.stderr)
        for row in PIPELINE["prepare"]:
            produced = run_row(ctx, row)
            if produced is not None and produced.facts.halt:
                note = produced.stage.note if produced.stage else produced.name
                return _found(ctx, None, None, blocked=f"{produced.name} halted: {note}")
            if keyword and ctx.selection.runner == "script":
                raise UsageError(f"-k selects pytest items, and {request.target} runs as a script "
                                 f"({ctx.selection.runner_reason or 'chosen'})")
        # with no GPU and no tier, gpu_requirement ran the target without a device on this very tree:
        # that run is the one a base run would be (and, when it failed, says why the gate is shut)
        claim = ctx.result_of(GpuClaim)
        run = next((made for made in (claim.runs if claim is not None else []) if made.label == "head-repo"), None)
        blocked = gate(ctx)
        if blocked:
            return _found(ctx, None, None, blocked=blocked, tried=run)
        probe = None
        with ctx.worktree.lend("base"):
            merged = grid.merged_session(ctx, "base") if run is None and keyword is None else None
            if merged is not None:
                run, probe = merged.repo, merged.probe
            if run is None:
                run = ctx.launch(Launch(label="base-repo"))
        return _found(ctx, run, probe)


def _found(ctx: Context, run: TargetRun | None, probe: TargetRun | None, blocked: str = "",
           tried: TargetRun | None = None) -> dict:
    """`tried`: a run that was made and is not the base run (the gate shut after it): only what pytest
    could not collect in it is shown."""
    request, selection = ctx.request, ctx.selection
    claim = ctx.result_of(GpuClaim)
    compat = ctx.result_of(RuntimeCompat)
    tier = ctx.facts.cpu_tier
    evidence = cpu_tier.run_evidence(run) if run is not None else None
    crashes = cpu_tier.crashes(evidence)
    found = {
        "repo": request.repo, "target": request.target, "runner": selection.runner,
        "runner_reason": selection.runner_reason,
        "cpu_tier": "triton" if tier else "off", "cpu_tier_reason": selection.cpu_tier_reason,
        "gpu_claimed": claim is not None and claim.stage.status == "pass",
        "runtime": compat.stage.note if compat is not None and compat.stage is not None else "not checked",
        "runtime_established": runtime_compat.established(ctx), "blocked": blocked or None,
        # the tier's hooks in the runtime probe: "installed", or why not (None without the tier)
        "cpu_tier_hooks": getattr(compat.stage, "cpu_tier_hooks", None) if compat is not None else None,
        "run": None, "route": _route(request, run), "channel": _channel(ctx, probe) if run is not None else
        {"channel": None, "proven": None, "why": "not tried: the target did not run"},
        "tier_crashes": crashes, "violations": (evidence or {}).get("violations", []),
        "not_exercised": cpu_tier.not_exercised(run) if run is not None else [],
        "collection_errors": collection_errors(run or tried) if (run or tried) is not None else [],
    }
    if run is not None:
        found["run"] = {"exit": run.exit, "timed_out": run.timed_out, "executed": run.stats.executed,
                        "failures": run.stats.failures, "errors": run.stats.errors, "skipped": run.stats.skipped,
                        "duration_s": round(run.duration_s, 1), "log_tail": run.log_tail(failing_first=False),
                        "outcomes": [{**case.model_dump(), "test_id": case.test_id} for case in run.cases]}
    reached = run is not None and not run.timed_out and not run.usage_error and not cpu_tier.tier_failure(run) \
        and (run.stats.executed > 0 or run.stats.skipped > 0)
    found["reached_outcome"] = reached
    found["short_of_pass"] = _short_of_pass(found, run)
    return found


def _route(request, run: TargetRun | None) -> dict:
    if not request.expected_route:
        return {"asked": None, "observed": None, "calls": 0}
    if run is None:
        return {"asked": request.expected_route, "observed": None, "calls": 0}
    calls = run.receipt.route_calls if run.receipt else {}
    return {"asked": request.expected_route, "observed": sum(calls.values()) > 0, "calls": sum(calls.values())}


def _channel(ctx: Context, probe: TargetRun | None) -> dict:
    plan = plan_of(ctx)
    if plan is None or not plan.rows:
        return {"channel": None, "proven": None, "why": "no grid was given (--grid)"}
    if not plan.channel:
        return {"channel": None, "proven": False, "why": "no channel was declared (--shape-env, --shape-arg or "
                                                         "--shape-argnames)"}
    if probe is None:  # the channel's proof is a run of its own unless the grid merges with the tests
        with ctx.worktree.lend("base"):
            probe = run_grid(ctx, plan, "base-grid-probe", poisoned(plan))
    proven, why = proves_channel(plan, probe)
    return {"channel": plan.channel, "proven": proven, "why": why}


def collection_errors(run: TargetRun) -> list[str]:
    """What each of pytest's collection errors in the run's log says (its `E   ` lines: an import's
    error, a conftest's), first seen first: a module that cannot be collected runs no test."""
    text = runtime_compat.collection_errors(run.log_text())
    return list(dict.fromkeys(line[1:].strip() for line in text.splitlines() if line.startswith("E   ")))[:5]


def _short_of_pass(found: dict, run: TargetRun | None) -> list[str]:
    """What would keep a PR against this checkout short of PASS, each named."""
    short = []
    if found["blocked"]:
        short.append(f"the target cannot run: {found['blocked']}")
    if not found["gpu_claimed"]:
        short.append("no GPU was claimed: PASS needs one (on the CPU tier the best verdict is INCONCLUSIVE)")
    if not found["runtime_established"]:
        short.append(f"runtime compatibility was not established ({found['runtime']}); name the package with "
                     "--runtime-module")
    if found["route"]["asked"] is None:
        short.append("--expected-route and --shape-vars are required for PASS (the receipt and the sensitivity "
                     "run need the route)")
    elif found["route"]["observed"] is False:
        short.append(f"the route {found['route']['asked']} was never observed: check --expected-route")
    if found["channel"]["proven"] is False:
        short.append(f"the grid channel was not proven ({found['channel']['why']})")
    if found["tier_crashes"]:
        short.append(f"the CPU tier could not run it: {cpu_tier.crash_summary(found['tier_crashes'])}")
    elif found["collection_errors"]:
        short.append(f"pytest could not collect the target: {found['collection_errors'][0]}")
    if run is not None and not run.passed and not cpu_tier.tier_failure(run):
        short.append(f"the target is red on the checkout (exit {run.exit}): a PR's failures there are not "
                     "attributed to it")
    if run is not None and run.passed and run.stats.executed == 0:
        short.append("the target executed no test: no correctness claim can be made")
    if found["not_exercised"]:
        short.append(f"{len(found['not_exercised'])} tests passed on the CPU tier without launching a kernel or "
                     "calling a route: they tested none of the checkout's kernels")
    return short


def lines(found: dict) -> list[str]:
    """What a maintainer reads."""
    said = [f"check {found['target']} in {found['repo']}",
            f"runner: {found['runner'] or 'none'} ({found['runner_reason'] or 'no reason recorded'})",
            f"cpu tier: {found['cpu_tier']} ({found['cpu_tier_reason'] or 'not asked'})",
            f"runtime: {found['runtime']}"]
    run = found["run"]
    if run is None:
        said.append(f"run: none ({found['blocked']})")
    else:
        said.append(f"run: exit {run['exit']}{' (timed out)' if run['timed_out'] else ''}, {run['executed']} executed, "
                    f"{run['failures']} failed, {run['errors']} errored, {run['skipped']} skipped "
                    f"in {run['duration_s']}s")
    route = found["route"]
    observed = {True: f"observed in {route['calls']} calls", False: "not observed", None: "not run"}[route["observed"]]
    said.append("route: none asked (--expected-route)" if route["asked"] is None else
                f"route: {route['asked']} {observed}")
    channel = found["channel"]
    said.append(f"channel: {channel['why']}" if channel["channel"] is None else
                f"channel: {channel['channel']} {'proven' if channel['proven'] else 'not proven'} ({channel['why']})")
    said.append("tier crashes: " + (cpu_tier.crash_summary(found["tier_crashes"]) if found["tier_crashes"] else "none"))
    if found["collection_errors"]:
        said.append(f"collection errors: {'; '.join(found['collection_errors'])}")
    idle = found["not_exercised"]
    if idle:
        said.append(f"not exercised: {len(idle)} passed without a kernel launch or a route call (first {idle[0]})")
    if found["violations"]:
        said.append(f"bounds sanitizer: {cpu_tier.describe(found['violations'][0])}"
                    + (f" (and {len(found['violations']) - 1} more)" if len(found["violations"]) > 1 else ""))
    said.append("short of PASS:" if found["short_of_pass"] else "short of PASS: nothing the check can see")
    said += [f"  - {reason}" for reason in found["short_of_pass"]]
    return said
