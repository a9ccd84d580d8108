"""The evidence index: concurrent writers lose nothing."""
import os

from kvtasks.store import Store


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
