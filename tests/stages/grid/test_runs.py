"""How many times a validation launches the target, per side and channel: on the argnames channel one
pytest session per side runs the repository's tests, the grid and the poisoned cell, and still has
to prove the channel; the env and cli channels cannot merge (their launches: test_stage.py)."""
import json
import os
from pathlib import Path

import pytest

from kvtasks.front import cli
from kvtasks.evidence.store import Store
from tests.batches import launches
from tests.kernel_repos import ARGNAMES_TEST, TILED, TILED_TAIL_BUG, git, make_patch, snapshot, tiled_repo

ROUTE = ["--expected-route", "kernels.tiled:tiled_scale", "--shape-vars", "M,N,dtype_str"]
ARGNAMES = ["--target", "tests/test_argnames.py", "--shape-argnames", "M,N,dtype_str", *ROUTE]


@pytest.fixture
def tiled(tmp_path):
    return tiled_repo(tmp_path / "tiled")


def patch(repo: Path, tmp_path: Path, name: str, kernel: str) -> str:
    return str(make_patch(repo, {"kernels/tiled.py": kernel}, tmp_path / f"{name}.patch"))


def test_the_argnames_channel_runs_one_session_per_side_and_reuses_the_base(tiled, validate, home, tmp_path):
    grid = ["--grid", "64,2000,f32;4,128,f32;3,100,f16"]
    blocked = validate(tiled, "--patch", patch(tiled, tmp_path, "tail", TILED_TAIL_BUG), "--label", "tail", *ARGNAMES,
                       *grid)
    assert blocked.verdict == "BLOCK"
    assert launches(home, "tail") == {"prepare": [], "base": ["base-session"], "head": ["head-session"]}
    selection = blocked.report["test_selection"]
    assert selection["grid_channel"] == "pytest" and selection["grid_independence"] == "adds-coverage"
    stage = blocked.stage("correctness_grid")
    assert stage["status"] == "fail" and stage["stats"]["executed"] == 3 and stage["stats"]["failures"] == 2
    # the proof is still the poisoned cell failing, now an item of the session, beside repo tests that passed
    assert stage["hook_proof"] == "the poisoned cell failed in the merged session head-session"
    assert blocked.stage("baseline_control")["s1_grid"]["hook_proof"].endswith("merged session base-session")
    assert blocked.stage("correctness_repo_tests")["stats"]["executed"] == 2  # the mark's own two cells only
    assert stage["cells"] == {"64,2000,f32": "executed", "4,128,f32": "executed", "3,100,f16": "executed"}
    assert any("(failing cells 64,2000,f32, 3,100,f16)" in f["detail"] for f in blocked.findings("blocker"))
    receipt = blocked.stage("execution_receipt")
    assert "head-grid items of the merged session head-session" in receipt["receipt_scope"]
    assert receipt["shape_namespace"].startswith("pytest parametrize cells")
    assert "reused_from" not in blocked.stage("baseline_control")

    clean = validate(tiled, "--patch", patch(tiled, tmp_path, "clean", "# no change in behaviour\n" + TILED),
                     "--label", "clean", *ARGNAMES, *grid)
    # the same base key: its evidence, proof included, is reused and the report says from where
    # the corrupted run is the head session again, seen as it was, and judged by its grid items
    assert launches(home, "clean") == {"prepare": [], "base": [],
                                       "head": ["head-session", "head-sensitivity-tail-session"]}
    reused = clean.stage("baseline_control")["reused_from"]
    assert reused["evidence"].startswith("base:") and reused["written_by"] == "tail"
    assert clean.stage("correctness_grid")["status"] == "pass" and clean.stage("sensitivity")["status"] == "pass"
    assert "reused_from" not in clean.stage("correctness_grid")


def test_a_merged_session_still_has_to_prove_the_channel(tiled, validate, home, tmp_path):
    # the test takes the grid's names and never uses them: its poisoned cell passes like any other
    ignoring = ARGNAMES_TEST.replace("x = np.arange(M * N, dtype=DTYPES[dtype_str]).reshape(M, N) % 7",
                                     "x = np.arange(4 * 64, dtype=np.float32).reshape(4, 64) % 7")
    assert ignoring != ARGNAMES_TEST
    (tiled / "tests/test_argnames.py").write_text(ignoring)
    git(tiled, "commit", "-qam", "a test that ignores its cells")
    result = validate(tiled, "--patch", patch(tiled, tmp_path, "tail", TILED_TAIL_BUG), "--label", "ignoring",
                      *ARGNAMES, "--grid", "64,2000,f32")
    stage = result.stage("correctness_grid")
    assert stage["status"] == "skip" and "was not consumed" in stage["note"], stage["note"]
    assert "the poisoned cell passed in the merged session head-session" in stage["hook_proof"]
    assert result.stage("baseline_control")["s1_grid"]["state"] == "hook-not-consumed"
    # the sensitivity run corrupts the repository's own tests instead: the head session again
    assert launches(home, "ignoring") == {"prepare": [], "base": ["base-session"],
                                          "head": ["head-session", "head-sensitivity-tail-session"]}
    assert result.verdict != "PASS"


def test_a_session_a_grid_cell_kills_runs_its_parts_alone(tiled, validate, home, tmp_path):
    killing = ARGNAMES_TEST.replace("def test_tiled(M, N, dtype_str):\n",
                                    "def test_tiled(M, N, dtype_str):\n    if M == 999:\n"
                                    "        os.kill(os.getpid(), signal.SIGKILL)\n")
    (tiled / "tests/test_argnames.py").write_text("import signal\n" + killing)
    git(tiled, "commit", "-qam", "a cell that kills the interpreter")
    result = validate(tiled, "--patch", patch(tiled, tmp_path, "tail", TILED_TAIL_BUG), "--label", "killed",
                      *ARGNAMES, "--grid", "999,64,f32;64,2000,f32")
    assert launches(home, "killed") == {
        "prepare": [], "base": ["base-session", "base-repo", "base-grid-probe", "base-grid"],
        "head": ["head-session", "head-repo", "head-grid-probe", "head-grid"]}
    assert any("merged head session stands for nothing (it ended with exit -9" in f["detail"]
               for f in result.findings("note"))
    # the repository's own tests are judged from their own run, not from the session the grid killed
    assert result.stage("correctness_repo_tests")["status"] == "pass"
    assert result.stage("correctness_grid")["status"] == "fail"


