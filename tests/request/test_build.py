"""build_request: every declared option reaches its field, whichever front door spells it."""
import pytest

from kvtasks.front import cli
from kvtasks.request import UsageError, build_request, declared_options
from kvtasks.request import resolution
from tests.kernel_repos import git, make_patch


def given_values(repo, tmp_path) -> dict:
    """A value, other than the default, for every option the Request declares."""
    return {
        "repo": str(repo), "target": "tests/test_scale.py",
        "patch": str(make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")), "head_sha": "a" * 40,
        "expected_route": "kernels.scale:scale", "shape_vars": "M,N", "shape_env": "SHAPES", "shape_arg": "--shapes",
        "shape_argnames": "M,N", "grid": "1,2;3,4", "axis": ["X=--x:1;2", "Y=--y:3"], "runner": "script",
        "tol_table": "f32=1e-5", "runtime_module": "kernels", "perf_args": "--bench", "perf_control_column": "ref",
        "no_perf": True, "no_replay": True, "cpu_tier": "triton", "cpu_sparse_grid": "0", "cpu_device_capability": "9.0",
        "cpu_device_name": "NVIDIA H100 80GB HBM3",
        "python_path": ["kernels", "tests"], "env": ["FLA_CACHE_RESULTS=0", "MY_MODE=a=b"], "no_network": True, "sensitivity_error": "1e-3",
        "sensitivity_mode": "both", "sensitivity_output": "out", "sandbox": True, "label": "spelt",
        "out": str(tmp_path / "report.json"), "base_ref": "main", "head_ref": "pr",
    }


# the PR is given one of two ways, so a request never holds both kinds' values
BY_PATCH, BY_REFS = ("patch", "head_sha"), ("base_ref", "head_ref")


@pytest.mark.parametrize("kind", ["patch", "refs"])
def test_every_option_reaches_its_field_from_the_cli_and_from_doit(kind, repo, tmp_path, monkeypatch):
    # the namespace checks are the host's to pass; here each switch only has to reach its field
    monkeypatch.setattr(resolution, "network_namespace", lambda: ("net-prefix",))
    monkeypatch.setattr(resolution, "mount_namespace", lambda: ("mount-prefix",))
    values = given_values(repo, tmp_path)
    assert sorted(values) == sorted(declared.field for declared in declared_options())
    other_kind = BY_REFS if kind == "patch" else BY_PATCH
    if kind == "refs":
        git(repo, "checkout", "-q", "-b", "pr", "main")
        (repo / "README.md").write_text("docs\n")
        git(repo, "add", "README.md")
        git(repo, "commit", "-q", "-m", "docs")
        git(repo, "checkout", "-q", "main")
    argv, variables = [], {}
    for declared in [declared for declared in declared_options() if declared.field not in other_kind]:
        value, option = values[declared.field], declared.option
        if option.switch:
            argv.append(declared.flags[-1])
            variables[declared.variables[-1]] = "1"
        elif option.repeated:
            argv += [word for part in value for word in (declared.flags[-1], part)]
            variables[declared.variables[-1]] = option.joined_by.join(value)
        else:
            argv += [declared.flags[-1], value]  # the last spelling: aliases such as --tests count too
            variables[declared.variables[-1]] = value
    given, _ = cli.parse_validation(argv)
    clones_root = tmp_path / "clones"
    from_cli, from_doit = build_request(given, clones_root=clones_root), build_request(variables, clones_root=clones_root)
    assert from_cli == from_doit
    unchanged = [declared.field for declared in declared_options()
                 if getattr(from_cli, declared.field) == declared.default]
    assert unchanged == (["base_ref", "head_ref"] if kind == "patch" else [])
    if kind == "refs":  # the refs become the patch and head OID of the private base worktree
        assert from_cli.source == str(repo) and from_cli.repo != str(repo)
        assert from_cli.head_sha == git(repo, "rev-parse", "pr").strip() and from_cli.patch.startswith(str(clones_root))
    assert from_cli.axis == ("X=--x:1;2", "Y=--y:3") and from_cli.python_path == ("kernels", "tests")
    assert from_cli.shape_arg == "--shapes" and from_cli.no_network and from_cli.network_namespace == ("net-prefix",)
    assert from_cli.sandbox and from_cli.sandbox_namespace == ("mount-prefix",) and from_cli.resolved
    assert from_cli.env == ("FLA_CACHE_RESULTS=0", "MY_MODE=a=b")


@pytest.mark.parametrize("pair,why", [
    ("HOME=/tmp", "is set by kvtasks itself"), ("PYTHONPATH=x", "is set by kvtasks itself"),
    ("TRITON_INTERPRET=0", "is set by kvtasks itself"), ("TRITON_CACHE_DIR=/tmp", "is set by kvtasks itself"),
    ("CUDA_VISIBLE_DEVICES=1", "is a device mask"), ("ROCR_VISIBLE_DEVICES=1", "is a device mask"),
    ("MY_VISIBLE_DEVICES=0", "is a device mask"), ("HF_TOKEN=x", "looks like a credential"),
    ("AWS_REGION=x", "looks like a credential"), ("NOEQUALS", "is not NAME=VALUE"), ("1BAD=x", "is not a variable"),
    ("SHAPES=1,2", "is --shape-env's"),
])
def test_env_refuses_what_kvtasks_decides_and_credentials(pair, why, repo):
    with pytest.raises(UsageError, match=f"--env {pair!r}: .*{why}"):
        build_request({"repo": str(repo), "target": "tests/test_scale.py", "shape_env": "SHAPES", "env": [pair]})


@pytest.mark.parametrize("misspelt", ["no_netwrok", "sensitivty_mode", "Label"])
def test_a_name_that_is_no_option_is_a_usage_error(misspelt, repo):
    # a manifest key spelt wrong would otherwise be dropped without a word (a run with the network on)
    with pytest.raises(UsageError, match=f"'{misspelt}' is no option"):
        build_request({"repo": str(repo), "target": "tests/test_scale.py", misspelt: "1"})
