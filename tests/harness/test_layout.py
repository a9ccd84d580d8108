"""Import roots and packages from a checkout's packaging: src layouts without a workaround."""

import pytest

from kvtasks.request import build_request
from kvtasks.harness import layout
from tests.kernel_repos import make_repo, write_files


@pytest.mark.parametrize("files,roots,packages", [
    ({"pyproject.toml": '[project]\nname = "Liger-Kernel"\n[tool.setuptools.packages.find]\nwhere = ["src"]\n',
      "src/liger_kernel/__init__.py": ""}, ["src"], ["liger_kernel"]),
    ({"pyproject.toml": '[tool.setuptools]\npackage-dir = {"" = "python"}\npackages = ["fast_ops"]\n',
      "python/fast_ops/__init__.py": ""}, ["python"], ["fast_ops"]),
    ({"pyproject.toml": '[tool.hatch.build.targets.wheel]\npackages = ["lib/kern"]\n', "lib/kern/__init__.py": ""},
     ["lib"], ["kern"]),
    ({"pyproject.toml": '[tool.poetry]\nname = "k-ops"\npackages = [{include = "kops", from = "code"}]\n',
      "code/kops/__init__.py": ""}, ["code"], ["kops", "k_ops"]),
    ({"setup.cfg": "[metadata]\nname = cfgpkg\n[options]\npackage_dir =\n    =source\n", "source/cfgpkg/__init__.py": ""},
     ["source"], ["cfgpkg"]),
    ({"setup.py": 'from setuptools import setup, find_packages\nsetup(name="pyk", packages=find_packages("pysrc"))\n',
      "pysrc/pyk/__init__.py": ""}, ["pysrc"], ["pyk"]),
    # no packaging at all: a src/ folder holding a package is a root; a flat checkout has none
    ({"src/flat/__init__.py": ""}, ["src"], []),
    ({"kernels/__init__.py": "", "pyproject.toml": '[project]\nname = "benchmarks"\n'}, [], []),
])
def test_import_roots_and_packages_come_from_the_packaging(tmp_path, files, roots, packages):
    write_files(tmp_path, files)
    assert layout.import_roots(tmp_path) == roots
    assert layout.declared_packages(tmp_path) == packages


@pytest.mark.parametrize("name,tooling", [("benchmark", True), ("benchmarks", True), ("bench", True), ("docs", True),
                                          ("tests", True), ("examples", True), ("scripts", True), ("ops", False),
                                          ("liger_kernel", False), ("attorch", False)])
def test_folders_of_tooling_are_never_a_package(name, tooling):
    assert layout.is_tooling(name) is tooling


def test_the_target_path_puts_packaging_roots_then_python_path_before_the_checkout(tmp_path):
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": '[tool.setuptools.packages.find]\nwhere = ["src"]\n',
                                         "src/pkg/__init__.py": "", "vendor/extra.py": "", "t.py": ""})
    request = build_request({"repo": str(repo), "target": "t.py", "python_path": ["vendor"]})
    assert layout.python_path(request) == [str(repo / "src"), str(repo / "vendor"), str(repo)]
    assert build_request({"repo": str(repo), "target": "t.py", "python_path": "vendor:src"}).python_path == \
        ("vendor", "src")
