import ast
from pathlib import Path

import pytest

from kvtasks.harness.junit import CaseResult
from kvtasks.harness.target_run import TargetRun
from kvtasks.records import Facts, Plan, Selection
from kvtasks.request import UsageError, build_request, grid_rows
from kvtasks.sources import parametrize_marks
from kvtasks.stages import Context, StageResult, base_oracle, selection, test_policy
from kvtasks.stages import receipt as receipt_stage
from kvtasks.stages.grid import channel, default_grid
from kvtasks.stages.grid import stage as grid_stage
from kvtasks.stages.grid.plan import grid_seed
from kvtasks.stages.grid.proof import SENTINEL
from kvtasks.worktree import Worktree
from tests.batches import launches
from tests.kernel_repos import (ARGNAMES_TEST, CLI_SCRIPT, ENV_TEST, PYTEST_HEADER, TILED, TILED_HEADS_ASSERT,
                                TILED_TAIL_BUG, check, git, make_patch, make_repo, tiled_repo)
from tests.kit import stage_context, target_run
from tests.receipts import receipt
from tests.recorded import after_both_sides, ready

ROUTE = ["--expected-route", "kernels.tiled:tiled_scale", "--shape-vars", "M,N,dtype_str"]


@pytest.fixture
def tiled(tmp_path):
    return tiled_repo(tmp_path / "tiled")


def tail_bug(repo, tmp_path):
    return make_patch(repo, {"kernels/tiled.py": TILED_TAIL_BUG}, tmp_path / "tail.patch")


def readme(repo, tmp_path):
    return make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch")


# the argnames channel's cells, proof and launches: test_runs.py
def test_env_channel_finds_the_hidden_tail_bug(tiled, validate, home, tmp_path):
    result = validate(tiled, "--patch", str(tail_bug(tiled, tmp_path)), "--target", "tests/test_env.py",
                      "--shape-env", "TILED_SHAPES", "--grid", "64,2000,f32", "--label", "env", *ROUTE)
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # its own aligned rows stay green
    selection = result.report["test_selection"]
    assert selection["grid_channel"] == "env"
    assert "TILED_SHAPES read in tests/test_env.py" in selection["grid_channel_basis"]
    assert selection["grid_independence"] == "unknown"
    grid = result.stage("correctness_grid")
    assert grid["status"] == "fail" and grid["hook_probe_exit"] != 0 and grid["stats"]["observed_work"] == 1
    base = result.stage("baseline_control")["s1_grid"]
    assert base["state"] == "ran" and base["exit"] == 0
    assert any("passes on base and fails on head" in f["detail"] for f in result.findings("blocker"))
    receipt = result.stage("execution_receipt")
    assert receipt["status"] == "pass" and receipt["required_shapes"] == ["64,2000,f32"]
    assert receipt["executed_shapes"] == ["64,2000,f32"] and "head-grid" in receipt["receipt_scope"]
    assert result.verdict == "BLOCK"
    # the env channel cannot merge: each part is a launch of its own
    assert launches(home, "env") == {"prepare": [], "base": ["base-repo", "base-grid-probe", "base-grid"],
                                     "head": ["head-repo", "head-grid-probe", "head-grid"]}


def test_a_one_name_grid_hands_each_cell_over_as_the_value_itself(tiled, validate, tmp_path):
    # pytest's convention: one argname takes the value itself, never a 1-tuple of it
    (tiled / "tests/test_rows.py").write_text(PYTEST_HEADER + '''

@pytest.mark.parametrize("M", [3])
def test_rows(M):
''' + check("M", "64", '"f32"'))
    git(tiled, "add", "-A")
    git(tiled, "commit", "-qm", "a one-name parametrize")
    result = validate(tiled, "--target", "tests/test_rows.py", "--shape-argnames", "M", "--grid", "128;256")
    assert result.report["test_selection"]["grid_channel"] == "pytest"
    grid = result.stage("correctness_grid")
    assert grid["status"] == "pass" and grid["stats"]["executed"] == 2 and grid["hook_probe_exit"] != 0, grid["note"]


