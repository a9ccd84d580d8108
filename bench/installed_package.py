"""The installed front door, with no kvtasks source tree in sight: a fresh virtual environment gets
`pip install --no-deps <checkout>` (its dependencies are the running interpreter's, by a .pth file),
then, from an empty directory, `validate-kernel-pr validate` (the demo), `batch` of two demo PRs,
`report` and `cache` run, each timed. The directory must stay empty: the cache, clones and trees
live in the workspace ($KVTASKS_HOME). Prints one line per command, then `installed package: N
problems, S.Ss in all, the directory it ran from left empty: B`, and exits non-zero on a problem.
With --smoke, the batch holds one demo PR instead of two and pytest loads no hypothesis plugin: a
check that the bench runs, not a measurement.

    python bench/installed_package.py [--root FOLDER] [--smoke]
"""
import argparse
import json
import os
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
DEMO_PRS = ("loosen-tolerance", "clean-fix")


def fresh_environment(root: Path) -> Path:
    """A venv that sees this interpreter's packages but not the checkout, with kvtasks installed into it."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    own_site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies' folders only: a .pth line adds a folder, never runs that folder's own .pth
    # files, so an editable kvtasks installed there stays out of sight
    Path(own_site, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-build-isolation", str(CHECKOUT)], check=True, capture_output=True)
    return venv


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="where to make the venv, the workspace and the empty directory")
    parser.add_argument("--smoke", action="store_true", help="a batch of one demo PR; no hypothesis plugin")
    args = parser.parse_args()
    batch_prs = DEMO_PRS[:1] if args.smoke else DEMO_PRS
    root = Path(args.root or tempfile.mkdtemp(prefix="kvtasks-installed-")).resolve()
    started = time.monotonic()
    venv = fresh_environment(root)
    print(f"install: {time.monotonic() - started:.1f}s")
    empty, home = root / "empty", root / "home"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(KVTASKS_HOME=str(home), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    if args.smoke:  # the demo's tests use no hypothesis: its pytest plugin's imports cost every target process
        env.setdefault("PYTEST_ADDOPTS", "-p no:hypothesispytest")

    def front_door(*args: str) -> subprocess.CompletedProcess:
        begun = time.monotonic()
        done = subprocess.run([str(venv / "bin" / "validate-kernel-pr"), *args], cwd=empty, env=env,
                              capture_output=True, text=True, timeout=900)
        print(f"validate-kernel-pr {args[0]}: exit {done.returncode}, {time.monotonic() - begun:.1f}s")
        return done

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import kvtasks; print(kvtasks.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True).stdout.strip()
    problems = [] if not Path(where).is_relative_to(CHECKOUT) else [f"kvtasks was imported from the checkout: {where}"]
    validated = front_door("validate", "--quiet", "--format", "json")
    summary = json.loads(validated.stdout)
    if [run["verdict"] for run in summary["reports"]] != ["BLOCK"] or validated.returncode != 1:
        problems.append(f"the demo did not BLOCK: {validated.stdout[-400:]} {validated.stderr[-400:]}")
    options = json.loads(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import json, pathlib; from kvtasks import demo; "
         f"print(json.dumps([demo.options(pathlib.Path({str(home / 'cache')!r}), n) for n in {batch_prs!r}]))"],
        cwd=empty, env=env, capture_output=True, text=True, check=True).stdout)
    shared = {key: value for key, value in options[0].items() if key not in ("patch", "head_sha", "label", "target")}
    manifest = root / "demo-prs.json"
    manifest.write_text(json.dumps({**shared, "prs": [{key: one[key] for key in ("patch", "head_sha", "label", "target")}
                                                      for one in options]}))
    batched = front_door("batch", f"manifest={manifest}", "--quiet", "--format", "json")
    if sorted(run["label"] for run in json.loads(batched.stdout)["reports"]) != sorted(o["label"] for o in options):
        problems.append(f"the batch did not report every PR: {batched.stdout[-400:]} {batched.stderr[-400:]}")
    rebuilt = front_door("report")
    listed = front_door("cache")
    if rebuilt.returncode != 0 or "demo: BLOCK" not in rebuilt.stdout:
        problems.append(f"report: {rebuilt.stdout[-400:]} {rebuilt.stderr[-400:]}")
    if listed.returncode != 0 or "demo" not in listed.stdout:
        problems.append(f"cache: {listed.stdout[-400:]} {listed.stderr[-400:]}")
    left = sorted(path.name for path in empty.iterdir())
    if left:
        problems.append(f"the directory it ran from is no longer empty: {left}")
    if not (home / "cache").is_dir() or not (home / "reports" / "demo" / "comment.md").is_file():
        problems.append("the workspace holds no cache or no report")
    print(f"installed package: {len(problems)} problems, {time.monotonic() - started:.1f}s in all, "
          f"the directory it ran from left empty: {not left}")
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
