"""Pick idle GPUs over a sampling window, and hold the claim as a lock for the whole run.

A device is idle when its peak GFX activity over the window stays at or below max_busy_pct (or
activity cannot be read at all: then VRAM alone decides and the basis says `vram-only`), its
used VRAM is at most max_used_gib and its free VRAM at least min_free_gib.

Exit codes, as a command (`python -m kvtasks.gpu.picker --samples N --interval S --quiet --all`)
and as a library: 0 chosen, 1 GPUs present but none idle, 2 no management library could query
the GPUs, 3 no GPUs. stdout carries only device indices, best first; stderr always carries one
`idleness-basis: activity+vram|vram-only` line when something was chosen.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


from kvtasks.system import faults, locks, processes
from kvtasks.gpu import lease
from kvtasks.gpu import device_nodes_present, open_backends
from kvtasks.gpu.backend import Backend, BackendUnavailable, Device
from kvtasks.host import IdleSettings  # KVTASKS_IDLE_<FIELD> overrides a default, e.g. KVTASKS_IDLE_SAMPLES=3
from kvtasks.errors import UsageError

CHOSEN, NONE_IDLE, UNQUERYABLE, NO_GPUS, NO_ANSWER = 0, 1, 2, 3, -1
EXTERNAL_GRACE_S = 60.0  # what a PICKER override may take beyond its sampling window
HEADLINES = {
    NO_ANSWER: "the PICKER override gave no usable answer",
    NONE_IDLE: "GPUs present but none stayed below the idleness thresholds across the window",
    UNQUERYABLE: "GPU management (AMD SMI / NVML) could not be queried; this says nothing about the GPUs",
    NO_GPUS: "this host reports no GPUs",
}


@dataclass
class Window:
    """One device seen across the sampling window, and whether it counts as idle."""

    device: Device
    readings: list[float | None] = field(default_factory=list)
    used_gib: float = 0.0
    free_gib: float = 0.0
    verdict: str = ""

    @property
    def known(self) -> list[float]:
        return [value for value in self.readings if value is not None]

    @property
    def peak(self) -> float | None:
        return max(self.known) if self.known else None

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.known) if self.known else None

    @property
    def basis(self) -> str:
        return "activity+vram" if self.known else "vram-only"

    def judge(self, settings: IdleSettings) -> bool:
        if self.device.index is None:
            self.verdict = "SKIP no device index"
        elif self.peak is not None and self.peak > settings.max_busy_pct:
            self.verdict = f"BUSY peaked {self.peak:g}%"
        elif self.used_gib > settings.max_used_gib:
            self.verdict = f"HELD {self.used_gib:.1f} GiB used"
        elif self.free_gib < settings.min_free_gib:
            self.verdict = f"FULL {self.free_gib:.1f} GiB free"
        else:
            self.verdict = "idle" if self.peak is not None else "idle by VRAM only (activity unavailable)"
            return True
        return False

    def rank_key(self) -> tuple:
        # measured devices before unknown ones; then quietest, then emptiest
        return (self.peak is None, self.peak or 0.0, self.mean or 0.0, self.used_gib, -self.free_gib)


@dataclass
class Pick:
    code: int
    message: str
    ranked: list[Window] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    vendor: str | None = None

    @property
    def basis(self) -> str:
        return self.ranked[0].basis if self.ranked else "unknown"


def _sample(backend: Backend, devices: list[Device], settings: IdleSettings) -> list[Window]:
    windows = [Window(device) for device in devices]
    for sample in range(settings.samples):
        if sample:
            faults.point("picker")
            time.sleep(settings.interval_s)
        for window in windows:
            window.readings.append(backend.activity(window.device))
    for window in windows:  # resident VRAM moves slowly: one reading after the window
        used, total = backend.vram_mib(window.device)
        window.used_gib, window.free_gib = used / 1024, (total - used) / 1024
    return windows


def pick(settings: IdleSettings | None = None, arch: str | None = None) -> Pick:
    """The idle GPUs, best first; with `arch`, only GPUs of that architecture are candidates."""
    settings = settings or IdleSettings.from_environ()
    backends, open_failures = open_backends()
    query_failures, other_archs = [], []
    try:
        for backend in backends:
            try:
                devices = backend.devices()
                other_archs += [device.arch for device in devices if arch and device.arch != arch]
                devices = [device for device in devices if not arch or device.arch == arch]
                if not devices:
                    continue
                windows = _sample(backend, devices, settings)
            except BackendUnavailable as exc:
                query_failures.append(str(exc))
                continue
            idle = sorted((w for w in windows if w.judge(settings)), key=Window.rank_key)
            if idle:
                return Pick(CHOSEN, f"{len(idle)} of {len(windows)} {backend.vendor} GPUs idle", idle, windows,
                            backend.vendor)
            unknown = all(w.peak is None for w in windows)
            verdicts = "; ".join(f"{w.device.index}: {w.verdict}" for w in windows)
            return Pick(NONE_IDLE, f"{len(windows)} {backend.vendor} GPUs ({verdicts})"
                                   + (", activity unavailable on every GPU" if unknown else ""),
                        [], windows, backend.vendor)
    finally:
        for backend in backends:
            backend.close()
    if other_archs and not query_failures:
        return Pick(NO_GPUS, f"no GPU of architecture {arch} (this host has {', '.join(sorted(set(other_archs)))})")
    said = "; ".join(query_failures + open_failures) or "the management libraries report no devices"
    if query_failures:
        return Pick(UNQUERYABLE, said)
    if device_nodes_present():
        return Pick(UNQUERYABLE, f"GPU device nodes exist but no management library reported a device: {said}")
    return Pick(NO_GPUS, f"no GPU device node (/dev/kfd, /dev/nvidiactl), and {said}")


def find_device(index: int) -> tuple[Device, Backend] | None:
    """The device a picker named by its visible index, with an open backend (caller closes it)."""
    backends, _ = open_backends()
    found = None
    for backend in backends:
        if found is None:
            try:
                match = [d for d in backend.devices() if d.index == index]
            except BackendUnavailable:
                match = []
            if match:
                found = (match[0], backend)
                continue
        backend.close()
    return found


def run_external(command: str, settings: IdleSettings) -> tuple[int, list[int], str, str]:
    """Run the PICKER override: (exit code, ranked indices, idleness basis, stderr tail).

    It gets its sampling window plus EXTERNAL_GRACE_S; one that runs longer is killed with its
    group and answers NO_ANSWER with the timeout as what it said."""
    argv = [command, "--samples", str(settings.samples), "--interval", str(settings.interval_s), "--quiet"]
    timeout_s = settings.samples * settings.interval_s + EXTERNAL_GRACE_S
    done = processes.run([*argv, "--all"], timeout_s=timeout_s)
    if not done.timed_out and done.returncode not in (0, 1, 2, 3) and "--all" in done.stderr:
        done = processes.run(argv, timeout_s=timeout_s)  # an older picker
    if done.timed_out:
        return NO_ANSWER, [], "unknown", f"PICKER {done.said()}"
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    indices = [int(line) for line in lines if line.isdigit()]
    if done.returncode == 0 and len(indices) != len(lines):
        return NO_ANSWER, [], "unknown", f"picker printed a non-numeric line: {lines[0]!r}"
    basis = [line.split(":", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("idleness-basis:")]
    return done.returncode, indices, (basis[-1] if basis else "unknown"), done.stderr.strip()[-300:]


def resolve_external(value: str) -> str | None:
    """The PICKER executable, or None when it is missing or not executable."""
    found = shutil.which(value)
    return found if found and os.access(found, os.X_OK) else None


# -- the claim: a non-blocking flock held by the validating process ----------------------------
# (by its lease owner when one runs: see kvtasks.gpu.lease; workers of one validator share it)

@dataclass(eq=False)
class Lease:
    index: int
    path: Path
    fd: int | None  # None: the validator's lease owner holds the lock
    basis: str = "unknown"  # the idleness basis the claim rested on, for PRs that reuse it


_HELD: list[Lease] = []


def lock_dir() -> Path:
    return Path(os.environ.get("KVTASKS_LOCK_DIR") or "/tmp")


def try_lock(index: int) -> Lease | None:
    if lease.running():
        answer = lease.ask({"op": "lock", "index": index})
        faults.point("lease")
        return Lease(index, Path(answer["path"]), None, answer["basis"]) if answer.get("locked") else None
    path = lock_dir() / f"gpu-{index}.lock"
    fd = locks.try_hold(path)
    if fd is None:
        return None
    claim = Lease(index, path, fd)
    _HELD.append(claim)
    faults.point("lease")
    return claim


def remember_basis(claim: Lease, basis: str) -> None:
    """The idleness basis the claim rests on, for later PRs of the run that reuse it."""
    claim.basis = basis
    if claim.fd is None and lease.running():
        lease.ask({"op": "basis", "index": claim.index, "basis": basis})


def release(claim: Lease) -> None:
    if claim.fd is None and lease.running():
        lease.ask({"op": "release", "index": claim.index})
    elif claim in _HELD:
        _HELD.remove(claim)
        os.close(claim.fd)


def release_all() -> None:
    for claim in held():
        release(claim)


def held() -> list[Lease]:
    if lease.running():
        return [Lease(index, Path(path), None, basis) for index, path, basis in lease.ask({"op": "held"})["held"]]
    return list(_HELD)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvtasks.gpu.picker", description=__doc__.splitlines()[0])
    try:
        defaults = IdleSettings.from_environ()
    except UsageError as exc:  # a bad KVTASKS_IDLE_* is one line, as at every front door
        parser.error(str(exc))
    parser.add_argument("--samples", type=int, default=defaults.samples)
    parser.add_argument("--interval", type=float, default=defaults.interval_s)
    parser.add_argument("--max-busy", type=float, default=defaults.max_busy_pct)
    parser.add_argument("--max-used-gib", type=float, default=defaults.max_used_gib)
    parser.add_argument("--min-free-gib", type=float, default=defaults.min_free_gib)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--all", action="store_true", help="print every idle index, best first")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.interval < 0:
        parser.error("--samples must be at least 1 and --interval at least 0")
    result = pick(IdleSettings(samples=args.samples, interval_s=args.interval, max_busy_pct=args.max_busy,
                               max_used_gib=args.max_used_gib, min_free_gib=args.min_free_gib))
    if not args.quiet:
        for window in result.windows:
            peak = "n/a" if window.peak is None else f"{window.peak:g}%"
            print(f"smi {window.device.smi_index} index {window.device.index} {window.device.bdf} peak {peak} "
                  f"used {window.used_gib:.1f} GiB free {window.free_gib:.1f} GiB: {window.verdict}",
                  file=sys.stderr)
    if result.code == CHOSEN:
        for window in result.ranked if args.all else result.ranked[:1]:
            print(window.device.index)
        print(f"idleness-basis: {result.basis}", file=sys.stderr)
    else:
        print(f"{HEADLINES[result.code]}: {result.message}", file=sys.stderr)
    return result.code


if __name__ == "__main__":
    sys.exit(main())
