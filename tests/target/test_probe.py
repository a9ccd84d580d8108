"""The route probe inside real interpreters: the import-hook wrapper (3.10/3.11) and sys.monitoring
(3.12+), whichever this machine has."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvtasks.target import receipts


def _candidates():
    yield sys.executable
    for minor in (10, 11, 12, 13):
        yield shutil.which(f"python3.{minor}")
    pyenv = shutil.which("pyenv")  # pyenv-managed interpreters are not on PATH unless activated
    if pyenv:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        for minor in (10, 11, 12, 13):
            yield from (str(path) for path in Path(root).glob(f"versions/3.{minor}.*/bin/python3.{minor}"))


def interpreters():
    """Every Python >= 3.10 this machine has, one per minor version: each probe mechanism runs."""
    found, versions = [], set()
    for candidate in _candidates():
        if not candidate:
            continue
        version = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        if version and version not in versions:
            versions.add(version)
            found.append(pytest.param(candidate, id=f"python{version}"))
    return found


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


def run_probe(tmp_path, python, script_text, routes, shape_vars=("M", "N")):
    for name, text in KERNELS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    script = tmp_path / "target.py"
    script.write_text(script_text)
    probe = receipts.prepare(tmp_path / "probe", label="head-repo", routes=list(routes),
                             shape_vars=list(shape_vars), receipt=tmp_path / "receipt.json")
    done = subprocess.run([python, "-m", probe.name, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{probe.folder}:{tmp_path}", "PATH": "/usr/bin:/bin"})
    receipt, digest, note = receipts.read(probe)
    return done, receipt, note


@pytest.mark.parametrize("python", interpreters())
def test_alias_taken_before_the_call_is_still_seen(tmp_path, python):
    done, receipt, _ = run_probe(tmp_path, python, (
        "from kern.ops import tile_add\n\nif __name__ == '__main__':\n"
        "    for n in (64, 2000):\n        tile_add(4, n)\n    print('done')\n"), ["kern.ops:tile_add"])
    assert done.returncode == 0 and "done" in done.stdout
    assert receipt["route"] == "kern.ops:tile_add" and receipt["route_calls"] == {"kern.ops:tile_add": 2}
    assert receipt["executed_shapes"] == ["4,64", "4,2000"]


@pytest.mark.parametrize("python", interpreters())
def test_decorated_route_resolves_to_the_wrapped_function(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, "import kern.ops as k\nk.decorated(3, 5)\n", ["kern.ops:decorated"])
    assert receipt["route_calls"] == {"kern.ops:decorated": 1} and receipt["executed_shapes"] == ["3,5"]


@pytest.mark.parametrize("python", interpreters())
def test_method_and_static_method_routes(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, (
        "from kern.ops import Kernel\nKernel().launch(8, 2)\nKernel.build(16, 1)\nKernel().build(32, 1)\n"),
        ["kern.ops:Kernel.launch", "kern.ops:Kernel.build"])
    assert receipt["route_calls"] == {"kern.ops:Kernel.launch": 1, "kern.ops:Kernel.build": 2}
    assert sorted(receipt["executed_shapes"]) == ["16,1", "32,1", "8,2"]


@pytest.mark.parametrize("python", interpreters())
def test_shape_vars_assigned_inside_the_body_are_read_at_return(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, "from kern.ops import body_shapes\nbody_shapes([[1, 2, 3]] * 7)\n",
                              ["kern.ops:body_shapes"], shape_vars=("M", "N", "dtype_str"))
    assert receipt["executed_shapes"] == ["7,3,f16"]


@pytest.mark.parametrize("python", interpreters())
def test_script_raising_mid_run_still_writes_its_receipt(tmp_path, python):
    done, receipt, _ = run_probe(tmp_path, python, (
        "from kern.ops import tile_add\ntile_add(1, 2)\nraise RuntimeError('kernel exploded')\n"),
        ["kern.ops:tile_add"])
    assert done.returncode == 1 and "kernel exploded" in done.stderr
    assert receipt["route_calls"] == {"kern.ops:tile_add": 1} and receipt["exit_status"] == 1


@pytest.mark.parametrize("python", interpreters())
def test_sys_exit_codes_pass_through(tmp_path, python):
    done, receipt, _ = run_probe(tmp_path, python, "import sys\nsys.exit(3)\n", ["kern.ops:tile_add"])
    assert done.returncode == 3 and receipt["exit_status"] == 3 and receipt["route"] == ""


@pytest.mark.parametrize("python", interpreters())
def test_unresolvable_route_is_named_in_the_receipt(tmp_path, python):
    _, receipt, _ = run_probe(tmp_path, python, "import kern.ops\n", ["kern.ops:no_such_function"])
    assert receipt["unresolved_routes"] == ["kern.ops:no_such_function"]


def test_a_receipt_from_another_run_is_refused(tmp_path):
    probe = receipts.prepare(tmp_path / "probe", label="head-repo", routes=[], shape_vars=[],
                             receipt=tmp_path / "receipt.json")
    (tmp_path / "receipt.json").write_text(json.dumps({"schema_version": 1, "nonce": "forged", "route": "a:b"}))
    receipt, digest, note = receipts.read(probe)
    assert receipt is None and len(digest) == 64 and "did not come from this run" in note


def test_probe_module_names_are_random_per_run(tmp_path):
    first = receipts.prepare(tmp_path / "p", label="a", routes=[], shape_vars=[], receipt=tmp_path / "r1.json")
    second = receipts.prepare(tmp_path / "p", label="b", routes=[], shape_vars=[], receipt=tmp_path / "r2.json")
    assert first.name != second.name and first.nonce != second.nonce
