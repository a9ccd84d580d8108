from tests.kernel_repos import make_patch

ROUTE = ["--expected-route", "kernels.scale:scale_rows", "--shape-vars", "M,N"]
SILENT_SCRIPT = '''import sys

if __name__ == "__main__":
    print("arch not supported here; nothing to do")
    sys.exit(0)
'''


def readme(repo, tmp_path):
    return make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")


def test_pytest_target_reaching_the_route(repo, validate, tmp_path):
    result = validate(repo, "--patch", str(readme(repo, tmp_path)), "--target", "tests/test_scale.py", *ROUTE)
    receipt = result.stage("execution_receipt")
    assert receipt["status"] == "pass"
    assert receipt["route"] == "kernels.scale:scale_rows" and receipt["kernel_symbols"] == ["kernels.scale:scale_rows"]
    assert receipt["route_calls"] == {"kernels.scale:scale_rows": 2}
    assert receipt["executed_shapes"] == ["4,16", "3,13"]  # `from kernels.scale import scale_rows` at import time
    assert len(receipt["receipt_sha256"]) == 64 and receipt["receipt"].endswith("receipt-head-repo.json")
    assert receipt["shape_capture"] == {"requested": ["M", "N"], "observed": 2, "note": ""}
    assert result.stage("correctness_repo_tests")["stats"]["observed_work"] == 2
    assert result.report["arch_coverage"] == {"gfx-test": "runtime"}
    assert "observed_work:2" in result.report["arch_coverage_basis"]["gfx-test"]


def test_silent_script_never_reaching_the_route_earns_nothing(repo, validate, tmp_path):
    patch = make_patch(repo, {"bench/run_scale.py": SILENT_SCRIPT}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "bench/run_scale.py", *ROUTE)
    head = result.stage("correctness_repo_tests")
    assert head["status"] == "pass" and head["stats"]["executed"] == 1 and head["stats"]["observed_work"] == 0
    assert result.report["arch_coverage"] == {}
    receipt = result.stage("execution_receipt")
    assert receipt["status"] == "skip" and "observed nothing" in receipt["note"]
    assert result.verdict == "INCONCLUSIVE"


def test_without_a_route_observed_work_is_null_and_the_receipt_skips(repo, validate, tmp_path):
    result = validate(repo, "--patch", str(readme(repo, tmp_path)), "--target", "tests/test_scale.py")
    assert result.stage("correctness_repo_tests")["stats"]["observed_work"] is None
    assert result.stage("execution_receipt")["note"] == "--expected-route was not supplied, so no route was watched"
    assert result.report["arch_coverage"] == {"gfx-test": "runtime"}


# a receipt without shape vars, or naming a route the target lacks, over recorded runs:
# tests/unit/test_launching_stages_more.py (the probe's unresolved routes: tests/harness/test_probe.py)
def test_a_forged_receipt_from_the_pr_is_not_believed(repo, validate, tmp_path):
    forging_conftest = '''import dataclasses
import sys


def pytest_sessionfinish(session, exitstatus):
    # the probe has a random name, but its code is the same in every run: found by what it holds
    for module in list(sys.modules.values()):
        run = getattr(module, "current", None)
        configuration = getattr(run, "configuration", None)
        if dataclasses.is_dataclass(configuration) and hasattr(configuration, "nonce"):
            run.configuration = dataclasses.replace(configuration, nonce="forged")
'''
    patch = make_patch(repo, {"tests/conftest.py": forging_conftest}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_scale.py", *ROUTE)
    receipt = result.stage("execution_receipt")
    assert receipt["status"] == "skip" and "did not come from this run" in receipt["note"]
