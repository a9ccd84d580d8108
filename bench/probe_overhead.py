"""Route-probe overhead on a call-heavy target, measured side by side in one run.

The target loops calling a small function 10^6 times; the route is a different function, called
once. It runs bare, under kvtasks' probe, and under a plain sys.setprofile call counter (what a
setprofile-based probe costs). Each is timed as a whole process, best of N. With --smoke, one
call and one run of each: a check that the bench runs, not a measurement.
Last line: `probe overhead: R.RRx bare (setprofile: S.SSx)`.
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtasks.harness import receipts

TARGET = '''import hot


def small(value):
    return value + 1


if __name__ == "__main__":
    total = 0
    for step in range(CALLS):
        total = small(total)
    hot.route(4, 8)
    print(total)
'''
HOT = "def route(M, N):\n    return M * N\n"
SETPROFILE = '''import runpy, sys
calls = [0]


def count(frame, event, arg):
    if event == "call":
        calls[0] += 1


sys.setprofile(count)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
sys.setprofile(None)
'''


def best_of(command, cwd, env, repeats, before=lambda: None):
    best = float("inf")
    for _ in range(repeats):
        before()  # the probe's configuration is gone once a run read it
        started = time.perf_counter()
        subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10**6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--smoke", action="store_true", help="one call, one run of each (overrides --calls, --repeats)")
    args = parser.parse_args()
    calls, repeats = (1, 1) if args.smoke else (args.calls, args.repeats)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "target.py").write_text(TARGET.replace("CALLS", str(calls)))
        (work / "hot.py").write_text(HOT)
        (work / "setprofile_counter.py").write_text(SETPROFILE)
        probe = receipts.prepare(work / "probe", routes=["hot:route"], shape_vars=["M", "N"],
                                 receipt=work / "receipt.json")
        env = {"PYTHONPATH": f"{probe.folder}:{work}", "PATH": "/usr/bin:/bin", **probe.environment}
        bare = best_of([args.python, "target.py"], work, env, repeats)
        probed = best_of([args.python, "-m", probe.name, "target.py"], work, env, repeats,
                         before=probe.write_configuration)
        profiled = best_of([args.python, "setprofile_counter.py", "target.py"], work, env, repeats)
        receipt, _, note = receipts.read(probe, "bench")
        assert receipt and receipt.route_calls == {"hot:route": 1}, note
        print(f"python {args.python}: {calls} calls, best of {repeats}")
        print(f"bare {bare:.3f}s  probe {probed:.3f}s ({receipt.mechanism})  setprofile {profiled:.3f}s")
        print(f"probe overhead: {probed / bare:.2f}x bare (setprofile: {profiled / bare:.2f}x)")


if __name__ == "__main__":
    main()
