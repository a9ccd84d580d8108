from kvtasks.request import build_request
from kvtasks.stages import Context
from kvtasks.stages.perf import stage as perf_stage
from kvtasks.stages.perf.entry import _imported_names, choose_entry
from kvtasks.worktree import Worktree
from tests.kernel_repos import make_patch, make_repo
from tests.stages.perf.benches import BENCH, KERNEL, TEST, rounds
from tests.recorded import after_both_sides

HARNESSED = BENCH.replace("import random\n", "import random  # a perftest-style harness\n")
FILES = {"kernels/__init__.py": "", "kernels/op.py": KERNEL, "tests/test_op.py": TEST,
         "bench/bench_op.py": HARNESSED.format(rows=6, extra="pass", control="1.0"),
         "bench/bench_other.py": "# perftest harness for something else\nimport json\n"}
SLOWER = {"kernels/op.py": KERNEL.replace("COST = 1.0", "COST = 1.25")}


def test_the_one_bench_importing_a_changed_module_is_discovered(tmp_path):
    ctx, launcher = after_both_sides(tmp_path, rounds(tmp_path, head_cost=1.25), base=FILES, head=SLOWER,
                                     target="tests/test_op.py", expected_route="")
    perf = perf_stage.run(ctx)
    assert perf.stage.target == "bench/bench_op.py" and perf.stage.target_basis == "discovered-bench"
    assert perf.stage.status == "fail" and launcher.launched("head-perf-1")[1].file == "bench/bench_op.py"


def test_in_a_real_checkout_git_s_grep_of_base_finds_the_one_bench(tmp_path):
    # the test above reads an in-memory worktree's grep_base; this one, git's own, over a real checkout
    repo = make_repo(tmp_path / "perf-repo", FILES)
    request = build_request({"repo": str(repo), "target": "tests/test_op.py",
                             "patch": str(make_patch(repo, SLOWER, tmp_path / "slow.patch"))})
    ctx = Context(request=request, worktree=Worktree(repo, request.patch), run_dir=tmp_path / "run")
    entry = choose_entry(ctx)
    assert (entry.file, entry.basis) == ("bench/bench_op.py", "discovered-bench")


def test_a_bench_imports_what_its_import_lines_name_and_nothing_they_merely_bind():
    source = ("import numpy.testing\nimport kernels as k\nfrom kernels import op\nfrom . import local\n"
              "from .helpers import timer\ncheck = numpy.testing.assert_allclose\n")
    names = _imported_names(source)
    assert {"kernels", "kernels.op", "numpy.testing"} <= names
    assert not names & {"numpy", "local", "helpers", "helpers.timer", "k"}
    assert _imported_names("def broken(:\n") == set()
