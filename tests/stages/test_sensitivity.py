"""sensitivity: whole validations of a suite that can fail, four that cannot, a batch of PRs that make
one insensitive and share base's corrupted run, an out-argument kernel and a route returning
integers; on recorded runs, how a corrupted run is judged and whom such a PR's blame falls on."""
import json
from types import SimpleNamespace

import pytest

from kvtasks.evidence import keys
from kvtasks.front import cli
from kvtasks.run import pipeline
from kvtasks.request import build_request
from kvtasks.stages import sensitivity, test_policy
from kvtasks.harness.junit import ExecutionStats
from kvtasks.harness.target_run import TargetRun
from kvtasks.evidence.store import Store
from tests.batches import doit, reports
from tests.kernel_repos import make_patch
from tests.receipts import receipt
from tests.recorded import after_both_sides
from tests.sensitivity_repos import HEADER, HELPERS, HELPERS_SELF_REFERENCE, OPS, OPS_REFACTORED, TESTS, \
    sensitivity_repo

ROUTE = ["--expected-route", "kernels.ops:scale", "--shape-vars", "M,N"]
GRID = ["--shape-env", "SENS_SHAPES", "--grid", "3,5;16,33"]
CANNOT_FAIL = "the tests pass with kernels.ops:scale's output corrupted: they cannot detect a wrong kernel here"


@pytest.fixture
def sens(tmp_path):
    return sensitivity_repo(tmp_path / "sens")


