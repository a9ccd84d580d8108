"""Zero configuration: base's impact map, built once per base, and the targets it infers from a PR's
changed files (kvtasks.run.impact, kvtasks.sources.impact_map, kvtasks.front.inference)."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from kvtasks.evidence.workspace import Workspace
from kvtasks.front import cli, pr_targets
from kvtasks.harness.in_target.nonfinite import shape_of
from kvtasks.request.repo_config import needs_no_validation
from kvtasks.run import impact
from kvtasks.sources import launchers
from kvtasks.sources.impact_map import ImpactMap, Item, RouteCall, _through_kernels, infer, touched
from tests.kernel_repos import git, make_repo, write_files
from tests.test_repo_config import branch

BENCH = Path(__file__).resolve().parent.parent / "bench" / "zero_config.py"
COMMON = "def tiles(n, tile):\n    return range(0, n, tile)\n"
SCALE = '''import numpy as np

from kernels.common import tiles


def scale_rows(x, factor):
    M, N = x.shape
    out = np.zeros_like(x)
    for start in tiles(N, 8):
        out[:, start:start + 8] = x[:, start:start + 8] * factor
    return out
'''
SHIFT = SCALE.replace("scale_rows(x, factor)", "shift_rows(x, amount)").replace("* factor", "+ amount")
SCALE_COLS = "\n\ndef scale_cols(x, factor):\n    return x * factor\n"  # no test calls it
SCALE_TAIL_BUG = SCALE.replace("tiles(N, 8)", "tiles(N - N % 8, 8)") + SCALE_COLS
TEST = '''import numpy as np
import pytest

from kernels.{module} import {function}


@pytest.mark.parametrize("M,N", [(4, 16), (3, 13), (5, 21)])
def test_{module}(M, N):
    x = np.arange(M * N, dtype=np.float32).reshape(M, N)
    np.testing.assert_allclose({function}(x, 2.0), x {op} 2.0, atol=1e-6)
'''
TEST_SCALE = TEST.format(module="scale", function="scale_rows", op="*")
TEST_SHIFT = TEST.format(module="shift", function="shift_rows", op="+")


@pytest.fixture(scope="module")
def two_kernels(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("zero-config") / "kernels", {
        "kernels/__init__.py": "", "kernels/common.py": COMMON, "kernels/scale.py": SCALE + SCALE_COLS,
        "kernels/shift.py": SHIFT,
        "kernels/constants.py": "FACTOR = 2.0\n", "tests/test_scale.py": TEST_SCALE, "tests/test_shift.py": TEST_SHIFT,
        "README.md": "kernels\n", "docs/index.md": "kernels\n"})
    branch(repo, "scale", {"kernels/scale.py": SCALE.replace("    M, N = x.shape\n", "    M, N = x.shape  # rows\n")
                           + SCALE_COLS})
    branch(repo, "untested", {"kernels/scale.py": SCALE + SCALE_COLS.replace("x * factor", "x * factor * 2")})
    branch(repo, "tail-bug", {"kernels/scale.py": SCALE_TAIL_BUG})
    branch(repo, "helper", {"kernels/common.py": COMMON.replace("return", "return  # every tile\n    ")})
    branch(repo, "test-only", {"tests/test_shift.py": TEST_SHIFT.replace("(5, 21)", "(5, 21), (2, 9)")})
    branch(repo, "docs", {"README.md": "kernels, documented\n", "docs/index.md": "more\n"})
    branch(repo, "constant", {"kernels/constants.py": "FACTOR = 3.0\n"})
    branch(repo, "mixed", {"kernels/scale.py": SCALE_TAIL_BUG, "kernels/constants.py": "FACTOR = 3.0\n"})
    return repo


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("home"))


def targets(workspace, repo, head: str) -> list[dict]:
    return pr_targets.target_options(workspace, {"repo": str(repo), "base_ref": "main", "head_ref": head,
                                                 "label": head})


def test_a_pr_touching_one_kernel_selects_only_its_tests_route_shapes_and_argnames(two_kernels, workspace):
    [options] = targets(workspace, two_kernels, "scale")
    assert (options["target"], options["expected_route"]) == ("tests/test_scale.py", "kernels.scale:scale_rows")
    assert (options["shape_vars"], options["shape_argnames"]) == ("M,N", "M,N")
    inferred = options["inferred"]
    assert inferred.changed == ["kernels/scale.py"] and len(inferred.tests) == 3
    assert all(test.startswith("tests/test_scale.py::test_scale[") for test in inferred.tests)


def test_the_caller_s_options_win_over_what_was_inferred(two_kernels, workspace):
    [options] = pr_targets.target_options(workspace, {"repo": str(two_kernels), "base_ref": "main",
                                                      "head_ref": "scale", "label": "own", "shape_vars": "N"})
    assert (options["shape_vars"], options["expected_route"]) == ("N", "kernels.scale:scale_rows")


def test_a_helper_both_kernels_use_selects_both(two_kernels, workspace):
    chosen = targets(workspace, two_kernels, "helper")
    assert sorted((options["label"], options["target"], options["expected_route"]) for options in chosen) == [
        ("helper.scale_rows", "tests/test_scale.py", "kernels.scale:scale_rows"),
        ("helper.shift_rows", "tests/test_shift.py", "kernels.shift:shift_rows")]


def test_a_pr_touching_only_a_test_file_selects_that_test(two_kernels, workspace):
    [options] = targets(workspace, two_kernels, "test-only")
    assert (options["target"], options["expected_route"]) == ("tests/test_shift.py", "kernels.shift:shift_rows")


def test_the_map_is_built_once_per_base_and_reused_by_the_next_pr(two_kernels, workspace, monkeypatch):
    targets(workspace, two_kernels, "scale")

    def no_base_run(*args, **kwargs):
        raise AssertionError("a second PR on the same base ran base's tests again")
    monkeypatch.setattr(impact, "build", no_base_run)
    [options] = targets(workspace, two_kernels, "tail-bug")
    assert options["inferred"].map_reused and options["expected_route"] == "kernels.scale:scale_rows"
    [stored] = (workspace.store.root / "impact").glob("*.json")
    items = ImpactMap.model_validate_json(stored.read_text()).items.values()
    assert items and all(item.seconds is not None and not item.stopped for item in items)


def test_what_reaches_no_route_is_named_and_only_documentation_is_nothing(two_kernels, workspace):
    with pytest.raises(pr_targets.NothingToValidate):
        targets(workspace, two_kernels, "docs")
    # a function no test calls, in a module whose other function a test does: nothing validates the change
    with pytest.raises(pr_targets.UnreachedChanges) as untested:
        targets(workspace, two_kernels, "untested")
    assert untested.value.unreached == ["kernels/scale.py"]
    with pytest.raises(pr_targets.UnreachedChanges) as unreached:
        targets(workspace, two_kernels, "constant")
    assert unreached.value.unreached == ["kernels/constants.py"]
    [options] = targets(workspace, two_kernels, "mixed")
    assert options["unvalidated_changes"] == ["kernels/constants.py"]


def test_base_s_tests_that_cannot_be_mapped_leave_the_pr_not_validated_and_a_bot_reads_its_report(
        two_kernels, tmp_path, monkeypatch, capsys):
    def unmappable(*args, **kwargs):
        raise impact.MapUnavailable("base's tests cannot be mapped: runtime_compat halted: import failed")
    monkeypatch.setattr(impact, "build", unmappable)
    fresh = Workspace(tmp_path / "home")
    with pytest.raises(pr_targets.UnreachedChanges) as unmapped:
        targets(fresh, two_kernels, "scale")
    assert unmapped.value.unreached == ["kernels/scale.py"] and "runtime_compat halted" in unmapped.value.line
    with pytest.raises(pr_targets.NothingToValidate):
        targets(fresh, two_kernels, "docs")
    monkeypatch.setenv("KVTASKS_HOME", str(fresh.root))
    monkeypatch.setenv(pr_targets.CI_VARIABLE, "true")
    monkeypatch.chdir(tmp_path)
    status = cli.main(["--repo", str(two_kernels), "--base-ref", "main", "--head-ref", "scale", "--label", "unmapped",
                       "--format", "json"])
    [run] = json.loads(capsys.readouterr().out)["reports"]
    assert (status, run["verdict"], run["exit"]) == (2, "INCONCLUSIVE", 2) and "cannot be mapped" in run["decided_by"]


def test_an_inferred_target_is_validated_as_a_configured_one_and_says_so(tmp_path):
    """bench/zero_config.py's smoke run: a reintroduced tail bug, validated with a maintainer's
    configuration and with the refs alone, blocks both ways; the report says what was inferred."""
    done = subprocess.run([sys.executable, str(BENCH), "--smoke", "--workspace", str(tmp_path / "workspace"),
                           "--json", str(tmp_path / "results.json")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTEST_ADDOPTS": "-p no:hypothesispytest"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert done.stdout.strip().splitlines()[-1] == (
        "zero-config: 1/1 verdicts equal to the configured run's (inferred targets 1, routes 1)"), done.stdout
    [result] = json.loads((tmp_path / "results.json").read_text())
    assert (result["configured"], result["zero_config"]) == ("BLOCK", "BLOCK"), result
    [run] = result["zero_config_run"]["runs"]
    report = json.loads(Path(run["report"]).read_text())
    inferred = report["test_selection"]["inferred"]
    assert (inferred["route"], inferred["target"], inferred["shape_argnames"]) == (
        "kernels.scale:scale_rows", "tests/test_scale.py", ["M", "N"])
    assert "config.inferred" in {finding["rule"] for finding in report["findings"]}


KERNELS = '''import triton
import triton.language as tl


from lib.helpers import twice


@triton.autotune(configs=[], key=["n"])
@triton.jit
def _scale_kernel(x_ptr, n, BLOCK: tl.constexpr):
    twice(n)


def launch(x):
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)
    return x


class Op:
    @staticmethod
    def forward(x):
        return launch(x)
'''

HELPERS = """import triton


