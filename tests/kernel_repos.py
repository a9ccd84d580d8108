"""Small git repositories built by the tests: real files, real commits, real patches."""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@kvtasks.invalid",
    "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@kvtasks.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env={**os.environ, **IDENTITY}, check=True,
                          capture_output=True, text=True).stdout


def write_files(repo: Path, files: dict[str, str | None]) -> None:
    for name, text in files.items():
        path = repo / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    write_files(path, files)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def make_patch(repo: Path, changes: dict[str, str | None], out: Path) -> Path:
    """Write the patch that turns the committed base into base+changes; leave the tree as it was."""
    write_files(repo, changes)
    git(repo, "add", "-A")
    out.write_text(git(repo, "diff", "--cached", "--binary"))
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-q", "-fdx")
    return out


def snapshot(repo: Path) -> tuple[str, dict[str, tuple[int, str]]]:
    """What 'handed back exactly as supplied' means: git's view and every byte and mode."""
    porcelain = git(repo, "status", "--porcelain", "--ignored", "--untracked-files=all")
    files = {}
    for path in sorted(repo.rglob("*")):
        if ".git" in path.relative_to(repo).parts:
            continue
        key = str(path.relative_to(repo))
        if path.is_dir():
            files[key] = (path.stat().st_mode, "dir")
        else:
            files[key] = (path.stat().st_mode, hashlib.sha256(path.read_bytes()).hexdigest())
    return porcelain, files


KERNEL = '''import numpy as np

TILE = 8


def scale_rows(x, factor):
    M, N = x.shape
    out = np.zeros_like(x)
    for start in range(0, N, TILE):
        out[:, start:start + TILE] = x[:, start:start + TILE] * factor
    return out
'''

KERNEL_TAIL_BUG = KERNEL.replace("range(0, N, TILE)", "range(0, N - N % TILE, TILE)")
# the kernel misbehaves only on the GPU at HIP index 1 (the fleet tests' second arch): a bug one arch
# shows
KERNEL_ARCH_BUG = KERNEL.replace("    return out\n", "    if __import__('os').environ.get('HIP_VISIBLE_DEVICES') == '1':\n"
                                                   "        out[:, -1] += 1\n    return out\n")

TESTS = '''import numpy as np
import pytest

from kernels.scale import scale_rows

SHAPES = [(4, 16), (3, 13)]


@pytest.mark.parametrize("M,N", SHAPES)
def test_scale(M, N):
    x = np.arange(M * N, dtype=np.float32).reshape(M, N)
    np.testing.assert_allclose(scale_rows(x, 2.0), x * 2.0, atol=1e-6)
'''


def kernel_repo(path: Path) -> Path:
    return make_repo(path, {
        "kernels/__init__.py": "",
        "kernels/scale.py": KERNEL,
        "tests/test_scale.py": TESTS,
        ".gitignore": "*.log\nbuild/\n",
    })


# A kernel module's first lines that leave a daemon at import, as a hostile kernel would: double fork,
# setsid, its environment cleared, in '/', every descriptor closed, SIGTERM ignored, a new process
# every 10 ms, each writing its pid into the heartbeat file {beat} until {beat}.stop exists
DAEMON_AT_IMPORT = '''import os
import signal
import time


def _daemonize(beat):
    if os.fork():
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.chdir("/")
        os.closerange(0, 1024)
        os.environ.clear()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while not os.path.exists(beat + ".stop"):
            if os.fork():
                os._exit(0)
            with open(beat, "a") as heartbeat:
                heartbeat.write(f"{{os.getpid()}}\\n")
            time.sleep(0.01)
    finally:
        os._exit(0)


_daemonize({beat!r})
'''


# A kernel package whose every import stands for GPU work: the process sleeps at its exit at least
# three times its own CPU time, and at least GPU_S seconds, so a batch of them is bound by the
# (simulated) GPUs, not by this machine's cores.
SLEEP_BOUND_INIT = '''import atexit
import os
import time

GPU_S = {gpu_s!r}
CPU_FACTOR = {cpu_factor!r}


def _gpu_work():
    spent = os.times()
    time.sleep(max(GPU_S, CPU_FACTOR * (spent.user + spent.system + spent.children_user + spent.children_system)))


atexit.register(_gpu_work)
'''


def sleep_bound_kernel_repo(path: Path, gpu_s: float, cpu_factor: float = 3.0) -> Path:
    """kernel_repo whose every target run sleeps as GPU work (SLEEP_BOUND_INIT): at least gpu_s, and
    cpu_factor times its own CPU time (so this machine's cores are not what a fleet bench measures)."""
    return make_repo(path, {
        "kernels/__init__.py": SLEEP_BOUND_INIT.format(gpu_s=gpu_s, cpu_factor=cpu_factor),
        "kernels/scale.py": KERNEL,
        "tests/test_scale.py": TESTS,
        ".gitignore": "*.log\nbuild/\n",
    })


# a tiled kernel whose tail tile is a statement of its own: what a PR changes to break only the tail
SPLIT_TAIL = '''import numpy as np

TILE = 64


def tiled_scale(x, factor):
    M, N = x.shape
    out = np.empty_like(x)
    full = N - N % TILE
    out[:, :full] = x[:, :full] * factor
    out[:, full:] = x[:, full:] * factor
    return out
'''

