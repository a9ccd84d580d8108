import json
import subprocess
import sys

from kvtasks import variables
from kvtasks.harness import environment

CALLER = {
    "PATH": "/usr/bin", "LANG": "C.UTF-8", "ROCM_PATH": "/opt/rocm", "HIP_PLATFORM": "amd",
    "GITHUB_TOKEN": "ghp_x", "GH_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "x", "SSH_AUTH_SOCK": "/tmp/agent",
    "HF_TOKEN": "x", "OPENAI_API_KEY": "x", "CUDA_API_KEY": "x", "TRITON_PASSWORD": "x",
    "NETRC": "/root/.netrc", "HOME": "/root", "TRITON_CACHE_DIR": "/shared/triton", "AITER_JIT_DIR": "/shared/jit",
}


def test_only_allowlisted_non_credential_names_pass():
    assert variables.passed_through(CALLER) == ["HIP_PLATFORM", "LANG", "PATH", "ROCM_PATH"]


def test_phase_caches_are_private_and_override_the_callers(tmp_path):
    env = environment.construct(CALLER, phase_dir=tmp_path / "base", label="base-repo", python_path=["/w"],
                                visible_devices={"HIP_VISIBLE_DEVICES": ""})
    for name in ("HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "AITER_JIT_DIR", "TORCH_EXTENSIONS_DIR"):
        assert env[name].startswith(str(tmp_path / "base")), name
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["VALIDATION_PHASE"] == "base-repo"
    assert env["PYTHONNOUSERSITE"] == "1"  # what a run writes into its private HOME never runs at start-up
    assert env["HIP_VISIBLE_DEVICES"] == ""


def test_a_target_printing_its_environment_sees_no_credential(tmp_path):
    env = environment.construct(CALLER, phase_dir=tmp_path / "head", label="head-repo", python_path=[],
                                visible_devices={})
    printed = subprocess.run([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
                             env=env, capture_output=True, text=True, check=True).stdout
    seen = json.loads(printed)
    for secret in ("GITHUB_TOKEN", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "HF_TOKEN",
                   "OPENAI_API_KEY", "CUDA_API_KEY", "TRITON_PASSWORD", "NETRC"):
        assert secret not in seen
