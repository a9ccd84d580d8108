"""Zero configuration against a maintainer's configuration, on real fixes run both ways.

Each fix of FIXES is validated as its PR (base: the fix's parent, head: the fix) and reverted (base:
the fix, head: a commit on it with its parent's tree, which reintroduces the bug; written to a local
copy of the repository), once with the repository's configuration and once with the refs alone,
where the impact map infers the targets, routes and shapes:

    python bench/zero_config.py --mirror DIR [--fixes attorch:7a43008,...] [--jobs N] [--timeout S]
        [--workspace DIR] [--json FILE]

With --json FILE and --workspace DIR, a run that was cut goes on where it stopped.

DIR holds the repositories' git copies as DIR/<owner>+<name>/repo (bare copies are fine); nothing is
fetched. The configuration is what a maintainer would write in `[tool.kvtasks]` once per repository,
never per fix: one target per kernel (its smallest test item on the CPU tier, as
bench/tier_coverage.py chose them, with both of the kernel's launchers as its routes and the
dimensions they hold as shape vars) and a map from source globs to those targets. The bench applies
the map to each PR's changed files and validates each target it names (flags stand for the table:
only base's own configuration file is ever read). A PR's verdict is the worst of its targets', as
kvtasks' own PR report takes it. Both modes run as in a maintainer's CI (`CI=true`: a change no
target validates is an INCONCLUSIVE report, not a usage error), on the CPU tier (`--cpu-tier
triton`, perf off), in workspaces of their own, so each builds its own base evidence and the
zero-config side its maps. On the CPU tier no verdict is PASS (PASS needs a claimed GPU): a verdict
is BLOCK, NEEDS_WORK or INCONCLUSIVE.

Prints a row per PR (both verdicts, what was inferred, the wall time of each), the confusion matrix
of the verdicts (rows configured, columns zero-config), how many configured BLOCKs zero-config kept,
the wall time of both modes; last line
`zero-config: A/B verdicts equal to the configured run's (inferred targets T, routes R)`.

With --smoke, one PR of a tiny numpy repository built here (a tail bug reintroduced) in place of
FIXES: a check that the bench runs, not a measurement (tests/test_impact.py judges it).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from tests.conftest import FAKES, IDLE_AMD  # noqa: E402
from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, git, kernel_repo, write_files  # noqa: E402

VERDICTS = ("BLOCK", "NEEDS_WORK", "INCONCLUSIVE", "PASS")  # worst first, as kvtasks' PR report orders them
NOT_RUN = "ERROR"  # the command wrote no report: its last line says why


def _kernel(item: str, layer: str, autograd: str, shape_vars: str) -> dict:
    return {"target": item, "expected_route": f"attorch.{layer}:{autograd}.forward,attorch.{layer}:{autograd}.backward",
            "shape_vars": shape_vars}


# a maintainer's configuration, per repository: its targets, and the map of source globs to them
CONFIGURATIONS = {
    "attorch": {
        "mirror": "BobMcDear+attorch",
        "options": ["--cpu-tier", "triton"],
        "targets": {
            "act": _kernel("tests/test_act_layers.py::test_act_layers[False-input_dtype0-0.0-Sigmoid-shape0]",
                           "act_layers", "ActFuncAutoGrad", "size"),
            "batch_norm": _kernel("tests/test_batch_norm_layer.py::test_batch_norm_layer"
                                  "[False-input_dtype0-None-False-False-False-0.1-1e-05-shape0]",
                                  "batch_norm_layer", "BatchNormAutoGrad", "batch_dim,feat_dim"),
            "layer_norm": _kernel("tests/test_layer_norm_layer.py::test_layer_norm_layer"
                                  "[False-input_dtype0-False-False-1e-05-shape0]",
                                  "layer_norm_layer", "LayerNormAutoGrad", "batch_dim,feat_dim"),
            "linear": _kernel("tests/test_linear_layer.py::test_linear_layer[False-input_dtype0-None-False-16-shape0]",
                              "linear_layer", "LinearAutoGrad", "batch_dim,out_feat_dim"),
            "p_loss": _kernel("tests/test_p_loss_layers.py::test_p_loss_layers"
                              "[False-input_dtype0-none-SmoothL1Loss-shape0]", "p_loss_layers", "PLossAutoGrad", "size"),
            "rms_norm": _kernel("tests/test_rms_norm_layer.py::test_rms_norm_layer[False-input_dtype0-False-1e-05-shape0]",
                                "rms_norm_layer", "RMSNormAutoGrad", "batch_dim,feat_dim"),
        },
        "map": {
            "attorch/act_*.py": ["act"],
            "attorch/batch_norm_*.py": ["batch_norm"], "tests/test_batch_norm_layer.py": ["batch_norm"],
            "attorch/layer_norm_*.py": ["layer_norm"], "tests/test_layer_norm_layer.py": ["layer_norm"],
            "attorch/linear_*.py": ["linear"], "tests/test_linear_layer.py": ["linear"],
            "attorch/p_loss_*.py": ["p_loss"], "tests/test_p_loss_layers.py": ["p_loss"],
            "attorch/rms_norm_*.py": ["rms_norm"], "tests/test_rms_norm_layer.py": ["rms_norm"],
        },
    },
}

# real fixes: (repository, the fix's commit, what it fixed, node ids the repository named otherwise then)
FIXES = [
    ("attorch", "3199f2d", "RMS norm backward: the correction term broadcast along features", {}),
    ("attorch", "194d60c", "layer and RMS norm backward: the weight-gradient buffer sized like the grid", {}),
    ("attorch", "7a43008", "smooth L1 and Huber: thresholded on the absolute difference", {}),
    ("attorch", "c8ecdfb", "p-loss autograd: as many gradients as inputs", {}),
    ("attorch", "0107f0f", "shrink and hard Swish: closed at their boundaries", {}),
    ("attorch", "1a3a517", "layer norm autograd: as many gradients as inputs", {}),
    ("attorch", "da06cb6", "fused linear and batch norm without an activation", {"linear": "shape0]>input_shape0]"}),
    ("attorch", "a231aac", "dropout kernel calls in batch norm and linear", {"linear": "shape0]>input_shape0]"}),
    ("attorch", "6bc73ed", "FP16 inputs for non-ReLU activations", {"act": "False-input_dtype0-0.0-Sigmoid>False-Sigmoid"}),
    ("attorch", "2053a1a", "linear: requires_grad no longer forced",
     {"linear": "False-input_dtype0-None-False-16-shape0]>None-False-16-input_shape0]"}),
]


def configured_targets(config: dict, changed: list[str], renamed: dict[str, str]) -> dict[str, dict]:
    """The targets the configuration's map sends the changed files to, node ids renamed for this fix."""
    names = sorted({name for path in changed for glob, targets in config["map"].items()
                    if fnmatch.fnmatchcase(path, glob) for name in targets})
    chosen = {}
    for name in names:
        options = dict(config["targets"][name])
        if name in renamed:
            old, new = renamed[name].split(">")
            options["target"] = options["target"].replace(old, new)
        chosen[name] = options
    return chosen