def test_cli_channel_on_a_script_target(tiled, validate, home, tmp_path):
    result = validate(tiled, "--patch", str(tail_bug(tiled, tmp_path)), "--target", "bench/check_tiled.py",
                      "--shape-arg", "--shapes", "--grid", "64,2000,f32", "--label", "cli", *ROUTE)
    selection = result.report["test_selection"]
    assert selection["runner"] == "script" and selection["grid_channel"] == "cli"
    assert selection["grid_independence"] == "adds-coverage"
    assert result.stage("correctness_grid")["status"] == "fail"
    assert result.verdict == "BLOCK"
    # nor can the cli channel
    assert launches(home, "cli") == {"prepare": [], "base": ["base-repo", "base-grid-probe", "base-grid"],
                                     "head": ["head-repo", "head-grid-probe", "head-grid"]}


TILED_FILES = {"kernels/__init__.py": "", "kernels/tiled.py": TILED, "tests/test_env.py": ENV_TEST,
               "tests/test_argnames.py": ARGNAMES_TEST, "bench/check_tiled.py": CLI_SCRIPT}
ROUTE_OPTIONS = {"expected_route": "kernels.tiled:tiled_scale", "shape_vars": "M,N,dtype_str"}


def prepared_selection(head: dict, **options):
    """The test selection after prepare's selection and grid_channel steps, which read sources only:
    an in-memory tiled repository (tests/kit.py), no git, no run."""
    ctx = stage_context(TILED_FILES, head, **ROUTE_OPTIONS, **options)
    for step in (selection.run, channel):
        produced = step(ctx)
        ctx.earlier[produced.name] = produced
    return ctx.selection


# what the grid stage and the base side make of a target that ignores the grid, or of no channel, over
# recorded runs: tests/unit/test_launching_stages_more.py
def test_no_channel_flag_is_said_and_leaves_the_plan_without_one():
    selected = prepared_selection({"README.md": "docs\n"}, target="tests/test_env.py", grid="64,2000,f32")
    assert selected.grid_channel == "" and "no channel flag" in selected.grid_channel_reason


def test_a_grid_of_the_script_s_own_defaults_is_a_duplicate():
    selected = prepared_selection({"README.md": "docs\n"}, target="bench/check_tiled.py", shape_arg="--shapes",
                                  grid="4,64,f32;8,128,f32")
    assert selected.grid_independence == "duplicates-target-defaults"


def test_a_failed_channel_guess_is_explained():
    reason = prepared_selection({"README.md": "docs\n"}, target="tests/test_env.py", shape_env="WRONG_NAME",
                                shape_argnames="M,N", grid="64,2000").grid_channel_reason
    assert "--shape-env WRONG_NAME: neither the target" in reason
    assert ("--shape-argnames M,N: the parametrize mark binds more names (M,N,dtype_str) and its rows are "
            "computed") in reason
    # a command-line channel on a pytest target: pytest's argv is not the test's
    reason = prepared_selection({"README.md": "docs\n"}, target="tests/test_env.py", shape_arg="--shapes",
                                grid="64,2000").grid_channel_reason
    assert "--shape-arg --shapes: argv reaches script targets only (runner is pytest)" in reason


