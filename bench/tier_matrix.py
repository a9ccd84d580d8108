"""The CPU tier across Triton releases: `bench/tier_coverage.py`'s items under each release, each in
its own environment, and one line over all of them.

    python bench/tier_matrix.py --python ENV/bin/python [--python ...] [tier_coverage's repository
        options: --attorch DIR --liger DIR --fla DIR --flaggems DIR --torchao DIR, --limit N, --timeout S,
        --kvtasks SOURCE_TREE]

Each `--python` is the interpreter of one environment holding one Triton release beside a CPU build of
torch, numpy and pytest, and kvtasks' own dependencies (kvtasks itself comes from this source tree,
or from --kvtasks: an older checkout, to measure before).
Every item runs under that interpreter, the targets included, as a validation there would run it.
A release the tier does not know is refused there with one note: its items are tier crashes.
Each release's coverage line is printed as `triton X.Y.Z (torch T): ...`, then the matrix line:
`tier matrix: P% of N items reached a test outcome over R triton releases (tier crashes C)`.

`--save FILE` writes every release's items as they are measured; `--merge FILE ...` runs nothing and
prints the same lines over the releases of saved files, so releases measured side by side (each run
with its own copies of the repositories: a copy is lent to one run at a time) give one matrix line.

With --smoke, tier_coverage's smoke item under this interpreter only: a check that the bench runs,
not a measurement.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from itertools import groupby
from pathlib import Path

from _tier_classes import apart_line, counts, strictly

PROJECT = Path(__file__).resolve().parent.parent
COVERAGE = PROJECT / "bench" / "tier_coverage.py"
REPOSITORIES = ("attorch", "liger", "fla", "flaggems", "torchao")
# the installed distributions' versions, read without importing torch (two seconds an environment)
_VERSIONS = "from importlib.metadata import version; print(version('triton'), version('torch'))"


def versions(python: str) -> tuple[str, str]:
    """(triton, torch) as that interpreter has them installed."""
    done = subprocess.run([python, "-c", _VERSIONS], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{python}: has no triton or torch installed: {done.stderr.strip().splitlines()[-1:]}")
    triton, torch = done.stdout.split()
    return triton, torch


def release(python: str, coverage_args: list[str]) -> list[dict]:
    """Every item of tier_coverage under `python`, each with its class, read from its --json."""
    with tempfile.TemporaryDirectory(prefix="tier-matrix-") as scratch:
        found = Path(scratch) / "items.json"
        done = subprocess.run([python, str(COVERAGE), *coverage_args, "--json", str(found)], cwd=scratch,
                              capture_output=True, text=True, env=_environment(python))
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not found.is_file():
            sys.exit(f"{python}: tier_coverage exited {done.returncode}: {(done.stdout + done.stderr)[-1500:]}")
        print("\n".join(f"    {line}" for line in lines[:-1]), flush=True)
        return json.loads(found.read_text())


def _environment(python: str) -> dict:
    # the targets run under the same interpreter as the bench (PYTHON_BIN), so under that release
    return {**os.environ, "PYTHON_BIN": python}


def outcomes(results: list[dict]) -> tuple[str, str]:
    """`P% of N items reached a test outcome`, with the tier crashes, as tier_coverage counts them."""
    percent, counted, crashes = counts(results)
    return f"{percent:.1f}% of {counted} items reached a test outcome", f"(tier crashes {crashes})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", default=[], help="one environment's interpreter (repeatable)")
    for name in REPOSITORIES:
        parser.add_argument(f"--{name}", type=Path, help=f"passed to tier_coverage: {name}'s local copy")
    parser.add_argument("--limit", type=int, default=0, help="passed to tier_coverage: the first N items of each")
    parser.add_argument("--timeout", type=int, default=180, help="passed to tier_coverage: seconds per item")
    parser.add_argument("--kvtasks", type=Path, help="passed to tier_coverage: the kvtasks source tree measured")
    parser.add_argument("--smoke", action="store_true", help="tier_coverage's smoke item under this interpreter")
    parser.add_argument("--save", type=Path, help="write every release's items (class, cause, triton, torch) here")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="SAVED",
                        help="run nothing: the lines over the releases of files --save wrote (runs made side by side)")
    options = parser.parse_args()
    if options.merge:
        saved = {}
        for path in options.merge:
            for item in json.loads(path.read_text()):
                measured = (item["triton"], item["torch"], item["repo"], item["item"])
                if measured in saved:
                    sys.exit(f"{path}: {' '.join(measured)} is measured twice in the files given")
                saved[measured] = item
        every = sorted(saved.values(), key=lambda item: (item["triton"], item["torch"]))
        for (triton, torch), results in groupby(every, key=lambda item: (item["triton"], item["torch"])):
            report_release(triton, torch, list(results))
        return matrix_line(every)
    if options.smoke:
        pythons, coverage_args = [sys.executable], ["--smoke"]
    else:
        pythons = options.python or sys.exit("give one --python per Triton release")
        coverage_args = [arg for name in REPOSITORIES if getattr(options, name)
                         for arg in (f"--{name}", str(getattr(options, name).resolve()))]
        coverage_args += ["--timeout", str(options.timeout)] + (["--limit", str(options.limit)] if options.limit else [])
        coverage_args += ["--kvtasks", str(options.kvtasks.resolve())] if options.kvtasks else []
    every = []
    for python in pythons:
        triton, torch = versions(python)
        print(f"== triton {triton} (torch {torch}): {python}", flush=True)
        results = [{**result, "triton": triton, "torch": torch} for result in release(python, coverage_args)]
        every += results
        report_release(triton, torch, results)
        if options.save:
            options.save.write_text(json.dumps(every, indent=1))
    return matrix_line(every)


def report_release(triton: str, torch: str, results: list[dict]) -> None:
    reached, crashes = outcomes(results)
    print(f"triton {triton} (torch {torch}): counted apart: {apart_line(results)}", flush=True)
    print(f"triton {triton} (torch {torch}): {reached} {crashes}", flush=True)


def matrix_line(every: list[dict]) -> int:
    seen = {item["triton"] for item in every}
    reached, crashes = outcomes(every)
    print(f"counted apart: {apart_line(every)}; {strictly(every)}")
    print(f"tier matrix: {reached} over {len(seen)} triton releases {crashes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
