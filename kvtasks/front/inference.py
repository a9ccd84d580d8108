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
from kvtasks.request.repo_config import needs_no_validation
from kvtasks.run import impact
from kvtasks.sources.impact_map import infer
from kvtasks.worktree.git_commands import run_git


class NoRouteReached(UsageError):
    """With no configuration: the PR's changes reach no route through base's impact map."""

    def __init__(self, message: str, unreached: list[str], nothing: bool):
        super().__init__(message)
        self.unreached, self.nothing = unreached, nothing


def inferred_targets(workspace: Workspace, tree: Path, base_oid: str, changed: list[str],
                     hunks: dict[str, list[tuple[int, int]]], given: dict) -> list[dict]:
    """The options of each inferred validation (the caller's options win over what was inferred);
    raise NoRouteReached when there is none."""
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
    unvalidated = {"unvalidated_changes": unreached} if unreached else {}
    chosen = [target.model_copy(update={"map_reused": reused}) for target in inferred]
    if len(chosen) == 1:
        return [{**chosen[0].options(), **given, **unvalidated, "inferred": chosen[0]}]
    if given.get("out"):
        raise UsageError(f"--out names one report, and this PR needs {len(chosen)} targets "
                         f"({', '.join(target.name for target in chosen)}); their reports go to the workspace's "
                         "reports/<label>.<target>/")
    label = str(given.get("label") or "pr")
    shared = {key: value for key, value in given.items() if key != "default_out"}
    return [{**target.options(), **shared, **unvalidated, "inferred": target, "label": f"{label}.{target.name}"}
            for target in chosen]


def suggested_config(workspace: Workspace, tree: Path, given: dict) -> list[str]:
    """The [tool.kvtasks] table base's map infers for the checkout as if the PR changed every module of it:
    a target per route its tests reach, and the map from each module to the targets it leads to."""
    head = run_git(tree, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    if head.returncode != 0:
        raise UsageError(f"--suggest-config maps a git checkout's committed tests; {tree} has no commit")
    impact_map, _ = impact.load_or_build(workspace, tree, head.stdout.strip(), given)
    modules = sorted({function.path for function in impact_map.functions})
    inferred, unreached = infer(impact_map, modules, needs_no_validation)
    lines = [f"# inferred from {head.stdout.strip()[:12]}'s impact map ({impact_map.note})"]
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
