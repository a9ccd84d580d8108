"""Small git repositories built by the tests: real files, real commits, real patches."""
from __future__ import annotations

import hashlib
import os
import subprocess
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