@triton.jit
def twice(n):
    return n * 2


@triton.jit
def unused(n):
    return n


@triton.jit
def aliased(n):
    return n


def run_aliased(n):
    kernel = aliased
    kernel[(1,)](n)


class Holder:
    @triton.jit
    def held(n):
        return n

    def go(self, n):
        self.held[(1,)](n)
"""


def test_launchers_are_the_functions_that_launch_a_jit_kernel_read_statically(tmp_path):
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "lib" / "ops.py").write_text(KERNELS)
    (tmp_path / "src" / "lib" / "helpers.py").write_text(HELPERS)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ops.py").write_text("def test_x():\n    pass\n")
    functions = launchers.functions(tmp_path)
    found = {function.route: (function.launches, function.kernel) for function in functions}
    assert found == {"lib.ops:launch": (True, False), "lib.ops:Op.forward": (False, False),
                     "lib.ops:_scale_kernel": (False, True), "lib.helpers:twice": (False, True),
                     "lib.helpers:unused": (False, True), "lib.helpers:aliased": (False, True),
                     "lib.helpers:run_aliased": (False, False), "lib.helpers:Holder.held": (False, True),
                     "lib.helpers:Holder.go": (True, False)}
    # a change inside a kernel, or inside a helper a kernel calls, reaches the launcher, wherever the
    # kernel is defined; one launched through an alias counts for its module's functions, as a
    # module-level change does
    helpers = [function for function in functions if function.path == "src/lib/helpers.py"]
    assert _through_kernels(touched(helpers, [(4, 4)]), functions) == {"lib.ops:launch"}
    assert _through_kernels(touched(helpers, [(27, 27)]), functions) == {"lib.helpers:Holder.go"}
    assert _through_kernels(touched(helpers, [(14, 14)]), functions) == {
        "lib.helpers:run_aliased", "lib.helpers:Holder.go"}
    # in a module of kernels alone, one nothing launches stays: no item calls it, the change is unreached
    kernels_only = [function for function in functions if function.route in ("lib.helpers:unused",)]
    assert _through_kernels(touched(kernels_only, [(9, 9)]), kernels_only) == {"lib.helpers:unused"}


def test_with_launchers_the_routes_are_they_and_a_dimension_without_a_local_name_is_named_by_its_argument():
    functions = [launchers.Function("lib.ops:launch", "lib/ops.py", True),
                 launchers.Function("lib.ops:Op.forward", "lib/ops.py", False)]
    calls = {"lib.ops:Op.forward": RouteCall(count=1, outside=True, arrays={"x": [7]}),
             "lib.ops:launch": RouteCall(count=1, outside=False, arrays={"x": [7]}, scalars={"n": 7, "BLOCK": 9})}
    items = {f"tests/test_ops.py::test_x[{size}]": Item(params={"size": size}, calls={
        route: call.model_copy(update={"arrays": {"x": [size, 3]}, "scalars": {"n": size}}) for route, call in calls.items()})
        for size in (7, 11)}
    impact_map = ImpactMap(base_oid="b", functions=functions, items=items, tests=["tests/test_ops.py"])
    [inferred], unreached = infer(impact_map, ["lib/ops.py"], needs_no_validation)
    assert (inferred.route, inferred.shape_vars, inferred.shape_argnames, unreached) == (
        "lib.ops:launch", ["n"], ["size"], [])
    for item in items.values():  # no argname feeds them: every dimension, by a local or by its argument
        item.params.clear()
    [inferred], _ = infer(impact_map, ["lib/ops.py"], needs_no_validation)
    assert (inferred.shape_vars, inferred.shape_argnames) == (["n", "x.shape[1]"], [])
    assert shape_of({"x": type("T", (), {"shape": (5, 3)})()}, ["x.shape[1]"]) == "3"


def test_on_the_cpu_tier_a_target_is_the_function_the_grid_fills_alone_or_else_its_smallest_item():
    functions = [launchers.Function("lib.ops:launch", "lib/ops.py", True)]
    items = {f"tests/test_ops.py::test_x[{size}]": Item(params={"size": size}, calls={"lib.ops:launch": RouteCall(
        count=1, outside=True, arrays={"x": [size, 64]}, scalars={"n": size})}) for size in (33, 7, 11)}
    tier_map = ImpactMap(base_oid="b", functions=functions, items=items, tests=["tests/test_ops.py"], cpu_tier=True)
    [inferred], _ = infer(tier_map, ["lib/ops.py"], needs_no_validation)
    assert (inferred.target, inferred.shape_argnames) == ("tests/test_ops.py::test_x", ["size"])
    [on_gpu], _ = infer(tier_map.model_copy(update={"cpu_tier": False}), ["lib/ops.py"], needs_no_validation)
    assert on_gpu.target == "tests/test_ops.py"
    # a channel beside another axis: the grid's rows times that axis' cells is given up for an item
    for item in items.values():
        item.params["bias"] = False
    [inferred], _ = infer(tier_map, ["lib/ops.py"], needs_no_validation)
    assert (inferred.target, inferred.shape_argnames, inferred.shape_vars) == (
        "tests/test_ops.py::test_x[7]", [], ["n", "x.shape[1]"])
    [on_gpu], _ = infer(tier_map.model_copy(update={"cpu_tier": False}), ["lib/ops.py"], needs_no_validation)
    assert (on_gpu.target, on_gpu.shape_argnames) == ("tests/test_ops.py", ["size"])
    for item in items.values():
        item.params.clear()
    [inferred], _ = infer(tier_map, ["lib/ops.py"], needs_no_validation)
    assert (inferred.target, inferred.shape_argnames) == ("tests/test_ops.py::test_x[7]", [])
    # the item must stand for every changed file, a changed test file too
    tier_map.functions.append(launchers.Function("lib.util:pad", "lib/util.py", False, 1, 2))
    items["tests/test_ops.py::test_x[33]"].calls["lib.util:pad"] = RouteCall(count=1, outside=False)
    [inferred], _ = infer(tier_map, ["lib/ops.py", "lib/util.py"], needs_no_validation)
    assert inferred.target == "tests/test_ops.py::test_x[33]"
    [inferred], _ = infer(tier_map, ["lib/ops.py", "tests/test_ops.py"], needs_no_validation)
    assert inferred.target == "tests/test_ops.py::test_x[7]"
    # what the map's run saw an item cost comes first: one its bound stopped last, then its seconds
    items["tests/test_ops.py::test_x[7]"].stopped = True
    items["tests/test_ops.py::test_x[11]"].seconds, items["tests/test_ops.py::test_x[33]"].seconds = 4.0, 0.5
    [inferred], _ = infer(tier_map, ["lib/ops.py"], needs_no_validation)
    assert inferred.target == "tests/test_ops.py::test_x[33]"


def test_check_suggests_the_configuration_the_map_infers(two_kernels, workspace, monkeypatch, capsys):
    targets(workspace, two_kernels, "scale")  # base's map, which the checkout's HEAD shares
    monkeypatch.setenv("KVTASKS_HOME", str(workspace.root))
    monkeypatch.setattr(impact, "build", lambda *args, **kwargs: pytest.fail("the stored map was not reused"))
    assert cli.main(["check", "--repo", str(two_kernels), "--suggest-config", "--quiet"]) == 0
    table = tomllib.loads(capsys.readouterr().out)["tool"]["kvtasks"]
    assert table["targets"]["scale_rows"] == {"target": "tests/test_scale.py", "expected_route": "kernels.scale:scale_rows",
                                             "shape_vars": "M,N", "shape_argnames": "M,N"}
    assert table["map"] == {"kernels/common.py": ["scale_rows", "shift_rows"], "kernels/scale.py": ["scale_rows"],
                            "kernels/shift.py": ["shift_rows"]}


def test_the_map_keeps_every_item_that_finished_before_a_kill(tmp_path):
    written = tmp_path / "impact.json"
    lines = [json.dumps({"test": f"tests/test_x.py::test_x[{n}]", "params": {"n": n},
                         "calls": {"m:f": {"count": 1, "outside": True, "arrays": {"x": [n]}, "scalars": {"n": n}}}})
             for n in (1, 2)]
    written.write_text("\n".join(lines) + '\n{"test": "tests/test_x.py::test_x[3]", "par')
    items = impact._items(written)
    assert sorted(items) == ["tests/test_x.py::test_x[1]", "tests/test_x.py::test_x[2]"]
    assert (items["tests/test_x.py::test_x[1]"].seconds, items["tests/test_x.py::test_x[1]"].stopped) == (None, False)
    assert items["tests/test_x.py::test_x[2]"].calls["m:f"].ints == {"n": 2}


def test_a_map_whose_run_stopped_short_but_by_its_timeout_is_used_once_and_never_stored(tmp_path, monkeypatch):
    log = tmp_path / "base-map.log"
    log.write_text("..F\nINTERNALERROR>   File \"x.py\", line 1\nINTERNALERROR> TimeoutError: stopped\n")
    run = SimpleNamespace(timed_out=False, exit=3, log=str(log))
    assert impact._interrupted(run) == "exit 3: INTERNALERROR> TimeoutError: stopped"
    assert impact._interrupted(SimpleNamespace(timed_out=True, exit=-9, log=str(log))) == ""
    assert impact._interrupted(SimpleNamespace(timed_out=False, exit=1, log=str(log))) == ""
    called = {"t::x": Item(calls={"m:f": RouteCall(count=1, outside=True)})}
    built = ImpactMap(base_oid="b", functions=[], items=called, tests=["t"], interrupted="exit 3: stopped")
    monkeypatch.setattr(impact, "build", lambda *args: built)
    workspace = Workspace(tmp_path / "home")
    assert impact.load_or_build(workspace, tmp_path, "b", {}) == (built, False)
    assert not impact.map_file(workspace, "b", {}).exists()
    monkeypatch.setattr(impact, "build", lambda *args: built.model_copy(update={"interrupted": ""}))
    impact.load_or_build(workspace, tmp_path, "b", {})
    assert impact.map_file(workspace, "b", {}).is_file()


def test_a_new_base_re_runs_only_the_test_files_whose_imports_changed(two_kernels, workspace):
    targets(workspace, two_kernels, "scale")  # main's map
    git(two_kernels, "checkout", "-q", "-b", "shift-base", "main")
    write_files(two_kernels, {"kernels/shift.py": SHIFT + "# shifted on this base\n"})
    git(two_kernels, "commit", "-qam", "shift-base")
    git(two_kernels, "checkout", "-q", "-b", "on-shift-base")
    write_files(two_kernels, {"kernels/scale.py": SCALE_TAIL_BUG})
    git(two_kernels, "commit", "-qam", "on-shift-base")
    git(two_kernels, "checkout", "-q", "main")
    [options] = pr_targets.target_options(workspace, {"repo": str(two_kernels), "base_ref": "shift-base",
                                                      "head_ref": "on-shift-base", "label": "next"})
    assert options["expected_route"] == "kernels.scale:scale_rows" and not options["inferred"].map_reused
    stored = ImpactMap.model_validate_json(impact.map_file(workspace, options["inferred"].map_base_oid, {}).read_text())
    assert "1 of 2 test files kept" in stored.note and stored.ran == ["tests/test_shift.py"]
    assert {nodeid.split("::")[0] for nodeid in stored.items} == {"tests/test_scale.py", "tests/test_shift.py"}


def test_no_changed_file_is_left_without_a_test_that_reaches_it():
    functions = [launchers.Function("k.ops:launch", "k/ops.py", True, 1, 5),
                 launchers.Function("k.epilogue:finish", "k/epilogue.py", False, 1, 3)]

    def item(*routes):
        return Item(calls={route: RouteCall(count=1, outside=True, arrays={"x": [4]}) for route in routes})
    items = {**{f"tests/test_a.py::test_a[{n}]": item("k.ops:launch") for n in range(3)},
             **{f"tests/test_b.py::test_b[{n}]": item("k.ops:launch") for n in range(2)},
             "tests/test_c.py::test_c": item("k.ops:launch", "k.epilogue:finish")}
    impact_map = ImpactMap(base_oid="b", functions=functions, items=items, tests=[])
    # the route's two busiest files never reach the epilogue: the third, which does, is a target too
    chosen, unreached = infer(impact_map, ["k/ops.py", "k/epilogue.py"], needs_no_validation,
                              {"k/ops.py": [(2, 2)], "k/epilogue.py": [(2, 2)]})
    assert [target.target for target in chosen] == ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
    assert unreached == []
    # a line outside every function (a constant, an import) touches them all; one inside, its function
    module = [functions[0], launchers.Function("k.ops:helper", "k/ops.py", False, 7, 9)]
    assert touched(module, [(8, 8)]) == {"k.ops:helper"}
    assert touched(module, [(6, 6)]) == {"k.ops:launch", "k.ops:helper"}


def test_a_rootdir_in_a_subfolder_still_names_items_from_the_checkout_s_root(tmp_path):
    repo = make_repo(tmp_path / "sub", {
        "python/pytest.ini": "[pytest]\n", "python/kern/__init__.py": "",
        "python/kern/ops.py": "def double(x):\n    return [v * 2 for v in x]\n",
        "python/test/test_ops.py": "import os\nimport sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))\n"
                                   "from kern.ops import double  # noqa: E402\n\n\ndef test_double():\n"
                                   "    assert double([1]) == [2]\n"})
    built, _ = impact.load_or_build(Workspace(tmp_path / "home"), repo, git(repo, "rev-parse", "HEAD").strip(), {})
    assert list(built.items) == ["python/test/test_ops.py::test_double"]
    assert [function.route for function in built.functions] == ["kern.ops:double"]
