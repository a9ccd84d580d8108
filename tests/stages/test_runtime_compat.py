import shutil
import subprocess

import pytest

from kvtasks.request import Request
from kvtasks.stages import Context, baseline_control, repo_tests, runtime_compat
from tests.kernel_repos import make_patch, make_repo
from tests.kit import MemoryWorktree, RecordingLauncher, stage_context
from tests.recorded import BASE, SEEN, TARGET, ready

CHECK = "from {module} import VALUE\n\n\ndef test_value():\n    assert VALUE == 1\n"
FLYDSL = {"python/flydsl/__init__.py": '__version__ = "0.3.2"\nVALUE = 1\n',
          "lib/bindings.cpp": "int answer() { return 42; }\n", "tests/test_flydsl.py": CHECK.format(module="flydsl")}
README = {"README.md": "docs\n"}


def flydsl_repo(tmp_path, version="0.3.2"):
    return make_repo(tmp_path / "flydsl", {
        "python/flydsl/__init__.py": f'__version__ = "{version}"\nVALUE = 1\n',
        "lib/bindings.cpp": "int answer() { return 42; }\n",
        "tests/test_flydsl.py": CHECK.format(module="flydsl"),
    })


def pylib(tmp_path, version):
    root = tmp_path / "pylib"
    (root / "flydsl").mkdir(parents=True)
    (root / "flydsl" / "__init__.py").write_text(f'__version__ = "{version}"\nVALUE = 1\n')
    return root


def readme(repo, tmp_path):
    return make_patch(repo, {"README.md": "docs\n"}, tmp_path / "pr.patch")


def test_aiter_imports_from_the_checkout(tmp_path, validate):
    repo = make_repo(tmp_path / "aiter", {"aiter/__init__.py": "VALUE = 1\n",
                                          "op_tests/test_op.py": CHECK.format(module="aiter")})
    result = validate(repo, "--patch", str(readme(repo, tmp_path)), "--target", "op_tests/test_op.py")
    assert result.report["repo"]["kind"] == "aiter"
    compat = result.stage("runtime_compat")
    assert compat["status"] == "pass" and compat["profile"] == "aiter"
    identity = result.report["runtime_identity"]
    assert identity["module_path"] == str(repo / "aiter" / "__init__.py")
    assert identity["python_executable"] and identity["python_version"]
    assert identity["native_artifacts"] == [] and "only means this import loaded none" in identity["native_artifacts_basis"]


