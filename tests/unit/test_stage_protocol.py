"""The stage contract: what a StageSpec declares is checked when the pipeline is built and as a
stage runs, stages read each other by type, and the PASS gate is the union of the stages' own
requirements."""
from pathlib import Path

import pytest
from pydantic import ConfigDict

from kvtasks.run import pipeline
from kvtasks.run.pipeline import PIPELINE, ROWS, Row, run_row
from kvtasks.records import CpuTier, Facts, Plan, Selection
from kvtasks.report import Entry, Layout, Stage
from kvtasks.stages import StageResult, StageSpec, result
from kvtasks.stages.payloads import GpuClaim
from tests.kit import stage_context

STAGES = Path(pipeline.__file__).parent / "stages"


class Declared(Stage):
    model_config = ConfigDict(extra="forbid")
    seen: str | None = None


def context():
    return stage_context({"tests/test_x.py": "def test_x():\n    pass\n"}, target="tests/test_x.py")


def test_the_pipeline_as_declared_has_a_provider_for_every_requirement():
    assert pipeline._checked(ROWS) == ROWS
    assert {row.name for row in ROWS if row.spec.passes} >= {"selection", "gpu_claim", "runtime_compat",
                                                             "correctness_repo_tests", "sensitivity", "execution_receipt"}


def test_a_row_whose_requirement_has_no_earlier_provider_is_refused_with_its_name():
    head_first = PIPELINE["head"] + PIPELINE["prepare"]
    with pytest.raises(TypeError, match=r"pipeline row test_sides requires BaselineControl, which no earlier row provides"):
        pipeline._checked(head_first)


def test_a_payload_must_forbid_extra_fields():
    class Loose(Stage):
        seen: str | None = None

    with pytest.raises(TypeError, match="must forbid extra fields"):
        StageSpec("loose", lambda ctx: None, payload=Loose)
    with pytest.raises(TypeError, match="no fact records"):
        StageSpec("odd", lambda ctx: None, provides=(Declared,))


def test_a_stage_reads_only_what_its_spec_declares():
    ctx = context()
    ctx.earlier["gpu_claim"] = result("gpu_claim", "pass", "claimed", arch="gfx942")
    reader = StageSpec("reader", lambda ctx: result("reader", "pass", ctx.get(GpuClaim).arch))
    with pytest.raises(LookupError, match="stage reader reads GpuClaim without declaring it"):
        run_row(ctx, Row(reader))
    declared = StageSpec("declared_reader", lambda ctx: result("declared_reader", "pass", ctx.get(GpuClaim).arch),
                         requires=(GpuClaim,))
    assert run_row(ctx, Row(declared)).stage.note == "gfx942"
    assert ctx.running is None  # the check ends with the stage


def test_an_amended_payload_is_read_as_the_latest_and_a_fact_record_by_its_type():
    ctx = context()
    ctx.earlier["gpu_claim"] = result("gpu_claim", "pass", "claimed", arch="gfx942")
    assert ctx.get(GpuClaim).arch == "gfx942"
    ctx.earlier["gpu_claim"] = result("gpu_claim", "pass", "amended", arch="gfx950")
    ctx.earlier["grid_channel"] = StageResult(name="grid_channel", facts=Facts(grid_plan=Plan(channel="env")))
    assert ctx.get(GpuClaim).arch == "gfx950" and ctx.get(Plan).channel == "env"
    assert ctx.get(CpuTier) is None and ctx.get(Declared) is None


def test_a_stage_that_sets_what_its_spec_does_not_declare_is_refused():
    ctx = context()
    sneaky = StageSpec("sneaky", lambda ctx: StageResult(name="sneaky", facts=Facts(grid_plan=Plan(channel="cli")),
                                                         selection=Selection(runner="script")))
    with pytest.raises(ValueError, match=r"pipeline row sneaky set \['grid_plan', 'runner'\], which its spec does not"):
        run_row(ctx, Row(sneaky))
    with pytest.raises(TypeError, match="no Facts or Selection fields"):
        StageSpec("typo", lambda ctx: None, sets=("runer",))
    honest = StageSpec("honest", lambda ctx: StageResult(name="honest", facts=Facts(grid_plan=Plan(channel="cli"))),
                       provides=(Plan,))
    assert run_row(ctx, Row(honest)) is not None and ctx.get(Plan).channel == "cli"


def test_the_pass_gate_is_the_union_of_the_stages_requirements():
    said = []
    layout = Layout(entries=(Entry("declared", Declared, required=True),),
                    requirements=(("declared", lambda report: said.append(report.label) or ["declared lacks x"]),
                                  ("other", lambda report: [])))
    run = StageResult(name="run", facts={"repo": {"worktree": "w", "base": "b" * 40, "kind": "unknown"},
                                         "runtime_identity": {"module": "k", "module_path": "k/__init__.py"}})
    composed = pipeline.report.compose(layout, "pr-1", [run, StageResult(name="declared", stage=Declared(status="pass", note="ok"))])
    assert said == ["pr-1"] and composed.verdict == "INCONCLUSIVE"
    assert composed.findings[-1].rule == "report.pass-withheld" and "declared lacks x" in composed.findings[-1].detail
    layout = Layout(entries=layout.entries, requirements=(("other", lambda report: []),))
    assert pipeline.report.compose(layout, "pr-1", [run, StageResult(name="declared", stage=Declared(status="pass", note="ok"))]).verdict == "PASS"


def test_no_stage_reads_another_by_name():
    readers = [f"{path.relative_to(STAGES)}:{number}" for path in STAGES.rglob("*.py")
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if "earlier[" in line or "earlier.get(" in line]
    assert readers == []


def test_a_field_gains_a_second_writer_only_as_an_amendment_or_a_declared_update():
    first = StageSpec("first", lambda ctx: None, sets=("runner", "runner_reason"))
    again = StageSpec("again", lambda ctx: None, sets=("runner",))
    with pytest.raises(TypeError, match=r"pipeline row again sets runner, which first set first: amend that stage"):
        pipeline._checked((Row(first), Row(again)))
    answered = StageSpec("answered", lambda ctx: None, updates=("runner",))
    assert pipeline._checked((Row(first), Row(answered)))
    amending = StageSpec("amending", lambda ctx: None, sets=("runner_reason",))
    assert pipeline._checked((Row(first), Row(amending, amends=first)))
    with pytest.raises(TypeError, match=r"pipeline row answered updates runner, which no earlier row sets"):
        pipeline._checked((Row(answered),))
    # the pipeline as declared: the grid stage answers the channel's independence and axes again from its runs
    updated = {name: row.name for row in ROWS for name in row.spec.updates}
    assert updated == {name: "correctness_grid" for name in ("grid_independence", "grid_independence_reason", "axes",
                                                             "axis_state", "axis_state_reason")}