def test_a_mark_binding_more_names_than_the_grid_keeps_its_first_row_s_cells_for_them(tiled, validate, tmp_path):
    # a dtype parametrized beside the dimensions, as most kernel tests do: the grid fills M and N
    selected = prepared_selection({"README.md": "docs\n"}, target="tests/test_argnames.py", shape_argnames="M,N",
                                  grid="64,2000")
    assert selected.grid_channel == "pytest" and "keeps dtype_str=f32" in selected.grid_channel_basis
    result = validate(tiled, "--patch", str(tail_bug(tiled, tmp_path)), "--target", "tests/test_argnames.py",
                      "--shape-argnames", "M,N", "--grid", "64,2000", "--label", "filled",
                      "--expected-route", "kernels.tiled:tiled_scale", "--shape-vars", "M,N")
    grid = result.stage("correctness_grid")
    assert grid["status"] == "fail" and grid["hook_probe_exit"] != 0, grid["note"]
    assert result.stage("baseline_control")["s1_grid"]["exit"] == 0  # base passes the filled cells
    assert result.verdict == "BLOCK"


def test_axis_reaches_the_public_api_assert_and_is_the_grids_one_independence(tiled, validate, tmp_path):
    # the shape cells are the target's own defaults; the proven axis alone adds coverage
    patch = make_patch(tiled, {"kernels/tiled.py": TILED_HEADS_ASSERT}, tmp_path / "heads.patch")
    result = validate(tiled, "--patch", str(patch), "--target", "bench/check_tiled.py", "--shape-arg", "--shapes",
                      "--grid", "4,64,f32;8,128,f32", "--axis", "num_heads=--num-heads:16;32", *ROUTE)
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # defaults 64 and 128 never hit 16
    selection = result.report["test_selection"]
    assert selection["axis_state"] == "proven"
    axis = selection["axes"][0]
    assert axis["hook_proof"] == "refused-invalid-value" and axis["independence"] == "adds-coverage"
    assert axis["target_default"] == ["64", "128"]
    grid = result.stage("correctness_grid")
    assert grid["axis_argv"] == ["--num-heads", "16", "32"] and grid["status"] == "fail"
    # one answer, in the field the seed names; the stage carries no second one to disagree with it
    assert selection["grid_independence"] == "adds-coverage" and "num_heads" in selection["grid_independence_reason"]
    assert "grid_independence" not in grid
    assert any("passes on base and fails on head" in f["detail"] for f in result.findings("blocker"))


def test_axis_flag_not_declared_is_hook_not_found():
    chosen = prepared_selection({"README.md": "docs\n"}, target="bench/check_tiled.py", shape_arg="--shapes",
                                grid="64,2000,f32", axis=("window=--window:1;2",))
    assert chosen.axis_state == "hook-not-found"


def test_axes_on_a_pytest_target_are_unusable():
    assert prepared_selection({}, target="tests/test_env.py", axis=("num_heads=--num-heads:16",)).axis_state == "unusable"


def test_shape_vars_without_a_grid_use_the_default_generator(tiled, tmp_path):
    request = build_request({"repo": str(tiled), "target": "tests/test_argnames.py", "shape_argnames": "M,N,dtype_str",
                             "expected_route": "kernels.tiled:tiled_scale", "shape_vars": "M,N,dtype_str"})
    ctx = Context(request=request, worktree=Worktree(tiled, request.patch), run_dir=tmp_path / "run")
    ctx.earlier["selection"] = StageResult(name="selection", selection={"runner": "pytest"})
    selection = channel(ctx).selection.model_dump(mode="json")
    assert selection["grid_channel"] == "pytest"
    # the dtype comes from the target's own parametrize rows
    drawn = default_grid(["M", "N", "dtype_str"], None, grid_seed("", ctx.worktree.head_oid(), "tests/test_argnames.py"))
    assert selection["grid_cells"] == [",".join(row[:2]) + ",f32" for row in drawn[0]]
    assert selection["grid_cells_basis"].startswith("generated for a size below 64")
    assert selection["grid_independence"] == "adds-coverage"


