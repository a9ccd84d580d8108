"""Validating by refs: kvtasks' private clones, the base worktrees and the PR patches made from them.

Owns `<workspace>/clones/<repo-id>/` (a bare shared clone of a local repository, or a bare clone of
a URL, fetched on demand; worktrees of base tips; the patches). It only ever reads the caller's
repository (git clone --shared, git fetch from it): never its worktree, index, refs, config, hooks
or object store. It runs no target and writes no evidence. Each use stamps what it used (the
clone's lock file, the tree's folder: their modification times), for `clone_collection` to remove
the trees and clones unused for longer than an age.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from kvtasks.system import locks, processes
from kvtasks.worktree import GitFailed, Worktree, git_environment, held_by_a_validator, run_git

_OID = re.compile(r"[0-9a-fA-F]{7,40}")
# the caller's git configuration must not change what is fetched, diffed or checked out
PLAIN_GIT = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
             "GIT_ASKPASS": "true", "GIT_LFS_SKIP_SMUDGE": "1"}
_FETCH_TIMEOUT_S = 1800
_PINS = "refs/kvtasks"


class RefsError(Exception):
    """The refs cannot be validated as asked (unknown ref, unrelated histories, unreachable URL)."""


@dataclass(frozen=True)
class RefsChange:
    """A PR given by refs, made into what the pipeline validates: a clean base tree and a patch."""

    source: str  # the repository the caller named (a path, or a URL without its credentials)
    clone: Path  # kvtasks' private clone of it
    worktree: Path  # the base tip, checked out (reused by every PR against this tip while it is free)
    base_ref: str
    base_oid: str
    head_ref: str
    head_oid: str
    merge_base: str
    patch: Path


def is_url(source: str) -> bool:
    """A git URL (scheme:// or scp-like user@host:path), as opposed to a path on this machine."""
    return "://" in source or bool(re.match(r"^[\w.-]+@[\w.-]+:", source))


def shown(location: str) -> str:
    """A location as it may be printed or recorded: a URL loses its user and password."""
    if "://" not in location:
        return location
    parts = urlsplit(location)
    if "@" not in parts.netloc:
        return location
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def prepare(source: str, base_ref: str, head_ref: str, clones_root: Path) -> RefsChange:
    """Resolve both refs in the private clone of `source`, write the PR's change (merge-base to
    head) as a patch, and check out the base tip; raise RefsError with git's own words."""
    for side, ref in (("base", base_ref), ("head", head_ref)):
        _check_ref(side, ref)
    location = _location(source)
    folder = clones_root / _repo_id(location)
    folder.mkdir(parents=True, exist_ok=True)
    with locks.held(locks.open_lock(folder / "clone.lock")):  # one front door at a time prepares a clone
        _stamp(folder / "clone.lock")
        clone = _clone(location, folder)
        try:
            base_oid, head_oid = _resolve_both(clone, location, base_ref, head_ref)
        except RefsError:
            if _intact(clone):
                raise
            # the caller's gc pruned objects this shared clone relied on: clone afresh, once
            shutil.rmtree(clone, ignore_errors=True)
            clone = _clone(location, folder)
            base_oid, head_oid = _resolve_both(clone, location, base_ref, head_ref)
        merge_base = _git(clone, "merge-base", base_oid, head_oid, check=False)
        if not merge_base:
            raise RefsError(f"--base-ref {base_ref} and --head-ref {head_ref} share no history in {shown(source)}: "
                            "there is no merge-base to take the PR's change from")
        patch = _write_patch(clone, folder, merge_base, head_oid, head_ref)
        worktree = _base_worktree(clone, folder, base_oid)
    return RefsChange(source=shown(source), clone=clone, worktree=worktree, base_ref=base_ref, base_oid=base_oid,
                      head_ref=head_ref, head_oid=head_oid, merge_base=merge_base, patch=patch)


def _check_ref(side: str, ref: str) -> None:
    """Ref names and commit ids only: revision syntax and refspecs are refused before git sees them."""
    if _OID.fullmatch(ref):
        return
    valid = bool(ref) and not ref.startswith("-") and processes.run(
        ["git", "check-ref-format", "--allow-onelevel", ref], env=git_environment(PLAIN_GIT), timeout_s=60).ok
    if not valid:
        raise RefsError(f"--{side}-ref {ref!r} is not a branch, tag, pull ref or commit id (revision syntax such as "
                        "~1 or @{1} and refspecs are not taken)")


def checkout(source: str, base_oid: str, clones_root: Path) -> Path:
    """The base tip `base_oid` of `source` checked out in kvtasks' private clone under
    `clones_root` (a fleet node's: it gets a repository and a commit, never a worktree)."""
    _check_ref("base", base_oid)
    location = _location(source)
    folder = clones_root / _repo_id(location)
    folder.mkdir(parents=True, exist_ok=True)
    with locks.held(locks.open_lock(folder / "clone.lock")):
        _stamp(folder / "clone.lock")
        clone = _clone(location, folder)
        return _base_worktree(clone, folder, _resolve(clone, location, base_oid, "base"))


def _location(source: str) -> str:
    if is_url(source):
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise RefsError(f"--repo {source!r} is neither an existing repository path nor a git URL")
    return str(path.resolve())


def _repo_id(location: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", shown(location).rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
    return f"{stem[:40] or 'repo'}-{hashlib.sha256(location.encode()).hexdigest()[:12]}"


def _git(clone: Path, *args: str, check: bool = True, timeout_s: float = 600) -> str:
    done = run_git(clone, *args, env=PLAIN_GIT, timeout_s=timeout_s)
    if not done.ok:
        if check:
            raise RefsError(f"git {args[0]} failed: {_said(done)}")
        return ""
    return done.stdout.strip()


def _said(done: processes.Finished) -> str:
    """git's own reason: its first fatal/error line (its last line is often only advice)."""
    stderr = done.stderr.decode(errors="replace") if isinstance(done.stderr, bytes) else done.stderr or ""
    lines = stderr.strip().splitlines()
    reason = next((line for line in lines if line.startswith(("fatal:", "error:", "ssh:"))), None)
    return reason or (lines[-1] if lines else done.said())


def _clone(location: str, folder: Path) -> Path:
    """The private bare clone: shared (alternates, nothing copied) for a local repository."""
    clone = folder / "repo.git"
    if (clone / "HEAD").is_file() and _git(clone, "rev-parse", "--is-bare-repository", check=False) == "true":
        return clone
    shutil.rmtree(clone, ignore_errors=True)
    shared = [] if is_url(location) else ["--shared"]
    done = run_git(folder, "clone", "--bare", "--quiet", "--no-tags", *shared, location, str(clone),
                   env=PLAIN_GIT, timeout_s=_FETCH_TIMEOUT_S)
    if not done.ok:
        shutil.rmtree(clone, ignore_errors=True)
        raise RefsError(f"cannot clone {shown(location)}: {shown(_said(done))}")
    return clone


def _intact(clone: Path) -> bool:
    return run_git(clone, "fsck", "--connectivity-only", "--no-dangling", env=PLAIN_GIT).ok


def _resolve_both(clone: Path, location: str, base_ref: str, head_ref: str) -> tuple[str, str]:
    # pins live for one preparation: a pin left from an earlier one may name a commit the caller
    # has since deleted and pruned, which would break every later fetch into this clone
    for pinned in filter(None, _git(clone, "for-each-ref", "--format=%(refname)", _PINS).splitlines()):
        _git(clone, "update-ref", "-d", pinned)
    return _resolve(clone, location, base_ref, "base"), _resolve(clone, location, head_ref, "head")


# what git says when the source has no such ref (a remote's, or a local branch asked of a clone)
_NO_SUCH_REF = re.compile(r"couldn't find remote ref|not our ref|unknown revision|invalid refspec|bad revision",
                          re.IGNORECASE)


def _resolve(clone: Path, location: str, ref: str, side: str) -> str:
    """The commit `ref` names in the source: fetched on demand (pull/N/head included) and pinned
    under refs/kvtasks/ while this preparation uses it."""
    pinned = f"{_PINS}/{side}"
    done = run_git(clone, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", location, f"+{ref}:{pinned}",
                   env=PLAIN_GIT, timeout_s=_FETCH_TIMEOUT_S)
    if done.ok:
        return _git(clone, "rev-parse", "--verify", f"{pinned}^{{commit}}")
    if _OID.fullmatch(ref):  # a commit id: reachable in the shared objects, or fetched by name
        oid = _git(clone, "rev-parse", "--verify", "--quiet", f"{ref.lower()}^{{commit}}", check=False)
        if oid:
            _git(clone, "update-ref", pinned, oid)
            return oid
    said = _said(done)
    if _NO_SUCH_REF.search(said):  # git's words for a name the source does not have
        raise RefsError(f"--{side}-ref {ref!r}: no such branch, tag or commit in {shown(location)}")
    raise RefsError(f"--{side}-ref {ref!r} could not be fetched from {shown(location)}: {shown(said)}")


def _write_patch(clone: Path, folder: Path, merge_base: str, head_oid: str, head_ref: str) -> Path:
    """The PR's change as one binary patch, proven byte-exact: applied to merge-base in a private
    index it must give head's tree exactly (contents, modes, renames, binary files, line endings)."""
    diff = run_git(clone, "diff", "--binary", "--full-index", "--no-color", "--no-ext-diff", "--no-textconv",
                   "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", merge_base, head_oid, env=PLAIN_GIT,
                   text=False)
    if not diff.ok:
        raise RefsError(f"git diff failed: {_said(diff)}")
    if not diff.stdout:
        raise RefsError(f"--head-ref {head_ref} changes nothing over its merge-base with the base ref")
    patches = folder / "patches"
    patches.mkdir(exist_ok=True)
    patch = patches / f"{merge_base[:12]}-{head_oid[:12]}.patch"
    if not patch.is_file() or patch.read_bytes() != diff.stdout:
        # another validation of this PR may be reading the patch: replace it whole, never rewrite it
        temporary = patches / f".{patch.name}.{os.getpid()}"
        temporary.write_bytes(diff.stdout)
        os.replace(temporary, patch)
    index = patches / f".index-{head_oid[:12]}-{os.getpid()}"
    try:
        env = {**PLAIN_GIT, "GIT_INDEX_FILE": str(index)}
        for args in (("read-tree", merge_base), ("apply", "--cached", "--binary", str(patch))):
            done = run_git(clone, *args, env=env)
            if not done.ok:
                raise RefsError(f"the change {merge_base[:12]}..{head_oid[:12]} does not replay as a patch: "
                                f"{_said(done)}")
        made = run_git(clone, "write-tree", env=env).stdout.strip()
    finally:
        index.unlink(missing_ok=True)
    if made != _git(clone, "rev-parse", f"{head_oid}^{{tree}}"):
        raise RefsError(f"the patch made from {merge_base[:12]}..{head_oid[:12]} does not reproduce head's tree")
    return patch


def _base_worktree(clone: Path, folder: Path, base_oid: str) -> Path:
    """The base tip checked out, detached, in the first slot no running validator holds: every PR
    against this tip reuses it (validations hand it back as they found it), and a slot a killed
    run left dirty is recovered or checked out again."""
    _git(clone, "worktree", "prune")
    slot = 0
    while True:
        worktree = folder / "trees" / (base_oid[:16] + (f"-{slot}" if slot else ""))
        if not held_by_a_validator(worktree):
            break
        slot += 1
    if (worktree / ".git").is_file() and _git(worktree, "rev-parse", "HEAD", check=False) == base_oid:
        try:
            Worktree(worktree, None).recover()  # what a killed validator left: its processes, its patch, its files
        except GitFailed:
            pass  # checked out again below
        if not _git(worktree, "status", "--porcelain", "--ignored", "--untracked-files=all", check=False):
            _stamp(worktree)
            return worktree
    shutil.rmtree(worktree, ignore_errors=True)
    _git(clone, "worktree", "prune")
    worktree.parent.mkdir(exist_ok=True)
    _git(clone, "worktree", "add", "--detach", "--force", str(worktree), base_oid)
    _stamp(worktree)
    return worktree


def _stamp(path: Path) -> None:
    """Mark `path` used now, for `clone_collection.collect`."""
    os.utime(path)
