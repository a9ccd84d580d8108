"""The launching stages as units: the kit's recording launcher hands each stage passing, failing and
crashed runs, and the stage's result and findings are asserted. No process starts."""
from pathlib import Path

import pytest

from kvtasks.stages import (Context, StageResult, base_oracle, baseline_control, gpu_requirement, repo_tests,
                            runtime_compat)
from kvtasks.stages.payloads import GpuClaim
from kvtasks.worktree import PatchRefused
from tests.kernel_repos import TESTS
from kvtasks.request import Request
from tests.kit import MemoryWorktree, RecordingLauncher, stage_context, target_run
from tests.recorded import BASE, HEAD, ROUTE, SEEN, TARGET, after_both_sides, failing, passing, ready


def validated(tmp_path: Path, runs: dict) -> tuple[list[StageResult], RecordingLauncher]:
    """baseline_control's and correctness_repo_tests' results over the recorded runs."""
    ctx, launcher = after_both_sides(tmp_path, runs)
    return [ctx.earlier[baseline_control.NAME], ctx.earlier[repo_tests.NAME]], launcher


def test_each_side_runs_in_its_own_lend_and_a_passing_head_passes(tmp_path):
    (base, head), launcher = validated(tmp_path, {"base-repo": passing(tmp_path, "base-repo"),
                                                  "head-repo": passing(tmp_path, "head-repo")})
    assert [(side, asked.label) for side, asked in launcher.asked] == [("base", "base-repo"), ("head", "head-repo")]
    assert all(asked.target is None and not asked.grid_rows and asked.corruption is None for _, asked in launcher.asked)
    assert base.stage.status == "pass" and base.stage.repo_tests["state"] == "ran"
    assert head.stage.status == "pass" and head.stage.note == "2 executed, all passed" and head.findings == []


@pytest.mark.parametrize("base_made, head_made, status, rule, severity, said", [
    (passing, failing, "fail", "target.regression", "blocker", "passes on base and fails on head"),
    (failing, failing, "fail", "target.red-on-both-sides", "note", "red on both sides (base: exit 1)"),
    (passing, lambda folder, label: target_run(folder, label, exit=-6, executed=1, log="Fatal Python error: Aborted",
                                               died="by signal SIGABRT in tests/test_scale.py::test_scale[3-13]"),
     "fail", "target.crashed", "blocker", "died on head, by signal SIGABRT in tests/test_scale.py::test_scale[3-13]"),
    (passing, lambda folder, label: target_run(folder, label, exit=None, executed=1, timed_out=True),
     "fail", "target.regression", "blocker", "passes on base and times out on head"),
    (lambda folder, label: target_run(folder, label, exit=None, executed=0, timed_out=True), failing,
     "fail", "target.base-timed-out", "note", "the base run timed out"),
    (passing, lambda folder, label: target_run(folder, label, executed=0, skipped=2),
     "skip", "tests.executed-nothing", "note", "executed no test"),
    (passing, lambda folder, label: target_run(folder, label, exit=5, executed=0, log="no tests ran in 0.01s"),
     "skip", "tests.executed-nothing", "note", "no tests collected: pytest found no test in tests/test_scale.py on "
                                               "head (exit 5)"),
])
def test_who_is_blamed_for_head_s_run_follows_base_s_same_run(tmp_path, base_made, head_made, status, rule,
                                                               severity, said):
    (base, head), _ = validated(tmp_path, {"base-repo": base_made(tmp_path / "base", "base-repo"),
                                           "head-repo": head_made(tmp_path / "head", "head-repo")})
    assert head.stage.status == status
    assert [(finding.rule, finding.severity) for finding in head.findings] == [(rule, severity)]
    assert said in head.findings[0].detail


def test_pytest_refusing_its_command_line_on_head_attributes_nothing(tmp_path):
    refused = target_run(tmp_path, "head-repo", exit=4, executed=0, log="ERROR: file or directory not found")
    (_, head), _ = validated(tmp_path, {"base-repo": passing(tmp_path, "base-repo"), "head-repo": refused})
    assert head.stage.status == "skip" and [finding.rule for finding in head.findings] == ["tests.pytest-refused"]


