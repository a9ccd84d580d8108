"""A corrupted run and the ordinary run it repeats look the same from inside the process: what a
suite, a conftest or a kernel can read (environment, argv, files, the in-target package's modules, its own item's
id and marks, its stdout) is compared between the two, random names aside."""
import json
import re

from kvtasks.harness import launching
from kvtasks.harness import session
from kvtasks.request import build_request
from tests.kernel_repos import make_repo

# everything a test can look at without inspecting the wrapper's closure, the stack or gc
FINGERPRINT = '''import json
import os
import sys

import numpy as np
import pytest

import early_look
import kern.ops
from kern.ops import scale


def _module_view(module):
    seen = {"callables": sorted(name for name, value in vars(module).items() if callable(value))}
    for name, value in sorted(vars(module).items()):
        if name.startswith("__") or callable(value) or type(value).__name__ == "module":
            continue
        try:
            seen[name] = json.loads(json.dumps(value, default=repr))
        except (TypeError, ValueError):
            seen[name] = type(value).__name__
    return seen


@pytest.mark.parametrize("M,N", [(2, 3)])
def test_scale(M, N, request):
    first = os.environ["PYTHONPATH"].split(":")[0]
    x = np.ones((int(M), int(N)))
    got = scale(x)
    view = {
        "environ": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(),
        "first_on_path": sorted(os.listdir(first)),
        "probe_modules": {name: _module_view(module) for name, module in sys.modules.items()
                          if (getattr(module, "__file__", None) or "/").startswith(first + os.sep)},
        "module_names": sorted(sys.modules),
        "item": request.node.nodeid, "marks": sorted(mark.name for mark in request.node.iter_markers()),
        "current_test": os.environ.get("PYTEST_CURRENT_TEST"), "stdout": os.readlink("/proc/self/fd/1"),
        "route": sorted(vars(kern.ops.scale)),
        "before_the_probe": early_look.SEEN,
        "function_marks": [len(mark.args[1]) for mark in request.function.pytestmark],
    }
    if request.node.nodeid.endswith("[2-3]"):  # the repository's own cell writes the view
        with open(os.environ["PYTHONPATH"].split(":")[-1] + "/../seen-" + str(os.getpid()) + ".json", "w") as out:
            json.dump(view, out)
    assert got.shape == x.shape
'''
# a plugin the repository's pytest configuration names: pytest loads it before any -p of the command line
EARLY_PLUGIN = '''import os

FIRST = os.environ["PYTHONPATH"].split(":")[0]
SEEN = sorted(os.listdir(FIRST))
'''
RANDOM = re.compile(r"\b[a-z]?[0-9a-f]{14,32}\b|0x[0-9a-f]+|\d{3,}")


def differences(one, other, where="") -> list[str]:
    """Where two views differ, each place named by its path: a failure says what a run could tell."""
    if isinstance(one, dict) and isinstance(other, dict):
        return [found for key in sorted(set(one) | set(other), key=str)
                for found in differences(one.get(key), other.get(key), f"{where}/{key}")]
    return [] if one == other else [f"{where}: {str(one)[:200]} != {str(other)[:200]}"]


def masked(value):
    """A view with this launch's random tokens (folder, module names, nonce) and pids masked, lists
    of names sorted once masked."""
    if isinstance(value, dict):
        return {RANDOM.sub("#", key): masked(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [masked(item) for item in value]
        return sorted(items) if all(isinstance(item, str) for item in items) else items
    return RANDOM.sub("#", value) if isinstance(value, str) else value


def test_a_corrupted_session_reads_the_same_as_the_session_it_repeats(tmp_path):
    repo = make_repo(tmp_path / "work" / "repo", {
        "kern/__init__.py": "", "kern/ops.py": "def scale(x):\n    return x * 2\n",
        "tests/test_ops.py": FINGERPRINT, "early_look.py": EARLY_PLUGIN,
        "pytest.ini": "[pytest]\naddopts = -p early_look\n",
    })
    request = build_request({"repo": str(repo), "target": "tests/test_ops.py", "expected_route": "kern.ops:scale",
                             "shape_vars": "M,N"})
    grid = {"grid_argnames": ["M", "N"], "grid_rows": [["64", "7"]], "poisoned_row": ["__VALIDATOR_INVALID_GRID__"] * 2}
    ordinary = launching.run(request, runner="pytest", run_dir=tmp_path / "run", label="head-session", **grid)
    corrupted = launching.run(request, runner="pytest", run_dir=tmp_path / "run", label="head-sensitivity-tail-session",
                              **grid, sensitivity={"mode": "tail"}, seen_as="head-session",
                              scratch=tmp_path / "run")
    views = sorted((tmp_path / "work").glob("seen-*.json"), key=lambda path: path.stat().st_mtime)
    assert len(views) == 2
    first, second = (json.loads(path.read_text()) for path in views)
    assert masked(first) == masked(second), differences(masked(first), masked(second))
    assert first["environ"]["VALIDATION_PHASE"] == "head-session" and first["marks"] == ["parametrize"]
    assert first["environ"]["GIT_CEILING_DIRECTORIES"] == str(repo.resolve().parent)  # no git above the tree
    # the configuration file is gone before the repository's first plugin loads, and so is its variable
    [package] = first["first_on_path"]
    assert first["before_the_probe"] == [package] and second["before_the_probe"] == second["first_on_path"]
    assert package.upper() not in first["environ"] and second["first_on_path"][0].upper() not in second["environ"]
    # the function's own mark lists the added rows too: its length tells no added cell from the repository's
    assert first["function_marks"] == [3]
    assert not any("kvtasks" in name for name in first["first_on_path"] + list(first["probe_modules"]))
    # nothing the package's modules hold can be called to ask what this run corrupts
    modules = first["probe_modules"]
    assert {name.partition(".")[2] for name in modules} >= {"", "monitor", "plugin", "corruption", "state"}
    assert "install" in next(view for name, view in modules.items() if name.endswith(".monitor"))["callables"]
    callables = {name for view in modules.values() for name in view["callables"]}
    assert not {"after_call", "outcome", "receipt", "_after_call", "_corruption_receipt"} & callables
    probe_state = json.dumps(first["probe_modules"])
    assert "sensitivity" not in probe_state and "PRODUCER" not in probe_state and "CONFIG" not in probe_state
    # and the corruption did happen (the repository's cell and the grid's), the grid's judged by its own items
    grid_part = session.part(corrupted, "grid", "head-sensitivity-tail")
    seen = grid_part.receipt.sensitivity
    assert seen.corrupted_calls == 1 and seen.outputs_corrupted == {"return": 2}
    assert (seen.tests_green_count, seen.tests_green) == (1, ["tests/test_ops.py::test_scale[64-7]"])
    assert session.part(ordinary, "grid", "head-grid").receipt.sensitivity is None
