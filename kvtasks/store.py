"""The evidence store and run journal: the only code that knows where evidence lives under cache/.

Evidence documents (one per stage group and key) are JSON files written atomically (temp file +
rename) under cache/evidence/<kind>/<key>.json, with the run's artifacts (logs, JUnit XML,
receipts, private phase caches) under cache/runs/<kind>/<key>/. A diskcache index (eviction
policy 'none', every write checked) maps keys, labels and base OIDs to them; nothing is ever
evicted except by `gc`, on request. Target launches are journalled in cache/launches.log.

The run journal (cache/journal/) records, before a patch touches a worktree, which worktree and
which exact patch bytes; it is cleared when the tree is handed back. A validator killed outright
(SIGKILL, a reboot) leaves its entry, and the next run on that worktree reverses exactly that patch.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import diskcache
from pydantic import TypeAdapter

from kvtasks.stages import StageResult

_RESULTS = TypeAdapter(list[StageResult])
KINDS = ("prepare", "base", "head")


class StoreError(Exception):
    pass


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


class Journal:
    """What a worktree owes: the patch applied to it that has not been reversed yet."""

    def __init__(self, root: Path):
        self.root = root

    def _paths(self, worktree: Path) -> tuple[Path, Path]:
        tag = hashlib.sha256(str(Path(worktree).resolve()).encode()).hexdigest()[:24]
        return self.root / f"{tag}.json", self.root / f"{tag}.patch"

    def begin(self, worktree: Path, patch: str) -> None:
        entry, copy = self._paths(worktree)
        data = Path(patch).read_bytes()
        write_atomic(copy, data)
        write_atomic(entry, json.dumps({"worktree": str(worktree), "patch": str(copy), "pid": os.getpid(),
                                        "patch_sha256": hashlib.sha256(data).hexdigest(),
                                        "started": time.time()}).encode())

    def end(self, worktree: Path) -> None:
        for path in self._paths(worktree):
            path.unlink(missing_ok=True)

    def pending(self, worktree: Path) -> dict | None:
        entry, _ = self._paths(worktree)
        try:
            return json.loads(entry.read_text())
        except (OSError, ValueError):
            return None


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._index = diskcache.Cache(str(self.root / "index"), eviction_policy="none")
        self.journal = Journal(self.root / "journal")

    def _set(self, key, value) -> None:
        if not self._index.set(key, value):
            raise StoreError(f"the evidence index refused a write for {key!r}")

    # -- evidence ---------------------------------------------------------------------------------
    def run_dir(self, kind: str, key: str) -> Path:
        return self.root / "runs" / kind / key

    def evidence_path(self, kind: str, key: str) -> Path:
        return self.root / "evidence" / kind / f"{key}.json"

    def write(self, kind: str, key: str, results: list[StageResult], *, label: str, base_oid: str | None) -> Path:
        path = self.evidence_path(kind, key)
        write_atomic(path, _RESULTS.dump_json(results, indent=1))
        entry = self._index.get(("evidence", kind, key)) or {"labels": []}
        labels = sorted(set(entry["labels"]) | {label})
        self._set(("evidence", kind, key), {"kind": kind, "key": key, "labels": labels, "base_oid": base_oid,
                                            "path": str(path), "written": time.time()})
        if base_oid:
            keys = set(self._index.get(("base_oid", base_oid), []))
            self._set(("base_oid", base_oid), sorted(keys | {f"{kind}:{key}"}))
        return path

    def read(self, kind: str, key: str) -> list[StageResult]:
        path = self.evidence_path(kind, key)
        if not path.is_file():
            return []
        return _RESULTS.validate_json(path.read_bytes())

    def keys_for_base(self, base_oid: str) -> set[str]:
        """Every piece of evidence about one base commit, as "kind:key"."""
        return set(self._index.get(("base_oid", base_oid), []))

    # -- labels -----------------------------------------------------------------------------------
    def set_label(self, label: str, record: dict) -> None:
        self._set(("label", label), {**(self._index.get(("label", label)) or {}), **record})

    def label(self, label: str) -> dict | None:
        return self._index.get(("label", label))

    def labels(self) -> list[str]:
        return sorted(key[1] for key in self._index.iterkeys() if isinstance(key, tuple) and key[0] == "label")

    # -- launches ---------------------------------------------------------------------------------
    def record_launches(self, kind: str, key: str, label: str, run_labels: list[str]) -> None:
        if not run_labels:
            return
        lines = "".join(json.dumps({"kind": kind, "key": key, "label": label, "run": run, "at": time.time()}) + "\n"
                        for run in run_labels)
        with open(self.root / "launches.log", "a") as journal:
            journal.write(lines)

    def launches(self) -> list[dict]:
        journal = self.root / "launches.log"
        if not journal.is_file():
            return []
        return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]

    # -- listing and collection -------------------------------------------------------------------
    def entries(self) -> list[dict]:
        rows = []
        for key in self._index.iterkeys():
            if not (isinstance(key, tuple) and key[0] == "evidence"):
                continue
            entry = self._index.get(key)
            size = _size(Path(entry["path"])) + _size(self.run_dir(entry["kind"], entry["key"]))
            rows.append({**entry, "size": size, "age_s": time.time() - entry["written"]})
        return sorted(rows, key=lambda row: row["written"])

    def gc(self, older_than_s: float) -> list[dict]:
        """Remove evidence written more than `older_than_s` ago, and only that."""
        removed = []
        for entry in self.entries():
            if entry["age_s"] <= older_than_s:
                continue
            Path(entry["path"]).unlink(missing_ok=True)
            shutil.rmtree(self.run_dir(entry["kind"], entry["key"]), ignore_errors=True)
            self._index.delete(("evidence", entry["kind"], entry["key"]))
            removed.append(entry)
        return removed


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
