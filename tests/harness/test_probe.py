"""The route probe inside real interpreters: the import-hook wrapper, on every Python this machine has
(a corrupted run and the run it repeats take the same path)."""
import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvtasks.harness import receipts
from kvtasks.harness.in_target.receipt import LoadedFile


def _candidates():
    yield sys.executable
    for minor in (10, 11, 12, 13):
        yield shutil.which(f"python3.{minor}")
    pyenv = shutil.which("pyenv")  # pyenv-managed interpreters are not on PATH unless activated
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        for minor in (10, 11, 12, 13):
            yield from (str(path) for path in Path(root).glob(f"versions/3.{minor}.*/bin/python3.{minor}"))


@functools.cache
def interpreters():
    """Every Python >= 3.10 this machine has, one per minor version: each probe mechanism runs.
    Asked once per process: each answer starts every candidate (pyenv's shims are shell scripts)."""
    found, versions = [], set()
    for candidate in _candidates():
        if not candidate:
            continue
        version = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        if version and version not in versions:
            versions.add(version)
            found.append(pytest.param(candidate, id=f"python{version}"))
    return tuple(found)


KERNELS = {
    "kern/__init__.py": "",
    "kern/ops.py": '''import functools


def traced(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)
    return wrapper


def tile_add(M, N, dtype_str="f32"):
    return M + N


@traced
def decorated(M, N):
    return M * N


def body_shapes(x):
    M, N = len(x), len(x[0])
    dtype_str = "f16"
    return M * N


def unrelated(value):
    return value + 1


class Kernel:
    def launch(self, M, N):
        return M - N

    @staticmethod
    def build(M, N):
        return M
''',
}


def probe_env(probe, checkout):
    """The target's environment: the package's folder first on the path, the variable naming its configuration."""
    return {"PYTHONPATH": f"{probe.folder}:{checkout}", "PATH": "/usr/bin:/bin", **probe.environment}


def run_probe(tmp_path, python, script_text, routes, shape_vars=("M", "N")):
    for name, text in KERNELS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    script = tmp_path / "target.py"
    script.write_text(script_text)
    probe = receipts.prepare(tmp_path / "probe", routes=list(routes),
                             shape_vars=list(shape_vars), receipt=tmp_path / "receipt.json")
    done = subprocess.run([python, "-m", probe.name, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          env=probe_env(probe, tmp_path))
    receipt, digest, note = receipts.read(probe, "head-repo")
    return done, receipt, note


@pytest.mark.parametrize("python", interpreters())
def test_alias_taken_before_the_call_is_still_seen(tmp_path, python):
    done, receipt, _ = run_probe(tmp_path, python, (
        "from kern.ops import tile_add\n\nif __name__ == '__main__':\n"
        "    for n in (64, 2000):\n        tile_add(4, n)\n    print('done')\n"), ["kern.ops:tile_add"])
    assert done.returncode == 0 and "done" in done.stdout
    assert receipt.route == "kern.ops:tile_add" and receipt.route_calls == {"kern.ops:tile_add": 2}
    assert receipt.executed_shapes == ["4,64", "4,2000"]


@pytest.mark.parametrize("python", interpreters())
def test_decorated_route_resolves_to_the_wrapped_function(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, "import kern.ops as k\nk.decorated(3, 5)\n", ["kern.ops:decorated"])
    assert receipt.route_calls == {"kern.ops:decorated": 1} and receipt.executed_shapes == ["3,5"]


@pytest.mark.parametrize("python", interpreters())
def test_method_and_static_method_routes(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, (
        "from kern.ops import Kernel\nKernel().launch(8, 2)\nKernel.build(16, 1)\nKernel().build(32, 1)\n"),
        ["kern.ops:Kernel.launch", "kern.ops:Kernel.build"])
    assert receipt.route_calls == {"kern.ops:Kernel.launch": 1, "kern.ops:Kernel.build": 2}
    assert sorted(receipt.executed_shapes) == ["16,1", "32,1", "8,2"]


@pytest.mark.parametrize("python", interpreters())
def test_shape_vars_assigned_inside_the_body_are_read_at_return(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, "from kern.ops import body_shapes\nbody_shapes([[1, 2, 3]] * 7)\n",
                              ["kern.ops:body_shapes"], shape_vars=("M", "N", "dtype_str"))
    assert receipt.executed_shapes == ["7,3,f16"]


@pytest.mark.parametrize("python", interpreters())
def test_script_raising_mid_run_still_writes_its_receipt(tmp_path, python):
    done, receipt, _ = run_probe(tmp_path, python, (
        "from kern.ops import tile_add\ntile_add(1, 2)\nraise RuntimeError('kernel exploded')\n"),
        ["kern.ops:tile_add"])
    assert done.returncode == 1 and "kernel exploded" in done.stderr
    assert receipt.route_calls == {"kern.ops:tile_add": 1} and receipt.exit_status == 1


@pytest.mark.parametrize("python", interpreters())
def test_sys_exit_codes_pass_through(tmp_path, python):
    done, receipt, _ = run_probe(tmp_path, python, "import sys\nsys.exit(3)\n", ["kern.ops:tile_add"])
    assert done.returncode == 3 and receipt.exit_status == 3 and receipt.route == ""


@pytest.mark.parametrize("python", interpreters())
def test_unresolvable_route_is_named_in_the_receipt(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, "import kern.ops\n", ["kern.ops:no_such_function"])
    assert receipt.unresolved_routes == ["kern.ops:no_such_function"]


def test_a_receipt_from_another_run_is_refused(tmp_path):
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[],
                             receipt=tmp_path / "receipt.json")
    (tmp_path / "receipt.json").write_text(json.dumps({"schema_version": 1, "nonce": "forged", "route": "a:b"}))
    receipt, digest, note = receipts.read(probe, "head-repo")
    assert receipt is None and len(digest) == 64 and "did not come from this run" in note


