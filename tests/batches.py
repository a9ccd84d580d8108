"""An eight-PR batch against the tiled repository, running it through doit, and what a workspace's
store says it launched (tests and bench)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from kvtasks.evidence.store import Store
from tests.kernel_repos import ENV_TEST, TILED, TILED_TAIL_BUG, git, make_patch

PROJECT = Path(__file__).resolve().parent.parent
SHARED = {"target": "tests/test_env.py", "shape_env": "TILED_SHAPES", "grid": "64,2000,f32",
          "expected_route": "kernels.tiled:tiled_scale", "shape_vars": "M,N,dtype_str", "no_perf": True}


def eight_prs(tiled: Path, folder: Path) -> dict[str, tuple[Path, dict]]:
    """label -> (patch, per-PR options): clean, buggy and test-weakening PRs; two of them with
    another grid, which is part of the base key, so the batch has two base keys."""
    folder.mkdir(parents=True, exist_ok=True)

    def patch(name: str, changes: dict[str, str]) -> Path:
        return make_patch(tiled, changes, folder / f"{name}.patch")

    wider_grid = {"grid": "64,2000,f32;8,130,f32"}
    return {
        "docs-1": (patch("docs-1", {"README.md": "one\n"}), {}),
        "docs-2": (patch("docs-2", {"README.md": "two\n"}), {}),
        "tail": (patch("tail", {"kernels/tiled.py": TILED_TAIL_BUG}), {}),
        "loose": (patch("loose", {"tests/test_env.py": ENV_TEST.replace("atol=1e-3", "atol=1e-1")}), {}),
        "comment": (patch("comment", {"kernels/tiled.py": "# tiled kernels\n" + TILED}), {}),
        "added-test": (patch("added-test", {"tests/test_more.py": "def test_more():\n    assert 1 + 1 == 2\n"}), {}),
        "tail-wide": (patch("tail-wide", {"kernels/tiled.py": TILED_TAIL_BUG}), wider_grid),
        "docs-wide": (patch("docs-wide", {"README.md": "wide\n"}), wider_grid),
    }


# two base keys (another grid is another key), each shared by a clean and a buggy PR, and a PR that
# weakens the suite: bench/parallel_batch.py's smoke run, which tests/test_concurrency.py judges
FIVE = ("docs-1", "tail", "loose", "docs-wide", "tail-wide")


def write_manifest(tiled: Path, prs: dict[str, tuple[Path, dict]], path: Path) -> Path:
    base = git(tiled, "rev-parse", "HEAD").strip()
    manifest = {"repo": str(tiled), "base": base, **SHARED,
                "prs": [{"label": label, "patch": str(patch), "head_sha": "a" * 40, **options}
                        for label, (patch, options) in prs.items()]}
    path.write_text(json.dumps(manifest, indent=1))
    return path


def doit(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), *args], cwd=PROJECT,
                          env={**os.environ, "KVTASKS_HOME": str(home)}, capture_output=True, text=True,
                          timeout=timeout)


def reports(home: Path, labels) -> dict[str, dict]:
    return {label: json.loads((home / "reports" / label / "validation_report.json").read_text()) for label in labels}


def base_runs_per_key(home: Path) -> Counter:
    """How often each base key's base-repo target was launched."""
    return Counter(row["key"] for row in Store(home / "cache").launches()
                   if row["kind"] == "base" and row["run"] == "base-repo")


def launches(home: Path, label: str) -> dict[str, list[str]]:
    """The runs a label's validation launched, per evidence kind, in launch order."""
    rows = [row for row in Store(home / "cache").launches() if row["label"] == label]
    return {kind: [row["run"] for row in rows if row["kind"] == kind] for kind in ("prepare", "base", "head")}
