"""The files test_policy reads, through a stage's context: a file's policy followed into the
checkout modules it imports names from, the deleted test file a PR-added one replaces, what of the
target head deletes, and the modules a PR supplies a test's expectations from.

It reads (kvtasks.sources does the parsing); the stage decides what the readings mean.
"""
from __future__ import annotations

import difflib
from typing import Callable

from kvtasks import sources
from kvtasks.sources import Policy, read_policy
from kvtasks.stages import Context
from kvtasks.stages.sides import is_test_path


def read_followed(text: str | None, read: Callable[[str], str | None]) -> Policy:
    """A file's policy, followed into the checkout modules it imports names from (`read` gives their
    text on the same side): a tolerance constant (`atol=ATOL`) is held at its defining module's value,
    and a comparison helper's call takes that helper's tolerance defaults."""
    constants, helpers = {}, {}
    for module, name, local in sources.imported_names(sources.parse(text)):
        defining = next((found for path in sources.module_files(module) if (found := read(path)) is not None), None)
        if defining is None:
            continue
        there = read_policy(defining)
        if name in there.constants:
            constants[local] = there.constants[name]
        if name in there.helpers:
            helpers[f"{module}.{name}"] = there.helpers[name]
    policy = read_policy(text or "", helpers)
    policy.constants = {**constants, **policy.constants}
    return policy


def renamed_from(ctx: Context, path: str) -> str | None:
    """The test file a PR-added file replaces: a deleted test file most like it (git's rename sense),
    or failing that, the deleted one sharing the most test functions with it."""
    changes = ctx.head_view.changes
    if changes.get(path) != "A":
        return None
    text = ctx.head_text(path) or ""
    tests = read_policy(text).tests
    best, best_score = None, (0, 0.5)
    for old, change in changes.items():
        if change != "D" or not is_test_path(old) or not old.endswith(".py"):
            continue
        before = ctx.worktree.read_base(old) or ""
        ratio = difflib.SequenceMatcher(a=before, b=text, autojunk=False).ratio()
        score = (1, ratio) if ratio > 0.5 else (0, len(tests & read_policy(before).tests))
        if score > best_score:
            best, best_score = old, score
    return best


def target_deleted(ctx: Context) -> str:
    """What of the target base has and head deletes (the file, or the test a `file::test` names); '' if nothing."""
    request = ctx.request
    base_text, head_text = ctx.worktree.read_base(request.target_path), ctx.head_text(request.target_path)
    if base_text is None:
        return ""
    if head_text is None:
        return f"{request.target_path} is deleted"
    node = [part.split("[", 1)[0] for part in request.target.split("::")[1:]]
    if not node:
        return ""
    test = ".".join(node)
    base, head = read_policy(base_text), read_policy(head_text)
    if base.parsed and head.parsed and test in base.tests and test not in head.tests:
        return f"{request.target_path}::{test} is deleted from the file"
    return ""


def supplied_modules(ctx: Context, roots: list[str]) -> set[str]:
    """The modules a PR supplies a test's expectations from: the routes' own, and every one it adds
    (a reference module beside its tests included), the target aside."""
    modules = {route.module for route in ctx.request.routes}
    for path, change in ctx.head_view.changes.items():
        if change != "A" or not path.endswith(".py") or path == ctx.request.target_path:
            continue
        for root in sorted(["", *roots], key=len, reverse=True):
            if not root or path.startswith(root.rstrip("/") + "/"):
                inside = path[len(root.rstrip("/")) + 1:] if root else path
                modules.add(inside.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
                break
    return modules
