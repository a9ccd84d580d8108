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
