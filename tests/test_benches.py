"""Every bench still runs: `python bench/NAME.py --smoke` runs its measured loop once on its smallest
input and prints its documented last line (docs/benchmarks.md), which is matched here. A refactor
that breaks a bench fails this test, not the next person who measures."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import triton_repos
from tests.kernel_repos import make_repo

BENCH = Path(__file__).resolve().parent.parent / "bench"
NUMBER = r"\d+\.\d+"
# each bench's documented last line
LAST_LINES = {
    "batch_reuse": r"base-side launches: \d+ \(separate: \d+\)",
    "cpu_tier": rf"scale \d+x4096 float16 \({NUMBER} GiB of tensors\): sparse run {NUMBER} s whole process, \d+ of \d+ "
                rf"programs, peak RSS \d+ MiB; the full grid at {NUMBER} ms a program would take \d+ min: \d+x",
    "fleet": r"fleet: \d+\.\d{2}x speed-up on 1 nodes \(base runs: \d+ per arch, ideal 1\.00x\)",
    "killed_anywhere": r"killed anywhere: 1 points, handed back 1/1, reruns blocked \d+/1, whole reports left \d+",
    "overhead": rf"validator overhead: {NUMBER}x target wall; irreducible {NUMBER}x; launches cold \d+, warm \d+",
    "perf_power": r"false alarms at 0%: \d+% \(best-of-3: \d+%\); detection at 10%: \d+% \(best-of-3: \d+%\)",
    "probe_overhead": rf"probe overhead: {NUMBER}x bare \(setprofile: {NUMBER}x\)",
    "replay": rf"replay cost: {NUMBER}x validation without replay",
    "soak": r"soak: 1 runs, \d+ signals, trees handed back (\d+)/\1, orphans 0, fabricated 0, survivors 0",
    "_tier_classes": r"tier classes: 42\.9% of 7 items reached a test outcome \(tier crashes 1\)",
    "tier_matrix": r"tier matrix: 100\.0% of \d+ items reached a test outcome over 1 triton releases "
                   r"\(tier crashes 0\)",
}


# benches a test of their own runs whole, which its smoke run would only repeat
RUN_WHOLE = {"installed_package": "tests/test_installed_package.py", "cpu_tier_repeat": "tests/stages/test_cpu_tier.py",
             "parallel_batch": "tests/test_concurrency.py", "sensitivity": "tests/test_dodo.py",
             # tier_matrix's smoke run is tier_coverage's, under this interpreter
             "tier_coverage": "tests/test_benches.py", "zero_config": "tests/test_impact.py"}


def test_every_bench_is_run_here_or_whole_elsewhere():
    assert sorted(path.stem for path in BENCH.glob("*.py")) == sorted([*LAST_LINES, *RUN_WHOLE])


@pytest.mark.parametrize("name", sorted(LAST_LINES))
def test_a_bench_s_smoke_run_prints_its_last_line(name, tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--smoke"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYTEST_ADDOPTS": "-p no:hypothesispytest"})
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}"
    assert re.fullmatch(LAST_LINES[name], lines[-1].strip()), lines[-1]


def test_the_tier_benches_count_reached_outcomes_apart_from_what_cannot_run_at_all(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import _tier_classes as classes
        import tier_coverage
    finally:
        sys.path.remove(str(BENCH))
    classify = tier_coverage.classify
    error = [{"outcome": "error", "message": "collection failure"}]
    assert classify(error, [], "", 0, False, 2, None)["class"] == "no test ran"  # it had counted as failed
    assert classify([{"outcome": "failed", "message": "assert"}], [], "", 1, False, 1, None)["class"] == "failed"
    assert classify([{"outcome": "passed"}], [], "", 1, False, 0, None, idle=["t"])["class"] == "not exercised"
    items = [{"class": name} for name in ("passed", "not exercised", "no test ran", "tier crash", "does not import",
                                          "repository skip")]
    assert classes.counts(items) == (50.0, 4, 1)
    assert classes.strictly(items).startswith("25.0% of 4 items")
    # a part of Triton the installed release lacks, never one it has (a submodule not yet imported included)
    triton_repos.require_triton_cpu()
    assert "has no triton.tools.no_such_part" in tier_coverage.release_lacks(
        ["ModuleNotFoundError: No module named 'triton.tools.no_such_part'"])
    assert tier_coverage.release_lacks(["ImportError: cannot import name 'experimental' from 'triton' (/x.py)",
                                        "ImportError: cannot import name 'jit' from 'triton' (/x.py)",
                                        "ModuleNotFoundError: No module named 'einops'"]) is None
    # a package Triton's own code refuses at import, on any device; never one that refuses itself
    refused = make_repo(tmp_path / "refused", {"pkg/__init__.py": "import triton.language as tl\ntl.arange(0, 4)\n"})
    assert tier_coverage.triton_refuses_import(refused, "pkg").startswith("ValueError: Did you forget to add @triton.jit")
    itself = make_repo(tmp_path / "itself", {"pkg/__init__.py": "raise RuntimeError('this package refuses to import')\n"})
    assert tier_coverage.triton_refuses_import(itself, "pkg") is None
    saved = tmp_path / "release.json"
    saved.write_text(json.dumps([{"class": "passed", "triton": "3.5.0", "torch": "2.13.0", "repo": "r", "item": "t"}]))
    merged = subprocess.run([sys.executable, str(BENCH / "tier_matrix.py"), "--merge", str(saved)], capture_output=True,
                            text=True)
    assert merged.stdout.splitlines()[-1] == ("tier matrix: 100.0% of 1 items reached a test outcome over 1 triton "
                                              "releases (tier crashes 0)")
    twice = subprocess.run([sys.executable, str(BENCH / "tier_matrix.py"), "--merge", str(saved), str(saved)],
                           capture_output=True, text=True)
    assert twice.returncode == 1 and "is measured twice" in twice.stderr
