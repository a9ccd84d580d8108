"""A batch manifest is typed as the repository's configuration is: the TOML a person writes reaches
each PR's options as the command line gives them, and a wrong key or type is refused naming it."""
import json
from types import SimpleNamespace

import pytest

from kvtasks.errors import UsageError
from kvtasks.run import batch

MANIFEST = '''repo = "kernels"
target = "tests/test_softmax.py"
tol_table = {f32 = 1e-5, f16 = 2e-3}
shape_vars = ["M", "N"]
no_perf = true

[[prs]]
label = "tail"
patch = "patches/tail.patch"
grid = [[64, 2000, "f32"], [7, 4097, "f16"]]

[[prs]]
label = "docs"
head_ref = "pull/7/head"
base_ref = "main"
'''


def built(path) -> list[dict]:
    return [request.options for request in batch.manifest_requests(
        str(path), lambda options: SimpleNamespace(label=options["label"], options=options))[1]]


def test_a_manifest_s_tables_and_arrays_reach_each_pr_as_the_command_line_gives_them(tmp_path):
    path = tmp_path / "nightly.toml"
    path.write_text(MANIFEST)
    tail, docs = built(path)
    shared = {"repo": str(tmp_path / "kernels"), "target": "tests/test_softmax.py", "tol_table": "f32=1e-05,f16=0.002",
              "shape_vars": "M,N", "no_perf": "1"}
    assert tail == {**shared, "label": "tail", "patch": str(tmp_path / "patches" / "tail.patch"),
                    "grid": "64,2000,f32;7,4097,f16"}
    assert docs == {**shared, "label": "docs", "head_ref": "pull/7/head", "base_ref": "main"}


@pytest.mark.parametrize("change, said", [
    (("[[prs]]\nlabel = \"docs\"", "[[prs]]\nlabel = \"docs\"\nshape_vars = {M = 1}"),
     "prs[1] shape_vars must be an array of names"),
    (("no_perf = true", "no_perf = true\nno_netwrok = true"), "the top level sets 'no_netwrok', which is no option"),
    (('head_ref = "pull/7/head"\n', ""), "prs[1]: a PR of `prs` needs `patch` or `head_ref`"),
    (('label = "tail"\n', ""), "prs[0] needs 'label'"),
])
def test_a_wrong_key_or_type_is_refused_naming_it_and_where_it_is(tmp_path, change, said):
    path = tmp_path / "nightly.toml"
    path.write_text(MANIFEST.replace(*change))
    with pytest.raises(UsageError, match="manifest") as refused:
        built(path)
    assert said in str(refused.value)


def test_what_the_command_line_s_spelling_accepted_a_manifest_still_accepts(tmp_path):
    # switches as 1/0, numbers as their digits, an empty choice for the default, and a JSON null for
    # an option not given
    path = tmp_path / "nightly.json"
    path.write_text(json.dumps({"repo": "kernels", "target": "t.py", "no_perf": 1, "no_network": 0,
                                "cpu_sparse_grid": "4096", "runner": "", "out": None,
                                "prs": [{"label": "a", "patch": "a.patch", "head_sha": None}]}))
    (only,) = built(path)
    assert only == {"repo": str(tmp_path / "kernels"), "target": "t.py", "no_perf": "1", "no_network": "",
                    "cpu_sparse_grid": "4096", "runner": "", "label": "a", "patch": str(tmp_path / "a.patch")}


@pytest.mark.parametrize("entry, said", [
    ({"label": "a", "patch": "a.patch", "tests": ["t.py"]}, "prs[0] tests must be a string (or a bare number)"),
    ({"label": 7, "patch": "a.patch"}, "prs[0] label: Input should be a valid string"),
])
def test_a_wrong_type_names_the_key_as_it_was_spelt(tmp_path, entry, said):
    path = tmp_path / "nightly.json"
    path.write_text(json.dumps({"repo": "kernels", "prs": [entry]}))
    with pytest.raises(UsageError, match="manifest") as refused:
        built(path)
    assert said in str(refused.value)
