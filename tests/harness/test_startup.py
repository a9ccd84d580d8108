"""Interpreter start-up code from a checkout never runs in a target, and a PR that brings some, or a
module that stands in for the standard library's, is a blocker naming it; the interpreter's own
start-up module still runs, and the in-target package takes its configuration before it imports
anything a checkout could stand in for."""
import ast
from pathlib import Path
import sys

from kvtasks.harness import startup
from tests.kernel_repos import KERNEL_TAIL_BUG, make_patch

# a tolerance widened for every comparison in the process, before any test file is read
WIDENING = '''import numpy.testing

_strict = numpy.testing.assert_allclose


def _loose(actual, desired, rtol=1e-7, atol=0, **kwargs):
    _strict(actual, desired, rtol=rtol, atol=max(atol, 1e9), **kwargs)


numpy.testing.assert_allclose = _loose
import sys
open({marker!r}, "a").write(repr(sys.argv) + "\\n")
'''


def test_a_checkouts_sitecustomize_never_runs_and_the_pr_that_adds_it_blocks(repo, validate, tmp_path):
    marker = tmp_path / "sitecustomize-ran"
    patch = make_patch(repo, {"kernels/scale.py": KERNEL_TAIL_BUG, "sitecustomize.py": WIDENING.format(marker=str(marker)),
                              "usercustomize.py": WIDENING.format(marker=str(marker)),
                              "colorsys.py": "# stands in for the standard library's module\n"}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py")
    assert not marker.exists()  # no target run of either side imported it
    assert result.verdict == "BLOCK"
    policy = result.stage("test_policy")
    assert policy["startup_files"] == ["sitecustomize.py", "usercustomize.py"]
    assert policy["stdlib_shadows"] == ["colorsys.py"]
    blockers = [f["detail"] for f in result.findings("blocker") if f["stage"] == "test_policy"]
    assert len(blockers) == 3 and "interpreter start-up code (sitecustomize.py)" in blockers[0]
    assert "colorsys.py, named like a standard-library module" in blockers[2]
    assert result.stage("correctness_repo_tests")["status"] == "fail"  # the tail bug, judged at base's tolerance


def test_the_interpreters_own_start_up_module_is_found_outside_the_constructed_path(tmp_path, monkeypatch):
    checkout, interpreter = tmp_path / "checkout", tmp_path / "site-packages"
    for folder in (checkout / "src", interpreter):
        folder.mkdir(parents=True)
        (folder / "sitecustomize.py").write_text("")
    (checkout / "sitecustomize.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", f"{checkout / 'src'}:{checkout}")
    monkeypatch.setattr(sys, "path", ["", str(checkout / "src"), str(checkout), str(interpreter)])
    assert startup._interpreters_own("sitecustomize") == str(interpreter / "sitecustomize.py")
    monkeypatch.setattr(sys, "path", ["", str(checkout / "src"), str(checkout)])
    assert startup._interpreters_own("sitecustomize") is None


def test_the_package_reads_its_configuration_before_any_import_but_os():
    from kvtasks.harness import in_target

    body = ast.parse(Path(in_target.__file__).read_text()).body
    started = next(index for index, node in enumerate(body) if isinstance(node, ast.Expr)
                   and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "_start")
    imported = {alias.name for node in body[:started] if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert imported == {"os"}  # built in before any path is searched: no checkout module stands in
    functions = {node.name: node for node in body if isinstance(node, ast.FunctionDef)}
    assert not [node for node in ast.walk(functions["_take_configuration"]) if isinstance(node, (ast.Import,
                                                                                                 ast.ImportFrom))]
    steps = functions["_start"].body  # the configuration is taken (file and variable gone) before any import
    taken = next(index for index, node in enumerate(steps) if "_take_configuration" in ast.dump(node))
    assert all(not isinstance(node, (ast.Import, ast.ImportFrom)) for step in steps[:taken + 1]
               for node in ast.walk(step))
