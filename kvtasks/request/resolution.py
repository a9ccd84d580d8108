"""A validated Request checked against what it names, in two steps with the worktree's lock taken
between them: `locate` finds the worktree (preparing kvtasks' private clone for a PR given by
refs), and `resolve` reads the rest once that worktree is this validator's (the target and folders
under it, the patch, where the report goes) and finds the namespaces --no-network and --sandbox
run targets in. Each refusal is a UsageError naming the flag.
"""
from __future__ import annotations

from pathlib import Path

from kvtasks.worktree import clones
from kvtasks.errors import UsageError
from kvtasks.request.model import Request
from kvtasks.request.namespaces import mount_namespace, network_namespace
from kvtasks.request.patch import checked_patch


def locate(request: Request, clones_root: Path | None) -> Request:
    """The request with `repo` the absolute top level of the worktree it validates: the caller's,
    or for a PR given by refs kvtasks' private base worktree under `clones_root`, with the PR's
    patch and head commit."""
    if request.base_ref and not request.source:
        if clones_root is None:
            raise UsageError("this front door has no workspace to keep a private clone in; give --patch instead")
        try:
            refs = clones.prepare(request.repo, request.base_ref, request.head_ref, clones_root)
        except clones.RefsError as exc:
            raise UsageError(str(exc)) from None
        request = request.model_copy(update={"repo": str(refs.worktree), "patch": str(refs.patch),
                                             "head_sha": refs.head_oid, "base_ref": refs.base_ref,
                                             "head_ref": refs.head_ref, "source": refs.source})
    given = request.repo
    repo = Path(given).expanduser().resolve()
    if not repo.is_dir():
        raise UsageError(f"--repo {given!r} is not a directory")
    toplevel = _git_toplevel(repo)
    if toplevel is None:
        raise UsageError(f"--repo {given!r} is not a git worktree")
    if toplevel != repo:
        raise UsageError(f"--repo {given!r} is inside the worktree {toplevel}; pass its top level")
    return request.model_copy(update={"repo": str(repo)})


def resolve(request: Request) -> Request:
    """The located request checked against its worktree and this host: paths resolved (a symlink
    out of the worktree is refused), the patch read, the report's copy placed, the namespaces found."""
    repo = Path(request.repo)
    if not (repo / request.target_path).resolve().is_relative_to(repo):
        raise UsageError(f"--target {request.target!r} escapes the worktree")
    patch = checked_patch(request.patch, repo) if request.patch else None
    out = request.out
    if out is not None:
        out_path = Path(out).expanduser().resolve()
        if out_path.is_relative_to(repo):
            raise UsageError(f"--out {out!r} lies inside the worktree; the next run would find it dirty")
        out = str(out_path)
    elif request.default_out:
        # a front door's own default (the CLI's ./validation_report.json, run from inside the
        # worktree) is no mistake of the caller's: inside the worktree it is simply not written
        default_path = Path(request.default_out).expanduser().resolve()
        out = None if default_path.is_relative_to(repo) else str(default_path)
    network = network_namespace() if request.no_network else ()
    sandbox = mount_namespace() if request.sandbox else ()
    for folder in request.python_path:
        resolved = (repo / folder).resolve()
        if not resolved.is_relative_to(repo):
            raise UsageError(f"--python-path {folder!r} must be a folder inside the checkout, relative to it")
        if not resolved.is_dir():
            raise UsageError(f"--python-path {folder!r} is not a folder of the checkout")
    return request.model_copy(update={"patch": patch, "out": out, "default_out": None, "network_namespace": network,
                                      "sandbox_namespace": sandbox, "resolved": True})


def _git_toplevel(path: Path) -> Path | None:
    import git

    try:
        top = git.Repo(path, search_parent_directories=True).working_tree_dir
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return Path(top).resolve() if top else None