def test_probe_module_names_are_random_per_run(tmp_path):
    first = receipts.prepare(tmp_path / "p", routes=[], shape_vars=[], receipt=tmp_path / "r1.json")
    second = receipts.prepare(tmp_path / "p", routes=[], shape_vars=[], receipt=tmp_path / "r2.json")
    assert first.name != second.name and first.nonce != second.nonce


ARRAY_KERNELS = '''import numpy as np


def scale(x):
    return x * 2


def pair(x):
    return x + 1, np.arange(3)


def counts(x):
    return np.bincount(x)


def write_into(out, x):
    out[...] = x * 2


def nothing(x):
    return None


def mean(x):
    return float(x.mean())


PRODUCED = []


def with_input(x):
    out = x * 2
    PRODUCED[:] = [out]
    return out, x, x[1:], x.reshape(2, 2)
'''

SENSITIVITY_SCRIPT = '''import json
import sys

import numpy as np

from kern.arrays import counts, mean, nothing, pair, scale, write_into

x = np.arange(1, 5, dtype=np.float32)
seen = {"scale": scale(x).tolist(), "x_after": x.tolist()}
first, second = pair(x)
seen["pair"] = [first.tolist(), second.tolist()]
seen["counts"] = counts(np.array([0, 1, 1])).tolist()
out = np.zeros(4, dtype=np.float32)
write_into(out, x)
seen["out"] = out.tolist()
seen["nothing"] = nothing(x)
seen["mean"] = mean(x)
print(json.dumps(seen))
'''


def sensitivity_probe(tmp_path, sensitivity, routes, script=SENSITIVITY_SCRIPT, python=sys.executable):
    (tmp_path / "kern").mkdir(exist_ok=True)
    (tmp_path / "kern/__init__.py").write_text("")
    (tmp_path / "kern/arrays.py").write_text(ARRAY_KERNELS)
    (tmp_path / "target.py").write_text(script)
    probe = receipts.prepare(tmp_path / "probe", routes=[f"kern.arrays:{r}" for r in routes],
                             shape_vars=[], receipt=tmp_path / "receipt.json", sensitivity=sensitivity)
    done = subprocess.run([python, "-m", probe.name, str(tmp_path / "target.py")], cwd=tmp_path, capture_output=True,
                          text=True, env=probe_env(probe, tmp_path))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), receipts.read(probe, "head-repo")[0]


