import time
from pathlib import Path


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