def test_a_base_run_that_leaves_files_stops_head_from_running(tmp_path):
    launcher = RecordingLauncher({"base-repo": passing(tmp_path, "base-repo")}, leaves={"base-repo": ["kernels/cache.bin"]})
    ctx = stage_context(BASE, HEAD, target=TARGET, earlier=ready(), launcher=launcher, **ROUTE)
    base = baseline_control.run(ctx)
    assert base.stage.status == "skip" and base.stage.artifacts == ["kernels/cache.bin"]
    assert [finding.rule for finding in base.findings] == ["baseline.dirty-after-base"]
    ctx.earlier[base.name] = base
    head = repo_tests.run(ctx)
    assert head.stage.status == "skip" and "baseline control did not pass" in head.stage.note
    assert launcher.labels == ["base-repo"]


def test_a_patch_that_no_longer_applies_skips_head_and_says_so(tmp_path):
    def refused(asked):
        raise PatchRefused("error: patch failed: kernels/scale.py:3")

    (_, head), _ = validated(tmp_path, {"base-repo": passing(tmp_path, "base-repo"), "head-repo": refused})
    assert head.stage.status == "skip" and "patch failed" in head.stage.note
    assert [finding.rule for finding in head.findings] == ["tests.head-not-applied"]


def test_with_no_device_and_no_tier_nothing_is_launched(tmp_path):
    launcher = RecordingLauncher()
    earlier = {**ready(), "gpu_claim": StageResult(name="gpu_claim", stage=GpuClaim(status="skip"))}
    ctx = stage_context(BASE, HEAD, target=TARGET, earlier=earlier, launcher=launcher, **ROUTE)
    base = baseline_control.run(ctx)
    assert base.stage.status == "skip" and "no verified-idle GPU was claimed" in base.stage.note
    assert launcher.asked == []


ORACLE_HEAD = {**HEAD, TARGET: TESTS.replace("def test_scale(M, N):", "def test_scale(M, N):  # looser\n")}


def oracle(tmp_path: Path, oracle_made) -> tuple[StageResult, RecordingLauncher]:
    """base_oracle over a PR that changes the kernel and its test, base's run passing both tests."""
    ctx, launcher = after_both_sides(tmp_path, {"head-baseoracle": oracle_made}, head=ORACLE_HEAD)
    return base_oracle.run(ctx), launcher


def test_the_oracle_runs_head_s_code_under_base_s_test_side_and_blames_a_wrong_value(tmp_path):
    stage, launcher = oracle(tmp_path, failing(tmp_path, "head-baseoracle"))
    side, asked = launcher.launched("head-baseoracle")
    assert side == "head" and asked.target is None
    assert stage.stage.status == "fail" and stage.stage.regressed == ["tests.test_scale::test_scale[3-13]"]
    assert [(finding.rule, finding.severity) for finding in stage.findings] == [("oracle.regression", "blocker")]
    assert "test_scale[3-13]" in stage.findings[0].detail


def test_an_oracle_failure_that_is_no_wrong_value_is_an_api_change(tmp_path):
    message = "TypeError: scale_rows() got an unexpected keyword argument 'out'"
    stage, _ = oracle(tmp_path, failing(tmp_path, "head-baseoracle", message))
    assert stage.stage.api_changed == ["tests.test_scale::test_scale[3-13]"] and not stage.stage.regressed
    assert [(finding.rule, finding.severity) for finding in stage.findings] == [("oracle.api-changed", "should-fix")]


def test_an_oracle_run_that_passes_where_base_passed_passes(tmp_path):
    stage, _ = oracle(tmp_path, passing(tmp_path, "head-baseoracle"))
    assert stage.stage.status == "pass" and stage.findings == [] and stage.stage.kept_at_base == [TARGET]


BROKEN = {**SEEN, "error": "ImportError: cannot import name 'TILE' from 'kernels.scale'",
          "traceback": "Traceback (most recent call last):\nImportError: cannot import name 'TILE'"}