# The grid channels real tests use: a tuple-valued `shape` (attorch) and `parametrize(*_SHAPE_PARAMS)`
# stacked on another parametrize mark (Liger).
REAL_GRIDS = '''import numpy as np
import pytest

from kernels.tiled import tiled_scale

_SHAPE_PARAMS = ("M, N", [(4, 64), (2, 128)])


@pytest.mark.parametrize("shape", [(2, 64), (4, 128)])
def test_tuple_shape(shape):
    x = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape) % 7
    np.testing.assert_allclose(tiled_scale(x, 3.0), x * 3.0)


@pytest.mark.parametrize(*_SHAPE_PARAMS)
@pytest.mark.parametrize("dtype_str", ["f32"])
def test_stacked(M, N, dtype_str):
    x = np.arange(M * N, dtype=np.float32).reshape(M, N) % 7
    np.testing.assert_allclose(tiled_scale(x, 3.0), x * 3.0)
'''


@pytest.mark.parametrize("target,argnames,grid,basis", [
    ("tests/test_real_grids.py::test_tuple_shape", "shape", "(3,100);(5, 29)",
     "@pytest.mark.parametrize binds shape"),
    ("tests/test_real_grids.py::test_stacked", "M,N,dtype_str", "3,100,f32",
     "stacked @pytest.mark.parametrize marks bind M,N + dtype_str"),
])
def test_tuple_cells_and_stacked_marks_carry_the_grid(target, argnames, grid, basis, tmp_path, validate):
    repo = make_repo(tmp_path / "real", {"kernels/__init__.py": "", "kernels/tiled.py": TILED,
                                         "tests/test_real_grids.py": REAL_GRIDS})
    result = validate(repo, "--patch", str(tail_bug(repo, tmp_path)), "--target", target,
                      "--shape-argnames", argnames, "--grid", grid)
    selection = result.report["test_selection"]
    assert selection["grid_channel"] == "pytest" and basis in selection["grid_channel_basis"]
    assert selection["grid_independence"] == "adds-coverage"
    assert result.stage("baseline_control")["s1_grid"]["exit"] == 0  # base ran every cell, tuples whole
    assert result.stage("correctness_grid")["status"] == "fail"
    assert any("passes on base and fails on head" in f["detail"] for f in result.findings("blocker"))


def test_parametrize_reads_unpacked_constants_and_tuple_cells(tmp_path):
    tree = ast.parse(REAL_GRIDS)
    assert parametrize_marks(tree) == [(["shape"], ["(2,64)", "(4,128)"]), (["M", "N"], ["4,64", "2,128"]),
                                       (["dtype_str"], ["f32"])]
    assert grid_rows("(3,100);(5, 29)") == [["(3,100)"], ["(5, 29)"]]
    assert grid_rows("(3,100),f32; 4,[1,2],f16;") == [["(3,100)", "f32"], ["4", "[1,2]", "f16"]]
    repo = make_repo(tmp_path / "repo", {"t.py": ""})
    with pytest.raises(UsageError, match="unbalanced brackets"):
        build_request({"repo": str(repo), "target": "t.py", "shape_argnames": "shape", "grid": "(3,100;(5,29)"})


CELLS = ["64,2000,f32", "4,128,f32"]
ITEMS = ["test_tiled[64-2000-f32]", "test_tiled[4-128-f32]"]
MISMATCH = "E       AssertionError: \nNot equal to tolerance rtol=1e-07, atol=0.001\nMismatched elements: 10"
# base's run of the target loaded the kernel while importing the route: the kernel is the code under test
LOADED = {"modules": [{"path": "kernels/tiled.py", "during": "route-import"}]}


