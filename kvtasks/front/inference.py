"""Targets for a PR whose repository configures none: inferred from its changed files through base's
impact map (kvtasks.run.impact builds it once per base; kvtasks.sources.impact_map infers from it).

Each inferred target is validated as a configured one would be, and its report says how it was
chosen (test_selection.inferred). A PR whose changes reach no route through the map is never
"nothing to validate" unless it changes documentation and CI files only: it is a usage error naming
the files, in CI an INCONCLUSIVE report (kvtasks.front.pr_targets). `check --suggest-config` prints
what the map infers for every function of the checkout, as the [tool.kvtasks] table that would
configure it.
"""
from __future__ import annotations

import json
from pathlib import Path

from kvtasks.errors import UsageError
from kvtasks.evidence.workspace import Workspace
from kvtasks.records import InferredTarget
from kvtasks.request.repo_config import needs_no_validation
from kvtasks.run import impact
from kvtasks.sources.impact_map import infer
from kvtasks.worktree.git_commands import run_git


class NoRouteReached(UsageError):
    """With no configuration: the PR's changes reach no route through base's impact map."""

    def __init__(self, message: str, unreached: list[str], nothing: bool):
        super().__init__(message)
        self.unreached, self.nothing = unreached, nothing


def head_commit(tree: Path) -> str:
    """The checkout's HEAD commit ("" where it has none): the base its map is keyed by."""
    head = run_git(tree, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    return head.stdout.strip() if head.returncode == 0 else ""


def inferred_targets(workspace: Workspace, tree: Path, base_oid: str, changed: list[str],
                     hunks: dict[str, list[tuple[int, int]]], given: dict) -> tuple[list[InferredTarget], list[str]]:
    """The targets base's map infers for the changed files, and the changed files none validates;
    raise NoRouteReached when there is no target."""
    impact_map, reused = impact.load_or_build(workspace, tree, base_oid, given)
    inferred, unreached = infer(impact_map, changed, needs_no_validation, hunks)
    if not inferred:
        listed = ", ".join(unreached[:20]) + (" ..." if len(unreached) > 20 else "")
        if not unreached:
            raise NoRouteReached(f"the PR changes documentation and CI files only ({', '.join(changed[:20])}); "
                                 "nothing to validate", unreached=[], nothing=True)
        raise NoRouteReached(f"the PR changes {listed}, and no test of base reaches them through its impact map "
                             f"({impact_map.note}); give --target, or configure the repository's [tool.kvtasks]",
                             unreached=unreached, nothing=False)
    return [target.model_copy(update={"map_reused": reused}) for target in inferred], unreached


def suggested_config(workspace: Workspace, tree: Path, given: dict) -> list[str]:
    """The [tool.kvtasks] table base's map infers for the checkout as if the PR changed every module of it:
    a target per route its tests reach, and the map from each module to the targets it leads to."""
    head = head_commit(tree)
    if not head:
        raise UsageError(f"--suggest-config maps a git checkout's committed tests; {tree} has no commit")
    impact_map, _ = impact.load_or_build(workspace, tree, head, given)
    modules = sorted({function.path for function in impact_map.functions})
    inferred, unreached = infer(impact_map, modules, needs_no_validation)
    lines = [f"# inferred from {head[:12]}'s impact map ({impact_map.note})"]
    for target in inferred:
        lines += ["", f"[tool.kvtasks.targets.{json.dumps(target.name)}]", f"# {target.why}",
                  *(f"{key} = {json.dumps(value)}" for key, value in target.options().items())]
    lines += ["", "[tool.kvtasks.map]"]
    for path in modules:
        names = [target.name for target in inferred if path in target.changed]
        if names:
            lines.append(f"{json.dumps(path)} = {json.dumps(names)}")
    if unreached:
        lines.append(f"# reached by no test of the checkout: {', '.join(unreached)}")
    return lines
