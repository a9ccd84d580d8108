"""cpu_tier: whether Triton kernels run in the interpreter on the CPU, and what that evidence says.

--cpu-tier triton turns it on; auto turns it on when no GPU was claimed and the target (or what it
imports from the checkout) imports triton. It needs triton, torch and numpy installed for PYTHON_BIN
(as the runtime probe found them); their versions are recorded, and each run's receipt records
the versions that run imported. Runs under the tier carry the in-target hooks of harness/in_target/cpu_tier.py
(bounds sanitizer, device redirect, autotune on the interpreter, sparse grid) and see no GPU.

What the tier changes in judging: a sanitizer violation on head that base does not show is a
blocker; the interpreter credits no architecture; interpreter timings are never perf evidence.
"""
from __future__ import annotations

from kvtasks import sources
from kvtasks.stages import Context, StageResult, StageSpec, result
from kvtasks.records import CpuTier, Facts, Selection
from kvtasks.stages.payloads import GpuClaim, RuntimeCompat
from kvtasks.harness.in_target.configuration import TierSettings
from kvtasks.harness.in_target.cpu_state import (ANSWERED_CUDA, DEFAULT_CAPABILITY, device_name_of, release,
                                                 unsupported_triton)
from kvtasks.harness.junit import junit_id
from kvtasks.harness.target_run import TargetRun

NAME = "cpu_tier"
EVIDENCE = "triton-interpreter (CPU)"


def _imports_triton(source: str | None) -> bool:
    return any(name.split(".")[0] == "triton" for name in sources.imported_modules(sources.parse(source)))


def wanted(ctx: Context) -> tuple[bool, str]:
    """Whether the tier is asked for here, and why, before anything is known about what is installed
    (the runtime probe asks too: it imports the checkout under the tier's hooks)."""
    request = ctx.request
    if request.cpu_tier == "off":
        return False, "--cpu-tier is off"
    if request.cpu_tier == "triton":
        return True, "--cpu-tier triton"
    claim = ctx.result_of(GpuClaim)
    if claim is not None and claim.stage.status == "pass":
        return False, "auto: a GPU was claimed, so kernels run on it"
    importers = [path for path in ctx.target_sources() if _imports_triton(ctx.head_text(path))]
    if not importers:
        return False, ("auto: neither the target, its conftest.py files nor the checkout modules it imports "
                       "import triton")
    return True, f"auto: no GPU was claimed and {', '.join(importers)} import triton"


def settings(ctx: Context) -> dict:
    """What the in-target hooks are installed with."""
    return {"sparse_programs": ctx.request.cpu_sparse_grid, "device_capability": ctx.request.cpu_device_capability,
            "device_name": ctx.request.cpu_device_name}


def known_bad(installed: dict[str, str]) -> str | None:
    """Why this triton release, or this triton/numpy pair, cannot run the interpreter, or None."""
    refused = unsupported_triton(installed.get("triton"))
    if refused:
        return refused
    triton, numpy = release(installed.get("triton")), release(installed.get("numpy"))
    # before 3.7 the interpreter's tensor.__index__ is int() of a 1-element array, which numpy 2.4 refuses
    if triton[:2] < (3, 7) and numpy[:2] >= (2, 4):
        return (f"triton {installed['triton']} with numpy {installed['numpy']} is a known-bad pair: numpy 2.4 breaks "
                "the interpreter of triton before 3.7 on every loop with a runtime bound ('only 0-dimensional arrays "
                "can be converted to Python scalars'); install numpy<2.4 (the triton-cpu extra pins it) or triton>=3.7")
    return None


def run(ctx: Context) -> StageResult:
    request = ctx.request
    on, why = wanted(ctx)
    if not on:
        return _off(why)
    fingerprint = ctx.facts.runtime_fingerprint
    if fingerprint is None:
        compat = ctx.get(RuntimeCompat)
        said = compat.note if compat is not None else "it did not run"
        return _off(f"{why}, but the runtime probe did not run ({said}), so what {request.host.python_bin} has "
                    "installed is unknown")
    installed = fingerprint.versions()
    missing = [name for name in ("triton", "torch", "numpy") if name not in installed]
    if missing:
        stage_result = _off(f"{why}, but {request.host.python_bin} has no {', '.join(missing)} installed")
        return stage_result.finding("cpu-tier.missing-packages", "note", f"the Triton CPU tier was asked for and could not run: "
                                            f"{', '.join(missing)} missing; install kvtasks[triton-cpu] into PYTHON_BIN")
    bad = known_bad(installed)
    if bad:
        stage_result = _off(f"{why}, but {bad}")
        return stage_result.finding("cpu-tier.known-bad-environment", "note", f"the Triton CPU tier was asked for and could not run (an environment "
                                            f"fact, not the PR's): {bad}")
    capability = request.cpu_device_capability
    name = device_name_of(TierSettings.of(settings(ctx)))
    tier = CpuTier(interpreter="triton", evidence=EVIDENCE, reason=why, triton=installed["triton"],
                   torch=installed["torch"], numpy=installed["numpy"], sanitizer="on",
                   device_redirect="cuda -> cpu", autotune="every config once per kernel and autotune key, first kept",
                   sparse_grid_programs=request.cpu_sparse_grid, device_capability=capability, device_name=name,
                   assumptions=[f"compute capability {capability} (--cpu-device-capability, default "
                                f"{DEFAULT_CAPABILITY}): the interpreter has none, and torch.cuda."
                                "get_device_capability() decides which kernel paths a repository takes",
                                f"device name {name!r} (--cpu-device-name), and CUDA {ANSWERED_CUDA} as "
                                "torch.version.cuda where torch's build answers none (a CPU build): libraries pick "
                                "their vendor backend and capability paths by them"])
    return StageResult(name=NAME, selection=Selection(cpu_tier="triton", cpu_tier_reason=why), facts=Facts(cpu_tier=tier))