def cells_run(folder: Path, label: str, *outcomes: str, shapes: list[str] = CELLS) -> TargetRun:
    """A recorded pytest-channel grid run: one JUnit item per cell with its outcome, the probe's
    receipt naming each item's cell and the shapes the route ran."""
    cases = [CaseResult(classname="tests.test_argnames", name=item, outcome=outcome,
                        message=MISMATCH if outcome == "failed" else "") for item, outcome in zip(ITEMS, outcomes)]
    failures, skipped = outcomes.count("failed"), outcomes.count("skipped")
    seen = receipt(route="kernels.tiled:tiled_scale", kernel_symbols=["kernels.tiled:tiled_scale"],
                   route_calls={"kernels.tiled:tiled_scale": len(shapes)}, executed_shapes=shapes, loaded=LOADED,
                   cells={f"tests/test_argnames.py::{item}": index for index, item in enumerate(ITEMS)})
    return target_run(folder, label, exit=1 if failures else 0, executed=len(cases) - skipped, failures=failures,
                      skipped=skipped, cases=cases, log=MISMATCH if failures else "", receipt=seen)


# a real session's skipped cell read back per cell: tests/harness/test_session.py; a cell hidden on head
# by a real conftest: test_runs.py's test_a_head_conftest_that_drops_or_stops_the_grid_cannot_turn_a_block_into_a_skip
def test_a_cell_the_pr_skips_on_head_is_named_and_blocks(tmp_path):
    skipping = ARGNAMES_TEST.replace("def test_tiled(M, N, dtype_str):\n",
                                     "def test_tiled(M, N, dtype_str):\n    if N % 64:\n        pytest.skip()\n")
    plan = Plan(channel="pytest", rows=[cell.split(",") for cell in CELLS])
    earlier = {**ready(), "grid_channel": StageResult(name="grid_channel", facts=Facts(grid_plan=plan),
                                                      selection=Selection(grid_channel="pytest", grid_cells=CELLS))}
    poisoned = f"E   ValueError: could not convert string to float: '{SENTINEL}'"
    runs = {"base-grid-probe": target_run(tmp_path, "base-grid-probe", exit=1, log=poisoned),
            "base-grid": cells_run(tmp_path, "base-grid", "passed", "passed"),
            "head-grid-probe": target_run(tmp_path, "head-grid-probe", exit=1, log=poisoned),
            "head-grid": cells_run(tmp_path, "head-grid", "skipped", "passed", shapes=CELLS[1:]),
            # base's target, head's kernel: the cells fail where base's own run passed
            "head-baseoracle": target_run(tmp_path, "head-baseoracle"),
            "head-baseoracle-grid": cells_run(tmp_path, "head-baseoracle-grid", "failed", "passed")}
    ctx, _ = after_both_sides(tmp_path, runs, base=TILED_FILES, earlier=earlier, target="tests/test_argnames.py",
                              head={"kernels/tiled.py": TILED_TAIL_BUG, "tests/test_argnames.py": skipping},
                              shape_argnames="M,N,dtype_str", grid=";".join(CELLS), **ROUTE_OPTIONS)
    for stage in (grid_stage.head, test_policy.run, base_oracle.run, receipt_stage.run):
        produced = stage(ctx)
        ctx.earlier[produced.name] = produced
    grid = ctx.earlier["correctness_grid"]
    assert grid.stage.cells == {"64,2000,f32": "skipped", "4,128,f32": "executed"}
    assert grid.stage.status == "fail" and grid.stage.cells_skipped == ["64,2000,f32"]
    assert ctx.earlier["baseline_control"].stage.s1_grid["cells"] == {"64,2000,f32": "executed",
                                                                      "4,128,f32": "executed"}
    # a blocker: the report's verdict is BLOCK (tests/test_report.py::test_findings_decide_before_completeness)
    assert any(finding.severity == "blocker" and "ran on base are skipped or deselected on head" in finding.detail
               and "64,2000,f32" in finding.detail for finding in grid.findings)
    assert any(finding.severity == "should-fix" and "a new skip/xfail call (pytest.skip)" in finding.detail
               for finding in ctx.earlier["test_policy"].findings)
    oracle = ctx.earlier["correctness_base_oracle"].stage
    assert oracle.status == "fail" and oracle.runs["head-baseoracle-grid"]["outcome"] == "fail"
    assert "missing required shapes" in ctx.earlier["execution_receipt"].stage.note
