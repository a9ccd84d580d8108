"""The evidence store: the only code that knows where evidence lives under cache/.

Each stage group of a run writes its results as one JSON document, atomically (temp file +
rename), under cache/runs/<label>/; the report is composed from those documents alone. A run's
private folder (phase caches, logs, JUnit XML) sits beside its evidence.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import TypeAdapter

from kvtasks.stages import StageResult

_RESULTS = TypeAdapter(list[StageResult])


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)

    def run_dir(self, label: str) -> Path:
        return self.root / "runs" / label

    def evidence_path(self, label: str, group: str) -> Path:
        return self.run_dir(label) / "evidence" / f"{group}.json"

    def reset(self, label: str) -> Path:
        """Start a run afresh: nothing from an earlier run of this label may reach its report."""
        run_dir = self.run_dir(label)
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        return run_dir

    def write(self, label: str, group: str, results: list[StageResult]) -> Path:
        path = self.evidence_path(label, group)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{group}.")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(_RESULTS.dump_json(results, indent=1))
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return path

    def read(self, label: str, group: str) -> list[StageResult]:
        path = self.evidence_path(label, group)
        if not path.is_file():
            return []
        return _RESULTS.validate_json(path.read_bytes())

    def read_all(self, label: str, groups: list[str]) -> list[StageResult]:
        return [result for group in groups for result in self.read(label, group)]

    def labels(self) -> list[str]:
        runs = self.root / "runs"
        return sorted(path.name for path in runs.iterdir() if path.is_dir()) if runs.is_dir() else []