TILED = '''import numpy as np

TILE = 64


def tiled_scale(x, factor, num_heads=1):
    M, N = x.shape
    dtype_str = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}[x.dtype]
    out = np.empty_like(x)
    n_tiles = (N + TILE - 1) // TILE
    for tile in range(n_tiles):
        out[:, tile * TILE:(tile + 1) * TILE] = x[:, tile * TILE:(tile + 1) * TILE] * factor
    return out
'''
# the tail tile is never stored: every N % 64 != 0 leaves garbage in the last columns
TILED_TAIL_BUG = TILED.replace("n_tiles = (N + TILE - 1) // TILE", "n_tiles = N // TILE")
# a public-API restriction that only a num_heads axis reaches
TILED_HEADS_ASSERT = TILED.replace("    M, N = x.shape\n", "    M, N = x.shape\n    assert num_heads != 16, "
                                   "\"num_heads=16 is not supported\"\n")


def check(M, N, dtype_str):
    return (f"    x = np.arange({M} * {N}, dtype=DTYPES[{dtype_str}]).reshape({M}, {N}) % 7\n"
            f"    np.testing.assert_allclose(tiled_scale(x, 3.0), x * 3.0, atol=1e-3)\n")


PYTEST_HEADER = '''import os

import numpy as np
import pytest

from kernels.tiled import tiled_scale

DTYPES = {"f32": np.float32, "f16": np.float16}
'''
ENV_TEST = PYTEST_HEADER + '''

def shapes():
    spec = os.environ.get("TILED_SHAPES")
    if not spec:
        return [(4, 64, "f32"), (8, 128, "f32")]  # non-aligned rows disabled
    return [(int(m), int(n), d) for m, n, d in (row.split(",") for row in spec.split(";"))]


@pytest.mark.parametrize("M,N,dtype_str", shapes())
def test_tiled(M, N, dtype_str):
''' + check("M", "N", "dtype_str")
ARGNAMES_TEST = PYTEST_HEADER + '''

@pytest.mark.parametrize("M,N,dtype_str", [
    (4, 64, "f32"),
    (8, 128, "f16"),
    # (64, 2000, "f32"),
])
def test_tiled(M, N, dtype_str):
''' + check("M", "N", "dtype_str")
CLI_SCRIPT = '''import argparse

import numpy as np

from kernels.tiled import tiled_scale

DTYPES = {"f32": np.float32, "f16": np.float16}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", nargs="+", default=["4,64,f32", "8,128,f32"])
    parser.add_argument("--num-heads", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--mode", default="fast")
    args = parser.parse_args()
    for spec in args.shapes:
        m, n, dtype_str = spec.split(",")
        M, N = int(m), int(n)
        for heads in args.num_heads:
            x = np.arange(M * N, dtype=DTYPES[dtype_str]).reshape(M, N) % 7
            np.testing.assert_allclose(tiled_scale(x, 3.0, num_heads=heads), x * 3.0, atol=1e-3)
    print("checked", len(args.shapes), "shapes")


if __name__ == "__main__":
    main()
'''


def tiled_repo(path: Path) -> Path:
    return make_repo(path, {
        "kernels/__init__.py": "",
        "kernels/tiled.py": TILED,
        "tests/test_env.py": ENV_TEST,
        "tests/test_argnames.py": ARGNAMES_TEST,
        "bench/check_tiled.py": CLI_SCRIPT,
    })


class Bystander:
    """A git repository that kvtasks was never given, with work in progress: a committed file, an
    uncommitted edit, a staged one and an untracked file. Placed around the trees of destructive
    scenarios (the trees inside it, beside it, below it), it must come out byte-identical."""

    OWN = ("kept.txt", "edited.txt", "staged.txt", "notes/untracked.txt")

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "-q", "-b", "work")
        write_files(path, {"kept.txt": "committed\n", "edited.txt": "committed\n", "staged.txt": "committed\n"})
        git(path, "add", "kept.txt", "edited.txt", "staged.txt")
        git(path, "commit", "-q", "-m", "bystander")
        write_files(path, {"edited.txt": "uncommitted edit\n", "staged.txt": "staged edit\n",
                           "notes/untracked.txt": "untracked\n"})
        git(path, "add", "staged.txt")
        self.placed = self.state()

    def state(self) -> tuple:
        """Its own files' bytes, its index, HEAD and every ref: not `git status`, since trees placed
        inside it are untracked files of its own."""
        dot_git = self.path / ".git"
        files = {name: (self.path / name).read_bytes() if (self.path / name).exists() else None for name in self.OWN}
        index = hashlib.sha256((dot_git / "index").read_bytes()).hexdigest()
        return files, index, (dot_git / "HEAD").read_text(), git(self.path, "for-each-ref")


def late_writer_pr(repo: Path, tmp_path: Path, delay_s: float) -> tuple[Path, Path, Path]:
    """A PR whose head test starts a grandchild that writes into the tree `delay_s` after it started,
    then hangs: (the patch, the file the test creates once running, the file holding the grandchild's pid)."""
    marker, pid_file = tmp_path / "head-started", tmp_path / "late.pid"
    slow = ("import subprocess, sys, time\n\n\ndef test_slow():\n"
            f"    late = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({delay_s}); "
            "open(\"tests/late.txt\", \"w\").write(\"late\")'])\n"
            f"    open('{pid_file}', 'w').write(str(late.pid))\n"
            f"    open('{marker}', 'w').close()\n    time.sleep(60)\n")
    return make_patch(repo, {"tests/test_slow.py": slow}, tmp_path / "pr.patch"), marker, pid_file


def wait_past_the_late_write(marker: Path, delay_s: float) -> None:
    """Sleep until late_writer_pr's grandchild would have written: it starts before its test creates
    `marker`, so delay_s after the marker's time, and a second's margin, is past that moment."""
    time.sleep(max(0.0, marker.stat().st_mtime + delay_s + 1 - time.time()))