# the interpreter lacks what the kernels import; and a module the checkout itself should hold (its
# absence is the layout's, not the environment's)
MISSING = {**SEEN, "error": "ModuleNotFoundError: No module named 'triton_extras'"}
MISSING_OWN = {**SEEN, "error": "ModuleNotFoundError: No module named 'kernels.fused'"}


@pytest.mark.parametrize("probes, status, rules", [
    ([SEEN], "pass", []),
    ([BROKEN, SEEN], "fail", [("runtime.import-broken", "blocker")]),
    ([BROKEN, BROKEN], "skip", [("runtime.compat-not-established", "note")]),
    ([None], "skip", [("runtime.compat-not-established", "note")]),
    ([MISSING, MISSING], "skip", [("runtime.compat-not-established", "note"), ("environment.incomplete", "note")]),
    ([MISSING_OWN, MISSING_OWN], "skip", [("runtime.compat-not-established", "note")]),
], ids=["imports", "the PR breaks the import", "broken on both sides", "the probe died",
        "a dependency the interpreter lacks", "a module of the checkout itself"])
def test_the_runtime_is_probed_on_head_and_base_is_asked_only_when_head_s_import_fails(probes, status, rules):
    launcher = RecordingLauncher(probes=[(seen, "probe log") for seen in probes])
    earlier = {"gpu_claim": ready()["gpu_claim"]}
    ctx = stage_context(BASE, HEAD, target=TARGET, earlier=earlier, launcher=launcher, runtime_module="kernels")
    probed = runtime_compat.run(ctx)
    assert probed.stage.status == status and [(finding.rule, finding.severity) for finding in probed.findings] == rules
    asked = [(side, launched.module, launched.folder.name) for side, launched in launcher.asked]
    assert asked == [("head", "kernels", "run"), ("base", "kernels", "base")][:len(probes)]
    if status == "pass":
        assert probed.facts.runtime_identity.module == "kernels" and probed.facts.pytest_module == SEEN["pytest"]


@pytest.mark.parametrize("head_made, requirement, rules", [
    (passing, "not-required", ["gpu.ran-without-gpu"]),
    (lambda folder, label: target_run(folder, label, exit=1, failures=1, log="E AssertionError: no GPU visible"),
     "required", []),
    (lambda folder, label: target_run(folder, label, executed=0, skipped=2), "required", []),
    (lambda folder, label: target_run(folder, label, exit=5, executed=0, log="no tests ran in 0.01s"),
     "not-required", []),
], ids=["passes without one", "fails without one", "skips everything without one", "collects no test"])
def test_with_no_gpu_claimed_the_head_run_without_a_device_says_whether_the_target_needs_one(
        tmp_path, head_made, requirement, rules):
    launcher = RecordingLauncher({"head-repo": head_made(tmp_path, "head-repo")})
    earlier = {**ready(), "gpu_claim": StageResult(name="gpu_claim", stage=GpuClaim(status="skip"))}
    ctx = stage_context(BASE, HEAD, target=TARGET, earlier=earlier, launcher=launcher, **ROUTE)
    amended = gpu_requirement.run(ctx)
    assert amended.selection.gpu_requirement == requirement and [f.rule for f in amended.findings] == rules
    # the run was made on head with no device, and is kept for correctness_repo_tests to adopt
    assert launcher.asked[0][0] == "head" and [run.label for run in amended.runs] == ["head-repo"]


@pytest.mark.parametrize("error, base_extra", [
    ("ModuleNotFoundError: No module named 'kernels_ext._C'", {"python/kernels_ext/__init__.py": ""}),
    ("ModuleNotFoundError: No module named 'kernels'", {}),
], ids=["a package under python/ (an extension not built)", "the runtime module itself"])
def test_a_module_the_checkout_or_the_request_names_is_no_missing_dependency(error, base_extra):
    broken = {**SEEN, "error": error}
    launcher = RecordingLauncher(probes=[(broken, "probe log"), (broken, "probe log")])
    ctx = stage_context({**BASE, **base_extra}, HEAD, target=TARGET, earlier={"gpu_claim": ready()["gpu_claim"]},
                        launcher=launcher, runtime_module="kernels")
    assert [finding.rule for finding in runtime_compat.run(ctx).findings] == ["runtime.compat-not-established"]


