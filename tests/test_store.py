"""The evidence store: concurrent writers lose nothing; evidence of another schema is never a crash."""
import os

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
