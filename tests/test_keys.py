"""Every input that can change how a base run comes out changes the base key."""
import json
import shutil
import subprocess
import sys

import pytest

from kvtasks import gpu, worktree
from kvtasks.evidence import keys
from kvtasks.harness import isolation
from kvtasks.host import HostSettings
from kvtasks.request import Request, declared_options
from kvtasks.request.options import KEYED
from kvtasks.stages.gpu_claim import GpuClaim
from kvtasks.records import RuntimeFingerprint, Selection
from tests.kernel_repos import git, make_repo

SELECTION = {"runner": "pytest", "grid_channel": "env", "grid_cells": ["64,2000,f32"]}
FINGERPRINT = {"python_executable": "/usr/bin/python3", "python_version": "3.11.7", "distributions": ["numpy==2.0"],
               "module_path": "/repo/kernels/__init__.py", "editable_sources": {}}
GPU = {"vendor": "amd", "arch": "gfx942", "model": "MI300X"}


@pytest.fixture
def request_(tmp_path):
    (tmp_path / "repo").mkdir()
    return Request(repo=str(tmp_path / "repo"), target="tests/test_env.py", host={"python_bin": sys.executable})


def base_key(request, *, fingerprint=FINGERPRINT, driver=None, environment=None, gpu=GPU, selection=SELECTION):
    runtime = keys.runtime_hash(request, RuntimeFingerprint(**fingerprint), GpuClaim(status="pass", **gpu), None,
                                driver or {"rocm": "6.2.0"})
    return keys.base_key(request, "a" * 40, Selection(**selection), runtime, environment or {"PATH": "/usr/bin"})


def test_each_input_of_a_base_run_changes_the_base_key(request_, monkeypatch):
    reference = base_key(request_)
    assert base_key(request_) == reference  # deterministic
    changed = {
        "TIMEOUT": base_key(request_.model_copy(update={"host": request_.host.model_copy(update={"timeout": 2})})),
        "--no-network": base_key(request_.model_copy(update={"no_network": ("unshare", "--net", "--")})),
        "--sandbox": base_key(request_.model_copy(update={"sandbox": ("unshare", "--mount")})),
        "per-PR cpu tier": base_key(request_.model_copy(update={"cpu_tier": "triton"})),
        "--env": base_key(request_.model_copy(update={"env": ("FLA_CACHE_RESULTS=0",)})),
        "PYTEST_ADDOPTS value": base_key(request_, environment={"PATH": "/usr/bin", "PYTEST_ADDOPTS": "-x"}),
        "LD_LIBRARY_PATH value": base_key(request_, environment={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"}),
        "HIP_ variable value": base_key(request_, environment={"PATH": "/usr/bin", "HIP_FORCE_DEV_KERNARG": "1"}),
        "driver": base_key(request_, driver={"rocm": "6.3.1"}),
        "editable source": base_key(request_, fingerprint={**FINGERPRINT, "editable_sources": {"dep": "f00d"}}),
    }
    monkeypatch.setattr(keys, "kvtasks_identity", lambda: "another kvtasks")
    changed["kvtasks' own code"] = base_key(request_)
    unchanged = [name for name, key in changed.items() if key == reference]
    assert not unchanged, unchanged
    assert len(set(changed.values())) == len(changed)


def test_what_the_base_run_is_asked_and_the_runtime_it_runs_on_change_the_base_key(request_):
    """A changed key is a base run again: the evidence graph reruns the base on any of these (one of
    them end to end in test_graph.py)."""
    reference = base_key(request_)
    host = request_.host
    changed = {
        "grid cells": base_key(request_, selection={**SELECTION, "grid_cells": ["64,2001,f32"]}),
        "expected route": base_key(request_.model_copy(update={"expected_route": "kernels.tiled:other"})),
        "target": base_key(request_.model_copy(update={"target": "tests/test_argnames.py"})),
        "PYTHON_BIN": base_key(request_.model_copy(update={"host": host.model_copy(
            update={"python_bin": "/opt/venv/bin/python"})})),
        "interpreter": base_key(request_, fingerprint={**FINGERPRINT, "python_executable": "/opt/venv/bin/python3"}),
        "package version": base_key(request_, fingerprint={**FINGERPRINT, "distributions": ["numpy==2.1"]}),
        "GPU model": base_key(request_, gpu={**GPU, "model": "MI325X"}),
        "GPU arch": base_key(request_, gpu={**GPU, "arch": "gfx950"}),
    }
    unchanged = [name for name, key in changed.items() if key == reference]
    assert not unchanged, unchanged
    assert len(set(changed.values())) == len(changed)


def test_the_runtime_probe_reports_the_version_of_each_installed_distribution(tmp_path):
    """What a package upgrade in the target's interpreter changes: its name==version in the fingerprint."""
    site = tmp_path / "site"
    dist = site / "kvtasks_marker-1.0.dist-info"
    dist.mkdir(parents=True)
    seen = []
    for version in ("1.0", "2.0"):
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kvtasks-marker\nVersion: {version}\n")
        out = tmp_path / f"runtime-{version}.json"
        subprocess.run([sys.executable, str(keys._PACKAGE / "harness" / "runtime_probe.py"), str(out), "json", "",
                        "/nowhere"], env={"PYTHONPATH": str(site)}, check=True)
        seen.append(json.loads(out.read_text())["distributions"])
    assert "kvtasks-marker==1.0" in seen[0] and "kvtasks-marker==2.0" in seen[1]


@pytest.mark.parametrize("module", ["run/executor.py", "variables.py", "system/processes.py", "harness/launching.py",
                                    "stages/baseline_control.py"])
def test_kvtasks_identity_changes_with_the_code_that_launches_and_judges_a_base_run(tmp_path, monkeypatch, module):
    copy = tmp_path / "kvtasks"
    shutil.copytree(keys._PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "demo"))
    monkeypatch.setattr(keys, "_PACKAGE", copy)
    keys.kvtasks_identity.cache_clear()
    before = keys.kvtasks_identity()
    (copy / module).write_text((copy / module).read_text() + "\n# changed\n")
    keys.kvtasks_identity.cache_clear()
    assert keys.kvtasks_identity() != before
    keys.kvtasks_identity.cache_clear()


def test_kvtasks_identity_covers_launch_probe_and_environment_code():
    identity = keys.kvtasks_identity()
    assert len(identity) == 64
    for module in ("launch.py", "in_target/monitor.py", "environment.py", "runtime_probe.py"):
        assert (keys._PACKAGE / "harness" / module).is_file()


def test_passed_through_values_are_what_the_target_sees(monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:cacheprovider")
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    values = isolation.passed_through_values()
    assert values["PYTEST_ADDOPTS"] == "-p no:cacheprovider" and values["TORCH_SHOW_CPP_STACKTRACES"] == "1"
    assert "GITHUB_TOKEN" not in values


def test_driver_versions_come_from_the_toolkit_the_host_points_at(tmp_path):
    (tmp_path / "rocm" / ".info").mkdir(parents=True)
    (tmp_path / "rocm" / ".info" / "version").write_text("6.2.4-120\n")
    found = gpu.driver_versions({"ROCM_PATH": str(tmp_path / "rocm"), "CUDA_HOME": str(tmp_path / "none")})
    assert found["rocm"] == "6.2.4-120" and "cuda" not in found


def test_an_editable_source_identity_follows_its_content(tmp_path):
    checkout = make_repo(tmp_path / "dep", {"dep/__init__.py": "X = 1\n"})
    first = worktree.source_identity(checkout)
    (checkout / "dep" / "__init__.py").write_text("X = 2\n")  # uncommitted edit
    edited = worktree.source_identity(checkout)
    (checkout / "dep" / "extra.py").write_text("Y = 1\n")  # untracked file
    untracked = worktree.source_identity(checkout)
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "x")
    assert len({first, edited, untracked}) == 3 and worktree.source_identity(checkout) != first
    plain = tmp_path / "plain"
    (plain / "pkg").mkdir(parents=True)
    (plain / "pkg" / "__init__.py").write_text("A = 1\n")
    before = worktree.source_identity(plain)
    (plain / "pkg" / "__init__.py").write_text("A = 2\n")
    assert worktree.source_identity(plain) != before


def test_the_runtime_probe_names_editable_installs(tmp_path):
    site = tmp_path / "site"
    dist = site / "dep-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dep\nVersion: 1.0\n")
    (dist / "direct_url.json").write_text(json.dumps({"url": f"file://{tmp_path / 'src'}",
                                                      "dir_info": {"editable": True}}))
    out = tmp_path / "runtime.json"
    probe = keys._PACKAGE / "harness" / "runtime_probe.py"
    subprocess.run([sys.executable, str(probe), str(out), "json", "", "/nowhere"], env={"PYTHONPATH": str(site)},
                   check=True)
    seen = json.loads(out.read_text())
    assert seen["editable"]["dep"] == str(tmp_path / "src") and "dep==1.0" in seen["distributions"]


