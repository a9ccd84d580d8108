"""The front doors as doit task creators: one table, FRONT_DOORS, of the commands `doit` (through the
repository's dodo.py) and `validate-kernel-pr` (from the installed package, through doit's loader
API) both run. Each row names the variables its command takes and builds the namespace of task
creators doit loads; adding a command is adding a row.

A door's variables arrive as a dict of strings, however they were spelt (doit's `name=value`, the
CLI's `--name value`); a variable the door does not take is a usage error, since a misspelt one
(no_netwrok=1) would otherwise be dropped without a word.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kvtasks import demo
from kvtasks.front import cache_commands, graph, pr_targets, reporting
from kvtasks.report import pages
from kvtasks.run import batch, check, session
from kvtasks.system import progress
from kvtasks.fleet.resources import require_ray
from kvtasks.request import Request, UsageError, doit_variables, locate, resolve, validate_request
from kvtasks.evidence.workspace import Workspace

Namespace = dict[str, object]


@dataclass(frozen=True)
class FrontDoor:
    doc: str
    variables: tuple[str, ...]
    # (workspace, the variables given) -> the task creators doit loads for this command
    tasks: Callable[[Workspace, dict[str, str]], Namespace]


def located(options: dict, workspace: Workspace) -> Request:
    """The request `options` ask for, validated and its worktree found (resolved once its lock is held)."""
    return locate(validate_request(options), workspace.clones)


def held_and_resolved(requests: list[Request]) -> list[Request]:
    """Take each request's worktree for this validator, then resolve the requests (what they read
    of a worktree is read while no other validator has it)."""
    session.hold_worktrees(requests)
    return [resolve(request) for request in requests]


def single_request(workspace: Workspace, given: dict, demo_without_repo: bool = True) -> Request:
    """The located Request of one validation: the variables given, on the embedded demo when no repo
    is (unless the front door's form requires --repo)."""
    options = {name: value for name, value in given.items() if name not in ("demo", "quiet")}
    if "repo" not in options and demo_without_repo:
        try:
            options = {**demo.options(workspace.store.root, given.get("demo") or demo.DEFAULT_PR), **options}
        except demo.UnknownDemo as exc:
            raise UsageError(str(exc)) from None
    return located(options, workspace)


def validation(workspace: Workspace, given: dict, demo_without_repo: bool = True) -> Namespace:
    """One PR: on one target, or on each target the repository's configuration maps its changes to
    (in CI, a PR that touches no mapped file: nothing to validate, or not validated where it changes
    more than documentation and CI files, said in its report and comment)."""
    try:
        chosen = pr_targets.target_options(workspace, given)
    except pr_targets.UnreachedChanges as unreached:
        if not pr_targets.in_ci():
            raise
        raise pr_targets.write_unreached(workspace.reports, str(given.get("label") or "pr"), unreached) from None
    except pr_targets.NothingToValidate as nothing:
        if not pr_targets.in_ci():
            raise
        said = pr_targets.write_nothing_to_validate(workspace.reports, str(given.get("label") or "pr"), nothing)
        return {"task_validate": lambda: {"actions": [(progress.result, [said])],
                                          "uptodate": [False], "verbosity": 2, "doc": "nothing to validate"},
                "DOIT_CONFIG": reporting.doit_config(workspace), graph.REQUESTS: []}
    requests = held_and_resolved([single_request(workspace, options, demo_without_repo) for options in chosen])
    if len(requests) == 1:
        return graph.loader_namespace(requests, workspace)
    return graph.loader_namespace(requests, workspace, batch_name=pr_targets.pr_label(
        [request.label for request in requests]), one_pr=True)


def _validate(workspace: Workspace, given: dict[str, str]) -> Namespace:
    return validation(workspace, given)


def _batch(workspace: Workspace, given: dict[str, str]) -> Namespace:
    manifest = given.get("manifest")
    if not manifest:
        raise UsageError("batch needs manifest=FILE (TOML or JSON)")
    engine, archs = batch.manifest_engine(manifest, given.get("engine"))
    name, requests = batch.manifest_requests(manifest, lambda options: located(options, workspace))
    if engine == "ray":
        require_ray()  # refused before anything runs; Ray itself is imported only by the batch's task
        # the driver takes no worktree: each node checks the base out in its own workspace
        requests = [resolve(request) for request in requests]
        batch.check_base(manifest, requests)

        def task_batch():
            """Validate every PR of a manifest on a Ray cluster, on each of its archs."""
            from kvtasks.fleet import engine as fleet_engine
            return {"actions": [(graph.fleet_action, [fleet_engine.run_batch, requests, workspace, name, archs])],
                    "uptodate": [False], "verbosity": 2}
        return {"task_batch": task_batch, "DOIT_CONFIG": reporting.doit_config(workspace)}
    requests = held_and_resolved(requests)
    batch.check_base(manifest, requests)
    return graph.loader_namespace(requests, workspace, batch_name=name)


def _report(workspace: Workspace, given: dict[str, str]) -> Namespace:
    def task_report():
        """Rebuild reports from stored evidence (label=L for one); runs no target, no git."""
        yield from graph.report_tasks(workspace, given.get("label"))
    return {"task_report": task_report, "DOIT_CONFIG": reporting.doit_config(workspace)}


def _serve(workspace: Workspace, given: dict[str, str]) -> Namespace:
    port = given.get("port") or "8000"
    if not port.isdigit() or int(port) > 65535:
        raise UsageError(f"port= takes a port number, e.g. port=8000; got {port!r}")

    def task_serve():
        """Serve reports/ (the HTML pages and JSON) on localhost; port=0 picks a free port."""
        return {"actions": [(pages.serve, [workspace.reports, int(port)])], "uptodate": [False], "verbosity": 2}
    return {"task_serve": task_serve, "DOIT_CONFIG": reporting.doit_config(workspace)}


def _cache(workspace: Workspace, given: dict[str, str]) -> Namespace:
    def task_cache():
        """List stored evidence: key, kind, labels, size, age (base=OID: only that commit's)."""
        return {"actions": [(cache_commands.list_cache, [workspace, given.get("base")])], "uptodate": [False],
                "verbosity": 2}
    return {"task_cache": task_cache, "DOIT_CONFIG": reporting.doit_config(workspace)}


def _cache_gc(workspace: Workspace, given: dict[str, str]) -> Namespace:
    older = given.get("older")
    if not older:
        raise UsageError("cache-gc needs older=AGE, e.g. older=30d")
    age = cache_commands.parse_age(older)  # a bad age is refused before doit runs anything

    def task_cache_gc():
        """Remove stored evidence older than older=AGE (e.g. 30d), and private clones and trees unused that long; never one in use."""
        return {"basename": "cache-gc", "actions": [(cache_commands.collect, [workspace, older, age])],
                "uptodate": [False], "verbosity": 2}
    return {"task_cache_gc": task_cache_gc, "DOIT_CONFIG": reporting.doit_config(workspace)}


def _check(workspace: Workspace, given: dict[str, str]) -> Namespace:
    request = check.request_of(workspace, given)

    def task_check():
        """Run the target once as a validation's base run would and say what a PR could reach (no repo: the demo)."""
        secret = workspace.store.grid_secret(request.host.grid_secret)
        return {"actions": [lambda: check.said(request, given.get("json"), secret, given.get("k")) == 0],
                "uptodate": [False], "verbosity": 2}
    return {"task_check": task_check, "DOIT_CONFIG": reporting.doit_config(workspace)}


FRONT_DOORS: dict[str, FrontDoor] = {
    "validate": FrontDoor("validate one PR (no variables: the embedded demo; demo=NAME picks another demo PR)",
                          (*doit_variables(), "demo", "quiet"), _validate),
    "batch": FrontDoor("validate every PR of manifest=FILE against one base", ("manifest", "engine", "quiet"), _batch),
    "report": FrontDoor("rebuild reports from stored evidence (label=L for one); runs no target, no git",
                        ("label", "quiet"), _report),
    "serve": FrontDoor("serve reports/ (the HTML pages and JSON) on localhost (port=8000; 0 picks a free port)",
                       ("port", "quiet"), _serve),
    "cache": FrontDoor("list stored evidence: kind, key, labels, size, age (base=OID: only that commit's)",
                       ("base", "quiet"), _cache),
    "check": FrontDoor("run a target once as a validation's base run would and say what a PR could reach "
                       "(json=FILE also writes it as JSON; k=EXPR runs only the items pytest's -k selects)",
                       (*doit_variables(), "quiet", "json", "k"), _check),
    "cache-gc": FrontDoor("remove stored evidence older than older=AGE (e.g. 30d), and private clones and trees "
                          "unused that long", ("older", "quiet"), _cache_gc),
}
# the doors doit's own commands list (serve only serves; it has nothing to describe as a task)
LISTED = ("batch", "cache", "cache-gc", "check", "report", "validate")


def namespace(command: str, workspace: Workspace, given: dict[str, str], quiet: bool) -> Namespace:
    """The task creators of `command` with the variables `given`; a command that is no front door
    (doit's own list, help, info, forget, ...) gets the catalogue, which builds and takes nothing.
    Progress and results are shown unless `quiet` (kvtasks.system.progress)."""
    progress.show(quiet)
    door = FRONT_DOORS.get(command)
    if door is None:
        return catalogue(workspace)
    unknown = sorted(set(given) - set(door.variables))
    if unknown:
        raise UsageError(f"{unknown[0]!r} is no variable of `{command}`; it takes {', '.join(door.variables)}")
    return door.tasks(workspace, given)


def catalogue(workspace: Workspace) -> Namespace:
    """Task creators that only describe the front doors, for doit's own commands (list, help, info,
    forget, ...): loading them builds no demo repository, takes no worktree and runs nothing."""
    def described(name: str, doc: str):
        return lambda: {"basename": name, "actions": None, "doc": doc}

    return {**{f"task_{name.replace('-', '_')}": described(name, FRONT_DOORS[name].doc) for name in LISTED},
            "DOIT_CONFIG": reporting.doit_config(workspace)}
