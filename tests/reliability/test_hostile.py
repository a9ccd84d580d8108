"""Hostile inputs: a clear error or a report, and the worktree untouched, every time."""
import json
import os
import socket
import string
import threading

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtasks.front import cli
from tests.kernel_repos import git, kernel_repo, make_patch, snapshot


def run_cli(repo, tmp_path, *flags):
    out = tmp_path / "out.json"
    out.unlink(missing_ok=True)
    before = snapshot(repo)
    code = cli.main(["--repo", str(repo), "--target", "tests/test_scale.py", "--out", str(out), "--quiet",
                     "--no-perf", *flags])
    assert snapshot(repo) == before
    return code, (json.loads(out.read_text()) if out.exists() else None)


def test_binary_patch_applies_and_is_handed_back(repo, idle_gpu, home, tmp_path):
    patch = make_patch(repo, {}, tmp_path / "unused.patch")
    (repo / "kernels" / "table.bin").write_bytes(bytes(range(256)) * 4)
    git(repo, "add", "-A")
    patch.write_text(git(repo, "diff", "--cached", "--binary"))
    git(repo, "reset", "-q", "--hard")
    git(repo, "clean", "-q", "-fdx")
    code, report = run_cli(repo, tmp_path, "--patch", str(patch))
    assert report["stages"]["merge_sim"]["changed_paths"] == {"kernels/table.bin": "A"}
    assert report["stages"]["correctness_repo_tests"]["status"] == "pass"


def test_rename_patch(repo, idle_gpu, home, tmp_path):
    (repo / "kernels/helpers.py").write_text("def helper():\n    return 1\n" * 20)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "helpers")
    os.rename(repo / "kernels/helpers.py", repo / "kernels/renamed helpers.py")
    git(repo, "add", "-A")
    patch = tmp_path / "rename.patch"
    patch.write_text(git(repo, "diff", "--cached", "-M"))
    git(repo, "reset", "-q", "--hard")
    assert "rename from" in patch.read_text()
    code, report = run_cli(repo, tmp_path, "--patch", str(patch))
    assert report["stages"]["merge_sim"]["changed_paths"] == {"kernels/helpers.py": "D",
                                                              "kernels/renamed helpers.py": "A"}


def test_patch_outside_the_repository_is_refused(repo, home, tmp_path, capsys):
    outside = tmp_path / "outside.patch"
    outside.write_text("diff --git a/../escape.py b/../escape.py\nnew file mode 100644\n--- /dev/null\n"
                       "+++ b/../escape.py\n@@ -0,0 +1 @@\n+print('out')\n")
    code, report = run_cli(repo, tmp_path, "--patch", str(outside))
    assert code == 64 and report is None
    assert "touches a path outside the worktree: '../escape.py'" in capsys.readouterr().err
    assert not (tmp_path / "escape.py").exists()


def test_patch_through_a_symlink_does_not_apply_and_touches_nothing(repo, idle_gpu, home, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "victim.py").write_text("original\n")
    os.symlink(outside, repo / "linked")
    git(repo, "add", "linked")
    git(repo, "commit", "-qm", "a symlinked folder")
    patch = tmp_path / "through-link.patch"
    patch.write_text("diff --git a/linked/victim.py b/linked/victim.py\n--- a/linked/victim.py\n"
                     "+++ b/linked/victim.py\n@@ -1 +1 @@\n-original\n+overwritten\n")
    code, report = run_cli(repo, tmp_path, "--patch", str(patch))
    assert report["stages"]["merge_sim"]["status"] == "fail" and report["verdict"] == "BLOCK"
    assert (outside / "victim.py").read_text() == "original\n"


def test_no_network_puts_targets_in_an_empty_network_namespace(repo, idle_gpu, home, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]

    def serve():
        try:
            while True:
                server.accept()[0].close()
        except OSError:  # the test closed the server
            return

    threading.Thread(target=serve, daemon=True).start()
    probe = ("import socket\n\n\ndef test_network():\n    s = socket.socket()\n    s.settimeout(2)\n"
             f"    assert s.connect_ex(('127.0.0.1', {port})) == 0, 'no network'\n")
    patch = make_patch(repo, {"tests/test_net.py": probe}, tmp_path / "net.patch")
    flags = ["--patch", str(patch), "--target", "tests/test_net.py"]
    _, open_report = run_cli(repo, tmp_path, *flags)
    assert open_report["stages"]["correctness_repo_tests"]["status"] == "pass"
    assert open_report["isolation"]["network"].startswith("host network")
    _, closed = run_cli(repo, tmp_path, *flags, "--no-network")
    assert closed["stages"]["correctness_repo_tests"]["status"] == "fail"
    assert closed["isolation"]["network"].startswith("none: a fresh network namespace")
    server.close()


