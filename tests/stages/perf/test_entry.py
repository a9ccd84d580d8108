from kvtasks.stages.perf.entry import _imported_names
from tests.kernel_repos import make_patch, make_repo
from tests.stages.perf.benches import BENCH, KERNEL, TEST


def test_the_one_bench_importing_a_changed_module_is_discovered(tmp_path, validate):
    harnessed = BENCH.replace("import random\n", "import random  # a perftest-style harness\n")
    repo = make_repo(tmp_path / "perf-repo", {
        "kernels/__init__.py": "", "kernels/op.py": KERNEL, "tests/test_op.py": TEST,
        "bench/bench_op.py": harnessed.format(rows=6, extra="pass", control="1.0"),
        "bench/bench_other.py": "# perftest harness for something else\nimport json\n",
    })
    patch = make_patch(repo, {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")}, tmp_path / "slow.patch")
    perf = validate(repo, "--patch", str(patch), "--target", "tests/test_op.py").stage("perf")
    assert perf["target"] == "bench/bench_op.py" and perf["target_basis"] == "discovered-bench"
    assert perf["status"] == "fail"


def test_a_bench_imports_what_its_import_lines_name_and_nothing_they_merely_bind():
    source = ("import numpy.testing\nimport kernels as k\nfrom kernels import op\nfrom . import local\n"
              "from .helpers import timer\ncheck = numpy.testing.assert_allclose\n")
    names = _imported_names(source)
    assert {"kernels", "kernels.op", "numpy.testing"} <= names
    assert not names & {"numpy", "local", "helpers", "helpers.timer", "k"}
    assert _imported_names("def broken(:\n") == set()