def test_every_option_field_and_host_setting_says_which_key_it_is_part_of():
    options = {option.field for option in declared_options()}
    assert set(Request.model_fields) == options | set(keys.REQUEST_FIELDS), "a Request field is in no key's list"
    assert set(HostSettings.model_fields) == set(keys.HOST_SETTINGS), "a host setting is in no key's list"
    assert set(keys.REQUEST_FIELDS.values()) | set(keys.HOST_SETTINGS.values()) <= set(KEYED)


def _another(value, choices=()):
    """A value of the same kind that differs."""
    if choices:
        return next(choice for choice in choices if choice != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, tuple):
        return (*value, "another")
    return f"{value or ''}another"


def _keys_of(request) -> tuple[str, str]:
    base = base_key(request)
    return base, keys.head_key(base, "p" * 64, request)


@pytest.mark.parametrize("option", declared_options(), ids=lambda option: option.field)
def test_an_option_changes_exactly_the_keys_it_declares(request_, option):
    reference = _keys_of(request_)
    changed = _keys_of(request_.model_copy(update={option.field: _another(getattr(request_, option.field),
                                                                          option.choices)}))
    declared = option.option.keys
    assert (changed[0] != reference[0], changed[1] != reference[1]) == \
        {"base": (True, True), "head": (False, True), "neither": (False, False)}[declared]


# PYTHON_BIN and PYLIB reach the base key through the runtime hash (above); the idle thresholds are a model
@pytest.mark.parametrize("setting", sorted(set(keys.HOST_SETTINGS) - {"python_bin", "pylib", "idle"}))
def test_a_host_setting_changes_exactly_the_keys_it_declares(request_, setting):
    reference = _keys_of(request_)
    host = request_.host.model_copy(update={setting: _another(getattr(request_.host, setting))})
    changed = _keys_of(request_.model_copy(update={"host": host}))
    assert (changed[0] != reference[0], changed[1] != reference[1]) == \
        {"base": (True, True), "head": (False, True), "neither": (False, False)}[keys.HOST_SETTINGS[setting]]
