import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from kvtasks.front import cli
from kvtasks.request import validate_request
from kvtasks.stages import selection
from tests.kernel_repos import TESTS, git, make_patch, snapshot
from tests.kit import stage_context
from tests.processes import alive


@pytest.fixture
def patch(repo, tmp_path):
    return make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")


def usage(capsys, argv):
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize("case,argv_of,message", [
    ("missing repo", lambda r, p, o: ["--target", "t.py", "--out", o], "--repo is required"),
    ("missing target", lambda r, p, o: ["--repo", r, "--out", o], "--target is required"),
    ("not a worktree", lambda r, p, o: ["--repo", str(Path(r).parent), "--target", "t.py", "--out", o],
     "is not a git worktree"),
    ("unreadable patch", lambda r, p, o: ["--repo", r, "--target", "t.py", "--patch", p + ".missing", "--out", o],
     "is unreadable"),
    ("head sha not 40 hex", lambda r, p, o: ["--repo", r, "--target", "t.py", "--head-sha", "abc123", "--out", o],
     "40-hex"),
    ("bad runner", lambda r, p, o: ["--repo", r, "--target", "t.py", "--runner", "bash", "--out", o],
     "--runner must be one of"),
    ("target escapes", lambda r, p, o: ["--repo", r, "--target", "../outside.py", "--out", o], "escapes the worktree"),
    ("out inside tree", lambda r, p, o: ["--repo", r, "--target", "t.py", "--out", r + "/report.json"],
     "lies inside the worktree"),
    ("grid arity", lambda r, p, o: ["--repo", r, "--target", "t.py", "--shape-argnames", "M,N", "--grid", "1,2,3",
                                    "--out", o], "--shape-argnames names 2"),
    ("capability", lambda r, p, o: ["--repo", r, "--target", "t.py", "--cpu-device-capability", "sm90", "--out", o],
     "--cpu-device-capability must be MAJOR.MINOR"),
    ("python path escapes", lambda r, p, o: ["--repo", r, "--target", "t.py", "--python-path", "../x", "--out", o],
     "--python-path '../x' must be a folder inside the checkout"),
    ("python path missing", lambda r, p, o: ["--repo", r, "--target", "t.py", "--python-path", "lib", "--out", o],
     "--python-path 'lib' is not a folder of the checkout"),
])
def test_usage_errors_exit_64_with_one_line_and_no_report(case, argv_of, message, repo, patch, home, tmp_path, capsys):
    out = tmp_path / "report.json"
    before = snapshot(repo)
    code, err = usage(capsys, argv_of(str(repo), str(patch), str(out)))
    assert code == 64, case
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()
    assert not (home / "reports").exists()
    assert snapshot(repo) == before


