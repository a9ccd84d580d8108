"""One target run: the constructed environment, the launch, and what the run left behind."""
from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Mapping

from kvtasks.system import containment, progress
from kvtasks.harness.heartbeat import Heartbeat
from kvtasks.gpu import lease
from kvtasks.request import Request
from kvtasks.harness import environment, receipts, runtime_probe, startup
from kvtasks.harness.environment import NO_DEVICE
from kvtasks.harness.layout import python_path
from kvtasks.harness.launch import launch, pytest_runnable
from kvtasks.harness.target_run import TargetRun


def gpu_turn(request: Request, visible_devices: Mapping[str, str]):
    """Wait for this validator's other workers to finish with the device (at most two target
    timeouts), saying so, rather than run on a device another target is using."""
    return lease.turn(visible_devices, bound_s=2 * max(request.host.timeout, request.host.perf_timeout) + 60,
                      say=progress.notice)


# what Python imports from its path at start-up, before anything kvtasks controls runs
STARTUP_MODULES = ("sitecustomize", "usercustomize")


def startup_shield(run_dir: Path) -> Path:
    """A folder of stand-ins for the start-up modules (kvtasks.harness.startup): first on a launch's
    path, the checkout's never run, whatever the process."""
    folder = run_dir / "startup"
    folder.mkdir(parents=True, exist_ok=True)
    for name in STARTUP_MODULES:
        shutil.copyfile(startup.__file__, folder / f"{name}.py")
    return folder


def target_env(request: Request, run_dir: Path, phase: str, label: str,
               visible_devices: Mapping[str, str] = NO_DEVICE, first: list[str] = ()) -> dict[str, str]:
    """Every process kvtasks launches with the checkout on its path: the constructed environment,
    `first` then the start-up shield before the checkout's import roots; a git it runs finds no
    repository above the checkout (one whose `.git` vanished is no repository, never its parent's)."""
    env = environment.construct(
        os.environ, phase_dir=run_dir / phase, label=label,
        python_path=[*first, str(startup_shield(run_dir)), *python_path(request)], visible_devices=visible_devices,
    )
    env["GIT_CEILING_DIRECTORIES"] = str(Path(request.repo).resolve().parent)
    env.update(environment.given_pairs(request.env))
    return env


# the runs whose route calls the replay uses, and the corrupted runs seen as them (which must do all
# they do): the others keep no capture, which costs a copy of every sampled call's arrays
CAPTURED = frozenset(f"{side}-{kind}" for side in ("base", "head") for kind in ("repo", "grid", "session"))


def run(request: Request, *, runner: str, run_dir: Path, label: str,
        visible_devices: Mapping[str, str] = NO_DEVICE, argv: list[str] | None = None,
        env_extra: Mapping[str, str] | None = None, grid_argnames: list[str] = (),
        grid_rows: list[list[str]] = (), poisoned_row: list[str] = (), cpu_tier: dict | None = None,
        sensitivity: dict | None = None, seen_as: str | None = None, scratch: Path | None = None,
        impact: Path | None = None) -> TargetRun:
    """Run the target once under the label's phase (the part before the first '-'), with the route
    probe installed; the run carries its own receipt and observed_work. A grid reaches it through
    argv, env_extra, or the probe's parametrize replacement (grid_argnames + grid_rows); with a
    poisoned_row too, one merged session runs the repository's tests, the grid and the poisoned cell
    (kvtasks.harness.session reads its parts). With
    cpu_tier (its settings) Triton kernels run in the interpreter under the tier's hooks; with
    sensitivity (mode, error, output) the probe corrupts what the routes produce; with impact (a
    file) the probe maps which item called which route there instead of watching them.

    The process sees `seen_as` (default: the label) as its VALIDATION_PHASE, its phase's caches
    under `scratch` (default: run_dir), and its probe, JUnit file, log and receipt in a randomly
    named folder of this launch's there under neutral names, moved to run_dir/runs/ under the
    label's names once it ended: a corrupted run launched `seen_as` the run it repeats, in that
    run's scratch, is that run again as far as anything in the process can read."""
    seen_as = seen_as or label
    phase = seen_as.split("-", 1)[0]
    routes = request.routes
    scratch = scratch or run_dir
    private = scratch / "launches" / secrets.token_hex(8)
    probe = receipts.prepare(private / "probe", routes=routes, shape_vars=request.shape_var_names,
                             receipt=private / "receipt.json", grid_argnames=grid_argnames, grid_rows=grid_rows,
                             poisoned_row=poisoned_row, cpu_tier=cpu_tier, sensitivity=sensitivity,
                             captures=private / "calls" if seen_as in CAPTURED else None, impact=impact)
    env = target_env(request, scratch, phase, seen_as, visible_devices, first=[str(probe.folder)])
    env.update(env_extra or {})
    env.update(probe.environment)
    if cpu_tier:
        env["TRITON_INTERPRET"] = "1"
    with gpu_turn(request, visible_devices):
        done = launch(
            label=label, runner=runner, target=request.target, cwd=Path(request.repo), env=env,
            python_bin=request.host.python_bin, run_dir=run_dir / "runs", timeout_s=request.host.timeout,
            probe=probe.name, argv=argv, prefix=request.launch_prefix([str(scratch)], left=str(private / "left")),
            private=private,
            before_retry=probe.write_configuration, log_ceiling=request.host.log_ceiling,
            beat=Heartbeat(label, probe.receipt.with_name(probe.receipt.name + ".progress"), request.host.heartbeat_s),
        )
    done.survivors += containment.namespace_survivors(private / "left")
    done.died = receipts.death(probe, done.exit, done.timed_out)
    receipt, digest, note = receipts.read(probe, label)
    kept = run_dir / "runs" / f"receipt-{label}.json"
    if probe.receipt.is_file():
        probe.receipt.replace(kept)
    captures = run_dir / "runs" / f"calls-{label}"
    shutil.rmtree(captures, ignore_errors=True)
    if (private / "calls").is_dir():
        shutil.move(str(private / "calls"), captures)
        done.captures = str(captures)
    shutil.rmtree(private, ignore_errors=True)
    done.receipt, done.receipt_path, done.receipt_sha256, done.receipt_note = receipt, str(kept), digest, note
    done.scratch = str(scratch)
    if routes:
        done.stats.observed_work = sum(receipt.route_calls.values()) if receipt else 0
    return done


