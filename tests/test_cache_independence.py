"""The verdict, and the whole report, do not depend on what the store held before: a PR that
changes its test side (so the base oracle runs) validated cold, then warm (its base evidence
reused), then in another workspace after another PR stored that base's evidence, gets the same
report but for the fields kvtasks.report.model.RUN_SPECIFIC declares."""
import json

from kvtasks.front import cli
from kvtasks.report.model import comparable
from tests.kernel_repos import ARGNAMES_TEST, TILED, make_patch, snapshot, tiled_repo

FLAGS = ["--target", "tests/test_argnames.py", "--expected-route", "kernels.tiled:tiled_scale", "--shape-vars",
         "M,N,dtype_str", "--shape-argnames", "M,N,dtype_str", "--grid", "64,2000,f32", "--no-perf", "--quiet"]


def test_cold_warm_and_another_pr_s_cache_give_the_same_report(tmp_path, monkeypatch, idle_gpu):
    repo = tiled_repo(tmp_path / "tiled")
    supplied = snapshot(repo)
    pr = make_patch(repo, {"kernels/tiled.py": "# tiles\n" + TILED,
                           "tests/test_argnames.py": ARGNAMES_TEST.replace('(4, 64, "f32"),', '(4, 64, "f32"),\n    (2, 64, "f32"),')},
                    tmp_path / "pr.patch")
    other = make_patch(repo, {"README.md": "another PR\n"}, tmp_path / "other.patch")

    def validate(home: str, patch, label: str) -> dict:
        monkeypatch.setenv("KVTASKS_HOME", str(tmp_path / home))
        out = tmp_path / f"{home}-{label}.json"
        cli.main(["--repo", str(repo), "--patch", str(patch), "--label", label, "--out", str(out), *FLAGS])
        assert snapshot(repo) == supplied
        return json.loads(out.read_text())

    cold = validate("first", pr, "pr")
    warm = validate("first", pr, "pr")
    validate("second", other, "other")
    crossed = validate("second", pr, "pr")
    assert cold["stages"]["correctness_base_oracle"]["status"] == "pass"  # the test side changed: the oracle ran
    assert "reused_from" not in cold["stages"]["baseline_control"]
    assert warm["stages"]["baseline_control"]["reused_from"]["written_by"] == "pr"
    assert crossed["stages"]["baseline_control"]["reused_from"]["written_by"] == "other"
    assert comparable(warm) == comparable(cold)
    assert comparable(crossed) == comparable(cold)
    # what the store kept names the runs' scratch folder only where a run saw it: its command and its
    # scratch field; every artifact path (records.ARTIFACT_FIELDS) points into the store
    scratch = str(tmp_path / "scratch")
    for document in (tmp_path / "first" / "cache" / "evidence").rglob("*.json"):
        assert set(fields_naming(json.loads(document.read_text()), scratch)) <= {"command", "scratch"}, document


def fields_naming(value, text: str, field: str = "") -> list[str]:
    """The fields, at any depth, whose value holds `text`."""
    if isinstance(value, dict):
        return [found for name, item in value.items() for found in fields_naming(item, text, name)]
    if isinstance(value, list):
        return [found for item in value for found in fields_naming(item, text, field)]
    return [field] if isinstance(value, str) and text in value else []
