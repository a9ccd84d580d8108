from pathlib import Path


def alive(pid: int) -> bool:
    """A process that still runs; a zombie waiting for a non-reaping init has already died."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
