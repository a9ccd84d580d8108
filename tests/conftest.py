import json
from pathlib import Path

import pytest

from kvtasks import cli
from tests.kernel_repos import kernel_repo, snapshot


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private kvtasks workspace (cache/ and reports/) for one test."""
    root = tmp_path / "kvtasks-home"
    monkeypatch.setenv("KVTASKS_HOME", str(root))
    return root


@pytest.fixture
def repo(tmp_path):
    return kernel_repo(tmp_path / "kernels-repo")


class Validation:
    def __init__(self, code: int, out: Path):
        self.code = code
        self.out = out
        self.report = json.loads(out.read_text()) if out.exists() else None

    @property
    def verdict(self):
        return self.report["verdict"]

    def stage(self, name):
        return self.report["stages"][name]

    def findings(self, severity):
        return [f for f in self.report["findings"] if f["severity"] == severity]


@pytest.fixture
def validate(home, tmp_path):
    """Run the flag CLI in-process and check the worktree is handed back byte-identical."""
    def run(repo: Path, *flags: str, check_handback: bool = True) -> Validation:
        out = tmp_path / "out" / "validation_report.json"
        before = snapshot(repo)
        code = cli.main(["--repo", str(repo), "--out", str(out), "--quiet", *flags])
        if check_handback:
            assert snapshot(repo) == before, "the worktree was not handed back as supplied"
        return Validation(code, out)
    return run