def test_flydsl_from_pylib_with_the_same_version_passes(tmp_path, validate, monkeypatch):
    repo = flydsl_repo(tmp_path)
    monkeypatch.setenv("PYLIB", str(pylib(tmp_path, "0.3.2")))
    result = validate(repo, "--patch", str(readme(repo, tmp_path)), "--target", "tests/test_flydsl.py")
    compat = result.stage("runtime_compat")
    assert compat["status"] == "pass" and compat["profile"] == "flydsl"
    assert result.report["runtime_identity"]["module_path"] == str(tmp_path / "pylib" / "flydsl" / "__init__.py")
    assert result.report["runtime_identity"]["module_version"] == "0.3.2"


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build a native library")
def test_native_libraries_loaded_by_the_import_are_hashed(tmp_path, validate):
    repo = make_repo(tmp_path / "native", {
        "kernels/__init__.py": ("import ctypes, os\n"
                                "_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libanswer.so'))\n"
                                "VALUE = _lib.answer() - 41\n"),
        "kernels/answer.c": "int answer(void) { return 42; }\n",
        "tests/test_native.py": CHECK.format(module="kernels"),
    })
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(repo / "kernels" / "libanswer.so"),
                    str(repo / "kernels" / "answer.c")], check=True)
    subprocess.run(["git", "add", "-f", "kernels/libanswer.so"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built"], cwd=repo, check=True)
    result = validate(repo, "--target", "tests/test_native.py")
    artifacts = result.report["runtime_identity"]["native_artifacts"]
    assert [a["path"] for a in artifacts] == [str(repo / "kernels" / "libanswer.so")]
    assert len(artifacts[0]["sha256"]) == 64 and artifacts[0]["size"] > 0


@pytest.mark.parametrize("init", ["VALUE = 1\ndef broken(:\n", "import kvtasks_missing_dependency\nVALUE = 1\n"])
def test_a_pr_that_breaks_the_package_import_is_blamed(tmp_path, validate, init):
    repo = make_repo(tmp_path / "pkg", {"kernels/__init__.py": "VALUE = 1\n",
                                        "tests/test_value.py": CHECK.format(module="kernels")})
    patch = make_patch(repo, {"kernels/__init__.py": init}, tmp_path / "pr.patch")
    result = validate(repo, "--patch", str(patch), "--target", "tests/test_value.py")
    compat = result.stage("runtime_compat")
    assert compat["status"] == "fail" and compat["base_import"] == "imports"
    error = "SyntaxError" if "broken" in init else "ModuleNotFoundError"
    assert error in compat["traceback_tail"]
    assert any("the PR breaks `import kernels`" in f["detail"] and error in f["detail"]
               for f in result.findings("blocker"))
    assert result.verdict == "BLOCK"


def test_the_keys_name_a_module_inside_the_tree_relative_to_it_and_one_outside_as_imported(tmp_path):
    """Two fleet nodes with homes of their own check the same base out at two paths: the same key."""
    from types import SimpleNamespace

    from kvtasks.stages.runtime_compat import keyed_module_path
    named = {}
    for node in ("node-1", "node-2"):
        tree = tmp_path / node / "clones" / "repo" / "base"
        (tree / "kernels").mkdir(parents=True)
        ctx = SimpleNamespace(worktree=SimpleNamespace(path=tree))
        named[node] = keyed_module_path(ctx, str(tree / "kernels" / "__init__.py"))
    assert named == {"node-1": "<worktree>/kernels/__init__.py", "node-2": "<worktree>/kernels/__init__.py"}
    outside = str(tmp_path / "site-packages" / "kernels" / "__init__.py")
    assert keyed_module_path(ctx, outside) == outside  # another package than the tree's: its own key


# -- the stage's decisions over recorded import probes (tests/kit.py): no git, no process ----------------

def probed(base: dict, head: dict | None, probes: list[dict], *, target: str, kind: str = "unknown",
           **options) -> tuple[Context, RecordingLauncher]:
    """A context once runtime_compat ran over the recorded probes (head's, then base's) on a worktree
    the layout says is of `kind` (Worktree.kind reads it off the checkout: the end-to-end tests above)."""
    launcher = RecordingLauncher(probes=[(seen, "probe log") for seen in probes])
    earlier = {name: made for name, made in ready().items() if name != runtime_compat.NAME}
    ctx = stage_context(base, head, target=target, earlier=earlier, launcher=launcher, kind=kind, **options)
    compat = runtime_compat.run(ctx)
    ctx.earlier[compat.name] = compat
    return ctx, launcher


def test_aiter_failing_to_import_is_an_environment_fact():
    broken = {**SEEN, "error": "ImportError: cannot import name '_compiled_ops' from partially initialized module "
                               "'aiter' (most likely due to a circular import)"}
    base = {"aiter/__init__.py": "from aiter import _compiled_ops\n",
            "op_tests/test_op.py": CHECK.format(module="aiter")}
    ctx, _ = probed(base, README, [broken, broken], target="op_tests/test_op.py", kind="aiter")
    compat = ctx.earlier[runtime_compat.NAME]
    assert compat.stage.status == "skip" and compat.stage.reason == "runtime_mismatch"
    assert "ImportError" in compat.stage.note and compat.stage.profile == "aiter"
    head = repo_tests.run(ctx)
    assert head.stage.note == "runtime compatibility was not established"
    assert [f for f in compat.findings + head.findings if f.severity == "blocker"] == []


def test_flydsl_pylib_version_drift_is_inconclusive_and_skips_correctness(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLIB", str(tmp_path))
    drifted = {**SEEN, "module_path": str(tmp_path / "flydsl" / "__init__.py"), "module_version": "0.3.1"}
    ctx, _ = probed(FLYDSL, README, [drifted], target="tests/test_flydsl.py", kind="flydsl")
    compat = ctx.earlier[runtime_compat.NAME]
    assert compat.stage.status == "skip" and compat.stage.reason == "runtime_mismatch"
    assert "0.3.1 is installed but the checkout is 0.3.2" in compat.stage.note
    for stage in (baseline_control, repo_tests):
        assert stage.run(ctx).stage.note == "runtime compatibility was not established"
    assert ctx.facts.runtime_identity is None


def test_pylib_with_a_patch_touching_cpp_bindings_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLIB", str(tmp_path))
    ctx, launcher = probed(FLYDSL, {"lib/bindings.cpp": "int answer() { return 43; }\n"}, [],
                           target="tests/test_flydsl.py", kind="flydsl")
    compat = ctx.earlier[runtime_compat.NAME]
    assert compat.stage.status == "skip" and "provenance cannot be proved" in compat.stage.note
    assert compat.stage.runtime_sources_changed == ["lib/bindings.cpp"]
    assert [f.severity for f in compat.findings] == ["note"] and launcher.asked == []  # nothing was imported


def test_generic_module_is_inferred_from_the_target(tmp_path):
    for path, text in BASE.items():  # the layout the inference reads is the checkout's on disk
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    launcher = RecordingLauncher(probes=[(SEEN, "probe log")])
    ctx = Context(request=Request(repo=str(tmp_path), target=TARGET), worktree=MemoryWorktree(BASE, root=tmp_path),
                  run_dir=tmp_path / "run", earlier={"gpu_claim": ready()["gpu_claim"]}, launcher=launcher)
    compat = runtime_compat.run(ctx)
    assert compat.stage.status == "pass" and compat.stage.module == "kernels"
    assert compat.stage.profile.startswith("generic")
    assert [launched.module for _, launched in launcher.asked] == ["kernels"]


def test_generic_module_named_by_the_caller():
    missing = {**SEEN, "error": "ModuleNotFoundError: No module named 'not_a_module_here'"}
    ctx, launcher = probed(BASE, None, [missing], target=TARGET, runtime_module="not_a_module_here")
    compat = ctx.earlier[runtime_compat.NAME]
    assert compat.stage.status == "skip" and "ModuleNotFoundError" in compat.stage.note
    assert [launched.module for _, launched in launcher.asked] == ["not_a_module_here"]
