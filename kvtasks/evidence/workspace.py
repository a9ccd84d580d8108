"""Where a front door keeps evidence (cache/) and publishes reports (reports/). It runs nothing and
reads no evidence itself (store.py does).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kvtasks.report import pages
from kvtasks.request import Request
from kvtasks.evidence.store import Store


@dataclass(frozen=True)
class Workspace:
    """Where a front door keeps evidence (cache/), private clones (clones/) and publishes reports (reports/)."""

    root: Path

    @cached_property
    def store(self) -> Store:
        return Store(self.root / "cache")

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def clones(self) -> Path:
        """kvtasks' private clones of repositories validated by refs (kvtasks.worktree.clones), apart from
        the evidence: deleting them loses no evidence."""
        return self.root / "clones"

    def report_paths(self, request: Request) -> list[Path]:
        paths = [self.reports / request.label / pages.REPORT]
        if request.out:
            paths.append(Path(request.out))
        return paths

    def doit_config(self) -> dict:
        (self.root / "cache").mkdir(parents=True, exist_ok=True)
        return {"dep_file": str(self.root / "cache" / "doit.sqlite3"), "backend": "sqlite3",
                "default_tasks": ["validate"]}

