"""Every bench still runs: `python bench/NAME.py --smoke` runs its measured loop once on its smallest
input and prints its documented last line (docs/benchmarks.md), which is matched here. A refactor
that breaks a bench fails this test, not the next person who measures."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
    "tier_matrix": r"tier matrix: 100\.0% of \d+ items reached a test outcome over 1 triton releases "
                   r"\(tier crashes 0\)",
}


# benches a test of their own runs whole, which its smoke run would only repeat
RUN_WHOLE = {"installed_package": "tests/test_installed_package.py", "cpu_tier_repeat": "tests/stages/test_cpu_tier.py",
             "parallel_batch": "tests/test_concurrency.py", "sensitivity": "tests/test_dodo.py",
             # tier_matrix's smoke run is tier_coverage's, under this interpreter
             "tier_coverage": "tests/test_benches.py", "zero_config": "tests/test_impact.py"}


def test_every_bench_is_run_here_or_whole_elsewhere():
    # a module whose name starts with "_" is a piece two benches share, not a bench
    assert sorted(path.stem for path in BENCH.glob("[!_]*.py")) == sorted([*LAST_LINES, *RUN_WHOLE])


@pytest.mark.parametrize("name", sorted(LAST_LINES))
def test_a_bench_s_smoke_run_prints_its_last_line(name, tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--smoke"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYTEST_ADDOPTS": "-p no:hypothesispytest"})
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}"
    assert re.fullmatch(LAST_LINES[name], lines[-1].strip()), lines[-1]