def validate(home: Path, pr: dict, label: str, options: list[str], timeout: int) -> dict:
    """One `validate-kernel-pr` run: the verdicts of the reports it wrote, what they say was inferred,
    and its wall time."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kvtasks", "--repo", pr["repo"], "--base-ref", pr["base"],
                           "--head-ref", pr["head"], "--no-perf", "--format", "json", "--label", label, *options],
                          capture_output=True, text=True, cwd=home,
                          # as in a maintainer's CI, where changes nobody validated are an INCONCLUSIVE report
                          env={**os.environ, **pr["env"], "KVTASKS_HOME": str(home), "TIMEOUT": str(timeout),
                               "CI": "true"})
    wall = time.perf_counter() - started
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        summary = {"reports": []}
    runs = []
    for run in summary["reports"]:
        body = json.loads(Path(run["report"]).read_text())
        inferred = (body.get("test_selection") or {}).get("inferred")
        runs.append({"verdict": run["verdict"], "decided_by": run["decided_by"], "report": run["report"],
                     "inferred": inferred})
    said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"runs": runs, "wall_s": wall, "exit": done.returncode, "said": said}


def worst(verdicts: list[str]) -> str:
    return min(verdicts, key=VERDICTS.index) if verdicts else NOT_RUN


def one_pr(pr: dict, workspace: Path, timeout: int) -> dict:
    """The PR validated both ways: each configured target, then the refs alone."""
    configured = [validate(workspace / "configured", pr, f"{pr['label']}.{name}",
                           [*pr["options"], *(f"--{key.replace('_', '-')}={value}" for key, value in options.items())],
                           timeout)
                  for name, options in pr["targets"].items()]
    zero = validate(workspace / "zero-config", pr, pr["label"], pr["options"], timeout)
    inferred = [run["inferred"] for run in zero["runs"] if run["inferred"]]
    return {**pr, "configured": worst([run["verdict"] for done in configured for run in done["runs"]]),
            "configured_wall_s": sum(done["wall_s"] for done in configured),
            "configured_runs": configured, "zero_config": worst([run["verdict"] for run in zero["runs"]]),
            "zero_config_wall_s": zero["wall_s"], "zero_config_run": zero,
            "inferred_targets": sorted(target["target"] for target in inferred),
            "inferred_routes": sorted({target["route"] for target in inferred})}


def revert(repo: Path, fix: str) -> str:
    """A commit on the fix whose tree is the fix's parent's: the PR that reverts it."""
    return git(repo, "commit-tree", f"{fix}^^{{tree}}", "-p", fix, "-m", f"Revert {fix[:12]}").strip()


def prs(mirror: Path, scratch: Path, chosen: list[str]) -> list[dict]:
    """Each chosen fix as its PR and as its revert, in a copy of its repository the reverts are
    written to (the mirror is only read)."""
    found, copies = [], {}
    for name, commit, what, renamed in FIXES:
        if chosen and f"{name}:{commit}" not in chosen:
            continue
        config = CONFIGURATIONS[name]
        if name not in copies:
            copies[name] = scratch / f"{name}.git"
            git(scratch, "clone", "-q", "--bare", str(mirror / config["mirror"] / "repo"), str(copies[name]))
        repo = copies[name]
        fix = git(repo, "rev-parse", f"{commit}^{{commit}}").strip()
        parent = git(repo, "rev-parse", f"{fix}^").strip()
        changed = git(repo, "diff", "--name-only", parent, fix).split()
        for direction, base, head in (("fix", parent, fix), ("revert", fix, revert(repo, fix))):
            found.append({"fix": f"{name}:{commit}", "what": what, "direction": direction, "repo": str(repo),
                          "base": base, "head": head, "label": f"{name}-{commit}-{direction}",
                          "options": config["options"], "env": {},
                          "targets": configured_targets(config, changed, renamed)})
    return found


def smoke_prs(scratch: Path) -> list[dict]:
    """A numpy repository whose fix closes a tail bug, reverted: the bug comes back; on a fake idle GPU
    (the suite's), since a validation without a claimed GPU makes no correctness claim."""
    (scratch / "amdsmi.json").write_text(json.dumps({"devices": [IDLE_AMD]}))
    (scratch / "locks").mkdir()
    env = {"KVTASKS_FAKE_AMDSMI": str(scratch / "amdsmi.json"), "KVTASKS_LOCK_DIR": str(scratch / "locks"),
           "KVTASKS_IDLE_SAMPLES": "2", "KVTASKS_IDLE_INTERVAL_S": "0", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(FAKES), os.environ.get("PYTHONPATH")]))}
    repo = kernel_repo(scratch / "kernels")
    write_files(repo, {"kernels/scale.py": KERNEL_TAIL_BUG})
    git(repo, "commit", "-qam", "tile the tail away")
    write_files(repo, {"kernels/scale.py": KERNEL})
    git(repo, "commit", "-qam", "fix: the tail columns are scaled too")
    fix = git(repo, "rev-parse", "HEAD").strip()
    return [{"fix": "smoke:tail", "what": "the tail columns scaled", "direction": "revert", "repo": str(repo),
             "base": fix, "head": revert(repo, fix), "label": "smoke-revert", "env": env,
             "options": ["--grid", "5,19;7,33"],  # numpy in Python loops: the default grid's 2^31-element row is minutes
             "targets": {"scale": {"target": "tests/test_scale.py", "expected_route": "kernels.scale:scale_rows",
                                   "shape_vars": "M,N", "shape_argnames": "M,N"}}}]


