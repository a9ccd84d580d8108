"""The run's launcher: what a stage asks for (kvtasks.stages.launches) launched, with the defaults
every launch of a run shares applied in one place: the runner the selection chose, the device the
GPU claim holds (none on the CPU tier, whose in-target settings ride every correctness run
instead), the run's scratch folder and each side's phase caches.

A stage holds the tree lent on the side it asks about; the executor launches into whatever tree is
lent now, and never reads a stage's results.
"""
from __future__ import annotations

from kvtasks.harness import launching, layout, replaying
from kvtasks.harness.environment import NO_DEVICE
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import Context, cpu_tier, gpu_claim
from kvtasks.stages.launches import Asked, ImportProbe, Launch, PytestCheck, Replay, Timing


def launch(ctx: Context, asked: Asked):
    """Launch what a stage asked for in the tree lent now (kvtasks.stages.launches.Launcher)."""
    if isinstance(asked, Launch):
        return _target_run(ctx, asked)
    if isinstance(asked, Timing):
        return _timing(ctx, asked)
    if isinstance(asked, Replay):
        return _replay(ctx, asked)
    if isinstance(asked, ImportProbe):
        return launching.probe_runtime(ctx.request, run_dir=asked.folder, module=asked.module, roots=list(asked.roots),
                                       visible_devices=gpu_claim.visible_devices(ctx), cpu_tier=asked.tier)
    if isinstance(asked, PytestCheck):
        return launching.pytest_available(ctx.request, ctx.run_dir)
    raise TypeError(f"nothing launches a {type(asked).__name__}")


def devices_and_tier(ctx: Context) -> dict:
    """What every correctness run is launched with: the claimed device, or on the CPU tier none and
    the tier's in-target settings."""
    if not cpu_tier.active(ctx):
        return {"visible_devices": gpu_claim.visible_devices(ctx), "cpu_tier": None}
    return {"visible_devices": NO_DEVICE, "cpu_tier": cpu_tier.settings(ctx)}


def _target_run(ctx: Context, asked: Launch) -> TargetRun:
    request = ctx.request if asked.target is None else ctx.request.model_copy(update={"target": asked.target})
    return launching.run(request, runner=asked.runner or ctx.selection.runner, run_dir=ctx.run_dir, label=asked.label,
                         **devices_and_tier(ctx), argv=list(asked.argv), env_extra=dict(asked.env),
                         grid_argnames=list(asked.grid_argnames), grid_rows=[list(row) for row in asked.grid_rows],
                         poisoned_row=list(asked.poisoned_row), sensitivity=asked.corruption, seen_as=asked.seen_as,
                         scratch=asked.scratch, impact=asked.impact)


def _timing(ctx: Context, asked: Timing) -> TargetRun:
    # a timing run shares its side's phase caches, so a JIT compile is not what gets timed
    phase_root = ctx.phase_roots.get(asked.side, ctx.run_dir)
    return launching.time_run(ctx.request, phase_root=phase_root, phase=asked.side, label=asked.label, file=asked.file,
                              argv=list(asked.argv), visible_devices=gpu_claim.visible_devices(ctx),
                              run_dir=ctx.run_dir)


def _replay(ctx: Context, asked: Replay) -> str:
    request = ctx.request
    done = replaying.replay(request, side=asked.side, folders=list(asked.folders), out=asked.out, run_dir=ctx.run_dir,
                            visible_devices=devices_and_tier(ctx)["visible_devices"],
                            import_roots=layout.python_path(request))
    if done.timed_out:
        return f"the {asked.side} replay timed out after {request.host.timeout}s"
    if done.returncode != 0:
        return f"the {asked.side} replay exited {done.returncode}: {done.stderr.strip()[-400:]}"
    return ""
