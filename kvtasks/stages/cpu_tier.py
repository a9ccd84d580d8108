"""cpu_tier: whether Triton kernels run in the interpreter on the CPU, and what that evidence says.

--cpu-tier triton turns it on; auto turns it on when no GPU was claimed and the target (or what it
imports from the checkout) imports triton. It needs triton, torch and numpy installed for PYTHON_BIN
(as the runtime probe found them); their versions are recorded, and each run's receipt records
the versions that run imported. Runs under the tier carry the in-target hooks of target/triton_cpu.py
(bounds sanitizer, device redirect, autotune on the interpreter, sparse grid) and see no GPU.

What the tier changes in judging: a sanitizer violation on head that base does not show is a
blocker; the interpreter credits no architecture; interpreter timings are never perf evidence.
"""
from __future__ import annotations

import ast

from kvtasks import target
from kvtasks.stages import Context, StageResult, gpu_claim, result
from kvtasks.target.launch import TargetRun

NAME = "cpu_tier"
EVIDENCE = "triton-interpreter (CPU)"


def _imports_triton(source: str | None) -> bool:
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name.split(".")[0] == "triton" for name in names):
            return True
    return False


def run(ctx: Context) -> StageResult:
    request = ctx.request
    if request.cpu_tier == "off":
        return _off("--cpu-tier is off")
    if request.cpu_tier == "auto":
        claim = ctx.earlier.get(gpu_claim.NAME)
        if claim is not None and claim.stage.status == "pass":
            return _off("auto: a GPU was claimed, so kernels run on it")
        importers = [path for path in ctx.target_sources() if _imports_triton(ctx.head_text(path))]
        if not importers:
            return _off("auto: neither the target, its conftest.py files nor the checkout modules it imports "
                        "import triton")
        why = f"auto: no GPU was claimed and {', '.join(importers)} import triton"
    else:
        why = "--cpu-tier triton"
    installed = _versions(ctx.fact("runtime_fingerprint") or {})
    missing = [name for name in ("triton", "torch", "numpy") if name not in installed]
    if missing:
        stage_result = _off(f"{why}, but {request.host.python_bin} has no {', '.join(missing)} installed "
                            "(or runtime compatibility was not established)")
        return stage_result.finding("note", f"the Triton CPU tier was asked for and could not run: "
                                            f"{', '.join(missing)} missing; install kvtasks[triton-cpu] into PYTHON_BIN")
    tier = {"interpreter": "triton", "evidence": EVIDENCE, "reason": why, "triton": installed["triton"],
            "torch": installed["torch"], "numpy": installed["numpy"], "sanitizer": "on",
            "device_redirect": "cuda -> cpu", "autotune": "every config once, first kept",
            "sparse_grid_programs": request.cpu_sparse_grid}
    return StageResult(name=NAME, selection={"cpu_tier": "triton", "cpu_tier_reason": why}, facts={"cpu_tier": tier})


def _versions(fingerprint: dict) -> dict[str, str]:
    """name -> version of the distributions the runtime probe found installed for PYTHON_BIN."""
    found = {}
    for entry in fingerprint.get("distributions") or []:
        name, _, version = entry.partition("==")
        found[name.lower()] = version
    return found


def _off(reason: str) -> StageResult:
    return StageResult(name=NAME, selection={"cpu_tier": "off", "cpu_tier_reason": reason}, facts={"cpu_tier": None})


def active(ctx: Context) -> bool:
    return bool(ctx.fact("cpu_tier"))


def launch_options(ctx: Context) -> dict:
    """What every correctness run is launched with: the claimed device, or on the tier none plus
    the tier's in-target settings."""
    if not active(ctx):
        return {"visible_devices": gpu_claim.visible_devices(ctx), "cpu_tier": None}
    return {"visible_devices": target.NO_DEVICE, "cpu_tier": {"sparse_programs": ctx.request.cpu_sparse_grid}}


def run_evidence(run: TargetRun) -> dict | None:
    """What the tier saw in one run (the versions it imported, violations, sparse launches, bf16
    skips), from its receipt."""
    seen = (run.receipt or {}).get("cpu_tier")
    if not seen:
        return None
    return {"evidence": EVIDENCE, "versions": seen.get("versions", {}), "violations": seen.get("violations", []),
            "sparse_launches": seen.get("sparse_launches", []), "bf16_skipped": seen.get("bf16_skipped", []),
            "autotuned": seen.get("autotuned", {}), "launches": seen.get("launches", 0)}


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
    elif base.get("state") == "target-not-present":
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
    return stage.finding("blocker", f"out-of-bounds memory access {where}: {describe(new[0])}{more}")


def sparse_skip(name: str, run: TargetRun, fields: dict) -> StageResult | None:
    """A skip for a failed script run that ran sparse launches the sanitizer passed: its outputs
    were never computed in full, so its failure is no evidence (pytest runs say so per test)."""
    seen = run_evidence(run)
    if not seen or run.runner != "script" or run.passed or not seen["sparse_launches"] or seen["violations"]:
        return None
    launches = ", ".join(f"{s['kernel']} {tuple(s['grid'])}" for s in seen["sparse_launches"][:3])
    stage = result(name, "skip", f"the script failed after sparse launches ({launches}): only their first and last "
                                 "programs ran, so its outputs prove nothing; the bounds sanitizer found nothing",
                   **fields)
    return stage.finding("note", f"{name}: sparse-grid launches were checked for bounds only")


def describe(violation: dict) -> str:
    where = f" in {violation['test']}" if violation.get("test") else ""
    return (f"{violation['op']} out of bounds in kernel {violation['kernel']}{where}: argument "
            f"{violation['argument']} at element offset {violation['element_offset']} of an allocation of "
            f"{violation['extent_elements']} elements (program {tuple(violation['program'])})")
