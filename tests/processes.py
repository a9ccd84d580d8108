import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def alive(pid: int, settle_s: float = 5.0) -> bool:
    """Whether the process still runs after a kill has had time to land (SIGKILL is asynchronous).

    A zombie waiting for a non-reaping init has already died.
    """
    deadline = time.monotonic() + settle_s
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return False
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


@contextmanager
def lock_held_elsewhere(path: Path) -> Iterator[None]:
    """Another process holds an exclusive flock on `path` for the duration (another validator)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(120)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait()


PROJECT = Path(__file__).resolve().parent.parent


def doit(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """This project's dodo.py run as a user runs it, with cache/ and reports/ under `home`."""
    env = {**os.environ, "KVTASKS_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), *args], cwd=PROJECT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def children(pid: int) -> list[int]:
    """The live processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split() if entry.name.isdigit() else None
        except OSError:
            continue
        if fields and fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def guardians(tree: Path) -> list[int]:
    """The live guardians (kvtasks.worktree.guardian) watching `tree`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if len(argv) > 2 and argv[1].endswith(b"guardian.py") and argv[2] == str(tree).encode() and alive(
                int(entry.name), settle_s=0):
            found.append(int(entry.name))
    return found


def wait_for_marker(marker: Path, process: subprocess.Popen, bound_s: float = 60) -> int:
    """The pid that stopped at a fault point (kvtasks.system.faults), once its marker says so."""
    from kvtasks.system import faults

    deadline = time.monotonic() + bound_s
    while (reached := faults.reached(marker)) is None:
        assert process.poll() is None, f"the validator exited ({process.returncode}) before its fault point"
        assert time.monotonic() < deadline, "the validator never reached its fault point"
        time.sleep(0.02)
    return reached[0]
