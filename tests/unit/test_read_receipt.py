"""The receipt as every reader gets it (`TargetRun.receipt`): the package's typed definition, stamped
by the validator, kept typed through stored evidence and through a merged session's parts."""
import json

from kvtasks.harness import receipts, session
from kvtasks.harness.in_target.receipt import LoadedFile, RouteOutput, SensitivityPart, SensitivityReceipt, to_json
from kvtasks.harness.junit import CaseResult, ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.stages import StageResult
from tests.receipts import receipt

GRID_ITEM, PROOF_ITEM = "t.py::test_scale[64]", "t.py::test_scale[x]"


def _merged() -> receipts.StampedReceipt:
    """A corrupted merged session's receipt: the repository's item, a grid cell and the poisoned cell."""
    return receipt(
        route="k:f", kernel_symbols=["k:f"], route_calls={"k:f": 3}, executed_shapes=["8", "64"],
        cells={"t.py::test_scale[8]": 0, GRID_ITEM: 1, PROOF_ITEM: 2}, merged_marks=1,
        added={GRID_ITEM: "grid", PROOF_ITEM: "proof"},
        parts={"repo": {"route": "k:f", "kernel_symbols": ["k:f"], "route_calls": {"k:f": 1}, "executed_shapes": ["8"]},
               "grid": {"route": "k:f", "kernel_symbols": ["k:f"], "route_calls": {"k:f": 2},
                        "executed_shapes": ["64"]}},
        route_outputs=[{"route": "k:f", "cell": "t.py::test_scale[8]", "checked": 1},
                       {"route": "k:f", "cell": GRID_ITEM, "checked": 1, "nonfinite": ["nan in return"]}],
        cpu_tier={"violations": [{"test": GRID_ITEM}, {"test": "t.py::test_scale[8]"}], "sparse_launches": [],
                  "bf16_skipped": [PROOF_ITEM], "launches": 3},
        sensitivity={"tests_failed": [], "tests_failed_count": 0, "tests_green": [GRID_ITEM, "t.py::test_scale[8]"],
                     "tests_green_count": 2, "corrupted_calls": 3,
                     "parts": {"grid": {"tests_failed": [], "tests_failed_count": 0, "tests_green": [GRID_ITEM],
                                        "tests_green_count": 1, "corrupted_calls": 2}}},
        label="head-session")


def test_a_read_receipt_is_the_typed_definition_stamped_with_producer_and_label(tmp_path):
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[], receipt=tmp_path / "receipt.json")
    written = receipt(nonce=probe.nonce, route_outputs=[{"route": "k:f", "cell": "t.py::t", "checked": 1}],
                      loaded={"modules": [{"path": "pkg/ops.py", "during": "route-import"}]})
    as_written = to_json(written)
    probe.receipt.write_text(json.dumps(as_written))  # a process cannot stamp its own receipt
    assert receipts.read(probe, "head-repo")[0] is None
    del as_written["producer"], as_written["label"]
    probe.receipt.write_text(json.dumps(as_written))
    read, _, note = receipts.read(probe, "head-repo")
    assert note == "" and isinstance(read, receipts.StampedReceipt)
    assert (read.producer, read.label) == (receipts.PRODUCER, "head-repo")
    assert read.route_outputs == [RouteOutput("k:f", "t.py::t", checked=1)]
    assert read.loaded.modules == [LoadedFile("pkg/ops.py", "route-import")] and read.sensitivity is None


def test_a_runs_receipt_reads_back_from_stored_evidence_as_it_was():
    run = TargetRun(label="head-session", runner="pytest", command=[], exit=1, duration_s=1.0, log="",
                    stats=ExecutionStats(), receipt=_merged())
    stored = StageResult(name="correctness_grid", runs=[run]).model_dump_json()
    again = StageResult.model_validate_json(stored).runs[0]
    assert again == run and isinstance(again.receipt.sensitivity.parts["grid"], SensitivityPart)
    assert json.loads(stored)["runs"][0]["receipt"]["producer"] == receipts.PRODUCER


def test_a_merged_sessions_part_holds_its_own_share_of_the_receipt(tmp_path):
    (tmp_path / "session.log").write_text("")
    cases = [CaseResult(name=name.partition("::")[2], classname="t", outcome="passed")
             for name in ("t.py::test_scale[8]", GRID_ITEM, PROOF_ITEM)]
    merged = TargetRun(label="head-session", runner="pytest", command=[], exit=0, duration_s=1.0,
                       log=str(tmp_path / "session.log"), stats=ExecutionStats(observed_work=3), cases=cases,
                       receipt=_merged())
    grid = session.part(merged, "grid", "head-grid").receipt
    assert (grid.label, grid.route_calls, grid.executed_shapes) == ("head-grid", {"k:f": 2}, ["64"])
    assert (grid.parts, grid.merged_marks, grid.added) == (None, None, None)
    assert grid.cells == {GRID_ITEM: 1} and [entry.cell for entry in grid.route_outputs] == [GRID_ITEM]
    assert grid.cpu_tier == {"violations": [{"test": GRID_ITEM}], "sparse_launches": [], "bf16_skipped": [],
                             "launches": 3}
    assert grid.sensitivity == SensitivityReceipt(tests_failed=[], tests_failed_count=0, tests_green=[GRID_ITEM],
                                                  tests_green_count=1, corrupted_calls=2)
    repo = session.part(merged, "repo", "head-repo")
    assert repo.stats.observed_work == 1 and repo.receipt.cells == {"t.py::test_scale[8]": 0}
    # a part the session did not count: no route calls, and the corrupted session's counts as a whole
    proof = session.part(merged, "proof", "head-grid-proof").receipt
    assert (proof.route, proof.route_calls, proof.cells) == ("", {}, {PROOF_ITEM: 2})
    assert proof.sensitivity.corrupted_calls == 3 and proof.sensitivity.parts == {}
    assert proof.cpu_tier["bf16_skipped"] == [PROOF_ITEM]
