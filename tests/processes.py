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
