"""The shape of kvtasks/: no module over 300 lines (the in-target code aside), and the architecture's
import contracts (pyproject.toml's [tool.importlinter]: no sibling importing one that imports it
back, the layers, no stage launching, a report reaching no harness) kept.

import-linter reads the checkout's package: every import counts wherever it is written, one inside a
function included (deferring an import hides a cycle from the interpreter, not from the maintainer,
who still cannot change one side without the other); only an import under `if TYPE_CHECKING:` is
left out, since it never runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its kvtasks/ is read, whatever is installed
MAX_LINES = 300
# The in-target code, exempt from the line limit: it runs inside the target, stdlib only, loaded
# under a per-run name. Paths from the checkout's root; one ending in "/" is a folder, everything
# under it exempt.
IN_TARGET = ("kvtasks/harness/in_target/",)


def modules_under(root: Path) -> dict[str, Path]:
    """Every module of the kvtasks package in the checkout at `root`, by its dotted name."""
    modules = {}
    for path in sorted((root / "kvtasks").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def lint_imports(checkout: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts of `checkout`'s pyproject.toml over `checkout`'s own kvtasks/."""
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=checkout,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(checkout)})


def test_no_module_is_over_300_lines_but_the_in_target_code():
    exempt = [ROOT / entry for entry in IN_TARGET]
    too_long = {str(path.relative_to(ROOT)): count for path in modules_under(ROOT).values()
                if not any(path == place or path.is_relative_to(place) for place in exempt)
                and (count := len(path.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them along their seams): {too_long}"


def test_the_in_target_exemption_names_only_in_target_code_that_exists():
    # an exemption for a path that is gone would exempt whatever takes its name next
    stale = [entry for entry in IN_TARGET if not (ROOT / entry).exists()]
    assert not stale, f"IN_TARGET names paths that are gone: {stale}"


def test_the_import_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0 and "4 kept, 0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_a_stage_that_imports_the_executor_breaks_its_contract(tmp_path):
    shutil.copytree(ROOT / "kvtasks", tmp_path / "kvtasks", ignore=shutil.ignore_patterns("__pycache__", "demo"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    stage = tmp_path / "kvtasks" / "stages" / "nonfinite.py"
    stage.write_text(stage.read_text() + "\nfrom kvtasks.run import executor  # a stage that launches\n")
    done = lint_imports(tmp_path)
    assert done.returncode == 1 and "Stages decide and never launch" in done.stdout and "BROKEN" in done.stdout
    assert "kvtasks.stages.nonfinite -> kvtasks.run.executor" in done.stdout