def test_sensitivity_corrupts_the_tail_of_returned_arrays_and_names_what_it_cannot(tmp_path):
    seen, receipt = sensitivity_probe(tmp_path, {"mode": "tail"}, ["scale", "pair", "counts", "nothing", "mean"])
    assert seen["scale"] == [2, 4, 6, 17] and seen["x_after"] == [1, 2, 3, 4]  # a copy: the input is untouched
    assert seen["pair"] == [[2, 3, 4, 11], [0, 1, 2]]  # the floating member only
    assert seen["counts"] == [1, 2] and seen["nothing"] is None
    assert seen["mean"] == 2.5 * 2 + 1
    report = receipt.sensitivity
    assert report.corrupted_calls == 3 and report.max_relative_error == pytest.approx(3.5 / 2.5)
    assert report.not_corrupted == {"returned int64 ndarray": 1, "returned nothing (None)": 1}
    assert receipt.mechanism == "import-hook wrapper" and receipt.route_calls["kern.arrays:scale"] == 1


def test_sensitivity_relative_error_nan_and_output_argument(tmp_path):
    seen, receipt = sensitivity_probe(tmp_path, {"mode": "tail", "error": 0.01}, ["scale"])
    assert seen["scale"][-1] == pytest.approx(8 * 1.01)
    assert receipt.sensitivity.max_relative_error == pytest.approx(0.01, rel=1e-4)
    seen, receipt = sensitivity_probe(tmp_path, {"mode": "nan"}, ["scale", "pair"])
    assert all(value != value for value in seen["scale"]) and seen["pair"][1] == [0, 1, 2]
    assert receipt.sensitivity.nan_elements == 8 and receipt.sensitivity.max_relative_error is None
    seen, receipt = sensitivity_probe(tmp_path, {"mode": "tail", "output": "out"}, ["write_into", "scale"])
    assert seen["out"] == [2, 4, 6, 17] and seen["scale"] == [2, 4, 6, 8]  # only the named argument
    assert receipt.sensitivity.corrupted_calls == 1
    assert receipt.sensitivity.not_corrupted == {"argument out: a call without an argument named 'out'": 1}


ECHO_SCRIPT = '''import json

import numpy as np

from kern.arrays import PRODUCED, with_input

x = np.arange(1, 5, dtype=np.float32)
out, echoed, view, reshaped = with_input(x)
print(json.dumps({"out": out.tolist(), "echoed": echoed.tolist(), "view": view.tolist(), "x": x.tolist(),
                  "reshaped": reshaped.tolist(), "same_object": out is PRODUCED[0]}))
'''


def test_only_what_the_route_produced_is_corrupted_and_each_output_is_named(tmp_path):
    seen, receipt = sensitivity_probe(tmp_path, {"mode": "tail"}, ["with_input"], script=ECHO_SCRIPT)
    assert seen["out"] == [2, 4, 6, 17] and seen["same_object"]  # produced: corrupted, in place
    assert seen["echoed"] == seen["x"] == [1, 2, 3, 4] and seen["view"] == [2, 3, 4]  # the input and its views: not
    assert seen["reshaped"] == [[1, 2], [3, 4]]
    report = receipt.sensitivity
    assert report.corrupted_calls == 1 and report.outputs_corrupted == {"return[0]": 1}
    assert report.outputs_left_alone == {f"return[{index}]": "an input (argument x, or memory shared with it)"
                                            for index in (1, 2, 3)}


TORCH_SCRIPT = '''import json

import torch

from kern.torched import add_into, softmax, argmax, with_view

x = torch.tensor([[1.0, -1.0], [0.0, 3.0]])
seen = {"softmax": softmax(x).tolist(), "argmax": argmax(x).tolist(), "view": with_view(x)[1].tolist()}
out = torch.zeros(2, 2, dtype=torch.bfloat16)
add_into(out, x)
seen["out"] = out.float().tolist()
print(json.dumps(seen))
'''
TORCH_KERNELS = '''import torch


def softmax(x):
    return torch.softmax(x, dim=-1)


def argmax(x):
    return x.argmax(dim=-1)


def add_into(out, x):
    out.copy_(x - 1)


def with_view(x):
    return x + 1, x.view(-1)[1:]
'''


