"""merge_sim: does the PR apply to this base, and what exactly are base, patch and head?

The tree is not touched here: the patch is applied to a private index (the head view) and
checked against the tree with `git apply --check`. A dirty tree (with or without a patch: what the
caller has there would not survive a lend) or a conflict halts the run.
"""
from __future__ import annotations


from pydantic import ConfigDict

from kvtasks.stages import Context, Stage, StageResult, StageSpec, result
from kvtasks.records import Repo
from kvtasks.worktree import GitFailed, shown

NAME = "merge_sim"


class MergeSim(Stage):
    """Whether the patch applies to this base, and what it changes."""

    model_config = ConfigDict(extra="forbid")

    changed_paths: dict[str, str] | None = None  # path -> git's change letter (A, M, D, R ...)
    identity_note: str | None = None  # why the report cannot be matched to a remote PR head
    dirty_entries: int | None = None  # how many entries made the supplied tree unclean


def run(ctx: Context) -> StageResult:
    request, worktree = ctx.request, ctx.worktree
    base = worktree.head_oid()
    repo = {
        "worktree": str(worktree.path),
        "base": base,
        "head": request.head_sha,
        "kind": worktree.kind(),
        "patch_sha256": request.patch_sha256(),
        # given by refs: the worktree is kvtasks' private checkout of the base ref's tip in a clone of `source`
        "source": request.source,
        "base_ref": request.base_ref,
        "head_ref": request.head_ref,
    }

    # with or without a patch: every lend hands the tree back clean, so an untracked, ignored or
    # changed entry the caller has would be removed with what the runs wrote
    with worktree.quiescent():
        dirty = worktree.status()
        applies = None if dirty or not request.has_patch else _check_apply(ctx)
    if dirty:
        stage = result(NAME, "skip", f"worktree is not isolated-clean ({shown(dirty)}); "
                                     "nothing was applied or run: commit, stash or remove them (a PR given by "
                                     "refs is validated in a private clone)", dirty_entries=len(dirty))
        stage.finding("merge.dirty-worktree", "note", "the supplied worktree has tracked, untracked or ignored files; "
                              "nothing was applied and nothing was run")
        stage.facts.set(repo=Repo(**{**repo, "head": None}), halt="the supplied worktree was not clean")
        return stage

    if not request.has_patch:
        stage = result(NAME, "skip", "no patch: the checkout was validated directly; "
                                     "mergeability and base attribution were not tested")
        stage.facts.repo = Repo(**{**repo, "head": request.head_sha or base})
        return stage

    if applies is not None:
        stage = result(NAME, "fail", f"patch does not apply to the base: {applies}")
        stage.finding("merge.patch-does-not-apply", "blocker", f"the patch does not apply to the current base {base[:12]}: {applies}")
        stage.facts.set(repo=Repo(**{**repo, "head": None}), halt="the patch does not apply")
        return stage

    fields = {"changed_paths": ctx.head_view.changes}
    if request.head_sha is None:
        fields["identity_note"] = "no --head-sha: the report cannot be matched to a remote PR head"
    stage = result(NAME, "pass", f"patch applies cleanly ({len(fields['changed_paths'])} paths)", **fields)
    stage.facts.repo = Repo(**repo)
    return stage


def _check_apply(ctx: Context) -> GitFailed | None:
    """Apply the patch to a private index, then check it against the tree itself."""
    try:
        ctx.head_view
        ctx.worktree.check_apply(ctx.request.patch)
    except GitFailed as exc:
        return exc
    return None


STAGE = StageSpec(NAME, run, payload=MergeSim, provides=(Repo,), sets=("halt",))
