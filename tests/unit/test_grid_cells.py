"""Which cells of a grid run on the env or cli channel are evidenced: the receipt's captured shape
vars, read against the cells by --shape-vars, and why none are when they cannot be told apart."""
import pytest

from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.records import Plan
from kvtasks.stages.grid.runs import cell_outcomes
from tests.kit import stage_context
from tests.receipts import receipt

PLAN = Plan(channel="env", rows=[["64", "2000"], ["7", "4097"]])


def grid_run(shapes: list[str]) -> TargetRun:
    return TargetRun(label="head-grid", runner="script", command=[], exit=0, duration_s=1.0, log="",
                     stats=ExecutionStats(), receipt=receipt(executed_shapes=shapes))


def context(shape_vars: str | None):
    options = {"shape_env": "SHAPES"} | ({"shape_vars": shape_vars} if shape_vars else {})
    return stage_context({"bench.py": "import os\n"}, target="bench.py", **options)


@pytest.mark.parametrize("shape_vars,plan,why", [
    (None, PLAN, "no --shape-vars were named"),
    ("M,N,dtype", PLAN, "differ in width"),
    ("M,N", PLAN, None),
])
def test_cells_without_shape_vars_or_of_another_width_are_not_individually_evidenced(shape_vars, plan, why):
    outcomes, basis = cell_outcomes(context(shape_vars), plan, grid_run(["64,2000"]))
    if why is None:
        assert outcomes == {"64,2000": "executed", "7,4097": "absent"} and basis == "the receipt's captured shape vars"
    else:
        assert outcomes is None and why in basis


def test_a_run_whose_route_captured_no_shape_evidences_no_cell():
    outcomes, basis = cell_outcomes(context("M,N"), PLAN, grid_run([]))
    assert outcomes is None and "captured no shape" in basis