def docs(repo, tmp_path):
    return str(make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch"))


def test_a_tight_suite_fails_when_corrupted_and_pass_stays_reachable(sens, validate, tmp_path):
    result = validate(sens, "--patch", docs(sens, tmp_path), "--target", "tests/test_good.py", *ROUTE, *GRID,
                      "--sensitivity-mode", "both")
    stage = result.stage("sensitivity")
    assert stage["status"] == "pass" and stage["modes_run"] == ["tail", "nan"]
    assert stage["corrupted_run"] == "head-grid"  # the grid's cells, not only the repo defaults
    tail, nan = stage["modes"]["tail"], stage["modes"]["nan"]
    assert tail["corrupted_calls"] == 2 and tail["tests_failed_count"] == 2 and tail["max_relative_error"] > 1
    assert nan["nan_elements"] == 3 * 5 + 16 * 33 and nan["max_relative_error"] is None
    assert result.verdict == "PASS" and result.code == 0
    assert "| sensitivity | pass |" in (tmp_path / "out" / "summary.md").read_text()


@pytest.mark.parametrize("name", ["self", "swallow", "loose", "shape"])
def test_a_suite_that_cannot_fail_is_sensitivity_fail_and_never_pass(sens, validate, tmp_path, name):
    result = validate(sens, "--patch", docs(sens, tmp_path), "--target", f"tests/test_{name}.py", *ROUTE, *GRID)
    stage = result.stage("sensitivity")
    assert stage["status"] == "fail" and stage["note"].startswith(CANNOT_FAIL)
    assert stage["modes"]["tail"]["tests_green_count"] == 2 and stage["modes"]["tail"]["tests_failed_count"] == 0
    # everything else passed: the sensitivity run alone keeps this suite from PASS
    assert [n for n in pipeline.REPORT.required if result.stage(n)["status"] != "pass"] == ["sensitivity"]
    assert result.verdict == "INCONCLUSIVE"
    notes = [f["detail"] for f in result.findings("note") if f["stage"] == "sensitivity"]
    assert notes and notes[0].startswith(CANNOT_FAIL) and "about the repository, not the PR" in notes[0]


@pytest.mark.parametrize("name,route,flags,status,reason", [
    ("into", "scale_into", [], "skip", "the route returns nothing it produced (returned nothing (None) x1); name "
                                       "the argument it writes its output into with --sensitivity-output NAME"),
    ("into", "scale_into", ["--sensitivity-output", "out"], "pass", "1 tests that saw a corrupted call failed"),
    ("hist", "histogram", [], "skip", "the route's output is not floating (returned int64 ndarray x1): there is "
                                      "nothing to corrupt"),
])
def test_what_the_route_produces_decides_what_is_corrupted(sens, validate, name, route, flags, status, reason):
    result = validate(sens, "--target", f"tests/test_{name}.py", "--expected-route", f"kernels.ops:{route}",
                      "--shape-vars", "M,N", *flags)
    stage = result.stage("sensitivity")
    assert stage["status"] == status and reason in stage["note"]
    assert result.stage("correctness_repo_tests")["status"] == "pass"  # the uncorrupted run was green
    assert "sensitivity" not in result.report["arch_coverage_basis"].get("gfx-test", "")


@pytest.mark.parametrize("flags,message", [
    (["--sensitivity-mode", "tails"], "--sensitivity-mode must be one of tail, nan, both"),
    (["--sensitivity-error", "0"], "--sensitivity-error must be a positive relative error"),
    (["--sensitivity-error", "nan"], "--sensitivity-error must be a positive relative error"),
    (["--sensitivity-error", "0.1", "--sensitivity-mode", "nan"], "--sensitivity-mode nan makes no tail run"),
    (["--sensitivity-output", "out[0]"], "--sensitivity-output must name one argument"),
])
def test_bad_sensitivity_flags_are_usage_errors(sens, capsys, flags, message):
    assert cli.main(["--repo", str(sens), "--target", "tests/test_good.py", *flags]) == 64
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_how_the_output_is_corrupted_is_part_of_the_head_key(sens):
    def head_key(**options):
        return keys.head_key("b" * 64, "p" * 64, build_request({"repo": str(sens), "target": "t.py", **options}))
    assert len({head_key(), head_key(sensitivity_mode="both"), head_key(sensitivity_error="0.01"),
                head_key(sensitivity_output="out")}) == 4


# -- judging, on recorded runs ---------------------------------------------------------------------

def _recorded(exit_code=0, timed_out=False, label="head-sensitivity-tail", **seen):
    sensitivity = {"corrupted_calls": 2, "max_relative_error": 1.5, "tests_failed": [], "tests_failed_count": 0,
                   "tests_green": [], "tests_green_count": 0, "corrupted_outside_tests": 0, **seen}
    return TargetRun(label=label, runner="pytest", command=[], exit=exit_code, timed_out=timed_out,
                     duration_s=1.0, log="", stats=ExecutionStats(),
                     receipt=receipt(route_calls={"kernels.ops:scale": 2}, sensitivity=sensitivity))


@pytest.mark.parametrize("run,status,reason", [
    (_recorded(0, corrupted_outside_tests=2), "fail", "0 tests passed with 2 corrupted calls, 2 of them outside any test"),
    (_recorded(1, corrupted_outside_tests=2), "pass", "0 tests that saw a corrupted call failed"),
    (_recorded(1, tests_green_count=2), "skip", "no test that saw a corrupted call failed"),
    (_recorded(0), "skip", "every test that saw a corrupted call was skipped"),
    (_recorded(None, timed_out=True), "skip", "timed out"),
    (_recorded(1, max_relative_error=0.0, tests_failed_count=1), "skip", "rounds away"),
])
def test_a_corrupted_run_counts_only_when_the_corruption_explains_it(sens, run, status, reason):
    ctx = SimpleNamespace(request=build_request({"repo": str(sens), "target": "tests/test_good.py",
                                                 "sensitivity_error": "1e-9"}))
    judged, why, _ = sensitivity.judge_run(ctx, "tail", run)
    assert (judged, reason in why) == (status, True), why


# the repository of sensitivity_repo, held in memory: the helper PR's runs are recorded; that this helper
# really leaves head's suite green and base's red when corrupted is shown by the batch test below
SENS_BASE = {"kernels/__init__.py": "", "kernels/ops.py": OPS, "tests/helpers.py": HELPERS,
             "tests/test_good.py": HEADER + TESTS["good"]}


# the same blame without a kernel change is a blocker: tests/unit/test_launching_stages_more.py
def test_a_pr_that_makes_a_sensitive_suite_insensitive_and_changes_the_kernel_is_should_fix(tmp_path):
    runs = {"head-sensitivity-tail": _recorded(0, tests_green_count=2),
            "base-sensitivity-tail": _recorded(1, label="base-sensitivity-tail", tests_failed_count=1)}
    ctx, _ = after_both_sides(tmp_path, runs, head={"tests/helpers.py": HELPERS_SELF_REFERENCE, "kernels/ops.py":
                                                    OPS_REFACTORED}, base=SENS_BASE, target="tests/test_good.py",
                              expected_route="kernels.ops:scale")
    stage = sensitivity.run(ctx)
    # the helper the target imports is the suite's change; the route's own module is not
    assert stage.stage.status == "fail" and stage.stage.test_changes == ["tests/helpers.py"]
    assert stage.stage.base["status"] == "pass" and stage.stage.base["modes"]["tail"]["tests_failed_count"] == 1
    assert test_policy.run(ctx).stage.status == "pass"  # no tolerance or comparison count moved
    assert [(finding.rule, finding.severity) for finding in stage.findings] == [("sensitivity.lost-on-head",
                                                                                 "should-fix")]
    blamed = stage.findings[0].detail
    assert blamed.startswith("the suite detects a corrupted kernels.ops:scale on base and not on head")
    assert "changes no kernel code" not in blamed


def test_base_corrupted_run_is_base_evidence_shared_by_a_batch(sens, home, tmp_path, idle_gpu):
    # three PRs that each make the suite unable to fail: base's corrupted run depends on base alone
    variants = {"self": HELPERS_SELF_REFERENCE,
                "copy": HELPERS_SELF_REFERENCE.replace("np.asarray(got)", "np.array(got)"),
                "same": HELPERS_SELF_REFERENCE.replace("want = np.asarray(got)", "want = got")}
    manifest = tmp_path / "batch.json"
    manifest.write_text(json.dumps({
        "repo": str(sens), "target": "tests/test_good.py", "expected_route": "kernels.ops:scale", "shape_vars": "M,N",
        "no_perf": True, "prs": [{"label": name, "patch": str(make_patch(sens, {"tests/helpers.py": helpers},
                                                                          tmp_path / f"{name}.patch"))}
                                 for name, helpers in variants.items()]}))
    done = doit(home, "batch", f"manifest={manifest}")
    assert done.returncode == 1, done.stderr[-2000:]
    bases = {}
    for name, published in reports(home, variants).items():
        sensitivity = published["stages"]["sensitivity"]
        assert published["verdict"] == "BLOCK" and sensitivity["status"] == "fail"
        bases[name] = sensitivity["base"]["modes"]["tail"]
        assert bases[name]["status"] == "pass" and bases[name]["tests_failed_count"] == 1
    # each base key runs base corrupted once, in whichever PR's head ran first; every other PR with that key
    # reuses it and says from which
    store = Store(home / "cache")
    base_keys = {name: store.label(name)["base_key"] for name in variants}
    assert len(set(base_keys.values())) < len(variants), base_keys
    launched = [row["label"] for row in store.launches() if row["run"] == "base-sensitivity-tail"]
    for key in set(base_keys.values()):
        sharing = [name for name in variants if base_keys[name] == key]
        made = [name for name in sharing if name in launched]
        assert len(made) == 1 and launched.count(made[0]) == 1 and "reused_from" not in bases[made[0]]
        for name in set(sharing) - set(made):
            assert bases[name]["reused_from"]["written_by"] == made[0]
            assert bases[name]["reused_from"]["evidence"].startswith("base-sensitivity:")