def _off(reason: str) -> StageResult:
    return StageResult(name=NAME, selection=Selection(cpu_tier="off", cpu_tier_reason=reason), facts=Facts(cpu_tier=None))


def active(ctx: Context) -> bool:
    return ctx.facts.cpu_tier is not None


def run_evidence(run: TargetRun) -> dict | None:
    """What the tier saw in one run (the versions it imported, violations, sparse launches, bf16
    skips), from its receipt."""
    seen = run.receipt.cpu_tier if run.receipt else None
    if not seen:
        return None
    autotuned = seen.get("autotuned", {})
    return {"evidence": EVIDENCE, "versions": seen.get("versions", {}), "violations": seen.get("violations", []),
            "sparse_launches": seen.get("sparse_launches", []), "bf16_skipped": seen.get("bf16_skipped", []),
            "autotuned": autotuned, "autotune_seconds": round(sum(k.get("seconds", 0) for k in autotuned.values()), 3),
            "launches": seen.get("launches", 0), "device_capability": seen.get("device_capability"),
            "cuda_queries": seen.get("cuda_queries", {}), "libdevice": seen.get("libdevice", {}),
            "crashes": seen.get("crashes", []), "launches_by_test": seen.get("launches_by_test", {})}


def not_exercised(run: TargetRun) -> list[str]:
    """The tests that passed under the tier having launched no kernel and called no route: they ran,
    and no kernel of the checkout's was tested by them (a CPU op of torch's answered instead)."""
    seen = run_evidence(run)
    if not seen or seen["launches_by_test"] is None:  # the items ran in xdist's workers: unknown here
        return []
    exercised = {junit_id(test) for test in [*seen["launches_by_test"], *(run.receipt.routed_tests if run.receipt else [])]}
    return [case.test_id for case in run.cases if case.outcome == "passed" and case.test_id not in exercised]


def observe(stage: StageResult, run: TargetRun) -> None:
    """Notes for what the tier did in a run that a reader should know: the autotune sweeps and their
    cost, and libdevice functions it could not run."""
    seen = run_evidence(run)
    if not seen:
        return
    idle = not_exercised(run)
    if idle:
        stage.finding("cpu-tier.not-exercised", "note", f"{stage.name}: {len(idle)} of {run.stats.executed} tests passed "
                      f"under the CPU tier without launching a kernel or calling a route, so they tested no kernel: "
                      f"{', '.join(idle[:3])}{' and more' if len(idle) > 3 else ''}")
    missing = sorted((seen["libdevice"] or {}).get("without_equivalent") or {})
    if missing:
        stage.finding("cpu-tier.libdevice-missing", "note", f"{stage.name}: libdevice {', '.join(missing)} has no equivalent in the Triton "
                              "interpreter; kernels calling it cannot run on the CPU tier")
    if seen["autotuned"]:
        sweeps = "; ".join(f"{kernel}: {k['configs_run']} configs over {k['keys']} autotune keys"
                           + (f" ({k['duplicates_skipped']} differing only in launch options skipped)"
                              if k["duplicates_skipped"] else "") for kernel, k in seen["autotuned"].items())
        stage.finding("cpu-tier.autotune-once", "note", f"{stage.name}: autotune ran every config once per kernel and key, "
                              f"{seen['autotune_seconds']:.2f}s in all ({sweeps})")


def crashes(evidence: dict | None) -> list[dict]:
    """The tests (None: the collection or the script) the tier itself could not run, with their cause."""
    return list((evidence or {}).get("crashes") or [])


