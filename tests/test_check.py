"""validate-kernel-pr check: one run of the checkout as a base run would, and what a PR could reach."""
import json
import subprocess

from kvtasks.front import cli
from kvtasks.run import check, executor
from kvtasks.stages.launches import Launch
from kvtasks.request import build_request
from tests import triton_repos
from kvtasks.worktree import Worktree
from tests.kernel_repos import make_patch, make_repo, snapshot

JUNK_KERNEL = '''import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def bessel_kernel(out_ptr, in_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, libdevice.j0(tl.load(in_ptr + offs)))


def bessel(x):
    out = torch.empty_like(x)
    bessel_kernel[(1,)](out, x, BLOCK=x.numel())
    return out
'''
JUNK_TEST = '''import torch

from bessel import bessel


def test_bessel():
    x = torch.rand(8, device="cuda")
    torch.testing.assert_close(bessel(x), torch.special.bessel_j0(x))
'''


def test_check_on_the_demo_says_runner_route_and_channel_and_what_keeps_a_pr_short(tmp_path, capsys, gpu_host):
    gpu_host(amd=[])  # no GPU: the demo's numpy kernels run without one
    request = build_request(check.demo_options(tmp_path / "store"))
    assert check.said(request, str(tmp_path / "check.json")) == 0
    said = capsys.readouterr().out.splitlines()
    found = json.loads((tmp_path / "check.json").read_text())
    assert "runner: pytest (defines collectable tests: test_softmax_matches_reference)" in said
    assert found["route"] == {"asked": "kernels.tiled_softmax:softmax_rows", "observed": True, "calls": 4}
    assert found["channel"]["channel"] == "env" and found["channel"]["proven"] is True
    assert "tier crashes: none" in said and found["run"]["executed"] == 4
    assert found["short_of_pass"] == ["no GPU was claimed: PASS needs one (on the CPU tier the best verdict is "
                                      "INCONCLUSIVE)"]


def test_check_on_a_src_layout_repository_under_the_tier_and_a_tier_crash_named(tmp_path, capsys, gpu_host):
    triton_repos.require_triton_cpu()
    gpu_host(amd=[])
    repo = triton_repos.packaged_repo(tmp_path / "tiny")
    code = cli.main(["check", "--repo", str(repo), "--target", "tests/test_norm.py", "--cpu-tier", "triton", "--quiet",
                     "--expected-route", "tiny_kernels.norm:rms_norm", "--shape-vars", "M,N",
                     "--shape-argnames", "M,N", "--grid", "3,50", "--json", str(tmp_path / "tiny.json")])
    found = json.loads((tmp_path / "tiny.json").read_text())
    assert code == 0, capsys.readouterr().out
    assert found["cpu_tier"] == "triton" and found["runtime_established"] and found["tier_crashes"] == []
    assert found["route"]["observed"] is True
    assert found["channel"]["channel"] == "pytest" and found["channel"]["proven"] is True, found["channel"]
    assert found["short_of_pass"] == ["no GPU was claimed: PASS needs one (on the CPU tier the best verdict is "
                                      "INCONCLUSIVE)"]

    junk = triton_repos.make_repo(tmp_path / "junk", {"bessel.py": JUNK_KERNEL, "tests/test_bessel.py": JUNK_TEST})
    capsys.readouterr()
    assert cli.main(["check", "--repo", str(junk), "--target", "tests/test_bessel.py", "--cpu-tier", "triton",
                     "--quiet", "--runtime-module", "bessel"]) == 1
    said = capsys.readouterr().out
    assert ("tier crashes: NotImplementedError: kvtasks CPU tier: libdevice.j0 has no equivalent in the Triton "
            "interpreter (in kvtasks hooks) (1 test, first tests/test_bessel.py::test_bessel)") in said
    assert "  - the CPU tier could not run it: NotImplementedError" in said


def test_check_names_what_pytest_could_not_collect(tmp_path, capsys, gpu_host):
    # a release without the module a repository imports fails at collection: check says which, not only "red"
    gpu_host(amd=[])
    repo = make_repo(tmp_path / "repo", {"kernel.py": "SCALE = 1\n",
                                         "tests/test_kernel.py": "from kernel import descriptor\n\n\n"
                                                                 "def test_kernel():\n    assert descriptor\n"})
    found = check.check(build_request({"repo": str(repo), "target": "tests/test_kernel.py",
                                       "runtime_module": "kernel"}))
    # with no GPU, the run without a device is what shut the gate: what it could not collect says why
    assert found["run"] is None and "not shown to run without one" in found["blocked"]
    assert [error.split(" (")[0] for error in found["collection_errors"]] == [
        "ImportError: cannot import name 'descriptor' from 'kernel'"]
    assert found["short_of_pass"][-1].startswith(
        "pytest could not collect the target: ImportError: cannot import name 'descriptor' from 'kernel'")
    assert any(line.startswith("collection errors: ImportError") for line in check.lines(found))