def test_without_a_gpu_the_head_run_gpu_requirement_made_is_adopted(tiled, home, tmp_path):
    out = tmp_path / "out" / "validation_report.json"
    before = snapshot(tiled)
    littering = TILED_TAIL_BUG + '\nopen("left_behind.bin", "wb").close()\n'  # head's kernel writes into the tree
    code = cli.main(["--repo", str(tiled), "--out", str(out), "--quiet", "--label", "gpuless", "--patch",
                     patch(tiled, tmp_path, "tail", littering), *ARGNAMES, "--grid", "64,2000,f32"])
    assert snapshot(tiled) == before and code == 1
    report = json.loads(out.read_text())
    assert report["test_selection"]["gpu_requirement"] == "not-required"
    # the run that asked whether the target needs a GPU is the head run: it is not launched twice
    assert launches(home, "gpuless") == {"prepare": ["head-session"], "base": ["base-session"], "head": []}
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"
    assert report["stages"]["correctness_grid"]["status"] == "fail"
    # what the adopted run left in the tree is still said, by the stage that adopted it
    assert report["stages"]["correctness_repo_tests"]["artifacts"] == ["left_behind.bin"]
    # the head evidence holds its own copies of what that run left
    head_key = Store(home / "cache").label("gpuless")["head_key"]
    kept = home / "cache" / "runs" / "head" / head_key / "runs"
    assert {"head-session.log", "head-grid.log", "junit-head-session.xml"} <= {path.name for path in kept.iterdir()}
    assert os.path.dirname(report["stages"]["correctness_grid"]["log"]) == str(kept)


def test_a_head_conftest_that_drops_or_stops_the_grid_cannot_turn_a_block_into_a_skip(tiled, validate, home, tmp_path):
    # the PR's conftest deselects every cell its own mark does not list but the poisoned one: they ran on
    # base, so hiding them blocks
    deselecting = '''OWN = {(4, 64, "f32"), (8, 128, "f16")}


def pytest_collection_modifyitems(config, items):
    def kept(item):
        values = tuple(getattr(item, "callspec", None).params.values()) if hasattr(item, "callspec") else ()
        return not values or values in OWN or "__VALIDATOR_INVALID_GRID__" in values
    items[:] = [item for item in items if kept(item)]
'''
    hidden = make_patch(tiled, {"kernels/tiled.py": TILED_TAIL_BUG, "tests/conftest.py": deselecting},
                        tmp_path / "hidden.patch")
    result = validate(tiled, "--patch", str(hidden), "--label", "hidden", *ARGNAMES, "--grid", "64,2000,f32")
    assert result.verdict == "BLOCK"
    assert any("skipped or deselected on head" in f["detail"] and "64,2000,f32" in f["detail"]
               for f in result.findings("blocker"))
    # the PR changed the oracle (a conftest.py), so the base oracle and sensitivity launch on their own
    assert [run for run in launches(home, "hidden")["head"] if not run.startswith(("head-baseoracle", "head-sens"))] \
        == ["head-session"]

    # one that ends the session at the first red grid cell, before the poisoned one: the session stands
    # for nothing and the parts run alone, so the failing cell is still judged
    stopping = """import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.option.maxfail = 1  # after kvtasks dropped it
"""
    stopped = make_patch(tiled, {"kernels/tiled.py": TILED_TAIL_BUG, "tests/conftest.py": stopping},
                         tmp_path / "stopped.patch")
    result = validate(tiled, "--patch", str(stopped), "--label", "stopped", *ARGNAMES, "--grid", "64,2000,f32;3,100,f16")
    assert any("stopped before its last item" in f["detail"] for f in result.findings("note"))
    assert [run for run in launches(home, "stopped")["head"] if not run.startswith(("head-baseoracle", "head-sens"))] \
        == ["head-session", "head-repo", "head-grid-probe", "head-grid"]
    assert result.stage("correctness_grid")["status"] == "fail" and result.verdict == "BLOCK"


def test_a_leak_check_at_module_teardown_still_blames_the_pr(tiled, validate, home, tmp_path):
    # base's own suite checks at module teardown that the kernel leaked nothing; pytest reports that on
    # the module's last item, which in a merged session is kvtasks' poisoned cell
    leak_check = '''import pytest

import kernels.tiled


@pytest.fixture(scope="module", autouse=True)
def nothing_leaked():
    yield
    assert not getattr(kernels.tiled, "LEAKED", []), "the kernel leaked buffers"
'''
    (tiled / "tests/conftest.py").write_text(leak_check)
    git(tiled, "add", "-A")
    git(tiled, "commit", "-qm", "a leak check")
    leaking = TILED.replace("    return out\n", "    LEAKED.append(out)\n    return out\n") + "\nLEAKED = []\n"
    result = validate(tiled, "--patch", patch(tiled, tmp_path, "leak", leaking), "--label", "leak", *ARGNAMES,
                      "--grid", "64,2000,f32")
    assert result.stage("correctness_repo_tests")["status"] == "fail" and result.verdict == "BLOCK"
    assert any("a teardown failed on an item kvtasks added" in f["detail"] for f in result.findings("note"))