def test_sensitivity_corrupts_torch_tensors_without_importing_torch_itself(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "kern").mkdir()
    (tmp_path / "kern/torched.py").write_text(TORCH_KERNELS)
    _, receipt = sensitivity_probe(tmp_path, {"mode": "tail"}, [], script="import sys\nassert 'numpy' not in "
                                   "sys.modules and 'torch' not in sys.modules\nprint('{}')\n")
    assert receipt.sensitivity.corrupted_calls == 0
    probe = receipts.prepare(tmp_path / "probe2", shape_vars=[],
                             routes=["kern.torched:softmax", "kern.torched:argmax", "kern.torched:add_into",
                                     "kern.torched:with_view"],
                             receipt=tmp_path / "receipt2.json", sensitivity={"mode": "tail", "output": "out"})
    (tmp_path / "torch_target.py").write_text(TORCH_SCRIPT)
    done = subprocess.run([sys.executable, "-m", probe.name, str(tmp_path / "torch_target.py")], cwd=tmp_path,
                          capture_output=True, text=True, env=probe_env(probe, tmp_path))
    assert done.returncode == 0, done.stderr
    seen, receipt = json.loads(done.stdout), receipts.read(probe, "head-repo")[0]
    assert seen["out"] == [[0.0, -2.0], [-1.0, 5.0]]  # bf16 out-argument: last element 2*2 + 1
    report = receipt.sensitivity
    assert report.corrupted_calls == 1 and report.max_relative_error == pytest.approx(1.5)
    assert report.not_corrupted == {"argument out: a call without an argument named 'out'": 3}
    assert seen["view"] == [-1.0, 0.0, 3.0]  # a view of the input is never corrupted
    probe = receipts.prepare(tmp_path / "probe3", shape_vars=[], routes=["kern.torched:with_view"],
                             receipt=tmp_path / "receipt3.json", sensitivity={"mode": "tail"})
    done = subprocess.run([sys.executable, "-m", probe.name, str(tmp_path / "torch_target.py")], cwd=tmp_path,
                          capture_output=True, text=True, env=probe_env(probe, tmp_path))
    assert done.returncode == 0, done.stderr
    report = receipts.read(probe, "head-repo")[0].sensitivity
    assert report.outputs_corrupted == {"return[0]": 1}
    assert report.outputs_left_alone == {"return[1]": "an input (argument x, or memory shared with it)"}


LOADS = {
    "pkg/__init__.py": "",
    "pkg/ops.py": "import json\nfrom pkg import _impl\n\n\ndef route(M, N):\n    from pkg import _lazy\n"
                  "    with open('configs/ops.json') as handle:\n        json.load(handle)\n"
                  "    return _impl.twice(M) + _lazy.once(N)\n",
    "configs/ops.json": "{}\n",
    "pkg/_impl.py": "def twice(value):\n    return 2 * value\n",
    "pkg/_lazy.py": "def once(value):\n    return value\n",
    "pkg/checks.py": "ATOL = 1e-5\n",
    "tests/conftest.py": "import pkg.ops  # a conftest that imports the route before pytest configures\n",
    "tests/test_x.py": "from pkg.checks import ATOL\nfrom pkg.ops import route\n\n\n"
                       "def test_route():\n    assert abs(route(1, 2) - 4) <= ATOL\n",
    "pytest.ini": "[pytest]\naddopts = -q\n",
}


