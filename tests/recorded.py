"""The scale kernel of tests/kernel_repos.py as the in-memory stage kit (tests/kit.py) holds it, and
what the kit's tests of launching stages share: the stages a launching stage needs before it, pytest
runs of the kernel's two rows, both sides' repository runs, and a runtime probe that saw nothing wrong."""
from pathlib import Path

from kvtasks.harness.junit import CaseResult
from kvtasks.records import Facts, Selection
from kvtasks.stages import Context, StageResult, baseline_control, repo_tests
from kvtasks.stages.payloads import GpuClaim, RuntimeCompat
from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, TESTS
from tests.kit import RecordingLauncher, stage_context, target_run

TARGET = "tests/test_scale.py"
BASE = {"kernels/__init__.py": "", "kernels/scale.py": KERNEL, TARGET: TESTS}
HEAD = {"kernels/scale.py": KERNEL_TAIL_BUG}
ROUTE = {"expected_route": "kernels.scale:scale_rows"}
FAILED = "E       AssertionError: \nNot equal to tolerance rtol=1e-07, atol=0\n1 failed, 1 passed"
CASES = ("test_scale[4-16]", "test_scale[3-13]")


def ready() -> dict[str, StageResult]:
    """What a launching stage needs before it runs anything: a claimed device, the runtime
    established (with pytest found), and pytest as the runner."""
    return {"gpu_claim": StageResult(name="gpu_claim", stage=GpuClaim(status="pass"),
                                     facts=Facts(visible_devices={"CUDA_VISIBLE_DEVICES": "0"})),
            "runtime_compat": StageResult(name="runtime_compat", stage=RuntimeCompat(status="pass"),
                                          facts=Facts(pytest_module="site-packages/pytest/__init__.py")),
            "selection": StageResult(name="selection", selection=Selection(runner="pytest"))}


def cases(*outcomes: str, message: str = "") -> list[CaseResult]:
    return [CaseResult(classname="tests.test_scale", name=name, outcome=outcome,
                       message=message if outcome == "failed" else "") for name, outcome in zip(CASES, outcomes)]


def passing(folder: Path, label: str) -> object:
    return target_run(folder, label, cases=cases("passed", "passed"))


def failing(folder: Path, label: str, message: str = FAILED) -> object:
    return target_run(folder, label, exit=1, failures=1, log=message, cases=cases("passed", "failed", message=message))


def after_both_sides(tmp_path: Path, runs: dict, head: dict = HEAD, base: dict = BASE, earlier: dict | None = None,
                     target: str = TARGET, **options) -> tuple[Context, RecordingLauncher]:
    """A context once baseline_control and correctness_repo_tests ran over the recorded runs (base's
    and head's repository runs passing unless `runs` makes them)."""
    launcher = RecordingLauncher({"base-repo": passing(tmp_path, "base-repo"),
                                  "head-repo": passing(tmp_path, "head-repo"), **runs})
    ctx = stage_context(base, head, target=target, earlier=earlier or ready(), launcher=launcher, **{**ROUTE, **options})
    for stage in (baseline_control, repo_tests):
        produced = stage.run(ctx)
        ctx.earlier[produced.name] = produced
    return ctx, launcher


# what an import probe of the kernel package reports when it imports cleanly
SEEN = {"error": "", "traceback": "", "inside_roots": True, "module_path": "/checkout/kernels/__init__.py",
        "module_version": None, "python_executable": "/usr/bin/python3", "python_version": "3.11.7",
        "native_artifacts": [], "pytest": "site-packages/pytest/__init__.py", "distributions": ["numpy==2.0"],
        "editable": {}}
