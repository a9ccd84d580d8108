"""Which targets validate a PR, from the kernel repository's configuration (kvtasks.request.repo_config), and
the PR's own report when there are several: one report per target and, beside them, the worst
verdict with each target's, as a fleet PR has per architecture.

With refs (or a patch) and no --target, the targets are those the configuration's map sends the
PR's changed files to. A PR that changes no mapped file is a usage error naming the files and the
map, never a pass. In CI (where the variable CI is set) it is instead, when it changes documentation
and CI files only (or files base maps to no target), a one-line "nothing to validate" report and
comment, exit 0; when it changes anything else, an INCONCLUSIVE report and comment naming what no
target validates, exit 2 under every --fail-on. Where the PR changes mapped files and others no target
validates, each target's report names those (`unvalidated_changes`) and cannot PASS. `--target NAME`
picks a named target. Options given by the caller win. A repository that configures no target and
no map gets its targets inferred from base's impact map (kvtasks.front.inference), answered the
same way when the PR reaches none.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from kvtasks import __version__
from kvtasks.worktree import clones
from kvtasks.front.inference import NoRouteReached, head_commit, inferred_targets
from kvtasks.run.pipeline import REPORT
from kvtasks.report import EXIT_CODES, comment
from kvtasks.request.repo_config import RepoConfig, load, needs_no_validation
from kvtasks.run.impact import MapUnavailable
from kvtasks.request import base_hunks, patch_paths
from kvtasks.request.model import checked_label
from kvtasks.system.files import write_atomic
from kvtasks.errors import INCONCLUSIVE_EXIT, KvtasksError, UsageError
from kvtasks.evidence.workspace import Workspace

PR_REPORT = "pr_report.json"
# set by CI services (GitHub Actions and GitLab among them): a PR that touches no mapped file there is
# reported as nothing to validate, where an interactive command is told it is a usage error
CI_VARIABLE = "CI"


class NothingToValidate(UsageError):
    """The PR changes no file the configuration's map sends to a target (or, with none, documentation
    and CI files only); `line` is what its report says."""

    def __init__(self, message: str, changed: list[str], line: str):
        super().__init__(message)
        self.changed, self.line = changed, line


class UnreachedChanges(UsageError):
    """The PR changes files no target validates, and no mapped file: nothing of it would be tested;
    `line` is what its report says."""

    def __init__(self, message: str, unreached: list[str], line: str):
        super().__init__(message)
        self.unreached, self.line = unreached, line


class NotValidated(KvtasksError):
    """In CI: a PR whose changes no target validates, said in its INCONCLUSIVE report and comment
    (`report`)."""

    exit_code = INCONCLUSIVE_EXIT

    def __init__(self, message: str, report: Path):
        super().__init__(message)
        self.report = report


def in_ci() -> bool:
    return os.environ.get(CI_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def _listed(files: list[str]) -> str:
    return f"{', '.join(files[:20])}{' ...' if len(files) > 20 else ''}"


def _say_without_a_run(reports: Path, label: str, record: dict, heading: str, summary: str, line: str) -> Path:
    """A PR's one-line answer when nothing was run: its pr_report.json (`record` in it), comment and
    summary, and the step summary; the report's path."""
    folder = reports / checked_label(label)
    write_atomic(folder / PR_REPORT, (json.dumps({"kvtasks_version": __version__, "label": label, **record},
                                                  indent=2) + "\n").encode())
    posted = f"## kvtasks: {heading} for {comment.inline(label)}{summary}\n\n{comment.inline(line)}\n"
    write_atomic(folder / comment.COMMENT, posted.encode())
    write_atomic(folder / "summary.md", f"## kvtasks: {heading}\n\n{line}\n".encode())
    comment.append_to_step_summary(posted)
    return folder / PR_REPORT


def write_nothing_to_validate(reports: Path, label: str, nothing: NothingToValidate) -> str:
    """In CI, a PR that touches no mapped file gets a one-line report and comment (and exits 0): what
    it changed and which map said so; nothing was run."""
    line = nothing.line
    written = _say_without_a_run(reports, label, {"verdict": None, "nothing_to_validate": line,
                                                  "changed": nothing.changed}, "nothing to validate", "", line)
    return f"{line}\nreport: {written}"


