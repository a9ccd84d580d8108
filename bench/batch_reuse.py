"""Batch against separate validations: base-side launches, wall time, and report regeneration.

Every demo PR plus two documentation-only PRs against the embedded demo's base: validated once as a
batch (one workspace), and once each as a separate cold validation (a fresh workspace each),
measured side by side in one run. Prints the wall-time ratio, the time `doit report` takes to
rebuild their reports from stored evidence, and last `base-side launches: B (separate: S)`. With
--smoke, one documentation-only PR alone and no grid (the cheapest validation: a check that the bench
runs, not a measurement).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvtasks import demo
from kvtasks.run import phases
from kvtasks.evidence.workspace import Workspace
from kvtasks.evidence.store import Store

PROJECT = Path(__file__).resolve().parent.parent


def patches(repo: Path, folder: Path) -> dict[str, Path]:
    """The demo's PRs plus two documentation-only PRs made with git itself."""
    found = {name: demo.patch_path(name) for name in demo.PRS}
    readme = repo / "README.md"
    original = readme.read_text()
    for number in (1, 2):
        readme.write_text(original + f"\nDocumentation change {number}.\n")
        extra = folder / f"docs-{number}.patch"
        extra.write_text(subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True, check=True).stdout)
        readme.write_text(original)
        found[f"docs-{number}"] = extra
    return found


def doit(home: Path, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), *args], cwd=PROJECT,
                   env={**os.environ, "KVTASKS_HOME": str(home)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def base_runs(home: Path) -> int:
    return sum(1 for row in Store(home / "cache").launches() if row["kind"] == "base" and row["run"] == "base-repo")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one documentation-only PR alone, no grid")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        repo, _ = demo.materialize(work / "demo-source")
        prs = patches(repo, work)
        options = dict(demo.OPTIONS)
        if args.smoke:  # the base-side launches of a grid add nothing the smoke checks
            prs = {"docs-1": prs["docs-1"]}
            options = {key: options[key] for key in ("target", "expected_route")}
        manifest = work / "five.toml"
        manifest.write_text("\n".join([f'repo = "{repo}"'] + [f'{k} = "{v}"' for k, v in options.items()] + [
            line for label, patch in prs.items() for line in ("[[prs]]", f'label = "{label}"', f'patch = "{patch}"')
        ]) + "\n")

        batch_home = work / "batch"
        batch_s = doit(batch_home, "batch", f"manifest={manifest}")
        batch_bases = base_runs(batch_home)

        separate_s, separate_bases = 0.0, 0
        for label, patch in prs.items():
            home = work / f"separate-{label}"
            separate_s += doit(home, "validate", f"repo={repo}", f"patch={patch}", f"label={label}",
                               *(f"{k}={v}" for k, v in options.items()))
            separate_bases += base_runs(home)

        workspace = Workspace(batch_home)
        started = time.perf_counter()
        for label in prs:
            phases.regenerate(workspace, label)
        regenerate_s = time.perf_counter() - started
        command_s = doit(batch_home, "report")

        print(f"{len(prs)} PRs against one base; batch {batch_s:.1f}s, separate {separate_s:.1f}s")
        print(f"wall-time ratio: {separate_s / batch_s:.2f}x faster as a batch")
        print(f"doit report regeneration for {len(prs)} reports: {regenerate_s:.3f}s in process, "
              f"{command_s:.2f}s as a command (interpreter start included)")
        print(f"base-side launches: {batch_bases} (separate: {separate_bases})")


if __name__ == "__main__":
    main()
