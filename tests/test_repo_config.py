"""A kernel repository that says how it is validated ([tool.kvtasks] in its pyproject.toml): a PR given
by refs with no --target gets the targets its changed files map to, one report each and a PR report
with the worst verdict; a PR touching no mapped file is the usage error; base's configuration is the
one used, and a PR that changes it is told so."""
import json
import subprocess
import sys

import pytest

from kvtasks.evidence.workspace import Workspace
from kvtasks.front import cli, front_doors, graph
from kvtasks.run import check, session
from kvtasks.request import Request, repo_config, validate_request
from kvtasks.stages import Context, selection
from kvtasks.stages.policy.criteria import parse_tol_table
from kvtasks.errors import UsageError
from kvtasks.worktree import Worktree
from tests.kernel_repos import KERNEL, KERNEL_TAIL_BUG, TESTS, git, make_repo, write_files
from tests.kit import stage_context

CONFIG = '''[project]
name = "kernels"

[tool.kvtasks]
no_perf = true

[tool.kvtasks.targets.scale]
target = "tests/test_scale.py"

[tool.kvtasks.targets.double]
target = "tests/test_double.py"
runner = "pytest"

[tool.kvtasks.map]
"kernels/scale.py" = ["scale"]
"kernels/double.py" = "double"
"kernels/common.py" = ["scale", "double"]
'''
DOUBLE_TESTS = TESTS.replace("scale_rows(x, 2.0)", "double_rows(x)").replace(
    "from kernels.scale import scale_rows", "from kernels.double import double_rows").replace("test_scale", "test_double")
DOUBLE = "from kernels.scale import scale_rows\nfrom kernels.common import FACTOR\n\n\ndef double_rows(x):\n" \
         "    return scale_rows(x, FACTOR)\n"