def write_unreached(reports: Path, label: str, unreached: UnreachedChanges) -> NotValidated:
    """In CI, a PR that changes files no target validates (and no mapped one): an INCONCLUSIVE report and
    comment naming them; nothing was run, and a gate never passes it (exit 2 under every --fail-on)."""
    line = unreached.line
    written = _say_without_a_run(reports, label, {"verdict": "INCONCLUSIVE", "process_exit_code": INCONCLUSIVE_EXIT,
                                                  "not_validated": line, "unreached": unreached.unreached},
                                 "**INCONCLUSIVE**", ": nothing of it was validated", line)
    return NotValidated(f"{line} (report: {written})", written)


# worst first, as a fleet PR's archs are merged
WORST_FIRST = ("BLOCK", "NEEDS_WORK", "INCONCLUSIVE", "PASS")


def _base_tree_and_changes(workspace: Workspace, given: dict) -> tuple[Path, bytes | None, str]:
    """Base's checkout (the private one of a PR given by refs), the PR's patch (None: no PR change)
    and base's OID ("" where the checkout has none)."""
    repo = str(given["repo"])
    if given.get("base_ref") and given.get("head_ref"):
        try:
            refs = clones.prepare(repo, str(given["base_ref"]), str(given["head_ref"]), workspace.clones)
        except clones.RefsError as exc:
            raise UsageError(str(exc)) from None
        return refs.worktree, refs.patch.read_bytes(), refs.base_oid
    patch = given.get("patch")
    tree = Path(repo).expanduser()
    if not patch:
        return tree, None, ""
    try:
        data = Path(str(patch)).expanduser().read_bytes()
    except OSError:
        return tree, None, ""  # build_request says what is wrong with the patch
    return tree, data, head_commit(tree) if tree.is_dir() else ""


def target_options(workspace: Workspace, given: dict) -> list[dict]:
    """The options of each validation the caller's options ask for: one, unless base's configuration
    maps the PR's changed files to several targets."""
    by_refs, by_patch = given.get("base_ref") or given.get("head_ref"), given.get("patch") or given.get("head_sha")
    if not given.get("repo") or (by_refs and by_patch):  # build_request says what is wrong with the PR's naming
        return [given]
    tree, patch, base_oid = _base_tree_and_changes(workspace, given)
    changed = sorted(set(patch_paths(patch))) if patch is not None else None
    config = load(tree) if tree.is_dir() else None
    named = given.get("target") or given.get("tests")
    if config is not None and (named or changed is None):
        return [config.chosen(given, tree)]
    if config is not None and (config.map or config.targets):
        return _mapped(config, changed, given)
    if named or changed is None or not base_oid:
        return [given]
    given = {**(config.defaults if config is not None else {}), **given}
    try:
        inferred, unreached = inferred_targets(workspace, tree, base_oid, changed, base_hunks(patch), given)
    except (MapUnavailable, NoRouteReached) as stopped:
        # a map that cannot be made reaches nothing either: every changed file but documentation is unreached
        unreached = stopped.unreached if isinstance(stopped, NoRouteReached) else \
            [path for path in changed if not needs_no_validation(path)]
        if not unreached:
            raise NothingToValidate(str(stopped), changed=changed, line=(
                f"nothing to validate: the PR changes documentation and CI files only ({_listed(changed)})")) from None
        why = f"and {stopped}" if isinstance(stopped, MapUnavailable) else \
            "which no test of base reaches through its impact map"
        raise UnreachedChanges(str(stopped), unreached=unreached, line=(
            f"not validated: the PR changes {_listed(unreached)}, {why}; give --target, or configure the "
            "repository's [tool.kvtasks]")) from None
    return _each_target(given, {target.name: {**target.options(), "inferred": target} for target in inferred}, unreached)