def confusion(results: list[dict]) -> list[str]:
    columns = [*VERDICTS, NOT_RUN]
    lines = ["confusion (rows: configured, columns: zero-config):",
             "  " + " " * 14 + "".join(f"{column:>14}" for column in columns)]
    for row in columns:
        counts = [sum(1 for r in results if (r["configured"], r["zero_config"]) == (row, column)) for column in columns]
        if any(counts):
            lines.append(f"  {row:<14}" + "".join(f"{count:>14}" for count in counts))
    return lines


def say(r: dict, how: str) -> None:
    print(f"{r['fix']:<18} {r['direction']:<7} configured {r['configured']:<12} ({len(r['targets'])} targets, "
          f"{r['configured_wall_s']:.0f} s)  zero-config {r['zero_config']:<12} "
          f"({len(r['inferred_targets'])} inferred, {r['zero_config_wall_s']:.0f} s)"
          f"{'' if r['configured'] == r['zero_config'] != NOT_RUN else '  DIFFERENT'}{how and f'  ({how})'}", flush=True)
    for target in r["inferred_targets"]:
        print(f"    inferred: {target}")
    if r["zero_config"] == NOT_RUN:
        print(f"    zero-config wrote no report: {r['zero_config_run']['said']}")
    for done in r["configured_runs"]:
        if not done["runs"]:
            print(f"    a configured target wrote no report: {done['said']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, help="folder of git copies, DIR/<owner>+<name>/repo")
    parser.add_argument("--fixes", default="", help="only these, as repo:commit,... (default all of FIXES)")
    parser.add_argument("--jobs", type=int, default=1, help="PRs validated at once")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per target run (TIMEOUT)")
    parser.add_argument("--workspace", type=Path, help="keep the workspaces here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="every PR's verdicts and what was inferred, written as each "
                        "finishes; the PRs already in it are kept, not run again (a cut run goes on)")
    parser.add_argument("--smoke", action="store_true", help="one PR of a tiny repository built here")
    options = parser.parse_args()
    if not options.smoke and not options.mirror:
        parser.error("--mirror DIR is required (or --smoke)")
    with tempfile.TemporaryDirectory(prefix="zero-config-") as scratch:
        workspace = (options.workspace or Path(scratch) / "workspace").resolve()
        for mode in ("configured", "zero-config"):
            (workspace / mode).mkdir(parents=True, exist_ok=True)
        chosen = smoke_prs(Path(scratch)) if options.smoke else prs(options.mirror.resolve(), Path(scratch),
                                                                    [f for f in options.fixes.split(",") if f])
        print(f"{len(chosen)} PRs ({len({pr['fix'] for pr in chosen})} fixes, both directions"
              f"{'' if not options.smoke else '; smoke: one direction'}), {options.jobs} at once", flush=True)
        done_before = json.loads(options.json.read_text()) if options.json and options.json.is_file() else []
        results = [r for r in done_before if r["label"] in {pr["label"] for pr in chosen}]
        for r in results:
            say(r, "kept from --json")
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
            running = [pool.submit(one_pr, pr, workspace, options.timeout) for pr in chosen
                       if pr["label"] not in {r["label"] for r in results}]
            for finished in as_completed(running):
                results.append(finished.result())
                say(results[-1], "")
                if options.json:  # a cut run keeps what it measured, and goes on from it
                    options.json.write_text(json.dumps(results, indent=2))
        wall = time.perf_counter() - started
    for line in confusion(results):
        print(line)
    blocks = [r for r in results if r["configured"] == "BLOCK"]
    kept = sum(1 for r in blocks if r["zero_config"] == "BLOCK")
    print(f"configured BLOCKs kept by zero-config: {kept} of {len(blocks)}")
    configured_s, zero_s = sum(r["configured_wall_s"] for r in results), sum(r["zero_config_wall_s"] for r in results)
    print(f"wall: configured {configured_s:.0f} s, zero-config {zero_s:.0f} s "
          f"({zero_s / configured_s if configured_s else 0:.2f}x, maps included); the bench {wall:.0f} s")
    equal = sum(1 for r in results if r["configured"] == r["zero_config"] != NOT_RUN)
    targets = sum(len(r["inferred_targets"]) for r in results)
    routes = len({route for r in results for route in r["inferred_routes"]})
    print(f"zero-config: {equal}/{len(results)} verdicts equal to the configured run's "
          f"(inferred targets {targets}, routes {routes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
