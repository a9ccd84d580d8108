"""The in-target package's pieces, imported directly (no target process): its configuration taken and
gone, corruption of numpy arrays, the NaN/Inf watch, written arguments, grid cells, the receipt
written by one side and validated by the other, and a copy loading the modules compiled once."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from kvtasks.harness import in_target, receipts
from kvtasks.harness.in_target import corruption, grid, monitor, nonfinite, state, writes
from kvtasks.harness.in_target.configuration import Configuration, Sensitivity, TierSettings, decode, encode
from kvtasks.harness.in_target.receipt import Loaded, LoadedFile, Receipt, RouteOutput, to_json

VARIABLE = in_target.__name__.upper()  # the package's name in capitals, as a launch's copy reads it


@pytest.fixture
def run(monkeypatch):
    """A Run of this process, as the package starts one from its configuration."""
    def started(sensitivity=None, **configured):
        current = state.Run(Configuration(**configured), corruption.make(sensitivity))
        monkeypatch.setattr(state, "current", current)
        return current
    return started


def test_the_configuration_is_taken_once_and_its_file_and_variable_are_gone(tmp_path, monkeypatch):
    configuration = Configuration(routes=["kern.ops:scale"], shape_vars=["M"], receipt=str(tmp_path / "r.json"),
                                  nonce="n1", grid_argnames=["M"], grid_rows=[["4"]], poisoned_row=["x"],
                                  cpu_tier=TierSettings.of({"sparse_programs": None, "device_capability": "9.0"}))
    written = tmp_path / "configuration.json"
    written.write_text(encode(configuration, Sensitivity(mode="tail", error=0.01)))
    monkeypatch.setenv(VARIABLE, str(written))
    text = in_target._take_configuration()
    assert not written.exists() and VARIABLE not in __import__("os").environ
    assert decode(text) == (configuration, Sensitivity(mode="tail", error=0.01))
    assert configuration.merged and configuration.cpu_tier == TierSettings(0, "9.0")
    assert in_target._take_configuration() is None  # taken once: a second reader finds nothing
    monkeypatch.setenv(VARIABLE, str(tmp_path / "absent.json"))
    assert in_target._take_configuration() is None and VARIABLE not in __import__("os").environ


def test_an_ordinary_run_has_no_sensitivity_and_prepare_writes_it_again_for_a_retry(tmp_path):
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[], receipt=tmp_path / "r.json",
                             sensitivity={"mode": "tail", "error": None, "output": ""})
    assert probe.sensitivity == Sensitivity(mode="tail") and (probe.folder / probe.name / "__main__.py").is_file()
    assert list(probe.environment) == [probe.name.upper()] and "kvtasks" not in json.dumps(probe.environment)
    ordinary = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[], receipt=tmp_path / "r.json")
    assert decode(ordinary.configuration_file.read_text())[1] is None
    ordinary.configuration_file.unlink()
    ordinary.write_configuration()
    assert decode(ordinary.configuration_file.read_text())[0] == ordinary.configuration


def test_a_path_resolved_folder_by_folder_is_the_path_resolved_whole(tmp_path):
    """loads.real_path caches each folder's resolution: links to folders, to files, through other
    links, .. after a link, relative and missing paths all end where os.path.realpath ends them."""
    from kvtasks.harness.in_target import loads

    (tmp_path / "real" / "pkg").mkdir(parents=True)
    (tmp_path / "real" / "pkg" / "mod.py").write_text("")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "target.py").write_text("")
    (tmp_path / "folder-link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "pkg" / "file-link.py").symlink_to(tmp_path / "elsewhere" / "target.py")
    (tmp_path / "chain").symlink_to(tmp_path / "folder-link" / "pkg")
    paths = [tmp_path / "real" / "pkg" / "mod.py", tmp_path / "folder-link" / "pkg" / "mod.py",
             tmp_path / "chain" / "file-link.py", tmp_path / "folder-link" / "pkg" / ".." / "pkg" / "mod.py",
             tmp_path / "chain" / ".." / "pkg" / "mod.py", tmp_path / "chain" / "." / "mod.py",
             tmp_path / "missing" / "mod.py", tmp_path / "chain", tmp_path / "chain" / "..", "relative/mod.py", "/"]
    for path in paths:
        for _ in range(2):  # the second answer comes from the cached folder
            assert loads.real_path(str(path)) == os.path.realpath(path), path
    assert loads.real_path(str(tmp_path / "chain" / "file-link.py")) == str(tmp_path / "elsewhere" / "target.py")


def test_each_copy_loads_the_modules_compiled_once_and_names_its_own_files(tmp_path):
    first = receipts.prepare(tmp_path / "one", routes=[], shape_vars=[], receipt=tmp_path / "r.json")
    second = receipts.prepare(tmp_path / "two", routes=[], shape_vars=[], receipt=tmp_path / "r.json")
    copy = second.folder / second.name
    assert sorted(p.name for p in (copy / "__pycache__").iterdir()) == \
        sorted(p.name for p in (first.folder / first.name / "__pycache__").iterdir())
    done = subprocess.run([sys.executable, "-v", "-c", f"import {second.name}.monitor as m; print(m.install.__code__.co_filename)"],
                          cwd=second.folder, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(second.folder), "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(copy / "monitor.py")  # a traceback names this copy's file
    assert f"code object from '{copy / '__pycache__'}" in done.stderr  # and nothing was compiled again
    (copy / "monitor.py").write_text((copy / "monitor.py").read_text() + "\nEDITED = True\n")
    edited = subprocess.run([sys.executable, "-c", f"import {second.name}.monitor as m; print(m.EDITED)"],
                            cwd=second.folder, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(second.folder), "PYTHONDONTWRITEBYTECODE": "1"})
    assert edited.stdout.strip() == "True"  # the compiled file is checked against its source


def test_the_tail_of_a_produced_array_is_corrupted_and_inputs_are_not():
    array = np.arange(1, 5, dtype=np.float32)
    out, error, nans = corruption.corrupt_one(array, None, Sensitivity())
    assert out is array and out.tolist() == [1, 2, 3, 9] and error == pytest.approx(5 / 4) and nans == 0
    out, error, _ = corruption.corrupt_one(np.ones(3), False, Sensitivity(error=0.5))
    assert out.tolist() == [1, 1, 1.5] and error == pytest.approx(0.5)
    out, error, nans = corruption.corrupt_one(np.ones((2, 2)), None, Sensitivity(mode="nan"))
    assert np.isnan(out).all() and error is None and nans == 4
    zero, error, _ = corruption.corrupt_one(np.array([4.0, 0.0]), None, Sensitivity(error=0.1))
    assert zero.tolist() == [4.0, pytest.approx(0.4)] and error == pytest.approx(0.1)  # over the largest magnitude
    assert corruption.corrupt_one(np.float64(-1.0), None, Sensitivity())[0] == 1.0  # -1 is 2*x + 1's fixed point
    frozen = np.ones(2)
    frozen.flags.writeable = False
    for value, in_place, why in ((np.arange(3), None, "int64 ndarray"), (np.ones(0), None, "empty ndarray"),
                                 (frozen, True, "read-only ndarray"), (None, None, "nothing (None)"),
                                 (None, True, "NoneType")):
        with pytest.raises(corruption.NotCorruptible) as refused:
            corruption.corrupt_one(value, in_place, Sensitivity())
        assert str(refused.value) == why
    x = np.ones(4)
    tally = corruption.Tally()
    with pytest.raises(corruption.NotCorruptible):
        corruption.corrupt_returned((x, x[1:]), Sensitivity(), "return", [("x", x)], tally)
    assert tally.outputs_left_alone == {f"return[{index}]": "an input (argument x, or memory shared with it)"
                                        for index in (0, 1)} and x.tolist() == [1, 1, 1, 1]


def test_the_corruption_lives_in_its_closures_and_counts_what_it_did(run):
    def route(x, out=None):
        return x * 2

    current = run(Sensitivity(mode="tail"))
    x = np.ones(3)
    current.test = "tests/test_a.py::test_a"
    corrupted = current.corruption.after_call(route, (x,), {}, route(x))
    assert corrupted.tolist() == [2, 2, 5]
    current.corruption.after_call(route, (x,), {}, x)  # the input handed back: never corrupted
    report = current.corruption.receipt()
    assert (report.corrupted_calls, report.tests_corrupted, report.corrupted_outside_tests) == (1, 1, 0)
    assert report.not_corrupted == {"returned an input (argument x, or memory shared with it)": 1}
    assert report.max_relative_error == pytest.approx(1.5) and report.outputs_corrupted == {"return": 1}
    ordinary = run(None)
    assert ordinary.corruption.after_call(route, (x,), {}, x * 2).tolist() == [2, 2, 2]
    assert ordinary.corruption.receipt() is None


def test_an_output_argument_is_corrupted_in_place_after_the_call(run):
    def write_into(out, x):
        out[...] = x

    current = run(Sensitivity(output="out"))
    out = np.zeros(2)
    current.corruption.after_call(write_into, (out, np.ones(2)), {}, None)
    current.corruption.after_call(lambda x: x, (np.ones(2),), {}, None)
    report = current.corruption.receipt()
    assert out.tolist() == [0.0, 1.0] and report.outputs_corrupted == {"argument out": 1}
    assert report.not_corrupted == {"argument out: a call without an argument named 'out'": 1}


def test_nonfinite_outputs_are_found_per_route_and_cell(run):
    assert nonfinite.nonfinite(np.array([1.0, math.nan, math.inf])) == ["nan", "inf"]
    assert nonfinite.nonfinite(np.ones(3)) == []
    found = list(nonfinite.floating_outputs({"a": np.ones(1), "b": (np.arange(2), np.ones(1, dtype=np.float16))}))
    assert [where for where, _ in found] == ["return['a']", "return['b'][1]"]
    current = run(shape_vars=["M"])
    nonfinite.watch_outputs(current, "k:f", (np.array([math.nan]), np.ones(1)), {"M": 64})
    nonfinite.watch_outputs(current, "k:f", np.array([math.inf]), {"M": 64})
    current.test = "tests/t.py::test_x"
    nonfinite.watch_outputs(current, "k:f", np.ones(2))
    assert list(current.outputs.values()) == [
        RouteOutput("k:f", "64", checked=3, nonfinite=["nan in return[0]", "inf in return"]),
        RouteOutput("k:f", "tests/t.py::test_x", checked=1)]
    class Dtype:  # what torch.float16 prints as
        def __str__(self):
            return "torch.float16"

    assert nonfinite.normalise(Dtype()) == "float16" and nonfinite.normalise("torch.x") == "torch.x"
    assert nonfinite.shape_of({"M": 1}, ["M", "N"]) is None


def test_an_argument_the_route_writes_into_is_named(run):
    current = run()
    x, y = np.ones(4), np.ones(4)

    def route(x, y):
        y[-1] = 0

    before = writes.arrays_before(current, "k:f", route, (x, y), {})
    route(x, y)
    writes.note_written(current, "k:f", before)
    assert current.written_arguments == {"k:f": ["y"]}
    assert writes.fingerprint("not an array") is None
    assert writes.fingerprint(np.ones(3)) == writes.fingerprint(np.ones(3)) != writes.fingerprint(np.zeros(3))


def test_grid_cells_become_what_they_spell():
    assert [grid.coerce(cell) for cell in ("True", "None", "(2049,2)", "[1]", "7", "0.5", "f16", "(oops")] == \
        [True, None, (2049, 2), [1], 7, 0.5, "f16", "(oops"]


def test_a_receipt_written_by_the_package_is_read_back_by_the_validator(run, tmp_path):
    current = run(routes=["k:f"], shape_vars=["M"], receipt=str(tmp_path / "receipt.json"), nonce="n2",
                  grid_argnames=["M"], poisoned_row=["x"])
    current.calls["k:f"] = 2
    current.shapes.append("64")
    current.parts["grid"] = state.PartCounts({"k:f": 1}, ["64"])
    current.cells["t.py::test[64]"] = 0
    monitor.write_receipt(1)
    monitor.write_receipt(0)  # once: the first exit path writes it
    written = json.loads((tmp_path / "receipt.json").read_text())
    assert written["exit_status"] == 1 and written["route"] == "k:f" and written["cells"] == {"t.py::test[64]": 0}
    assert written["parts"]["grid"]["kernel_symbols"] == ["k:f"] and written["merged_marks"] == 0
    assert "sensitivity" not in written and "xdist" not in written and "config_file" not in written["loaded"]
    read = receipts.validated((tmp_path / "receipt.json").read_bytes())
    assert read.parts["grid"].route_calls == {"k:f": 1} and read.route_calls == {"k:f": 2} and read.xdist is None


def test_a_receipt_that_does_not_match_its_definition_is_refused(tmp_path):
    receipt = Receipt(nonce="n3", route="", kernel_symbols=[], route_calls={}, unresolved_routes=[],
                      executed_shapes=[], shape_vars=[], exit_status=0, route_outputs=[],
                      loaded=Loaded(modules=[LoadedFile("pkg/ops.py", "route-import")]), judges_replaced=[],
                      written_arguments={})
    assert receipts.validated(json.dumps(to_json(receipt))) == receipt
    probe = receipts.prepare(tmp_path / "probe", routes=[], shape_vars=[], receipt=tmp_path / "receipt.json")
    for key, value in (("exit_status", "0"), ("route_calls", {"k:f": "2"}), ("surprise", 1)):
        probe.receipt.write_text(json.dumps({**to_json(receipt), "nonce": probe.nonce, key: value}))
        read, digest, note = receipts.read(probe, "head-repo")
        assert read is None and len(digest) == 64 and note.startswith("the receipt does not match its definition")
    probe.receipt.write_text(json.dumps({**to_json(receipt), "nonce": probe.nonce}))
    read, _, note = receipts.read(probe, "head-repo")
    assert note == "" and read.producer == receipts.PRODUCER and read.label == "head-repo"


ROUTES = '''import numpy as np


def scale(x, M):
    N = len(x)
    return x * M


class Kernel:
    @staticmethod
    def launch(M):
        return np.array([float("nan")])
'''


def test_routes_are_wrapped_at_import_and_counted_with_their_shapes(run, tmp_path, monkeypatch):
    (tmp_path / "watched_routes.py").write_text(ROUTES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("sys.meta_path", list(__import__("sys").meta_path))  # the finder goes with the test
    monkeypatch.delitem(__import__("sys").modules, "watched_routes", raising=False)
    current = run(routes=["watched_routes:scale", "watched_routes:Kernel.launch", "watched_routes:absent"],
                  shape_vars=["M", "N"], receipt=str(tmp_path / "receipt.json"), nonce="n4")
    monkeypatch.setattr("atexit.register", lambda function: None)  # written below, not at this process's exit
    monitor.install()
    from watched_routes import Kernel, scale  # imported after install: instrumented as it executes

    assert scale(np.ones(2), 3).tolist() == [3, 3] and Kernel.launch(5).shape == (1,)
    monitor.write_receipt(0)
    read = receipts.validated((tmp_path / "receipt.json").read_bytes())
    assert read.route_calls == {"watched_routes:scale": 1, "watched_routes:Kernel.launch": 1}
    assert read.executed_shapes == ["3,2"] and read.unresolved_routes == ["watched_routes:absent"]
    assert [(out.route, out.nonfinite) for out in read.route_outputs] == [
        ("watched_routes:scale", []), ("watched_routes:Kernel.launch", ["nan in return"])]
    assert current.installed and read.exit_status == 0


def test_a_script_runs_as_python_would_run_it_and_its_exit_status_is_the_receipts(run, tmp_path, monkeypatch):
    script = tmp_path / "target.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nsys.exit(3)\n")
    monkeypatch.setattr("sys.argv", list(__import__("sys").argv))
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    current = run(receipt=str(tmp_path / "receipt.json"), nonce="n5")
    current.installed = True  # nothing to watch, and no exit hook in this process
    from kvtasks.harness.in_target import script as runner

    assert runner.run_script([str(script), "--flag"]) == 3
    assert receipts.validated((tmp_path / "receipt.json").read_bytes()).exit_status == 3