def _mapped(config: RepoConfig, changed: list[str], given: dict) -> list[dict]:
    names = config.targets_for(changed)
    if not names:
        globs = "; ".join(f"{pattern} -> {', '.join(targets) or 'no target'}" for pattern, targets in config.map.items())
        said = (f"the PR changes {_listed(changed)}, and no glob of the map "
                f"in base's {config.file} sends any of them to a target ({globs or 'the map is empty'}); give --target "
                "to validate it anyway")
        unreached = config.unreached(changed)
        if unreached:
            raise UnreachedChanges(said, unreached=unreached, line=(
                f"not validated: the PR changes {_listed(unreached)}, which no target of the map in base's "
                f"{config.file} validates; map them in base's {config.file} (a glob mapped to [] needs no "
                "validation), or give --target"))
        raise NothingToValidate(said, changed=changed, line=(
            f"nothing to validate: the PR changes no file the map in base's {config.file} sends to a target "
            f"({_listed(changed)})"))
    return _each_target(given, {name: config.options(name) for name in names}, config.unreached(changed))


def _each_target(given: dict, targets: dict[str, dict], unreached: list[str]) -> list[dict]:
    """One validation's options per target (its options under the caller's): one target keeps the
    caller's label, several are `<label>.<name>` each and refuse --out (which names one report); what
    the PR changes that no target validates rides each, whose report says so and cannot PASS."""
    unvalidated = {"unvalidated_changes": unreached} if unreached else {}
    if len(targets) == 1:
        return [{**options, **given, **unvalidated} for options in targets.values()]
    if given.get("out"):
        raise UsageError(f"--out names one report, and this PR needs {len(targets)} targets ({', '.join(targets)}); "
                         "their reports go to the workspace's reports/<label>.<target>/")
    label = str(given.get("label") or "pr")
    shared = {key: value for key, value in given.items() if key != "default_out"}
    return [{**options, **shared, **unvalidated, "label": f"{label}.{name}"} for name, options in targets.items()]


def pr_label(labels: list[str]) -> str:
    """The PR's own label, from its targets' (`<label>.<target>`)."""
    return labels[0].rsplit(".", 1)[0]


def write_pr_report(reports: Path, labels: list[str]) -> tuple[int, Path]:
    """reports/<PR label>/pr_report.json and comment.md: the worst verdict first, then each target's;
    return the worst verdict's exit code and the PR report's path."""
    label = pr_label(labels)
    targets = {}
    for target_label in labels:
        body = json.loads((reports / target_label / "validation_report.json").read_text())
        targets[target_label.rsplit(".", 1)[1]] = {"label": target_label, "verdict": body["verdict"],
                                                   "report": str(reports / target_label / "validation_report.json"),
                                                   "body": body}
    verdict = min((entry["verdict"] for entry in targets.values()), key=WORST_FIRST.index)
    summary = {"schema_version": targets[next(iter(targets))]["body"]["schema_version"], "kvtasks_version": __version__,
               "label": label, "verdict": verdict, "process_exit_code": EXIT_CODES[verdict],
               "targets": {name: {key: entry[key] for key in ("label", "verdict", "report")}
                           for name, entry in targets.items()}}
    folder = reports / label
    write_atomic(folder / PR_REPORT, (json.dumps(summary, indent=2) + "\n").encode())
    lines = [f"## kvtasks: **{verdict}** for {comment.inline(label)}, the worst of {len(targets)} targets", "",
             "| target | verdict |", "| --- | --- |",
             *(f"| {comment.inline(name, in_table=True)} | {entry['verdict']} |" for name, entry in targets.items()), ""]
    for name, entry in targets.items():
        own = comment.markdown(entry["body"], REPORT.required, comment.page_url(entry["label"]))
        lines += [own.replace("## kvtasks:", "### Target:", 1).replace("\n### ", "\n#### "), ""]
    posted = "\n".join(lines).rstrip() + "\n"
    write_atomic(folder / comment.COMMENT, posted.encode())
    comment.append_to_step_summary(posted)
    return EXIT_CODES[verdict], folder / PR_REPORT
