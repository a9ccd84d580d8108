"""Timing benches for perf validations: small repos whose printed times follow the kernel's COST, and
recorded rounds of the bench for perf's unit tests."""
from pathlib import Path

from tests.kernel_repos import make_patch, make_repo
from tests.kit import target_run

KERNEL = "COST = 1.0\n\n\ndef op(n):\n    return n\n"
TEST = "from kernels.op import op\n\n\ndef test_op():\n    assert op(3) == 3\n"
# A bench whose printed times follow the kernel's COST, with small run-to-run jitter: the timing
# pipeline (rounds, scraping, statistics) is real; only the clock is synthetic, so tests are exact.
BENCH = '''import os
import random

from kernels.op import COST, op

ROWS = {rows}

if __name__ == "__main__":
    jitter = random.Random(os.getpid())
    print("| M | N | time (us) | ref (us) |")
    print("|---|---|---|---|")
    for m in range(ROWS):
        op(m)
        base = 10.0 * (m + 1)
        print(f"| {{m}} | 128 | {{base * COST * (1 + jitter.uniform(0, 0.01)):.3f}} | "
              f"{{base * (1 + jitter.uniform(0, 0.01)) * {control}:.3f}} |")
    {extra}
'''


def perf_repo(tmp_path, rows=6, extra="pass", control="1.0"):
    return make_repo(tmp_path / "perf-repo", {
        "kernels/__init__.py": "", "kernels/op.py": KERNEL, "tests/test_op.py": TEST,
        "bench/bench_op.py": BENCH.format(rows=rows, extra=extra, control=control),
    })


PERF = ["--target", "tests/test_op.py", "--perf-args", "bench/bench_op.py"]


def pr_added_bench(tmp_path, control):
    repo = make_repo(tmp_path / "perf-repo", {"kernels/__init__.py": "", "kernels/op.py": KERNEL,
                                              "tests/test_op.py": TEST})
    bench = BENCH.format(rows=6, extra="pass", control=control)
    return repo, make_patch(repo, {"bench/bench_op.py": bench}, tmp_path / "bench.patch")


def printed(cost: float, control: float) -> str:
    """What BENCH prints, without its jitter: a time following the kernel's COST, a control following
    neither side's kernel (scaled by `control`)."""
    rows = "\n".join(f"| {m} | 128 | {10.0 * (m + 1) * cost:.3f} | {10.0 * (m + 1) * control:.3f} |" for m in range(6))
    return f"| M | N | time (us) | ref (us) |\n|---|---|---|---|\n{rows}\n"


def rounds(folder: Path, head_cost: float = 1.0, head_control: float = 1.0) -> dict:
    """Three interleaved rounds a side (PERF_REPEAT's default), base's bench printing cost and control 1.0."""
    return {f"{side}-perf-{number}": target_run(folder, f"{side}-perf-{number}", runner="script",
                                                log=printed(*((head_cost, head_control) if side == "head" else (1, 1))))
            for number in (1, 2, 3) for side in ("base", "head")}
