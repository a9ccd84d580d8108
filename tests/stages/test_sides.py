"""The route and test sides of a PR, decided from fabricated receipts of base's run."""
from types import SimpleNamespace

from kvtasks.stages import sides
from kvtasks.stages.payloads import BaselineControl
from tests.kit import MemoryWorktree
from tests.receipts import receipt


# base's sources: the route's module imports a helper of its own and, through it, the tile sizes
BASE = {"pkg/__init__.py": "", "pkg/ops.py": "from pkg import _impl\n", "pkg/_impl.py": "from .tiles import TILE\n",
        "pkg/tiles.py": "TILE = 64\n", "pkg/checks.py": "ATOL = 1e-5\n", "pkg/unused.py": "",
        "pkg/_lazy.py": "", "tests/test_x.py": "from pkg.checks import ATOL\n"}


def context(changes: dict[str, str], loaded: list[dict] | None, routes=("pkg/ops.py", "pkg/ops/__init__.py"),
            base=BASE):
    runs = [] if loaded is None else [SimpleNamespace(label="base-repo", receipt=receipt(loaded={"modules": loaded}))]
    baseline = SimpleNamespace(runs=runs, stage=SimpleNamespace(note="base control ran"))
    return SimpleNamespace(head_view=SimpleNamespace(changes=changes), route_files=lambda: set(routes),
                           result_of=lambda kind: baseline if kind is BaselineControl else None,
                           request=SimpleNamespace(repo="/nonexistent", python_path=[]),
                           worktree=MemoryWorktree(base))


LOADED = [{"path": "pkg/__init__.py", "during": ""}, {"path": "pkg/ops.py", "during": ""},
          {"path": "pkg/_impl.py", "during": "route-import"}, {"path": "pkg/checks.py", "during": ""},
          {"path": "pkg/_lazy.py", "during": "route-call"}, {"path": "tests/test_x.py", "during": ""},
          {"path": "configs/ops.json", "during": "route-call"}]  # a file a route call opened


def test_the_route_side_is_what_base_ran_for_the_route_and_everything_else_judges():
    changes = {"pkg/ops.py": "M", "pkg/_impl.py": "M", "pkg/_lazy.py": "M", "pkg/__init__.py": "M",
               "pkg/checks.py": "M", "pkg/unused.py": "M", "pkg/new_kernel.py": "A", "pkg/ops.cu": "M",
               "configs/ops.json": "M", "pkg/golden.json": "M", "tests/data/golden.npy": "M", "tolerances.csv": "M",
               "tests/__init__.py": "A",
               ".pytest.ini": "A", "pkg/sitecustomize.py": "A", "csrc/kernel.hip": "M"}
    split = sides.decide(context(changes, LOADED))
    assert sorted(split.route) == ["configs/ops.json", "csrc/kernel.hip", "pkg/__init__.py", "pkg/_impl.py",
                                   "pkg/_lazy.py", "pkg/new_kernel.py", "pkg/ops.cu", "pkg/ops.py"]
    # a golden output beside the kernel that no route call read judges it
    assert sorted(split.test) == [".pytest.ini", "pkg/checks.py", "pkg/golden.json", "pkg/sitecustomize.py",
                                  "pkg/unused.py", "tests/__init__.py", "tests/data/golden.npy", "tolerances.csv"]
    assert split.basis.startswith("observed: base-repo loaded 7 checkout files")
    # the base oracle holds every changed test-side file at base; a target the PR adds runs as head's
    assert split.test_side_changed("tests/__init__.py", target_added=True) == [
        path for path in split.test if path != "tests/__init__.py"]


def test_head_importing_a_helper_does_not_move_it_to_the_route_side():
    """pkg/checks.py is imported by the test on base; whatever head's kernel does with it, base's run decides."""
    split = sides.decide(context({"pkg/ops.py": "M", "pkg/checks.py": "M"}, LOADED))
    assert split.route == ["pkg/ops.py"] and split.test == ["pkg/checks.py"]


def test_what_base_s_route_imports_is_route_side_whoever_imported_it_first():
    """pkg/tiles.py is imported by the route's own helper: the test importing it first changes nothing."""
    first_by_the_test = [{"path": "pkg/tiles.py", "during": ""}, *LOADED]
    split = sides.decide(context({"pkg/tiles.py": "M", "pkg/unused.py": "M"}, first_by_the_test))
    assert split.route == ["pkg/tiles.py"] and split.test == ["pkg/unused.py"]


def test_without_a_receipt_the_route_side_is_the_routes_modules_and_what_they_import():
    split = sides.decide(context({"pkg/ops.py": "M", "pkg/_impl.py": "M", "pkg/checks.py": "M"}, None))
    assert split.route == ["pkg/ops.py", "pkg/_impl.py"] and split.test == ["pkg/checks.py"]
    assert split.basis.startswith("static: no base run's receipt says what it loaded")


def test_without_a_route_everything_outside_the_tests_is_under_test():
    split = sides.decide(context({"pkg/ops.py": "M", "pkg/checks.py": "M", "tests/test_x.py": "M", "setup.cfg": "M"},
                                 LOADED, routes=()))
    assert split.route == ["pkg/ops.py", "pkg/checks.py"] and split.test == ["tests/test_x.py", "setup.cfg"]
    assert split.basis.startswith("no --expected-route")


def test_a_data_file_the_pr_adds_in_the_route_s_folder_is_the_kernel_s():
    # base's run could not have opened a file base did not have: a tuned configuration the PR adds
    # beside the kernel (or below it) is code under test; added data elsewhere still judges
    changes = {"pkg/ops.py": "M", "pkg/tuned.json": "A", "pkg/configs/tuned_mi300.json": "A",
               "tests/data/expected.json": "A", "configs/new.json": "A", "pkg/golden.json": "M"}
    split = sides.decide(context(changes, LOADED))
    assert sorted(split.route) == ["pkg/configs/tuned_mi300.json", "pkg/ops.py", "pkg/tuned.json"]
    assert sorted(split.test) == ["configs/new.json", "pkg/golden.json", "tests/data/expected.json"]
