"""The installed package does the job alone: bench/installed_package.py installs kvtasks into a fresh
venv and runs validate (the demo), batch (two PRs), report and cache from an empty directory, which
must stay empty."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "installed_package.py"


def test_the_installed_front_door_needs_no_source_tree_and_leaves_the_directory_empty(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--root", str(tmp_path)], capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installed package: 0 problems" in done.stdout and "left empty: True" in done.stdout