def test_check_k_runs_only_the_items_it_selects(tmp_path, capsys, gpu_host, monkeypatch):
    gpu_host(amd=[])
    monkeypatch.setenv("KVTASKS_HOME", str(tmp_path / "home"))
    asked, launch = [], executor.launch

    def recorded(ctx, request):
        asked.append(request)
        return launch(ctx, request)
    monkeypatch.setattr(executor, "launch", recorded)
    assert cli.main(["check", "-k", "8-100", "--quiet", "--json", str(tmp_path / "check.json")]) == 0
    run = json.loads((tmp_path / "check.json").read_text())["run"]
    assert run["executed"] == 1
    assert [case["test_id"] for case in run["outcomes"]] == ["tests.test_softmax::test_softmax_matches_reference[8-100-f16]"]
    # every run it made selected with -k (the run without a device, the channel's proof), none of the whole suite
    launched = [request for request in asked if isinstance(request, Launch)]
    assert launched and all(request.argv[-2:] == ("-k", "8-100") for request in launched)


def test_check_k_is_refused_for_a_script_target(tmp_path, capsys, gpu_host, monkeypatch):
    gpu_host(amd=[])
    monkeypatch.setenv("KVTASKS_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "scripted", {"kernels/__init__.py": "", "bench/run.py": "if __name__ == '__main__':\n    print('ran')\n"})
    assert cli.main(["check", "--repo", str(repo), "--target", "bench/run.py", "-k", "fast", "--quiet"]) == 64
    assert "-k selects pytest items, and bench/run.py runs as a script" in capsys.readouterr().err


def _with_work_in_progress(repo):
    """A checkout as a developer has it: a note, a draft folder, an ignored build folder and an edit."""
    (repo / ".gitignore").write_text("build/\n")
    subprocess.run(["git", "-C", str(repo), "add", ".gitignore"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ignore"],
                   check=True)
    (repo / "notes.txt").write_text("precious\n")
    (repo / "wip").mkdir()
    (repo / "wip" / "draft.py").write_text("DRAFT = 1\n")
    (repo / "build").mkdir()
    (repo / "build" / "kernel.so").write_bytes(b"\x7fELF built once")
    (repo / "tests" / "test_kernel.py").write_text((repo / "tests" / "test_kernel.py").read_text() + "# an edit\n")
    return snapshot(repo)


def test_check_refuses_a_checkout_with_work_in_progress_and_leaves_every_byte(tmp_path, capsys, gpu_host):
    # every lend hands the tree back clean: lent as it was, the note, the draft, the build and the edit went with it
    gpu_host(amd=[])
    repo = make_repo(tmp_path / "repo", {"kernel.py": "SCALE = 1\n",
                                         "tests/test_kernel.py": "def test_kernel():\n    assert True\n"})
    supplied = _with_work_in_progress(repo)
    found = check.check(build_request({"repo": str(repo), "target": "tests/test_kernel.py"}))
    assert found["run"] is None and "worktree is not isolated-clean (4 entries: " in found["blocked"]
    assert "?? notes.txt" in found["blocked"] and "!! build/kernel.so" in found["blocked"]
    assert snapshot(repo) == supplied


def test_a_validation_without_a_patch_refuses_a_checkout_with_work_in_progress(tmp_path, validate):
    repo = make_repo(tmp_path / "repo", {"kernel.py": "SCALE = 1\n",
                                         "tests/test_kernel.py": "def test_kernel():\n    assert True\n"})
    _with_work_in_progress(repo)
    done = validate(repo, "--target", "tests/test_kernel.py", "--label", "as-is")  # the fixture holds the bytes
    merge = done.stage("merge_sim")
    assert merge["status"] == "skip" and merge["dirty_entries"] == 4 and done.verdict == "INCONCLUSIVE"


def test_check_undoes_what_a_killed_validation_left_before_it_looks(tmp_path, capsys, gpu_host):
    # a validation killed with its patch applied leaves a dirty tree that is not the caller's work: undone
    # as a validation would, never named to the caller as theirs to commit or stash
    gpu_host(amd=[])
    repo = make_repo(tmp_path / "repo", {"kernel.py": "SCALE = 1\n",
                                         "tests/test_kernel.py": "def test_kernel():\n    assert True\n"})
    supplied = snapshot(repo)
    patch = make_patch(repo, {"kernel.py": "SCALE = 2\n"}, tmp_path / "pr.patch")
    killed = Worktree(repo, str(patch))
    killed.journal.open(repo)
    killed.apply(str(patch))
    (repo / "written.log").write_text("the killed run wrote this")
    killed.journal._update(pid=2 ** 22 + 1, pid_start=1)
    found = check.check(build_request({"repo": str(repo), "target": "tests/test_kernel.py"}))
    assert found["blocked"] is None or "isolated-clean" not in found["blocked"]
    assert "was killed with patch" in capsys.readouterr().err
    assert snapshot(repo) == supplied