def _mount_namespace_available() -> bool:
    from kvtasks.request import UsageError, mount_namespace

    try:
        mount_namespace()
    except UsageError:
        return False
    return True


@pytest.mark.skipif(not _mount_namespace_available(), reason="this host cannot unshare a mount namespace")
def test_under_sandbox_a_target_cannot_write_the_evidence_store(repo, idle_gpu, home, tmp_path):
    """A PR that tries to rewrite its own prepare record, plant a file in KVTASKS_HOME and write
    the reports folder: every write fails, the evidence is byte-identical, the tree stays writable."""
    evidence = home / "cache" / "evidence" / "prepare" / "run.json"
    hostile = ("import os\nimport pytest\n\n\ndef test_forge():\n"
               f"    for path in [{str(evidence)!r}, {str(home / 'planted.txt')!r},\n"
               f"                 {str(home / 'reports' / 'planted.txt')!r}]:\n"
               "        with pytest.raises(OSError):\n"
               "            open(path, 'w').write('{\"forged\": true}')\n"
               "    open('scratch-ok.txt', 'w').write('the tree is writable')\n")
    patch = make_patch(repo, {"tests/test_forge.py": hostile}, tmp_path / "forge.patch")
    _, sandboxed = run_cli(repo, tmp_path, "--patch", str(patch), "--target", "tests/test_forge.py", "--sandbox")
    head = sandboxed["stages"]["correctness_repo_tests"]
    assert head["status"] == "pass", head["note"]  # every write into the store failed, the tree write did not
    assert head["artifacts"] == ["scratch-ok.txt"]
    assert sandboxed["isolation"]["sandbox"].startswith("evidence read-only")
    assert "forged" not in evidence.read_text() and not (home / "planted.txt").exists()
    assert not (home / "reports" / "planted.txt").exists()


NAMES = st.text(alphabet=string.ascii_letters + string.digits + " _-'\"é中", min_size=1, max_size=12).filter(
    lambda name: name.strip() == name and name not in (".", ".."))
CHANGES = st.dictionaries(
    keys=st.builds(lambda folder, name: f"{folder}/{name}.py" if folder else f"{name}.py",
                   st.sampled_from(["", "kernels", "new dir", "tests/ü"]), NAMES),
    values=st.one_of(st.text(max_size=200), st.none()), min_size=1, max_size=4)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(changes=CHANGES, existing=st.booleans())
def test_any_patch_and_path_ends_in_a_report_or_a_usage_error_with_the_tree_restored(tmp_path_factory, changes,
                                                                                     existing):
    root = tmp_path_factory.mktemp("prop")
    repo = kernel_repo(root / "repo")
    if existing:  # modify or delete files that exist on base too
        changes = {**changes, "kernels/scale.py": changes.get("kernels/scale.py")}
    applicable = {path: text for path, text in changes.items() if text is not None or (repo / path).exists()}
    if not applicable:
        return
    patch = make_patch(repo, {path: (text if text is not None else None) for path, text in applicable.items()},
                       root / "generated.patch")
    out = root / "out.json"
    before = snapshot(repo)
    previous_home = os.environ.get("KVTASKS_HOME")
    os.environ["KVTASKS_HOME"] = str(root / "home")
    try:
        code = cli.main(["--repo", str(repo), "--patch", str(patch), "--target", "tests/test_scale.py", "--out",
                         str(out), "--quiet", "--no-perf"])
    except SystemExit as exc:
        code = exc.code
    finally:
        if previous_home is None:
            os.environ.pop("KVTASKS_HOME", None)
        else:
            os.environ["KVTASKS_HOME"] = previous_home
    assert snapshot(repo) == before
    assert (code == 64 and not out.exists()) or json.loads(out.read_text())["verdict"] in (
        "PASS", "NEEDS_WORK", "BLOCK", "INCONCLUSIVE")
