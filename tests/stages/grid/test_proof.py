"""kvtasks.stages.grid.proof: a poisoned run proves a channel only by failing over the invalid value."""
from kvtasks.harness.junit import CaseResult, ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages.grid.plan import Plan
from kvtasks.stages.grid.proof import SENTINEL, proves_channel
from tests.receipts import receipt


def test_a_poisoned_run_proves_a_channel_only_by_naming_the_value(tmp_path):
    def run(exit_code, text, timed_out=False, cases=(), cells=None):
        log = tmp_path / f"{len(list(tmp_path.iterdir()))}.log"
        log.write_text(text)
        return TargetRun(label="head-grid-probe", runner="pytest", command=[], exit=exit_code, timed_out=timed_out,
                         duration_s=1.0, log=str(log), stats=ExecutionStats(), cases=list(cases),
                         receipt=receipt(cells=cells or {}))

    env, pytest_plan = Plan(channel="env", rows=[["1", "2"]]), Plan(channel="pytest", rows=[["1", "2"]])
    assert proves_channel(env, run(1, f"ValueError: invalid literal for int(): '{SENTINEL}'"))[0]
    assert not proves_channel(env, run(None, SENTINEL, timed_out=True))[0]
    crashed, why = proves_channel(env, run(1, "ImportError: libcuda.so.1: cannot open shared object file"))
    assert not crashed and "unrelated crash proves nothing" in why
    failed_cell = CaseResult(name="test_x[a-b]", classname="t", outcome="failed", message="TypeError: bad operand")
    # the probe's receipt, not the item's id, says which item ran the poisoned row
    assert proves_channel(pytest_plan, run(1, "1 failed", cases=[failed_cell], cells={"t.py::test_x[a-b]": 0}))[0]
    assert not proves_channel(pytest_plan, run(1, "1 failed", cases=[failed_cell]))[0]
    assert not proves_channel(env, run(0, ""))[0]
