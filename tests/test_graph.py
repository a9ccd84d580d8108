"""The evidence graph end to end: base-side reuse, cache invalidation, batch, report regeneration."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvtasks.evidence.store import Store
from tests.conftest import IDLE_AMD
from tests.kernel_repos import ENV_TEST, TILED_TAIL_BUG, make_patch, tiled_repo

PROJECT = Path(__file__).resolve().parent.parent
GRID = ["--shape-env", "TILED_SHAPES", "--grid", "64,2000,f32", "--expected-route", "kernels.tiled:tiled_scale",
        "--shape-vars", "M,N,dtype_str", "--target", "tests/test_env.py"]
CHEAP = ["--target", "tests/test_env.py", "--no-perf"]


@pytest.fixture
def tiled(tmp_path):
    return tiled_repo(tmp_path / "tiled")


def base_launches(home: Path, label: str | None = None) -> list[dict]:
    return [row for row in Store(home / "cache").launches()
            if row["kind"] == "base" and (label is None or row["label"] == label)]


def docs_patch(repo, tmp_path, name="docs"):
    return make_patch(repo, {"README.md": f"{name}\n"}, tmp_path / f"{name}.patch")


def test_a_second_patch_against_the_same_base_runs_no_base_target(tiled, validate, home, tmp_path):
    first = validate(tiled, "--patch", str(docs_patch(tiled, tmp_path, "one")), "--label", "pr-1", *GRID)
    assert first.stage("baseline_control")["status"] == "pass"
    assert {row["run"] for row in base_launches(home, "pr-1")} == {"base-repo", "base-grid-probe", "base-grid"}
    second = validate(tiled, "--patch", str(make_patch(tiled, {"kernels/tiled.py": TILED_TAIL_BUG},
                                                       tmp_path / "tail.patch")), "--label", "pr-2", *GRID)
    assert base_launches(home, "pr-2") == []
    reused = second.stage("baseline_control")
    # the same evidence, and the report says it is pr-1's, by its content key
    assert reused.pop("reused_from") == {"evidence": f"base:{keys_of(home, 'pr-1')['base_key']}", "written_by": "pr-1",
                                         "written_utc": reused_written_utc(home, "base", keys_of(home, "pr-1"))}
    assert reused == first.stage("baseline_control")
    assert second.verdict == "BLOCK"  # attribution still uses the reused base grid


def keys_of(home: Path, label: str) -> dict:
    return Store(home / "cache").label(label)


def reused_written_utc(home: Path, kind: str, record: dict) -> str:
    written = Store(home / "cache").provenance(kind, record[f"{kind}_key"])["written"]
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(written))


def test_a_runtime_change_reruns_the_base(tiled, validate, home, gpu_host, tmp_path, monkeypatch):
    """PYLIB's contents, then the claimed GPU's model: each a runtime the base never ran on. (Every
    other input of the keys, one by one: tests/test_keys.py.) The runtime is in the base key whatever the
    flags, so the repo tests alone, untimed, show it: a grid or perf would add launches, not a rerun."""
    pylib = tmp_path / "pylib"
    pylib.mkdir()
    (pylib / "helper.py").write_text("VERSION = 1\n")
    monkeypatch.setenv("PYLIB", str(pylib))
    validate(tiled, "--patch", str(docs_patch(tiled, tmp_path)), "--label", "a", *CHEAP)
    (pylib / "helper.py").write_text("VERSION = 2\n")
    validate(tiled, "--patch", str(docs_patch(tiled, tmp_path)), "--label", "b", *CHEAP)
    assert keys_of(home, "a")["runtime_hash"] != keys_of(home, "b")["runtime_hash"]
    assert base_launches(home, "b")
    gpu_host(amd=[{**IDLE_AMD, "market_name": "Fake Instinct MI-U", "target_graphics_version": "gfx-next"}])
    validate(tiled, "--patch", str(docs_patch(tiled, tmp_path)), "--label", "c", *CHEAP)
    assert keys_of(home, "b")["runtime_hash"] != keys_of(home, "c")["runtime_hash"]
    assert base_launches(home, "c")


def doit(home: Path, *args: str, **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "KVTASKS_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), *args], cwd=PROJECT,
                          env=env, capture_output=True, text=True, timeout=600, **popen)


def test_doit_report_rebuilds_identical_json_without_the_worktree_and_the_cache_lists_and_collects(tiled, validate,
                                                                                                   home, tmp_path):
    label = "pr-1-the-tail-tile-fix-rebased-onto-the-nightly-base"  # longer than any fixed column
    validate(tiled, "--patch", str(docs_patch(tiled, tmp_path)), "--label", label, *GRID)
    published = home / "reports" / label / "validation_report.json"
    original = published.read_bytes()
    launches = len(Store(home / "cache").launches())
    shutil.rmtree(home / "reports")
    shutil.rmtree(tiled)  # the worktree is gone: regeneration reads stored evidence only

    # the cache lists what the validation stored, with no worktree either
    listing = doit(home, "cache")
    assert listing.returncode == 0 and "base" in listing.stdout and label in listing.stdout
    record = Store(home / "cache").label(label)
    lines = [line for line in doit(home, "cache", f"base={record['base_oid']}").stdout.splitlines() if line.strip()]
    header = next(line for line in lines if line.split()[:2] == ["kind", "key"])
    rows = [line for line in lines if label in line]
    assert [row.split() for row in rows] == [
        [kind, key, label, *row.split()[3:]] for kind, key, row in
        zip(("prepare", "base", "head"), (label, record["base_key"], record["head_key"]), rows)]
    assert {row.rindex(label) for row in rows} == {header.index("labels")}  # columns as wide as their values
    assert label not in doit(home, "cache", "base=" + "0" * 40).stdout

    # the label as the listing prints it, pasted, rebuilds the report: one process answers both
    pasted = rows[0].split()[2]
    done = doit(home, "report", f"label={pasted}")
    assert done.returncode == 0, done.stderr
    assert published.read_bytes() == original
    assert f"{label}: {json.loads(original)['verdict']}" in done.stdout
    # the pages are redrawn from the published JSON too
    assert f"PASS · {label}" in (home / "reports" / label / "index.html").read_text()
    assert f'data-label="{label}"' in (home / "reports" / "index.html").read_text()
    assert len(Store(home / "cache").launches()) == launches
    every = doit(home, "report")
    assert every.returncode == 0 and f"{label}: PASS" in every.stdout

    # and collects it
    kept = doit(home, "cache-gc", "older=30d")
    assert "removed 0 evidence entries" in kept.stdout
    assert len(Store(home / "cache").entries()) == 3
    copy = tmp_path / "copied-home"  # the index holds paths relative to the store: a copy is whole
    shutil.copytree(home, copy)
    assert "removed 3 evidence entries" in doit(copy, "cache-gc", "older=0s").stdout
    assert len(Store(home / "cache").entries()) == 3 and doit(home, "report", f"label={label}").returncode == 0
    gone = doit(home, "cache-gc", "older=0s")
    assert "removed 3 evidence entries" in gone.stdout and Store(home / "cache").entries() == []
    assert Store(home / "cache").labels() == []  # label records go with their evidence
    report = doit(home, "report", f"label={label}")
    assert report.returncode == 64 and len(report.stderr.strip().splitlines()) == 1
    assert "stored evidence is gone" in report.stderr and "Traceback" not in report.stderr
    assert doit(home, "cache-gc", "older=soon").returncode == 64


def write_manifest(tiled, tmp_path, labels=("clean", "tail", "loose")) -> Path:
    patches = {
        "clean": docs_patch(tiled, tmp_path),
        "tail": make_patch(tiled, {"kernels/tiled.py": TILED_TAIL_BUG}, tmp_path / "tail.patch"),
        "loose": make_patch(tiled, {"tests/test_env.py": ENV_TEST.replace("atol=1e-3", "atol=1e-1")},
                            tmp_path / "loose.patch"),
    }
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tiled, capture_output=True, text=True).stdout.strip()
    lines = [f'repo = "{tiled}"', f'base = "{base}"', 'target = "tests/test_env.py"', 'shape_env = "TILED_SHAPES"',
             'grid = "64,2000,f32"', 'expected_route = "kernels.tiled:tiled_scale"', 'shape_vars = "M,N,dtype_str"', ""]
    for label in labels:
        lines += ["[[prs]]", f'label = "{label}"', f'patch = "{patches[label].name}"', f'head_sha = "{"a" * 40}"', ""]
    manifest = tmp_path / "nightly.toml"
    manifest.write_text("\n".join(lines))
    return manifest


def test_batch_refuses_a_manifest_whose_base_is_not_head(tiled, home, tmp_path):
    manifest = write_manifest(tiled, tmp_path)
    manifest.write_text(manifest.read_text().replace("base = ", 'base = "' + "0" * 40 + '"\n# was '))
    done = doit(home, "batch", f"manifest={manifest}")
    assert done.returncode == 64 and "is not the worktree's HEAD" in done.stderr


def test_a_killed_batch_resumes_without_rerunning_the_base(tiled, home, tmp_path, idle_gpu):
    manifest = write_manifest(tiled, tmp_path)
    env = {**os.environ, "KVTASKS_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "doit", "-f", str(PROJECT / "dodo.py"), "batch",
                             f"manifest={manifest}"], cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not any(row["kind"] == "head" for row in Store(home / "cache").launches()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert len([row for row in base_launches(home) if row["run"] == "base-repo"]) == 1
    done = doit(home, "batch", f"manifest={manifest}")
    assert len([row for row in base_launches(home) if row["run"] == "base-repo"]) == 1
    assert (home / "reports" / "nightly" / "index.md").is_file(), done.stdout


def test_a_second_validator_on_a_busy_worktree_is_refused(tiled, home, tmp_path):
    from kvtasks import worktree

    worktree.hold_exclusively(tiled)
    try:
        done = subprocess.run([sys.executable, "-m", "kvtasks", "--repo", str(tiled), "--target", "tests/test_env.py",
                               "--out", str(tmp_path / "r.json")], capture_output=True, text=True,
                              env={**os.environ, "KVTASKS_HOME": str(home)})
    finally:
        worktree.release_exclusive(tiled)
    assert done.returncode == 64 and f"pid {os.getpid()}" in done.stderr and "is busy" in done.stderr
    assert not (tmp_path / "r.json").exists()