@pytest.mark.parametrize("variable,value,message", [
    ("TIMEOUT", "0", "TIMEOUT must be a positive integer"),
    ("PERF_REPEAT", "-3", "PERF_REPEAT must be a positive integer"),
    ("PERF_MIN_ROWS", "two", "PERF_MIN_ROWS must be a positive integer"),
    ("PERF_TIMEOUT", "1.5", "PERF_TIMEOUT must be a positive integer"),
    ("PERF_THRESHOLD", "2.5", "PERF_THRESHOLD must be in (0, 2]"),
    ("PERF_THRESHOLD", "0", "PERF_THRESHOLD must be in (0, 2]"),
    ("PYTHON_BIN", "/nonexistent/python", "not an executable interpreter"),
    ("KVTASKS_IDLE_SAMPLES", "many", "KVTASKS_IDLE_SAMPLES must be a positive integer"),
])
def test_bad_host_settings_are_usage_errors(variable, value, message, repo, home, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(variable, value)
    out = tmp_path / "report.json"
    code, err = usage(capsys, ["--repo", str(repo), "--target", "tests/test_scale.py", "--out", str(out)])
    assert code == 64 and len(err) == 1 and message in err[0]
    assert not out.exists()


def test_empty_and_non_patch_files_are_usage_errors(repo, home, tmp_path, capsys):
    for content, message in [(b"", "is empty"), (b"just some words\n", "is not a patch")]:
        bogus = tmp_path / "bogus.patch"
        bogus.write_bytes(content)
        code, err = usage(capsys, ["--repo", str(repo), "--target", "t.py", "--patch", str(bogus)])
        assert code == 64 and message in err[0]


def test_dash_led_values_are_accepted_both_ways(tmp_path):
    for flags in (["--shape-arg", "--shapes"], ["--shape-arg=--shapes"]):
        given, _ = cli.parse_validation(["--repo", str(tmp_path), "--target", "tests/test_scale.py", "--quiet", *flags])
        request = validate_request(given)
        # the report's test_selection is the selection stage's, which copies the request's value
        chosen = selection.run(stage_context({"tests/test_scale.py": TESTS}, target=request.target,
                                             shape_arg=request.shape_arg))
        assert request.shape_arg == chosen.selection.shape_arg == "--shapes"


def test_schema_subcommand_prints_the_report_schema(capsys):
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    stages = schema["$defs"]["Stages"]
    assert set(stages["required"]) == {"merge_sim", "gpu_claim", "runtime_compat", "test_policy",
                                       "baseline_control", "correctness_repo_tests", "correctness_grid",
                                       "sensitivity", "execution_receipt"}
    assert {"verdict", "process_exit_code", "repo", "stages", "findings"} <= set(schema["required"])


def test_report_validates_against_the_exported_schema(repo, validate, tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    result = validate(repo, "--target", "tests/test_scale.py")
    cli.main(["schema"])
    jsonschema.validate(result.report, json.loads(capsys.readouterr().out))


def test_summary_is_written_beside_the_report_and_printed(repo, home, tmp_path, capsys):
    out = tmp_path / "out" / "validation_report.json"
    code = cli.main(["--repo", str(repo), "--target", "tests/test_scale.py", "--out", str(out), "--label", "pr-7"])
    printed = capsys.readouterr().out
    summary = (out.parent / "summary.md").read_text()
    assert "**INCONCLUSIVE**" in summary and "| correctness_repo_tests | pass |" in summary
    assert "**INCONCLUSIVE**" in printed
    assert (home / "reports" / "pr-7" / "validation_report.json").is_file()
    assert code == 2


def test_the_default_out_from_inside_the_worktree_goes_only_to_the_workspace(repo, home, monkeypatch, capsys):
    monkeypatch.chdir(repo / "tests")  # a common habit: running from inside the checkout
    before = snapshot(repo)
    code = cli.main(["--repo", str(repo), "--target", "tests/test_scale.py", "--label", "inside", "--quiet"])
    published = home / "reports" / "inside" / "validation_report.json"
    said = [line for line in capsys.readouterr().err.splitlines() if "validation_report.json" in line]
    assert said == [f"validate-kernel-pr: ./validation_report.json would lie inside the worktree, so the report is "
                    f"written only to {published}"]
    assert code == json.loads(published.read_text())["process_exit_code"] == 2  # INCONCLUSIVE, not a usage error
    assert snapshot(repo) == before
    # the caller naming that same path is still told no
    assert usage(capsys, ["--repo", str(repo), "--target", "tests/test_scale.py", "--out", "validation_report.json"]) \
        == (64, ["validate-kernel-pr: error: --out 'validation_report.json' lies inside the worktree; the next run "
                "would find it dirty"])


def test_a_stale_report_never_survives_a_new_run(repo, home, tmp_path, capsys):
    out = tmp_path / "validation_report.json"
    out.write_text('{"verdict": "PASS"}')
    cli.main(["--repo", str(repo), "--target", "tests/test_scale.py", "--out", str(out), "--quiet"])
    assert json.loads(out.read_text())["verdict"] != "PASS"


SLOW_TEST = '''import os
import time


def test_slow():
    with open("{marker}." + os.environ["VALIDATION_PHASE"], "w") as marker:
        marker.write(str(os.getpid()))
    time.sleep(60)
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("phase", ["base-repo", "head-repo"])
def test_signal_mid_run_hands_the_tree_back_byte_identical(sig, phase, repo, home, tmp_path, idle_gpu):
    marker = tmp_path / "started"
    slow_test = SLOW_TEST.format(marker=marker)
    patch = make_patch(repo, {"tests/test_slow.py": slow_test, "kernels/scale.py": None}, tmp_path / "pr.patch")
    if phase == "base-repo":
        (repo / "tests/test_slow.py").write_text(slow_test)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "slow test on base")
        patch = make_patch(repo, {"kernels/scale.py": None}, tmp_path / "pr.patch")
    before = snapshot(repo)
    out = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "kvtasks", "--repo", str(repo), "--patch", str(patch),
                             "--target", "tests/test_slow.py", "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reached = Path(f"{marker}.{phase}")
    deadline = time.monotonic() + 60
    while not reached.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the target never started"
        time.sleep(0.05)
    if phase == "head-repo":
        assert not (repo / "kernels/scale.py").exists()  # the patch really was applied
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "the worktree was restored" in err
    assert not alive(int(reached.read_text()))  # the target did not outlive the validator
    assert snapshot(repo) == before
    assert not out.exists()


def test_version_names_the_tool_and_the_report_schema(capsys):
    from kvtasks import __version__, report

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"validate-kernel-pr {__version__} (report schema {report.SCHEMA_VERSION})"


@pytest.mark.parametrize("verdicts,code,fail_on,gated", [
    (["INCONCLUSIVE"], 2, "inconclusive", 2), (["INCONCLUSIVE"], 2, "needs_work", 0),
    (["NEEDS_WORK"], 1, "needs_work", 1), (["NEEDS_WORK"], 1, "block", 0), (["BLOCK"], 1, "block", 1),
    (["PASS", "BLOCK"], 1, "block", 1), (["PASS"], 0, "block", 0),
])
def test_fail_on_sets_the_least_severe_verdict_that_fails(verdicts, code, fail_on, gated):
    assert cli.gate_code([{"verdict": verdict, "findings": []} for verdict in verdicts], code, fail_on) == gated


@pytest.mark.parametrize("fail_on", ["inconclusive", "needs_work", "block"])
def test_a_run_that_lacked_the_repository_s_dependencies_fails_under_every_fail_on(fail_on):
    incomplete = {"verdict": "INCONCLUSIVE", "findings": [{"rule": "environment.incomplete"}]}
    assert cli.gate_code([incomplete], 2, fail_on) == 2
    assert cli.gate_code([{**incomplete, "findings": [{"rule": "gpu.not-claimed"}]}], 2, "needs_work") == 0


def test_doit_words_and_flags_are_one_spelling_and_a_flags_value_stays_a_value():
    words, words_output = cli.parse_validation(["repo=/r", "no_network=1", "sandbox=0", "--tol-table", "f32=1e-5",
                                                "quiet=1", "demo=clean-fix"], demo=True)
    flags, flags_output = cli.parse_validation(["--repo", "/r", "--no-network", "--tol-table=f32=1e-5", "--quiet",
                                                "--demo", "clean-fix"], demo=True)
    assert words == flags and words_output == flags_output
    assert (words["repo"], words["no_network"], words["sandbox"], words["tol_table"], words["demo"]) == \
        ("/r", True, False, "f32=1e-5", "clean-fix") and words_output["quiet"]


def test_format_json_is_the_only_thing_on_stdout(repo, home, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the flag form's report copy goes to ./validation_report.json, never the project's
    code = cli.main(["validate", f"repo={repo}", "--target", "tests/test_scale.py", "--label", "machine",
                     "--format", "json", "--fail-on", "needs_work"])
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"][0]["verdict"] == "INCONCLUSIVE" and summary["exit"] == code == 0
    assert summary["schema_version"] == json.loads((home / "reports" / "machine" / "validation_report.json")
                                                   .read_text())["schema_version"]
    assert all(set(finding) == {"rule", "severity", "stage"} for finding in summary["reports"][0]["findings"])
    # a contract with its own schema: what was printed is valid against `schema --summary`
    assert cli.main(["schema", "--summary"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$id"].endswith(summary["schema_version"])
    jsonschema.validate(summary, schema)
    assert summary["reports"][0]["decided_by"].startswith("required stages short of pass")


def test_a_target_whose_dependency_is_missing_is_not_green_under_any_fail_on(repo, tmp_path, idle_gpu, capsys):
    # base's package imports a library this interpreter lacks: nothing can be tested, and saying so
    # must fail the CI gate whatever --fail-on lets pass
    (repo / "kernels" / "__init__.py").write_text("import kvtasks_absent_dependency  # noqa: F401\n")
    git(repo, "commit", "-qam", "a dependency the runner lacks")
    patch = make_patch(repo, {"README.md": "docs\n"}, tmp_path / "docs.patch")
    out = tmp_path / "report.json"
    code = cli.main(["--repo", str(repo), "--patch", str(patch), "--target", "tests/test_scale.py", "--out", str(out),
                     "--quiet", "--runtime-module", "kernels", "--fail-on", "block"])
    report = json.loads(out.read_text())
    assert report["verdict"] == "INCONCLUSIVE" and code == 2
    said = [f["detail"] for f in report["findings"] if f["rule"] == "environment.incomplete"]
    assert said and "cannot import 'kvtasks_absent_dependency'" in said[0]
