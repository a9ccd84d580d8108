"""A cgroup v2 per launch, where the host delegates one to the validator (kvtasks.system.containment).

Every process of a launch is in its cgroup whatever it does to its session, environment or
working directory, and `cgroup.kill` ends them all at once; the journal keeps the cgroup's path,
so a guardian recovering a dead validator's tree ends its launches through it. Only folders this
module made (their name's prefix) are ever ended: the journal lives where a target can write.
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

LAUNCH_PREFIX = "kvtasks-launch-"
END_BOUND_S = 10.0


_CGROUP_ROOT: list[Path | None] = []  # [the folder launches' cgroups go under, or None]; found once per process


def _own_cgroup() -> Path | None:
    """This process's cgroup v2 folder, if the unified hierarchy is mounted and says which."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    mount = next((line.split()[4] for line in mounts if " - cgroup2 " in line), None)
    if relative is None or mount is None:
        return None
    return Path(mount) / relative.lstrip("/")


def cgroup_root() -> Path | None:
    """Where this host lets the validator make a cgroup per launch: its own cgroup v2 folder when a
    child cgroup can be made there and has `cgroup.kill` (Linux 5.14); None otherwise."""
    if not _CGROUP_ROOT:
        found = None
        own = _own_cgroup()
        if own is not None:
            trial = own / f"kvtasks-check-{secrets.token_hex(4)}"
            try:
                trial.mkdir()
                if (trial / "cgroup.kill").exists() and os.access(trial / "cgroup.procs", os.W_OK):
                    found = own
                trial.rmdir()
            except OSError:
                pass
        _CGROUP_ROOT.append(found)
    return _CGROUP_ROOT[0]


def make() -> Path | None:
    root = cgroup_root()
    if root is None:
        return None
    folder = root / f"{LAUNCH_PREFIX}{secrets.token_hex(6)}"
    try:
        folder.mkdir()
    except OSError:
        return None
    return folder


def members(folder: Path) -> list[int]:
    try:
        return [int(pid) for pid in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def is_launch_cgroup(folder: Path) -> bool:
    """A cgroup this module made: named so, directly in the folder launches' cgroups go under. A
    journal names its launches' cgroups, and a target can write the journal: anything else it names
    (a folder of its own, another hierarchy) is never ended."""
    root = cgroup_root()
    try:
        return root is not None and folder.name.startswith(LAUNCH_PREFIX) and folder.resolve().parent == root.resolve() \
            and (folder / "cgroup.kill").is_file()
    except OSError:
        return False


def end(folder: Path, bound_s: float = END_BOUND_S) -> list[int]:
    """Kill every process in the cgroup (`cgroup.kill`), wait for it to empty and remove it;
    return the pids it held. A dead validator's cgroup is ended the same way by its guardian."""
    if not is_launch_cgroup(folder):
        return []
    found = members(folder)
    try:
        (folder / "cgroup.kill").write_text("1")
    except OSError:
        return found  # no cgroup.kill to write: nothing here ends by a list of pids it names
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            folder.rmdir()  # refused while a process is still in it
            return found
        except FileNotFoundError:
            return found
        except OSError:
            time.sleep(0.01)
    return found
