"""Validator overhead: a validation's wall against its target processes' wall and the irreducible runs'.

Two targets, each validated through the flag CLI (`python -m kvtasks`, one process) in a fresh
private workspace, cold (empty evidence store) and then warm (a second PR against the same base:
the first PR's change plus a README line, under another label, so its base evidence is reused from
the store; the bench stops if launches.log shows a base launch for it):

- demo: the embedded demo (kvtasks.demo) with `doit validate`'s options and its PR hidden-tail-bug
  (env channel: the grid reaches the target through an environment variable);
- pytest: a tiny numpy kernel repository on the argnames channel whose test module imports a module
  that sleeps --import-seconds at import (it stands for `import torch`); its PR refactors the kernel
  harmlessly, and a two-cell grid makes the grid, its channel proof and the sensitivity stage run.

Figures, per validation:
- validator wall: the CLI process from start to exit;
- target wall: the sum of `duration_s` of every target launch (results[].runs[], less a merged
  session's parts and runs adopted from another group, which are read from a launch counted once) in
  the evidence documents under the workspace's cache/evidence/{prepare,base,head}/ that this validation created
  or rewrote (so reused base evidence is not counted). The runtime probe is not a target run, so
  its wall is validator overhead here;
- irreducible wall: the runs any validator must make, timed bare (no kvtasks) in the same bench run
  on checkouts of each side it needs (cold: base and head; warm: head only), with the environment
  kvtasks gives a target: for the pytest target one `python -m pytest TARGET -q -p no:cacheprovider`
  process per side; for the demo, whose env channel needs two processes per side, that and the same
  with the demo's shape variable set to its grid;
- launches: the lines launches.log gained during the validation (one per target launch).

kvtasks' own bytecode is compiled first (compileall), as an installed copy has it after its first
run. PYTEST_ADDOPTS defaults to `-p no:hypothesispytest` (the kernel repositories never use hypothesis;
its plugin would add a second of imports to every process, validated and bare alike). With
--repeats N every figure is the best (minimum) of N rounds, each in fresh workspaces. The verdicts
are printed as found: without a claimed GPU a clean PR is INCONCLUSIVE, and every stage still runs.

Last line: `validator overhead: R.RRx target wall; irreducible I.IIx; launches cold C, warm W`, where
R = validator wall / target wall and I = validator wall / irreducible wall, both of the WARM
validation of the pytest target, and C, W the pytest target's cold and warm launch counts; the
line above it gives the demo's same figures. With --smoke, one round of the pytest target alone,
its module sleeping 0s, and no demo line: a check that the bench runs, not a measurement.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kvtasks  # noqa: E402
from kvtasks import demo  # noqa: E402
from kvtasks.harness import environment  # noqa: E402
from kvtasks.evidence.store import KINDS, Store  # noqa: E402
from tests.kernel_repos import PYTEST_HEADER, TILED, check, git, make_repo  # noqa: E402

SLOW_MODULE = '''import time

# stands for `import torch`: the import alone costs this much in every process that runs the tests
time.sleep({seconds})
'''
ARGNAMES_TEST = PYTEST_HEADER + '''
import slow_runtime  # noqa: E402,F401


@pytest.mark.parametrize("M,N,dtype_str", [
    (4, 64, "f32"),
    (8, 128, "f16"),
])
def test_tiled(M, N, dtype_str):
''' + check("M", "N", "dtype_str")
# a harmless refactor of the kernel: ceiling division spelled another way
TILED_REFACTOR = TILED.replace("n_tiles = (N + TILE - 1) // TILE", "n_tiles = -(-N // TILE)")
PYTEST_OPTIONS = {"target": "tests/test_tiled.py", "expected_route": "kernels.tiled:tiled_scale",
                  "shape_vars": "M,N,dtype_str", "shape_argnames": "M,N,dtype_str", "grid": "64,2000,f32;7,4097,f32"}


@dataclass
class Target:
    """A kernel repository, its options, and a cold and a warm PR against the same base."""
    name: str
    description: str
    repo: Path
    options: dict[str, str]
    prs: dict[str, tuple[Path, str]]  # "cold"/"warm" -> (patch, head OID)
    bare_envs: list[dict[str, str]]  # one bare process per entry, per side


@dataclass
class Figures:
    verdict: str
    validator_s: float
    target_s: float
    irreducible_s: float
    launches: list[dict] = field(default_factory=list)
    run_seconds: list[tuple[str, float]] = field(default_factory=list)  # ("kind/run label", wall) per target run


def derive_pr(base_repo: Path, folder: Path, name: str, patch: Path | None, changes: dict[str, str]) -> tuple[Path, str]:
    """A PR made with git itself: `patch` (if any) and `changes` committed on a clone of the base;
    returns the base-to-head patch and the head OID."""
    clone = folder / f"pr-{name}"
    git(folder, "clone", "-q", str(base_repo), str(clone))
    if patch is not None:
        git(clone, "apply", "--index", str(patch))
    for path, text in changes.items():
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        (clone / path).write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", name)
    out = folder / f"{name}.patch"
    out.write_text(git(clone, "diff", "--binary", "HEAD~1", "HEAD"))
    head = git(clone, "rev-parse", "HEAD").strip()
    shutil.rmtree(clone)
    return out, head


def demo_target(work: Path) -> Target:
    options = demo.options(work / "demo-source")
    repo, patch = Path(options.pop("repo")), Path(options.pop("patch"))
    cold_head = options.pop("head_sha")
    options.pop("label")
    readme = (repo / "README.md").read_text() + "\nA documentation line.\n"
    warm = derive_pr(repo, work, "demo-warm", patch, {"README.md": readme})
    grid_env = {options["shape_env"]: options["grid"]}
    return Target("demo", f"embedded demo, PR {demo.DEFAULT_PR} (env channel {options['shape_env']})", repo,
                  options, {"cold": (patch, cold_head), "warm": warm}, [{}, grid_env])


def pytest_target(work: Path, import_seconds: float) -> Target:
    repo = make_repo(work / "slow-import", {
        "kernels/__init__.py": "",
        "kernels/tiled.py": TILED,
        "slow_runtime.py": SLOW_MODULE.format(seconds=import_seconds),
        "tests/test_tiled.py": ARGNAMES_TEST,
        "README.md": "tiled kernels\n",
    })
    cold = derive_pr(repo, work, "pytest-cold", None, {"kernels/tiled.py": TILED_REFACTOR})
    warm = derive_pr(repo, work, "pytest-warm", cold[0], {"README.md": "tiled kernels\n\nA documentation line.\n"})
    return Target("pytest", f"slow-import repository ({import_seconds:g}s import), kernel refactor (argnames channel)",
                  repo, dict(PYTEST_OPTIONS), {"cold": cold, "warm": warm}, [{}])


def evidence_stamps(cache: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for kind in KINDS for path in (cache / "evidence" / kind).glob("*.json")}


def validate(target: Target, home: Path, work: Path, label: str, env: dict[str, str]) -> Figures:
    """One validation through the CLI, and what it wrote: its evidence's run walls and its launches."""
    patch, head = target.prs[label]
    cache = home / "cache"
    store = Store(cache)
    stamps, launched_before = evidence_stamps(cache), len(store.launches())
    out = work / "out" / f"{target.name}-{label}.json"
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in target.options.items()]
    command = [sys.executable, "-m", "kvtasks", "--repo", str(target.repo), "--patch", str(patch), "--head-sha", head,
               *flags, "--label", f"{target.name}-{label}", "--out", str(out), "--quiet"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    validator_s = time.perf_counter() - started
    if not out.is_file():
        raise SystemExit(f"overhead: the {target.name} {label} validation wrote no report (exit {done.returncode}): "
                         f"{done.stderr.strip()[-500:]}")
    written = [path for path, stamp in evidence_stamps(cache).items() if stamps.get(path) != stamp]
    run_seconds = [(f"{path.parent.name}/{run['label']}", run.get("duration_s") or 0.0) for path in written
                   for result in json.loads(path.read_text())["results"] for run in result.get("runs", [])
                   # a merged session's parts and a run another group adopted are no launch of their own
                   if not run.get("session") and not run.get("adopted_from")]
    return Figures(json.loads(out.read_text())["verdict"], validator_s, sum(seconds for _, seconds in run_seconds), 0.0,
                   store.launches()[launched_before:], run_seconds)


def checkout(target: Target, work: Path, side: str) -> Path:
    """A plain checkout of one side: the base, or the base with a PR's patch applied."""
    folder = work / "checkouts" / side
    git(work, "clone", "-q", str(target.repo), str(folder))
    if side != "base":
        git(folder, "apply", str(target.prs[side][0]))
    return folder


def bare_seconds(target: Target, folder: Path, work: Path, caller: dict[str, str]) -> float:
    """The irreducible runs of one side, bare: the process(es) its channel needs, with the
    environment kvtasks gives a target (allowlisted variables, private HOME and caches, the
    checkout on the import path)."""
    env = environment.construct(caller, phase_dir=work / "bare-phase" / folder.name, label="bare",
                                python_path=[str(folder)], visible_devices={})
    total = 0.0
    for extra in target.bare_envs:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", target.options["target"], "-q", "-p", "no:cacheprovider"],
                       cwd=folder, env={**env, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        total += time.perf_counter() - started
    return total


def measure(target: Target, work: Path, env: dict[str, str]) -> dict[str, Figures]:
    """One round: cold then warm in a fresh workspace, then the bare runs of each side."""
    home = work / "home"
    figures = {label: validate(target, home, work, label, {**env, "KVTASKS_HOME": str(home)})
               for label in ("cold", "warm")}
    base_launches = [row["run"] for row in figures["warm"].launches if row["kind"] == "base"]
    if base_launches:
        raise SystemExit(f"overhead: the warm {target.name} validation did not reuse the stored base: it launched "
                         f"{', '.join(base_launches)}")
    sides = {side: bare_seconds(target, checkout(target, work, side), work, env) for side in ("base", "cold", "warm")}
    figures["cold"].irreducible_s = sides["base"] + sides["cold"]
    figures["warm"].irreducible_s = sides["warm"]
    return figures


def best(rounds: list[dict[str, Figures]]) -> dict[str, Figures]:
    """The minimum of each figure over the rounds; verdict, launches and run list of the last."""
    merged = {}
    for label in ("cold", "warm"):
        last = rounds[-1][label]
        merged[label] = Figures(last.verdict, *(min(getattr(r[label], name) for r in rounds)
                                                for name in ("validator_s", "target_s", "irreducible_s")),
                                last.launches, last.run_seconds)
    return merged


def launched(figures: Figures) -> str:
    """The runs launched, by side and label, with their walls where the evidence has them."""
    walls = dict(figures.run_seconds)
    rows = []
    for row in figures.launches:
        seconds = walls.get(f"{row['kind']}/{row['run']}")
        rows.append(f"{row['kind']}/{row['run']}" + (f" {seconds:.2f}s" if seconds is not None else ""))
    return ", ".join(rows) or "none"


def summary(figures: dict[str, Figures]) -> str:
    warm = figures["warm"]
    return (f"{warm.validator_s / warm.target_s:.2f}x target wall; irreducible {warm.validator_s / warm.irreducible_s:.2f}x; "
            f"launches cold {len(figures['cold'].launches)}, warm {len(warm.launches)}")


def table(target: Target, figures: dict[str, Figures], repeats: int) -> None:
    print(f"{target.name}: {target.description}; grid {target.options['grid']}; best of {repeats}")
    print(f"  {'':5} {'verdict':13} {'validator':>9} {'targets':>8} {'irreducible':>11} {'launches':>8}")
    for label, row in figures.items():
        print(f"  {label:5} {row.verdict:13} {row.validator_s:8.2f}s {row.target_s:7.2f}s {row.irreducible_s:10.2f}s "
              f"{len(row.launches):8d}")
    for label, row in figures.items():
        print(f"  {label} launched: {launched(row)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import-seconds", type=float, default=2.0,
                        help="how long the pytest target's slow module sleeps at import (stands for torch)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds; each figure is the best of them")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and say where it is")
    parser.add_argument("--smoke", action="store_true",
                        help="the pytest target alone, one round, no import sleep (overrides --import-seconds, --repeats)")
    args = parser.parse_args()
    import_seconds, repeats = (0.0, 1) if args.smoke else (args.import_seconds, args.repeats)
    work = Path(tempfile.mkdtemp(prefix="kvtasks-overhead-"))
    env = {**os.environ, "KVTASKS_SCRATCH": str(work / "scratch")}
    env.setdefault("PYTEST_ADDOPTS", "-p no:hypothesispytest")
    # an installed kvtasks has its bytecode after its first run; where the host forbids writing it
    # (PYTHONDONTWRITEBYTECODE), every validator would compile kvtasks again and that is not its cost
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(kvtasks.__file__).parent)], check=True)
    try:
        # the demo's validations cost as much again as the pytest target's, whose figures the last line gives
        targets = [] if args.smoke else [demo_target(work / "demo")]
        targets.append(pytest_target(work / "pytest", import_seconds))
        results = {}
        for target in targets:
            rounds = []
            for round_number in range(repeats):
                folder = work / target.name / f"round-{round_number}"
                folder.mkdir(parents=True)
                rounds.append(measure(target, folder, env))
            results[target.name] = best(rounds)
            table(target, results[target.name], repeats)
        if not args.smoke:
            print(f"demo: validator overhead {summary(results['demo'])}")
        print(f"validator overhead: {summary(results['pytest'])}")
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
