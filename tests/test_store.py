"""The evidence store: concurrent writers lose nothing; evidence of another schema is never a crash."""
import os
from pathlib import Path

from kvtasks.evidence.store import Store


def test_concurrent_writers_to_one_index_entry_lose_no_label(tmp_path):
    store = Store(tmp_path / "cache")
    writers = []
    for writer in range(4):
        pid = os.fork()
        if pid == 0:
            mine = Store(tmp_path / "cache")
            for number in range(60):
                mine.write("base", "k", [], label=f"w{writer}-{number}", base_oid="b" * 40)
                mine.set_label(f"w{writer}-{number}", {"base_key": "k"})
            os._exit(0)
        writers.append(pid)
    assert all(os.waitpid(pid, 0)[1] == 0 for pid in writers)
    entry = store.entries()[0]
    assert len(entry["labels"]) == 240 and len(store.labels()) == 240
    assert store.keys_for_base("b" * 40) == {"base:k"}


def test_evidence_of_another_schema_is_ignored_said_and_its_base_runs_again(tmp_path, capsys):
    from kvtasks.run import phases
    from kvtasks.evidence.workspace import Workspace

    workspace = Workspace(tmp_path)
    store = workspace.store
    store.write("base", "k", [], label="old", base_oid="b" * 40)
    store.write("prepare", "old", [], label="old", base_oid="b" * 40)
    store.set_label("old", {"halted": None, "base_key": "k", "head_key": "h"})
    assert store.read("base", "k") == [] and store.unreadable("base", "k") is None
    # what kvtasks stored before evidence carried its schema: a bare list of stage results
    store.evidence_path("base", "k").write_text('[{"name": "baseline_control", "stage": {"status": "pass"}}]')
    store.evidence_path("prepare", "old").write_text('{"evidence_schema": 99, "results": []}')
    assert not phases.base_done(workspace, "k")
    said = capsys.readouterr().err
    assert "stored base evidence k is ignored and base runs again: it was written in evidence schema 1, " \
           "and this kvtasks reads" in said
    store.read("base", "k")
    assert capsys.readouterr().err == ""  # said once
    assert store.unreadable_evidence("old") == [
        f"prepare:old: it was written in evidence schema 99, and this kvtasks reads {store_schema()}",
        f"base:k: it was written in evidence schema 1, and this kvtasks reads {store_schema()}"]
    assert store.missing_evidence("old") == ["head:h"]
    store.evidence_path("base", "k").write_text('{"evidence_schema": %d, "results": [{"stage": 1}]}' % store_schema())
    assert store.read("base", "k") == []
    assert "does not read as evidence schema" in store.unreadable("base", "k")


def store_schema() -> int:
    from kvtasks.evidence.store import EVIDENCE_SCHEMA
    return EVIDENCE_SCHEMA


def test_a_stored_result_points_its_artifact_fields_at_the_kept_copies_and_nothing_else(tmp_path):
    """Artifact paths move into the store as data, by field: the command a run was launched with and
    the scratch folder it saw are what they were, even where they name the same files."""
    from kvtasks.harness.junit import ExecutionStats
    from kvtasks.harness.target_run import TargetRun
    from kvtasks.stages import StageResult, result

    store = Store(tmp_path / "cache")
    scratch = tmp_path / "scratch"
    (scratch / "runs" / "calls-head").mkdir(parents=True)
    for name in ("head.log", "junit-head.xml", "receipt-head.json", "head-usage-error.log"):
        (scratch / "runs" / name).write_text(name)
    runs = scratch / "runs"
    run = TargetRun(label="head", runner="pytest", exit=0, duration_s=1.0, log=str(runs / "head.log"),
                    command=["python", "-m", "probe", f"--junitxml={runs / 'junit-head.xml'}", str(runs / "head.log")],
                    stats=ExecutionStats(junit_xml=str(runs / "junit-head.xml")),
                    receipt_path=str(runs / "receipt-head.json"), captures=str(runs / "calls-head"),
                    addopts_dropped={"dropped": "--cov", "file": "setup.cfg", "error": "no --cov",
                                     "first_log": str(runs / "head-usage-error.log")},
                    scratch=str(scratch))
    stage = result("repo_tests", "pass", log=str(runs / "head.log"), stats=run.stats)
    stored = StageResult(name="repo_tests", stage=stage.stage, runs=[run])
    store.write("head", "k", [stored], label="pr", base_oid=None, scratch=scratch)

    kept = store.run_dir("head", "k") / "runs"
    again = store.read("head", "k")[0]
    moved = again.runs[0]
    assert (moved.log, moved.stats.junit_xml, moved.receipt_path, moved.captures, moved.addopts_dropped["first_log"]) == \
        (str(kept / "head.log"), str(kept / "junit-head.xml"), str(kept / "receipt-head.json"), str(kept / "calls-head"),
         str(kept / "head-usage-error.log"))
    shown = again.stage.model_dump(mode="json")
    assert shown["log"] == str(kept / "head.log") and shown["stats"]["junit_xml"] == str(kept / "junit-head.xml")
    assert all(Path(path).exists() for path in (moved.log, moved.stats.junit_xml, moved.receipt_path, moved.captures))
    assert moved.command == run.command and moved.scratch == str(scratch)
