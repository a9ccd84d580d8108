import pytest

from kvtasks.stages import selection
from kvtasks.stages.selection import classify, runner_risk
from tests.kernel_repos import KERNEL, TESTS, make_patch
from tests.kit import stage_context

KERNEL_FILES = {"kernels/__init__.py": "", "kernels/scale.py": KERNEL, "tests/test_scale.py": TESTS}

PYTEST_FILE = "import pytest\n\n@pytest.mark.parametrize('m', [1])\ndef test_a(m):\n    pass\n"
SCRIPT_FILE = "def run():\n    pass\n\nif __name__ == '__main__':\n    run()\n"
WORKER_FILE = "def test_op(m, n, dtype):\n    pass\n\nif __name__ == '__main__':\n    test_op(1, 2, 'f32')\n"
NEITHER = "X = 1\n"
ARGV_IN_BODY = ("import argparse\nparser = argparse.ArgumentParser()\nargs = parser.parse_args()\n\n"
                "def test_a():\n    pass\n")
ARGV_UNDER_MAIN = ("import argparse\n\ndef test_a():\n    pass\n\nif __name__ == '__main__':\n"
                   "    argparse.ArgumentParser().parse_args()\n")


def selected(head: dict, **options):
    """The selection stage's test selection for a PR to the small kernel repository, in memory (tests/kit.py)."""
    return selection.run(stage_context(KERNEL_FILES, head, **options)).selection


@pytest.mark.parametrize("source,node,runner", [
    (PYTEST_FILE, False, "pytest"),
    ("class TestOps:\n    def test_x(self):\n        pass\n", False, "pytest"),
    (SCRIPT_FILE, False, "script"),
    (WORKER_FILE, False, "script"),
    (NEITHER, False, "none"),
    (NEITHER, True, "pytest"),
    ("def broken(:\n", False, "none"),
])
def test_structural_runner_selection(source, node, runner):
    assert classify(source, node)[0] == runner


def test_worker_functions_are_named_in_the_reason():
    assert "test_op" in classify(WORKER_FILE, False)[1]


def test_runner_risk_names_argv_parsed_in_module_body():
    assert "argv parsed in module body (line 3, parse_args)" in runner_risk(ARGV_IN_BODY)
    assert runner_risk(ARGV_UNDER_MAIN) == ""


def test_forced_runner_records_what_selection_said():
    chosen = selected({"tests/test_argv.py": ARGV_IN_BODY}, target="tests/test_argv.py", runner="script")
    assert chosen.runner == "script" and chosen.runner_basis == "declared-by-caller"
    assert chosen.runner_selected_by_structure == "pytest"
    assert "runner_risk" not in chosen.model_dump(exclude_unset=True)


def test_pytest_selected_module_parsing_argv_carries_the_risk():
    assert "argv parsed in module body" in selected({"tests/test_argv.py": ARGV_IN_BODY},
                                                    target="tests/test_argv.py").runner_risk


def test_target_with_no_runner_is_skip_never_fail(repo, validate, tmp_path):
    patch = make_patch(repo, {"kernels/helpers.py": NEITHER}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "kernels/helpers.py")
    assert result.report["test_selection"]["runner"] == "none"
    assert result.stage("correctness_repo_tests")["status"] == "skip"
    assert result.findings("blocker") == []


def test_a_target_on_neither_side_has_no_runner():
    chosen = selected({"README.md": "docs\n"}, target="tests/test_absent.py")
    assert chosen.runner == "none" and chosen.runner_basis == "target-missing"


def test_a_target_the_pr_deletes_is_run_by_base_s_file():
    # the base run and the base oracle run base's file against head's code: its runner is base's
    chosen = selected({"tests/test_scale.py": None}, target="tests/test_scale.py")
    assert chosen.runner == "pytest" and chosen.runner_reason.startswith("the PR deletes the target; base's file:")
