"""The GitHub Actions recipe (examples/github-actions/): its workflows parse and hold no secrets, and
their validation and comment steps run as written against a local bare repository, with a stand-in
`gh` that records what it would post: one comment, created and then updated."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernel_repos import git
from tests.test_repo_config import branch, configured  # noqa: F401 (the fixture: a repository with [tool.kvtasks])

yaml = pytest.importorskip("yaml")
RECIPES = Path(__file__).resolve().parent.parent / "examples" / "github-actions"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")
BOT = "github-actions[bot]"
# the stand-in gh: the few calls the comment step makes, against a JSON file of the PR's comments
STAND_IN_GH = '''import json, sys
from pathlib import Path
state_path = Path(__file__).with_name("gh-state.json")
state = json.loads(state_path.read_text())
args = sys.argv[1:]
state["calls"].append(args)
if args[:2] == ["pr", "view"]:
    print(state["heads"][args[2]])
elif args[:1] == ["api"] and "/contents/" in args[1]:  # a file's blob at a ref: the validate workflow's
    print(state["workflow"].get(args[1].split("?ref=", 1)[1], ""))
elif args[:1] == ["api"] and args[1].count("/") == 2:  # the repository: its default branch
    print(state["default_branch"])
elif args[:1] == ["api"] and "--paginate" in args:  # the PR's comments, filtered as the step's --jq filters them
    marker = "<!-- kvtasks verdict -->"
    number = args[1].split("/")[-2]
    for comment in state["comments"]:
        if comment["pr"] == number and comment["user"] == "%s" and comment["body"].startswith(marker):
            print(comment["id"])
elif args[:2] == ["pr", "comment"]:
    body = Path(args[args.index("--body-file") + 1]).read_text()
    state["comments"].append({"id": len(state["comments"]) + 1, "pr": args[2], "user": "%s", "body": body})
elif args[:3] == ["api", "--method", "PATCH"]:
    number = int(args[3].rsplit("/", 1)[1])
    body = Path(args[args.index("-F") + 1].removeprefix("body=@")).read_text()
    next(c for c in state["comments"] if c["id"] == number)["body"] = body
else:
    sys.exit(f"the stand-in gh does not know {args}")
state_path.write_text(json.dumps(state))
''' % (BOT, BOT)


def workflow(name: str) -> dict:
    return yaml.safe_load((RECIPES / name).read_text())


def step(job: dict, name: str) -> dict:
    return next(found for found in job["steps"] if found.get("name") == name)


def run_step(found: dict, job_env: dict, expressions: dict, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """A `run:` step as the runner runs it: its expressions substituted (every one must be known
    here), the job's and the step's env, bash -eo pipefail, in its working-directory."""
    def substitute(text: str) -> str:
        return EXPRESSION.sub(lambda match: expressions[match.group(1)], str(text))

    environment = {**env, **{key: substitute(value) for key, value in {**job_env, **found.get("env", {})}.items()}}
    folder = Path(substitute(found["working-directory"])) if "working-directory" in found else cwd
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", substitute(found["run"])],
                          cwd=folder, env=environment, capture_output=True, text=True, timeout=900)


WORKFLOW = ".github/workflows/kvtasks-validate.yml"


def gh_state(heads: dict, head_sha: str, workflow_at_head: str = "blob-of-main") -> dict:
    """The stand-in GitHub: the PRs' heads, no comments yet, and the validate workflow's blob on the
    default branch and at the validated head."""
    return {"heads": heads, "comments": [], "calls": [], "default_branch": "main",
            "workflow": {"main": "blob-of-main", head_sha: workflow_at_head}}


def comment_event(head_sha: str) -> dict:
    return {"github.token": "not-a-token", "github.repository": "kernels/kernels",
            "github.event.workflow_run.head_sha": head_sha, "github.event.workflow_run.path": WORKFLOW}


def comment_job(tmp_path: Path, reports: Path, state: dict) -> tuple[Path, dict]:
    """The comment job's folder, holding the downloaded artifact and a stand-in gh first on its PATH."""
    job = tmp_path / "comment-job"
    shutil.copytree(reports, job / "reports")
    bin_dir = job / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(f"#!{sys.executable}\n{STAND_IN_GH}")
    (bin_dir / "gh").chmod(0o755)
    (bin_dir / "gh-state.json").write_text(json.dumps(state))
    return job, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def validate_job(configured: Path, tmp_path: Path, head_ref: str, number: str, base_ref: str = "main",
                 **environ: str):
    """The gpu job's "Validate the PR" step on PR `number` (`base_ref` to `head_ref`) of a bare copy
    of `configured`: (the step's outcome, its reports folder, the checkout, the head OID)."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(configured), str(origin))
    checkout = tmp_path / "workspace"
    git(tmp_path, "clone", "-q", str(origin), str(checkout))
    base_sha, head_sha = (git(checkout, "rev-parse", f"origin/{ref}").strip() for ref in (base_ref, head_ref))
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    # this process's environment carries the stand-in GPU host (idle_gpu) and the private GPU locks
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RUNNER_TEMP": str(runner_temp), "GITHUB_WORKSPACE": str(checkout), **environ}
    gpu = workflow("kvtasks-validate.yml")["jobs"]["gpu"]
    event = {"runner.temp": str(runner_temp), "github.event.pull_request.number": number,
             "github.event.pull_request.base.sha": base_sha, "github.event.pull_request.head.sha": head_sha}
    done = run_step(step(gpu, "Validate the PR"), gpu["env"], event, env, checkout)
    return done, runner_temp / "kvtasks" / "reports", checkout, head_sha


def test_the_workflows_parse_hold_no_secrets_and_keep_pr_code_away_from_the_token():
    validate, posting = workflow("kvtasks-validate.yml"), workflow("kvtasks-comment.yml")
    said = json.dumps([validate, posting], default=str)  # what the workflows do, their comments aside
    assert "secrets." not in said and "pull_request_target" not in said
    # yaml reads the key `on` as True
    assert set(validate[True]) == {"pull_request"} and validate["permissions"] == {"contents": "read"}
    assert {"gpu", "cpu-tier"} == set(validate["jobs"])
    for job in validate["jobs"].values():
        checkout = next(found for found in job["steps"] if str(found.get("uses", "")).startswith("actions/checkout"))
        assert checkout["with"]["persist-credentials"] is False
        assert any(str(found.get("uses", "")).startswith("actions/upload-artifact") for found in job["steps"])
    assert "--sandbox --no-network" in validate["jobs"]["gpu"]["env"]["KVTASKS_ISOLATION"]
    # kvtasks is on no package index: it is installed as the maintainer names it, and the targets'
    # interpreter gets the repository's dependencies
    runs = [str(found.get("run", "")) for job in validate["jobs"].values() for found in job["steps"]]
    assert not [run for run in runs if re.search(r"pip install (-q )?'?kvtasks", run)]
    assert any("PYTHON_BIN=" in run for run in runs)
    assert set(posting[True]) == {"workflow_run"} and posting["permissions"]["pull-requests"] == "write"
    assert not [found for found in posting["jobs"]["comment"]["steps"] if "checkout" in str(found.get("uses", ""))]


def test_the_validation_and_comment_steps_run_against_a_bare_repository(configured, tmp_path, idle_gpu):  # noqa: F811
    validated, reports, checkout, head_sha = validate_job(configured, tmp_path, "tail-bug", "7")
    assert validated.returncode == 1, validated.stdout[-2000:] + validated.stderr[-2000:]  # BLOCK fails the gate
    assert json.loads((reports / "pr-7" / "validation_report.json").read_text())["verdict"] == "BLOCK"
    assert git(checkout, "status", "--porcelain", "--ignored") == ""  # the checkout stays as fetched
    # before the upload, nothing works in kvtasks' workspace any more; a process left there fails the job
    gpu = workflow("kvtasks-validate.yml")["jobs"]["gpu"]
    env = {**os.environ, "RUNNER_TEMP": str(tmp_path / "runner-temp")}
    survivors = step(gpu, "Nothing of the PR's is left running")
    event = {"runner.temp": str(tmp_path / "runner-temp")}
    assert run_step(survivors, gpu["env"], event, env, checkout).returncode == 0
    lingering = subprocess.Popen(["sleep", "60"], cwd=reports)
    try:
        found = run_step(survivors, gpu["env"], event, env, checkout)
        assert found.returncode == 1 and str(lingering.pid) in found.stderr
        assert lingering.wait(timeout=10) == -9  # and it was ended
    finally:
        lingering.kill()

    # the artifact, downloaded by the comment job; the stand-in gh is first on its PATH
    job, comment_env = comment_job(tmp_path, reports, gh_state({"7": head_sha}, head_sha))
    state = job / "bin" / "gh-state.json"
    posting = workflow("kvtasks-comment.yml")["jobs"]["comment"]
    run_event = comment_event(head_sha)
    for _ in range(2):  # posted once, then updated in place
        done = run_step(step(posting, "Post or update the comment"), {}, run_event, comment_env, job)
        assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads(state.read_text())
    assert [c["pr"] for c in recorded["comments"]] == ["7"]
    posted = (reports / "pr-7" / "comment.md").read_text()
    assert recorded["comments"][0]["body"] == "<!-- kvtasks verdict -->\n" + posted
    assert [call[:3] for call in recorded["calls"] if call[0] != "pr" or call[1] != "view"][-1] == \
        ["api", "--method", "PATCH"]
    # an artifact naming a PR whose head is not the validated commit is not posted
    state.write_text(json.dumps(gh_state({"7": "0" * 40}, head_sha)))
    refused = run_step(step(posting, "Post or update the comment"), {}, run_event, comment_env, job)
    assert refused.returncode == 1 and json.loads(state.read_text())["comments"] == []


def test_a_docs_only_pr_in_ci_is_nothing_to_validate_and_a_forged_artifact_is_never_posted(configured, tmp_path):  # noqa: F811
    validated, reports, _, head_sha = validate_job(configured, tmp_path, "docs", "8", CI="true")  # as GitHub sets it
    assert validated.returncode == 0, validated.stdout[-2000:] + validated.stderr[-2000:]
    said = (reports / "pr-8" / "comment.md").read_text()
    assert said.startswith("## kvtasks: nothing to validate for `pr-8`") and "README.md" in said
    assert json.loads((reports / "pr-8" / "pr_report.json").read_text())["verdict"] is None

    post = step(workflow("kvtasks-comment.yml")["jobs"]["comment"], "Post or update the comment")
    job, comment_env = comment_job(tmp_path, reports, gh_state({"8": head_sha}, head_sha))
    assert run_step(post, {}, comment_event(head_sha), comment_env, job).returncode == 0
    state = job / "bin" / "gh-state.json"
    assert json.loads(state.read_text())["comments"][0]["body"] == "<!-- kvtasks verdict -->\n" + said
    # a PR whose head changes the validate workflow could have uploaded any artifact: it is said to be
    # unverified, and nothing of the artifact is posted
    state.write_text(json.dumps(gh_state({"8": head_sha}, head_sha, workflow_at_head="blob-the-pr-wrote")))
    assert run_step(post, {}, comment_event(head_sha), comment_env, job).returncode == 0
    body = json.loads(state.read_text())["comments"][0]["body"]
    assert "results unverified" in body and WORKFLOW in body and "nothing to validate" not in body


def test_a_runner_lacking_the_repository_s_dependencies_never_goes_green(configured, tmp_path, idle_gpu):  # noqa: F811
    # base's kernels import a library the targets' interpreter lacks; the PR touches a mapped kernel
    branch(configured, "needs-dep", {"kernels/scale.py": "import kvtasks_absent_dependency  # noqa: F401\n"
                                                         + (configured / "kernels" / "scale.py").read_text()})
    git(configured, "checkout", "-q", "-b", "on-needs-dep", "needs-dep")
    (configured / "kernels" / "scale.py").write_text((configured / "kernels" / "scale.py").read_text() + "\n# tidy\n")
    git(configured, "commit", "-qam", "tidy")
    git(configured, "checkout", "-q", "main")
    validated, reports, _, _ = validate_job(configured, tmp_path, "on-needs-dep", "9", base_ref="needs-dep")
    report = json.loads((reports / "pr-9" / "validation_report.json").read_text())
    assert report["verdict"] == "INCONCLUSIVE" and validated.returncode == 2  # --fail-on needs_work, and still red
    assert "environment.incomplete" in [finding["rule"] for finding in report["findings"]]
