"""The evidence store: the only code that knows where evidence lives under cache/.

Evidence documents (one per stage group and key) are JSON files written atomically (temp file +
rename) under cache/evidence/<kind>/<key>.json, each saying the evidence schema it was written in;
a document of another schema (or one that no longer reads) is ignored, said once on stderr, and
its group runs again: never a crash, with the artifacts the validator kept from its
runs (logs, JUnit XML, receipts) under cache/runs/<kind>/<key>/. A diskcache index (eviction
policy 'none', every write checked, every read-modify-write inside `Cache.transact()`) maps keys,
labels and base OIDs to them, with paths relative to the store root so a copied store stays
whole; nothing is ever evicted except by `gc`, on request. Target launches are listed in
cache/launches.log.

Targets never write here. A run works in a scratch folder outside the store (`scratch_dir`: the
probe copies, receipts, JUnit files and the per-phase private caches, which a phase's runs share);
when a stage group is done, the validator copies what is evidence into the store itself (`write`).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import diskcache
from pydantic import BaseModel, ValidationError

from kvtasks.records import ARTIFACT_FIELDS
from kvtasks.system.files import write_atomic
from kvtasks.stages import StageResult

# the shape of stored stage results; a change to it bumps this, and older evidence runs again
# (1: a bare list of results, before the version was stored; 2: facts and selection as free dictionaries;
# 4: every finding carries its rule id, kvtasks.rules; 5: a run's receipt is the package's typed receipt,
# every field written, the ones that do not apply as null)
EVIDENCE_SCHEMA = 5


class _Evidence(BaseModel):
    evidence_schema: int
    results: list[StageResult]

KINDS = ("prepare", "base", "head")
# what a run leaves in its scratch folder that is evidence: logs, JUnit XML, receipts, perf logs
# and the runtime probe's answer; the probe copies and the phase caches stay behind
_ARTIFACT_FOLDERS = ("runs", "perf", "runtime")


class StoreError(Exception):
    pass


class Store:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._index = diskcache.Cache(str(self.root / "index"), eviction_policy="none")
        self._said: set[tuple[str, str]] = set()

    def _set(self, key, value) -> None:
        if not self._index.set(key, value):
            raise StoreError(f"the evidence index refused a write for {key!r}")

    # -- evidence ---------------------------------------------------------------------------------
    def run_dir(self, kind: str, key: str) -> Path:
        """Where the artifacts the validator kept from a group's runs are stored."""
        return self.root / "runs" / kind / key

    def grid_secret(self, configured: str | None = None) -> str:
        """The secret the default grid's drawn dimensions come from: `configured` (KVTASKS_GRID_SECRET)
        when given, else this store's own, made once: PRs validated here cannot know their cells in advance. It is written whole beside its place and linked there, so
        the first writer wins a race and a writer killed midway leaves no empty secret behind."""
        if configured:
            return configured
        path = self.root / "grid-secret"
        if not path.exists():
            handle, temp = tempfile.mkstemp(dir=self.root, prefix=".grid-secret.")
            try:
                with os.fdopen(handle, "w") as out:
                    out.write(secrets.token_hex(16))
                os.link(temp, path)
            except FileExistsError:
                pass
            except OSError:  # a filesystem without hard links: a rename, first come first kept
                if not path.exists():
                    os.replace(temp, path)
            finally:
                Path(temp).unlink(missing_ok=True)
        return path.read_text().strip()

    def scratch_dir(self, kind: str, key: str) -> Path:
        """Where a group's runs work: outside the store, so a target never sees the evidence folder.

        One folder per store and key (KVTASKS_SCRATCH, else the temp dir): a reused base's phase
        caches are still there for the timing runs of a later PR."""
        configured = os.environ.get("KVTASKS_SCRATCH", "").strip()
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        root = Path(configured) if configured else Path(tempfile.gettempdir()) / f"kvtasks-scratch-{os.getuid()}"
        return root / tag / kind / key

    def evidence_path(self, kind: str, key: str) -> Path:
        return self.root / "evidence" / kind / f"{key}.json"

    def write(self, kind: str, key: str, results: list[StageResult], *, label: str, base_oid: str | None,
              scratch: Path | None = None) -> Path:
        """Store a group's results; with `scratch`, first copy the artifacts its runs left there
        (logs, JUnit XML, receipts, probe output; never the phase caches) into the store, and
        point the results' artifact fields (records.ARTIFACT_FIELDS) at the stored copies."""
        path = self.evidence_path(kind, key)
        document = _Evidence(evidence_schema=EVIDENCE_SCHEMA, results=results).model_dump(mode="json")
        if scratch is not None:
            kept = self.run_dir(kind, key)
            for folder in _ARTIFACT_FOLDERS:
                if (scratch / folder).is_dir():
                    shutil.copytree(scratch / folder, kept / folder, dirs_exist_ok=True)
            document = artifacts_moved(document, str(scratch), str(kept))
        write_atomic(path, json.dumps(document, indent=1).encode())
        with self._index.transact():
            entry = self._index.get(("evidence", kind, key)) or {"labels": []}
            labels = sorted(set(entry["labels"]) | {label})
            self._set(("evidence", kind, key), {"kind": kind, "key": key, "labels": labels, "base_oid": base_oid,
                                                "path": str(path.relative_to(self.root)), "written": time.time(),
                                                "written_by": label})
            if base_oid:
                keys = set(self._index.get(("base_oid", base_oid), []))
                self._set(("base_oid", base_oid), sorted(keys | {f"{kind}:{key}"}))
        return path

    def read(self, kind: str, key: str) -> list[StageResult]:
        """The stored results; none when there are none, or when they are unreadable to this
        kvtasks (said once: the group that wrote them runs again)."""
        results, unreadable = self._load(kind, key)
        if unreadable and (kind, key) not in self._said:
            self._said.add((kind, key))
            print(f"kvtasks: stored {kind} evidence {key} is ignored and {kind} runs again: {unreadable}",
                  file=sys.stderr, flush=True)
        return results

    def unreadable(self, kind: str, key: str) -> str | None:
        """Why existing evidence cannot be read by this kvtasks, or None."""
        return self._load(kind, key)[1]

    def _load(self, kind: str, key: str) -> tuple[list[StageResult], str | None]:
        path = self.evidence_path(kind, key)
        if not path.is_file():
            return [], None
        try:
            document = json.loads(path.read_bytes())
        except ValueError as exc:
            return [], f"it is not JSON ({exc})"
        version = document.get("evidence_schema") if isinstance(document, dict) else 1
        if version != EVIDENCE_SCHEMA:
            return [], f"it was written in evidence schema {version}, and this kvtasks reads {EVIDENCE_SCHEMA}"
        try:
            return _Evidence.model_validate(document).results, None
        except ValidationError as exc:
            return [], f"it does not read as evidence schema {EVIDENCE_SCHEMA} ({exc.error_count()} errors)"

    def provenance(self, kind: str, key: str) -> dict | None:
        """When and for which label a group's evidence was written (None when the store holds none)."""
        return self._index.get(("evidence", kind, key))

    def keys_for_base(self, base_oid: str) -> set[str]:
        """Every piece of evidence about one base commit, as "kind:key"."""
        return set(self._index.get(("base_oid", base_oid), []))

    # -- labels -----------------------------------------------------------------------------------
    def set_label(self, label: str, record: dict) -> None:
        with self._index.transact():
            self._set(("label", label), {**(self._index.get(("label", label)) or {}), **record})

    def missing_evidence(self, label: str) -> list[str]:
        """What a label's report needs that the store does not hold ("kind:key"); all of it for an
        unknown label."""
        record = self.label(label)
        if record is None:
            return [f"label:{label}"]
        needed = [("prepare", label)] + ([] if record.get("halted") else
                                         [("base", record.get("base_key")), ("head", record.get("head_key"))])
        return [f"{kind}:{key}" for kind, key in needed if not key or not self.evidence_path(kind, key).is_file()]

    def unreadable_evidence(self, label: str) -> list[str]:
        """What a label's report needs that the store holds in a form this kvtasks cannot read
        ("kind:key: why")."""
        record = self.label(label) or {}
        needed = [("prepare", label)] + ([] if record.get("halted") else
                                         [("base", record.get("base_key")), ("head", record.get("head_key"))])
        return [f"{kind}:{key}: {why}" for kind, key in needed if key and (why := self.unreadable(kind, key))]

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
            if entry is None:
                continue
            path = self.root / entry["path"]
            size = _size(path) + _size(self.run_dir(entry["kind"], entry["key"]))
            rows.append({**entry, "path": str(path), "size": size, "age_s": time.time() - entry["written"]})
        return sorted(rows, key=lambda row: row["written"])

    def gc(self, older_than_s: float) -> list[dict]:
        """Remove evidence written more than `older_than_s` ago, and only that; a label whose
        report needed any of it goes with it."""
        removed = []
        for entry in self.entries():
            if entry["age_s"] <= older_than_s:
                continue
            Path(entry["path"]).unlink(missing_ok=True)
            shutil.rmtree(self.run_dir(entry["kind"], entry["key"]), ignore_errors=True)
            shutil.rmtree(self.scratch_dir(entry["kind"], entry["key"]), ignore_errors=True)
            with self._index.transact():
                self._index.delete(("evidence", entry["kind"], entry["key"]))
                if entry.get("base_oid"):
                    keys = set(self._index.get(("base_oid", entry["base_oid"]), []))
                    self._set(("base_oid", entry["base_oid"]), sorted(keys - {f"{entry['kind']}:{entry['key']}"}))
            removed.append(entry)
        for label in self.labels():
            if self.missing_evidence(label):
                self._index.delete(("label", label))
        return removed


def artifacts_moved(value: Any, source: str, target: str) -> Any:
    """`value` (results as JSON data) with each artifact field's path (records.ARTIFACT_FIELDS, at any
    depth) under the folder `source` pointed at the same place under `target`; none without a folder."""
    source, target = source.rstrip(os.sep), target.rstrip(os.sep)

    def moved(item: Any, field: str | None) -> Any:
        if isinstance(item, dict):
            return {name: moved(inner, name) for name, inner in item.items()}
        if isinstance(item, list):
            return [moved(inner, field) for inner in item]
        if field in ARTIFACT_FIELDS and isinstance(item, str) and item.startswith(source + os.sep):
            return target + item[len(source):]
        return item

    return moved(value, None) if source else value


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