def test_a_pytest_receipt_names_what_the_run_loaded_and_what_the_route_imported(tmp_path):
    """Loaded modules in first-import order, each with what was running: the route's import (its own
    imports), a route call (a lazy import), or the test side (a helper the test imports)."""
    for name, text in LOADS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    probe = receipts.prepare(tmp_path / "probe", routes=["pkg.ops:route"], shape_vars=["M", "N"],
                             receipt=tmp_path / "receipt.json")
    done = subprocess.run([sys.executable, "-m", probe.name, "--pytest", "tests/test_x.py", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env=probe_env(probe, tmp_path))
    receipt, _, note = receipts.read(probe, "base-repo")
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = receipt.loaded
    modules = {entry.path: entry.during for entry in loaded.modules}
    assert sorted(modules) == ["pkg/__init__.py", "pkg/_impl.py", "pkg/_lazy.py", "pkg/checks.py", "pkg/ops.py",
                               "tests/conftest.py", "tests/test_x.py"]
    assert list(modules).index("pkg/checks.py") < list(modules).index("pkg/_lazy.py")  # the order they loaded in
    assert modules["pkg/_impl.py"] == "route-import" and modules["pkg/_lazy.py"] == "route-call"
    assert modules["pkg/checks.py"] == "" and modules["pkg/ops.py"] == ""
    assert loaded.config_file == "pytest.ini" and loaded.rootdir == "."
    assert loaded.opened == [LoadedFile("configs/ops.json", "route-call")]  # the route reads its config
    assert "tests/conftest.py" in loaded.plugins and receipt.route_calls == {"pkg.ops:route": 1}


WRITES = {"kern/writes.py": '''import numpy as np


class Config:  # an argument with an array's names and none of its content
    dtype = "float16"
    shape = None


def scale(x, out, config, factor=2.0):
    out[...] = x * factor
    x[-1, -1] = 0.0  # writes its input back, as a kernel hiding a wrong tail in it would
    return out
'''}


def test_the_arguments_a_route_writes_into_are_named_and_odd_ones_never_fail_the_call(tmp_path):
    (tmp_path / "kern").mkdir()
    (tmp_path / "kern" / "writes.py").write_text(WRITES["kern/writes.py"])
    done, receipt, note = run_probe(tmp_path, sys.executable, (
        "import numpy as np\nfrom unittest import mock\nfrom kern.writes import Config, scale\n\n"
        "if __name__ == '__main__':\n"
        "    big = np.ones((600, 4096), dtype=np.float32)\n"
        "    for _ in range(3):\n"
        "        scale(np.ones((4, 8), dtype=np.float32), np.empty((4, 8), dtype=np.float32), Config())\n"
        "    scale(big, np.empty_like(big), mock.MagicMock())\n"
        "    scale(np.ones((2, 2)), np.empty((2, 2)), np.ndarray)\n"
        "    print('done')\n"), ["kern.writes:scale"], shape_vars=())
    assert done.returncode == 0 and "done" in done.stdout, done.stderr
    assert receipt.written_arguments == {"kern.writes:scale": ["x", "out"]}, note


FREED = {
    # a cycle made as the conftest imports, before any test: garbage only a collection frees
    "tests/conftest.py": '''import gc
import weakref

import pytest


class Node:
    pass


def _made_at_import():
    node = Node()
    node.self = node
    return weakref.ref(node)


gc.disable()  # until the test collects: no automatic collection frees the cycle first
MADE_AT_IMPORT = _made_at_import()


@pytest.fixture
def made_at_import():
    return MADE_AT_IMPORT
''',
    "tests/test_gc.py": '''import gc


def test_the_repositorys_garbage_is_collected_and_what_ran_before_it_is_frozen(made_at_import):
    assert gc.get_freeze_count() > 0  # pytest's modules, and the package's, before the conftest
    gc.collect()
    gc.enable()
    assert made_at_import() is None
''',
}


def test_a_run_freezes_only_what_ran_before_the_repository_s_code(tmp_path):
    """The objects alive before the repository's code runs are frozen (no collection walks them), and
    nothing of the repository's is: a cycle its conftest made on import is freed by a collection."""
    for name, text in FREED.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[], receipt=tmp_path / "receipt.json")
    done = subprocess.run([sys.executable, "-m", probe.name, "--pytest", "tests/test_gc.py", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, env=probe_env(probe, tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