def time_run(request: Request, *, phase_root: Path, phase: str, label: str, file: str, argv: list[str],
             visible_devices: Mapping[str, str] = NO_DEVICE, run_dir: Path | None = None) -> TargetRun:
    """One timing run: no probe, PERF_TIMEOUT, and the phase's caches shared with its correctness
    runs so a JIT compile is not what gets timed; its log goes to run_dir (default the phase root)."""
    env = target_env(request, phase_root, phase, label, visible_devices)
    logs = (run_dir or phase_root) / "perf"
    with gpu_turn(request, visible_devices):
        return launch(label=label, runner="script", target=file, cwd=Path(request.repo), env=env,
                      python_bin=request.host.python_bin, run_dir=logs, timeout_s=request.host.perf_timeout,
                      probe=None, argv=argv, prefix=request.launch_prefix([str(phase_root), str(logs)]),
                      log_ceiling=request.host.log_ceiling,
                      beat=Heartbeat(label, None, request.host.heartbeat_s))


def probe_runtime(request: Request, *, run_dir: Path, module: str, roots: list[str],
                  visible_devices: Mapping[str, str] = NO_DEVICE, cpu_tier: dict | None = None) -> tuple[dict | None, str]:
    """Import `module` the way the target would (with cpu_tier, its settings: under the tier's
    hooks); return what the probe saw (None if it died or timed out) and its log, which says which."""
    probe_dir = run_dir / "runtime"
    probe_dir.mkdir(parents=True, exist_ok=True)
    out = probe_dir / "runtime.json"
    out.unlink(missing_ok=True)
    env = target_env(request, run_dir, "head", "runtime-probe", visible_devices)
    tier = ""
    if cpu_tier:
        # the in-target package under a random name, in a folder of its own: nothing of it shadows the
        # checkout's modules
        package = receipts.neutral_name()
        shutil.rmtree(probe_dir / "tier", ignore_errors=True)
        receipts.copy_package(probe_dir / "tier" / package)
        tier = json.dumps({"folder": str(probe_dir / "tier"), "package": package, "settings": cpu_tier})
        env["TRITON_INTERPRET"] = "1"
    with gpu_turn(request, visible_devices):
        done = containment.run(
            # run as -c, not by path: the probe's own folder must not shadow the checkout's modules
            [*request.launch_prefix([str(run_dir)]), request.host.python_bin, "-c",
             Path(runtime_probe.__file__).read_text(), str(out), module, tier, *roots],
            cwd=request.repo, env=env, timeout_s=min(300, request.host.timeout),
        )
    log = (done.stdout + done.stderr)[-2000:]
    if done.timed_out:
        return None, f"the runtime probe {done.said()}: {log}"
    if not out.is_file():
        return None, f"probe exited {done.returncode} without a result: {log}"
    return json.loads(out.read_text()), log


# (interpreter, import path) pairs `python -m pytest` was seen to run with in this process: every
# group's gate asks, and each answer costs an interpreter that imports pytest
_PYTEST_RUNS: set[tuple[str, tuple[str, ...]]] = set()


def pytest_available(request: Request, run_dir: Path) -> str | None:
    """None when `python -m pytest` runs in the target's environment; otherwise why not (asked
    again each time: a failure may be the host's moment, not the environment)."""
    asked = (request.host.python_bin, tuple(python_path(request)))
    if asked in _PYTEST_RUNS:
        return None
    done = pytest_runnable(request.host.python_bin, target_env(request, run_dir, "probe", "pytest-version"),
                           cwd=run_dir)
    if not done.ok:
        return f"python -m pytest is not runnable with {request.host.python_bin}: {done.said()}"
    _PYTEST_RUNS.add(asked)
    return None


__all__ = ["run", "time_run", "probe_runtime", "pytest_available", "target_env"]
