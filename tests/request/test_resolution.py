"""Validating a request is pure; what it names is read by locate and resolve, and a front door
resolves only once it holds the worktree."""
import pytest

from kvtasks.front import front_doors, graph
from kvtasks.run import session
from kvtasks.system import processes
from kvtasks.worktree import clones
from kvtasks.request import Request, UsageError, locate, resolution, resolve, validate_request
from kvtasks.evidence.workspace import Workspace


@pytest.fixture
def no_io(monkeypatch):
    """Every way a request could touch the host fails the test: a process, a clone, git."""
    def touched(*args, **kwargs):
        raise AssertionError("validation touched the host")

    monkeypatch.setattr(processes, "run", touched)
    monkeypatch.setattr(clones, "prepare", touched)
    monkeypatch.setattr(resolution, "_git_toplevel", touched)


def test_validation_reads_no_worktree_runs_nothing_and_clones_nothing(no_io, tmp_path):
    missing = str(tmp_path / "no-such-tree")
    by_patch = validate_request({"repo": missing, "target": "t.py", "patch": str(tmp_path / "no.patch"),
                                 "no_network": "1", "sandbox": True, "python_path": "lib", "out": "r.json"})
    assert (by_patch.repo, by_patch.no_network, by_patch.sandbox, by_patch.resolved) == (missing, True, True, False)
    assert by_patch.network_namespace == by_patch.sandbox_namespace == ()
    by_refs = validate_request({"repo": "https://example.invalid/kernels.git", "target": "t.py", "base_ref": "main",
                                "head_ref": "pull/7/head"})
    assert (by_refs.base_ref, by_refs.head_ref, by_refs.source) == ("main", "pull/7/head", None)


def test_an_unresolved_request_launches_nothing():
    request = validate_request({"repo": "/tree", "target": "t.py", "no_network": "1"})
    with pytest.raises(ValueError, match="resolve"):
        request.launch_prefix()


@pytest.mark.parametrize("options, message", [
    ({"head_sha": "HEAD"}, "--head-sha must be a full 40-hex commit OID, got 'HEAD'"),
    ({"runner": "nose"}, "--runner must be one of pytest, script, got 'nose'"),
    ({"label": "a b"}, "--label 'a b' must be letters"),
    ({"cpu_sparse_grid": "-1"}, "--cpu-sparse-grid must be a program count"),
    ({"sensitivity_error": "0"}, "--sensitivity-error must be a positive relative error"),
    ({"sensitivity_error": "1e-3", "sensitivity_mode": "nan"}, "--sensitivity-mode nan makes no tail run"),
    ({"target": "../t.py"}, "--target '../t.py' escapes the worktree"),
    ({"python_path": "../x"}, "--python-path '../x' must be a folder inside the checkout"),
    ({"base_ref": "main"}, "--base-ref and --head-ref go together"),
    ({"base_ref": "main", "head_ref": "pr", "patch": "p.patch"}, "either by refs"),
])
def test_a_bad_value_is_refused_by_validation_alone(options, message, no_io):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_request({"repo": "/tree", "target": "t.py", **options})


def test_resolve_reads_what_validation_left(repo, tmp_path, monkeypatch):
    monkeypatch.setattr(resolution, "network_namespace", lambda: ("net-prefix",))
    given = validate_request({"repo": str(repo), "target": "tests/test_scale.py", "no_network": "1",
                              "default_out": str(repo / "validation_report.json")})
    done = resolve(locate(given, None))
    assert done.resolved and done.network_namespace == ("net-prefix",) and done.out is None
    with pytest.raises(UsageError, match="is not a folder of the checkout"):
        resolve(locate(validate_request({"repo": str(repo), "target": "t.py", "python_path": "lib"}), None))
    with pytest.raises(UsageError, match="is not a git worktree"):
        locate(validate_request({"repo": str(tmp_path), "target": "t.py"}), None)


def test_the_front_door_resolves_once_it_holds_the_worktree(repo, tmp_path, monkeypatch):
    said = []
    monkeypatch.setattr(session, "hold_worktrees", lambda requests: said.append(("held", [r.repo for r in requests])))
    monkeypatch.setattr(front_doors, "resolve", lambda request: said.append(("resolved", request.repo)) or request)
    monkeypatch.setattr(graph, "loader_namespace", lambda requests, *args, **kwargs: {graph.REQUESTS: requests})
    workspace = Workspace(tmp_path / "home")
    namespace = front_doors.validation(workspace, {"repo": str(repo), "target": "tests/test_scale.py"})
    assert said == [("held", [str(repo)]), ("resolved", str(repo))]
    assert [type(request) for request in namespace[graph.REQUESTS]] == [Request]