def branch(repo, name: str, files: dict) -> None:
    git(repo, "checkout", "-q", "-b", name, "main")
    write_files(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", name)
    git(repo, "checkout", "-q", "main")


@pytest.fixture
def configured(tmp_path):
    repo = make_repo(tmp_path / "configured", {
        "pyproject.toml": CONFIG, "kernels/__init__.py": "", "kernels/scale.py": KERNEL,
        "kernels/common.py": "FACTOR = 2.0\n", "kernels/double.py": DOUBLE,
        "tests/test_scale.py": TESTS, "tests/test_double.py": DOUBLE_TESTS, "README.md": "kernels\n"})
    branch(repo, "tail-bug", {"kernels/scale.py": KERNEL_TAIL_BUG})
    branch(repo, "common", {"kernels/common.py": "FACTOR = 2.0  # the factor both kernels use\n",
                            "kernels/scale.py": KERNEL_TAIL_BUG})
    branch(repo, "docs", {"README.md": "kernels, documented\n"})
    branch(repo, "mixed", {"kernels/scale.py": KERNEL_TAIL_BUG, "csrc/scale.cu": "// the CUDA build of scale\n"})
    branch(repo, "unmapped", {"README.md": "kernels, documented\n", "kernels/__init__.py": "VERSION = 2\n",
                              "setup.py": "from setuptools import setup\n\nsetup()\n"})
    branch(repo, "own-config", {"README.md": "docs\n",
                                "pyproject.toml": CONFIG.replace('"kernels/scale.py" = ["scale"]', '"nothing" = []')})
    return repo


def by_refs(repo, head_ref: str, *flags: str) -> int:
    return cli.main(["--repo", str(repo), "--base-ref", "main", "--head-ref", head_ref, "--label", head_ref,
                     "--quiet", *flags])


def report(home, label: str) -> dict:
    return json.loads((home / "reports" / label / "validation_report.json").read_text())


def requests_by_refs(repo, head_ref: str, tmp_path, monkeypatch, **flags) -> list[Request]:
    """The requests the front door resolves for a PR given by refs, as `by_refs` asks: what the
    configuration decides is decided here, before the graph is built, so nothing is held or run."""
    monkeypatch.setattr(session, "hold_worktrees", lambda requests: None)
    monkeypatch.setattr(graph, "loader_namespace", lambda requests, *args, **kwargs: {graph.REQUESTS: requests})
    given = {"repo": str(repo), "base_ref": "main", "head_ref": head_ref, "label": head_ref, **flags}
    return front_doors.validation(Workspace(tmp_path / "home"), given)[graph.REQUESTS]


# what such a request makes of a run end to end (the tail bug blocks, the configuration's no_perf skips
# the timing): test_two_targets_give_two_reports_and_the_worst_verdict
def test_the_target_comes_from_the_changed_files(configured, tmp_path, monkeypatch):
    [chosen] = requests_by_refs(configured, "tail-bug", tmp_path, monkeypatch)
    assert (chosen.target, chosen.label) == ("tests/test_scale.py", "tail-bug")
    assert chosen.no_perf  # the configuration's default applied
    assert chosen.unvalidated_changes == ()  # a PR of mapped files alone carries none


def test_two_targets_give_two_reports_and_the_worst_verdict(configured, home, idle_gpu, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = by_refs(configured, "common", "--format", "json")
    scale, double = report(home, "common.scale"), report(home, "common.double")
    assert scale["test_selection"]["target"] == "tests/test_scale.py" and scale["verdict"] == "BLOCK"
    assert "unvalidated_changes" not in scale["test_selection"]  # the PR changes mapped files alone
    # the configuration's defaults reach the run: no_perf skips the timing
    assert scale["stages"]["perf"]["status"] == "skip" and "--no-perf" in scale["stages"]["perf"]["note"]
    assert double["test_selection"]["target"] == "tests/test_double.py"
    pr = json.loads((home / "reports" / "common" / "pr_report.json").read_text())
    assert pr["verdict"] == "BLOCK" and set(pr["targets"]) == {"scale", "double"} and code == 1
    posted = (home / "reports" / "common" / "comment.md").read_text()
    assert posted.startswith("## kvtasks: **BLOCK** for `common`, the worst of 2 targets")
    assert posted.count("### Target: **BLOCK** for `common.") == 2  # double_rows calls the tail-bugged scale_rows


def test_a_pr_touching_no_mapped_file_is_the_usage_error(configured, home, idle_gpu, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CI", raising=False)  # an interactive command (in CI: tests/test_github_actions.py)
    code = by_refs(configured, "docs")
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 64 and len(said) == 1
    assert "the PR changes README.md" in said[0] and "kernels/scale.py -> scale" in said[0]
    assert not (home / "reports").exists()


def test_a_pr_changing_what_no_target_validates_is_never_nothing_to_validate(configured, home, idle_gpu, tmp_path,
                                                                            capsys, monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step-summary.md"))
    # even where the gate lets INCONCLUSIVE pass: nothing of the PR was tested
    code = by_refs(configured, "unmapped", "--fail-on", "block")
    said = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(said) == 1 and said[0].startswith("validate-kernel-pr: error: not validated: the PR "
                                                               "changes kernels/__init__.py, setup.py, which no target")
    pr = json.loads((home / "reports" / "unmapped" / "pr_report.json").read_text())
    assert pr["verdict"] == "INCONCLUSIVE" and pr["unreached"] == ["kernels/__init__.py", "setup.py"]  # not README.md
    posted = (home / "reports" / "unmapped" / "comment.md").read_text()
    assert posted.startswith("## kvtasks: **INCONCLUSIVE** for `unmapped`: nothing of it was validated")
    assert (tmp_path / "step-summary.md").read_text() == posted + "\n"
    # documentation alone is nothing to validate
    assert by_refs(configured, "docs") == 0
    assert json.loads((home / "reports" / "docs" / "pr_report.json").read_text())["verdict"] is None


def test_what_a_pr_changes_beside_its_mapped_files_is_named_and_keeps_the_report_from_pass(configured, home, idle_gpu):
    by_refs(configured, "mixed")
    chosen = report(home, "mixed")
    assert chosen["test_selection"]["target"] == "tests/test_scale.py"
    assert chosen["test_selection"]["unvalidated_changes"] == ["csrc/scale.cu"]
    [said] = [f for f in chosen["findings"] if f["rule"] == "config.not-validated"]
    assert said["severity"] == "note" and "csrc/scale.cu, which no target of base's map validates" in said["detail"]
    assert chosen["verdict"] == "BLOCK"  # the tail bug the mapped target caught still blocks


def test_no_pass_while_a_changed_file_is_validated_by_no_target():
    from types import SimpleNamespace

    ctx = stage_context({"tests/test_x.py": "def test_x():\n    pass\n"}, target="tests/test_x.py",
                        unvalidated_changes=("csrc/scale.cu",))
    decided = selection.run(ctx)
    assert decided.selection.unvalidated_changes == ["csrc/scale.cu"]
    assert [f.rule for f in decided.findings] == ["config.not-validated"]
    shown = SimpleNamespace(expected_route="kernels.scale:scale_rows", shape_vars="M,N", runner="pytest")
    assert selection.passes(SimpleNamespace(test_selection=SimpleNamespace(**vars(shown), unvalidated_changes=None))) == []
    assert selection.passes(SimpleNamespace(test_selection=SimpleNamespace(**vars(shown), unvalidated_changes=[
        "csrc/scale.cu"]))) == ["the PR changes csrc/scale.cu, which no target validates"]


def test_what_no_target_validates_is_any_file_but_documentation_ci_and_what_base_maps_to_no_target():
    config = repo_config.RepoConfig(file="pyproject.toml", targets={"scale": {}},
                                    map={"kernels/scale.py": ["scale"], "examples/*": []})
    changed = ["README.md", "docs/conf.py", ".github/workflows/ci.yml", "LICENSE", "examples/run.py",
               "kernels/scale.py", "kernels/configs/autotune.json", "csrc/scale.cu", "CMakeLists.txt",
               "requirements.txt", "pyproject.toml", "tests/test_scale.py", "conftest.py",
               # a document inside the package may be data the package reads
               "kernels/README.md", "kernels/prompts/template.rst"]
    assert config.unreached(changed) == ["kernels/configs/autotune.json", "csrc/scale.cu", "CMakeLists.txt",
                                         "requirements.txt", "pyproject.toml", "tests/test_scale.py", "conftest.py",
                                         "kernels/README.md", "kernels/prompts/template.rst"]


def test_base_configuration_is_used_and_a_pr_changing_it_is_told_so(configured, tmp_path, monkeypatch):
    # head's own map would send README.md nowhere and scale.py to no target: base's is the one read
    [chosen] = requests_by_refs(configured, "own-config", tmp_path, monkeypatch, target="scale")
    assert chosen.target == "tests/test_scale.py"
    # the selection stage, on the PR's own head view, says so (a stage's findings reach the report:
    # test_what_a_pr_changes_beside_its_mapped_files_is_named_and_keeps_the_report_from_pass)
    ctx = Context(request=chosen, worktree=Worktree(chosen.repo, chosen.patch), run_dir=tmp_path / "run")
    told = [finding for finding in selection.run(ctx).findings if finding.rule == "config.changed-by-pr"]
    assert told and "pyproject.toml" in told[0].detail


def test_flags_win_over_the_configuration(configured, tmp_path, monkeypatch):
    [over_the_map] = requests_by_refs(configured, "tail-bug", tmp_path, monkeypatch, target="tests/test_double.py")
    assert over_the_map.target == "tests/test_double.py"
    # and over a named target's own options
    [over_the_name] = requests_by_refs(configured, "tail-bug", tmp_path, monkeypatch, target="double",
                                       runner="script")
    assert (over_the_name.target, over_the_name.runner) == ("tests/test_double.py", "script")


@pytest.mark.parametrize("text,said", [
    ('[tool.kvtasks]\nrepo = "elsewhere"\n', "sets 'repo'"),
    ('[tool.kvtasks.targets.a]\nrunner = "pytest"\n', "[tool.kvtasks.targets.a] needs 'target'"),
    ('[tool.kvtasks]\ntol_table = ["f32", 1e-5]\n', "[tool.kvtasks] tol_table must be a table of dtype = tolerance"),
    ('[tool.kvtasks.targets.a]\ntarget = "t.py"\nshape_env = {M = 1}\n',
     "[tool.kvtasks.targets.a] shape_env must be a string (or a bare number); it is dict"),
    ('[tool.kvtasks]\ncpu_sparse_grid = "many"\n', "cpu_sparse_grid must be an integer (or its digits); it is str 'many'"),
    ('[tool.kvtasks.targets.a]\ntarget = "t.py"\n[tool.kvtasks.map]\n"k/*" = ["b"]\n', "'b', which is no named target"),
])
def test_a_configuration_mistake_is_a_usage_error_naming_the_file(text, said, tmp_path):
    (tmp_path / "pyproject.toml").write_text(text)
    with pytest.raises(UsageError, match="pyproject.toml"):
        try:
            repo_config.load(tmp_path)
        except UsageError as exc:
            assert said in str(exc)
            raise


def test_the_toml_a_person_writes_reaches_the_options_as_the_command_line_gives_them(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kvtasks]\ntol_table = {f32 = 1e-5, f16 = 2e-3}\nno_network = true\n'
        '[tool.kvtasks.targets.a]\ntests = "t.py"\nshape_vars = ["M", "N"]\ngrid = [[64, 2000, "f32"], "7,4097,f16"]\n'
        'env = ["A=1", "B=2"]\ncpu_sparse_grid = 4096\ncpu_device_capability = 9.0\n')
    config = repo_config.load(tmp_path)
    assert config.defaults == {"tol_table": "f32=1e-05,f16=0.002", "no_network": "1"}
    assert config.options("a") == {**config.defaults, "target": "t.py", "shape_vars": "M,N",
                                   "grid": "64,2000,f32;7,4097,f16", "env": ["A=1", "B=2"],
                                   "cpu_sparse_grid": "4096", "cpu_device_capability": "9.0"}
    request = validate_request({**config.options("a"), "repo": str(tmp_path)})
    assert request.tol_table == "f32=1e-05,f16=0.002" and parse_tol_table(request.tol_table) == {"f32": 1e-5,
                                                                                                   "f16": 2e-3}


def test_the_configuration_s_json_schema_names_every_option_and_its_forms():
    schema = json.loads(subprocess.run([sys.executable, "-m", "kvtasks", "schema", "--config"], capture_output=True,
                                       text=True, check=True).stdout)
    assert schema["title"] == "KvtasksTable" and schema["additionalProperties"] is False
    assert {"tol_table", "grid", "shape_vars", "targets", "map"} <= set(schema["properties"])
    assert "table of dtype = tolerance" in schema["properties"]["tol_table"]["description"]


def test_kvtasks_toml_is_read_at_its_top_level(tmp_path):
    (tmp_path / "kvtasks.toml").write_text('[targets.a]\ntarget = "t.py"\n[map]\n"k/**" = ["a"]\n')
    config = repo_config.load(tmp_path)
    assert config.file == "kvtasks.toml" and config.targets_for(["k/x/y.py", "README.md"]) == ["a"]


def test_check_reads_the_configuration_and_a_named_target_is_its_options(configured, tmp_path):
    workspace = Workspace(tmp_path / "home")
    request = check.request_of(workspace, {"repo": str(configured), "target": "double"})
    assert request.target == "tests/test_double.py" and request.runner == "pytest" and request.no_perf
    by_path = check.request_of(workspace, {"repo": str(configured), "target": "tests/test_scale.py"})
    assert by_path.target == "tests/test_scale.py" and by_path.no_perf and by_path.runner is None


@pytest.mark.parametrize("command", [["check"], ["validate"]])
def test_an_unknown_target_name_is_a_usage_error_naming_the_configured_ones(configured, command, capsys, tmp_path):
    code = cli.main([*command, "--repo", str(configured), "--target", "softmax", "--out", str(tmp_path / "r.json")])
    assert code == 64 and not (tmp_path / "r.json").exists()
    assert "--target 'softmax' is neither a target named in base's pyproject.toml (scale, double) nor a file of the " \
           "checkout" in capsys.readouterr().err


def test_check_has_its_own_help(capsys):
    assert cli.main(["check", "--help"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("usage: validate-kernel-pr check") and "--json FILE" in said
    assert "what a PR against a checkout could reach" in said and "0 the target reached a test outcome" in said


def test_a_target_path_base_lacks_is_the_stages_to_judge_not_a_usage_error(configured):
    config = repo_config.load(configured)
    for path in ("tests/test_new.py", "test_renamed.py::test_x[a/b]"):  # a test the PR adds, a renamed one
        assert config.chosen({"target": path}, configured)["target"] == path
    with pytest.raises(UsageError, match="--target 'softmax' is neither a target named"):
        config.chosen({"target": "softmax"}, configured)