def crash_summary(found: list[dict]) -> str:
    """The distinct causes, most frequent first, with the first test each ended."""
    by_cause: dict[str, list] = {}
    for crash in found:
        by_cause.setdefault(crash["cause"], []).append(crash.get("test"))
    ordered = sorted(by_cause.items(), key=lambda item: -len(item[1]))
    return "; ".join(f"{cause} ({len(tests)} {'test' if len(tests) == 1 else 'tests'}, first "
                     f"{tests[0] or 'at collection'})" for cause, tests in ordered[:3]) + \
        (f"; and {len(ordered) - 3} more causes" if len(ordered) > 3 else "")


def tier_failure(run: TargetRun) -> list[dict]:
    """The run's tier crashes when they account for every failed or errored test (a collection crash
    accounts for all): the run's red is then the tier's, not the code's. Empty otherwise."""
    found = crashes(run_evidence(run))
    if not found or run.passed:
        return []
    tests = {crash.get("test") for crash in found}
    if None in tests or run.stats.failures + run.stats.errors <= len(tests):
        return found
    return []


def _signature(violation: dict) -> tuple:
    return violation.get("kernel"), violation.get("op"), violation.get("argument")


def head_only_violations(head: TargetRun, base_evidence: dict | None) -> list[dict]:
    """Sanitizer violations on head whose kernel, access and argument base did not show."""
    seen = run_evidence(head)
    if not seen:
        return []
    on_base = {_signature(v) for v in ((base_evidence or {}).get("violations") or [])}
    return [v for v in seen["violations"] if _signature(v) not in on_base]


def blocker(ctx: Context, name: str, run: TargetRun, base: dict | None, fields: dict) -> StageResult | None:
    """A fail with a blocker when the bounds sanitizer raised on head where base ran under the tier
    and did not (or base has no such target, or there is no patch); None otherwise: with no
    comparable base run the ordinary attribution decides."""
    base = base or {}
    if not ctx.request.has_patch:
        where = "in the supplied checkout"
    elif base.get("state") in ("target-not-present", "target-absent"):
        where = "in a target the PR adds"
    elif base.get("state") in ("ran", "all-skipped") and base.get("cpu_tier"):
        where = "on head and not on base"
    else:
        return None
    new = head_only_violations(run, base.get("cpu_tier"))
    if not new:
        return None
    stage = result(name, "fail", f"the bounds sanitizer raised on head: {describe(new[0])}", **fields)
    more = f" (and {len(new) - 1} more)" if len(new) > 1 else ""
    return stage.finding("cpu-tier.out-of-bounds", "blocker", f"out-of-bounds memory access {where}: {describe(new[0])}{more}")


def sparse_skip(name: str, run: TargetRun, fields: dict) -> StageResult | None:
    """A skip for a script run that ran sparse launches the sanitizer passed, whatever its exit:
    their outputs were never computed in full, so neither a pass nor a failure is evidence (pytest
    runs say so per test)."""
    seen = run_evidence(run)
    if not seen or run.runner != "script" or not seen["sparse_launches"] or seen["violations"]:
        return None
    launches = ", ".join(f"{s['kernel']} {tuple(s['grid'])}" for s in seen["sparse_launches"][:3])
    ended = "exited 0" if run.passed else f"failed (exit {run.exit})"
    stage = result(name, "skip", f"the script {ended} after sparse launches ({launches}): only their first and last "
                                 "programs ran, so its outputs were not computed in full and prove nothing; the bounds "
                                 "sanitizer found nothing", **fields)
    return stage.finding("cpu-tier.sparse-grid-bounds-only", "note", f"{name}: sparse-grid launches were checked for bounds only")


def credit_fixes(stage: StageResult, head: TargetRun, base: dict | None) -> None:
    """A positive note when base violated bounds and head, run under the tier, no longer does."""
    seen = run_evidence(head)
    if not seen or not base or not base.get("cpu_tier"):
        return
    on_head = {_signature(v) for v in seen["violations"]}
    fixed = {_signature(v): v for v in base["cpu_tier"].get("violations") or [] if _signature(v) not in on_head}
    for violation in fixed.values():
        stage.finding("cpu-tier.out-of-bounds-fixed", "note", f"this PR fixes an out-of-bounds {violation['op']} that base has: {describe(violation)}")


def describe(violation: dict) -> str:
    where = f" in {violation['test']}" if violation.get("test") else ""
    return (f"{violation['op']} out of bounds in kernel {violation['kernel']}{where}: argument "
            f"{violation['argument']} at element offset {violation['element_offset']} of an allocation of "
            f"{violation['extent_elements']} elements (program {tuple(violation['program'])})")


STAGE = StageSpec(NAME, run, requires=(GpuClaim,), reads_if_present=(RuntimeCompat,), provides=(CpuTier,), sets=("cpu_tier", "cpu_tier_reason"))