COLLECTION = ("_____ ERROR collecting tests/test_scale.py _____\nImportError while importing test module "
              "'/checkout/tests/test_scale.py'.\nTraceback:\nE   ModuleNotFoundError: No module named '{}'\n1 error in 0.1s")


def test_a_head_run_failing_for_a_dependency_the_interpreter_lacks_says_so(tmp_path):
    lacking = COLLECTION.format("einops")
    (_, head), _ = validated(tmp_path, {"base-repo": failing(tmp_path / "base", "base-repo", lacking),
                                        "head-repo": failing(tmp_path / "head", "head-repo", lacking)})
    assert [finding.rule for finding in head.findings] == ["target.red-on-both-sides", "environment.incomplete"]
    assert "cannot import 'einops'" in head.findings[1].detail
    # a conftest that cannot import it ends pytest with a usage error: said so too
    conftest = "ImportError while loading conftest '/checkout/tests/conftest.py'.\nE   ModuleNotFoundError: " \
               "No module named 'einops'"
    refused = target_run(tmp_path / "conf" / "head", "head-repo", exit=4, executed=0, log=conftest)
    (_, head), _ = validated(tmp_path / "conf", {"base-repo": passing(tmp_path / "conf", "base-repo"),
                                                 "head-repo": refused})
    assert [finding.rule for finding in head.findings] == ["tests.pytest-refused", "environment.incomplete"]


@pytest.mark.parametrize("log", [
    COLLECTION.format("kernels.fused"),  # a module of the checkout's own: the code's failure
    COLLECTION.format("triton.language.extra.cuda"),  # found in part: a version's matter, not a missing library
    "SKIPPED [1] tests/test_scale.py:3: could not import 'nolib': No module named 'nolib'\n"
    "E   AssertionError: tail\n1 failed, 1 skipped",  # importorskip's words beside a real failure
], ids=["the checkout's module", "a submodule of an installed library", "an importorskip's skip"])
def test_a_failure_that_is_not_a_missing_library_is_not_blamed_on_the_environment(tmp_path, log):
    (_, head), _ = validated(tmp_path, {"base-repo": passing(tmp_path / "base", "base-repo"),
                                        "head-repo": failing(tmp_path / "head", "head-repo", log)})
    assert [finding.rule for finding in head.findings] == ["target.regression"]


def test_the_runtime_module_is_the_regular_package_the_target_imports_before_a_namespace_folder(tmp_path):
    # a quantization library's layout: packaging/ holds build scripts (a namespace package no import
    # reaches past the installed `packaging`), and its tests import `packaging` before the library
    files = {"packaging/build_wheel.py": "", "quant/__init__.py": "", "quant/ops.py": "",
             "tests/test_ops.py": "from packaging import version\nimport quant.ops\n"}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    worktree = MemoryWorktree(files, root=tmp_path)
    request = Request(repo=str(tmp_path), target="tests/test_ops.py")
    ctx = Context(request=request, worktree=worktree, run_dir=tmp_path / "run", earlier={})
    assert runtime_compat.profile(ctx).module == "quant"


def test_a_declared_namespace_package_the_target_imports_wins_over_a_helper_module(tmp_path):
    # a src/ layout whose package has no __init__.py, declared by its packaging, and a root helper
    files = {"pyproject.toml": '[tool.setuptools.packages.find]\nwhere = ["src"]\n', "src/mykern/ops.py": "",
             "helpers.py": "", "tests/test_ops.py": "from mykern.ops import add\nfrom helpers import ref\n"}
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    ctx = Context(request=Request(repo=str(tmp_path), target="tests/test_ops.py"),
                  worktree=MemoryWorktree(files, root=tmp_path), run_dir=tmp_path / "run", earlier={})
    assert runtime_compat.profile(ctx).module == "mykern"
