"""The Triton CPU tier's costs, measured side by side in one run.

1. Sanitizer and hooks: one row-softmax launch (2048 rows x 1000 columns, masked) in the
   interpreter, best of 5 processes with the tier's hooks against plain TRITON_INTERPRET=1.
2. Sparse grid: a row-scaling kernel on a 524289 x 4096 float16 tensor (> 2^31 elements, 4 GiB
   each for input and output): the wall time and the peak resident memory of the sparse run,
   against the interpreter's time per program times the launch's program count (the full grid).

Needs the triton-cpu extra. Prints a line of ratios for each, the sparse grid's `scale Rx4096 float16
(G GiB of tensors): sparse run W s whole process, P of R programs, peak RSS M MiB; the full grid at
T ms a program would take N min: Xx` last but for a violation it raised; asserts nothing. With
--smoke, each process once, the softmax and the per-program time on 16 rows (the sparse run keeps
its size: it runs two programs): a check that the bench runs, not a measurement.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtasks.harness import receipts

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from tests import triton_repos  # noqa: E402  (the kernels the tests use)

SOFTMAX_BENCH = '''import sys
import time
import torch
from softmax import softmax

x = torch.randn(int(sys.argv[1]), 1000)
softmax(x[:2])
started = time.perf_counter()
out = softmax(x)
print("kernel_s", time.perf_counter() - started)
torch.testing.assert_close(out, torch.softmax(x, dim=-1))
'''

SCALE_BENCH = '''import sys
import time
import torch
from scale import scale_rows

rows = int(sys.argv[1])
x = torch.empty(rows, 4096, dtype=torch.float16)
x[0].uniform_()
x[-1].uniform_()
started = time.perf_counter()
scale_rows(x, 2.0)
print("kernel_s", time.perf_counter() - started)
'''


def run(folder: Path, script: str, argv: list[str], tier: bool) -> tuple[float, dict | None, str]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(folder)}
    command = [sys.executable, script, *argv]
    receipt = None
    if tier:
        probe = receipts.prepare(folder / "probe", routes=[], shape_vars=[],
                                 receipt=folder / "receipt.json", cpu_tier={"sparse_programs": 4096})
        env["PYTHONPATH"] = f"{probe.folder}:{folder}"
        env.update(probe.environment)
        command = [sys.executable, "-m", probe.name, script, *argv]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if tier:
        receipt = json.loads((folder / "receipt.json").read_text())
    return wall, receipt, done.stdout + done.stderr


def kernel_seconds(log: str) -> float:
    return float(log.split("kernel_s")[1].split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="each process once, on the fewest rows")
    args = parser.parse_args()
    repeats, softmax_rows, small_rows = (1, 16, 16) if args.smoke else (5, 2048, 256)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        (folder / "softmax.py").write_text(triton_repos.SOFTMAX_MASKED)
        (folder / "scale.py").write_text(triton_repos.SCALE_INT64)
        (folder / "bench_softmax.py").write_text(SOFTMAX_BENCH)
        (folder / "bench_scale.py").write_text(SCALE_BENCH)

        plain = min(kernel_seconds(run(folder, "bench_softmax.py", [str(softmax_rows)], tier=False)[2])
                    for _ in range(repeats))
        hooked = min(kernel_seconds(run(folder, "bench_softmax.py", [str(softmax_rows)], tier=True)[2])
                     for _ in range(repeats))
        print(f"softmax {softmax_rows}x1000 launch in the interpreter, best of {repeats}: plain {plain:.3f} s, "
              f"with the sanitizer and hooks {hooked:.3f} s: {hooked / plain:.2f}x")

        _, _, small_log = run(folder, "bench_scale.py", [str(small_rows)], tier=False)
        per_program = kernel_seconds(small_log) / small_rows
        rows = 2**31 // 4096 + 1
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        wall, receipt, log = run(folder, "bench_scale.py", [str(rows)], tier=True)
        peak_mib = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
        sparse = receipt["cpu_tier"]["sparse_launches"]
        print(f"scale {rows}x4096 float16 ({2 * rows * 4096 * 2 / 2**30:.1f} GiB of tensors): sparse run {wall:.1f} s "
              f"whole process, {sparse[0]['programs_run']} of {rows} programs, peak RSS {peak_mib:.0f} MiB; "
              f"the full grid at {per_program * 1e3:.2f} ms a program would take {per_program * rows / 60:.0f} min: "
              f"{per_program * rows / wall:.0f}x")
        if receipt["cpu_tier"]["violations"]:
            print("unexpected violation:", receipt["cpu_tier"]["violations"][0], log[-500:])


if __name__ == "__main__":
    main()
