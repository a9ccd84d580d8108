"""validate-kernel-pr: the installed front door; each command runs the same doit graph as `doit`.

    validate-kernel-pr validate [FLAGS | name=value ...]   one PR (no --repo: the embedded demo)
    validate-kernel-pr --repo W --target T ...              the same, the flag form
    validate-kernel-pr batch --manifest FILE | report | serve | cache | cache-gc --older 30d
    validate-kernel-pr check [--target T | NAME ...] [--json FILE]   run a target once, as a base run would
    validate-kernel-pr check --repo W --suggest-config   the [tool.kvtasks] table inferred for a checkout
    validate-kernel-pr schema [--config | --summary] | fleet-node | --version

Exit codes: 0 PASS, 1 BLOCK or NEEDS_WORK, 2 INCONCLUSIVE (or kvtasks crashed: its traceback is in
crash.log beside the report), 64 a usage error (no report written);
--fail-on moves the bar a verdict fails a CI gate at.
Evidence, clones and published reports live under $KVTASKS_HOME (default ~/.cache/kvtasks), never in
the current directory or the worktree; the report is also written to --out (default
./validation_report.json for the flag form, unless that lies inside the worktree: then the
workspace's reports/<label>/ is the only copy, and a line says so).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kvtasks import __version__, errors, report, worktree
from kvtasks.front import front_doors, graph, inference, machine_summary, pr_targets
from kvtasks.run import check
from kvtasks.system import progress
from kvtasks.errors import UsageError
from kvtasks.run.pipeline import REPORT
from kvtasks.request.config_model import KvtasksTable
from kvtasks.report import comment
from kvtasks.request import declared_options
from kvtasks.evidence.workspace import Workspace

DEFAULT_OUT = "validation_report.json"
# the verdicts from least to most severe; --fail-on X fails the gate at X and every verdict above it
SEVERITY_ORDER = ("PASS", "INCONCLUSIVE", "NEEDS_WORK", "BLOCK")
FAIL_ON = {"inconclusive": "INCONCLUSIVE", "needs_work": "NEEDS_WORK", "block": "BLOCK"}
# the front door's own options (_output_options): how it speaks and gates, no Request field
OUTPUT_OPTIONS = ("quiet", "verbose", "format", "fail_on", "report_url")
EXIT_CODES_HELP = ("exit codes: 0 PASS, 1 BLOCK or NEEDS_WORK, 2 INCONCLUSIVE, 64 a usage error (no report); "
                   "--fail-on moves the bar")


def workspace_root() -> Path:
    configured = os.environ.get("KVTASKS_HOME", "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache).expanduser().resolve() / "kvtasks"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own usage errors are UsageErrors too
        raise UsageError(message)


def _output_options(p: argparse.ArgumentParser) -> None:
    """How much the front door says, in which form, and which verdicts fail a CI gate."""
    p.add_argument("--quiet", action="store_true", help="no progress lines and no summary")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="more progress: the workspace, each validation's tree, target and report, every doit task")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="json: one machine summary (verdicts, exit codes, report paths, findings by rule) on "
                        "stdout, and no progress")
    p.add_argument("--fail-on", choices=tuple(FAIL_ON), default="inconclusive",
                   help="the least severe verdict that exits non-zero (default inconclusive: any verdict but PASS); "
                        "a verdict below it exits 0")
    p.add_argument("--report-url", metavar="PREFIX",
                   help="where reports/ is served (e.g. a CI artifact or pages URL): comment.md links the "
                        "report's page under it")


def parser(demo: bool = False, prog: str = "validate-kernel-pr", description: str = "",
           epilog: str = EXIT_CODES_HELP) -> argparse.ArgumentParser:
    """The flags, derived from the options the Request declares, plus the front door's own."""
    p = Parser(prog=prog, description=description or __doc__.split("\n\nExit codes")[0],
                epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    for declared in declared_options():
        option = declared.option
        if option.switch:
            p.add_argument(*declared.flags, dest=declared.field, action="store_true", help=option.help)
        elif option.repeated:
            p.add_argument(*declared.flags, dest=declared.field, action="append", default=[], help=option.help)
        else:
            p.add_argument(*declared.flags, dest=declared.field, help=option.help)
    if demo:
        p.add_argument("--demo", help="with no --repo: which embedded demo PR to validate")
    _output_options(p)
    return p


def door_parser(command: str) -> argparse.ArgumentParser:
    """A front door's variables as flags (--manifest FILE, --older 30d, ...)."""
    door = front_doors.FRONT_DOORS[command]
    p = Parser(prog=f"validate-kernel-pr {command}", description=door.doc, epilog=EXIT_CODES_HELP)
    for variable in door.variables:
        if variable != "quiet":
            p.add_argument(f"--{variable.replace('_', '-')}", dest=variable)
    _output_options(p)
    return p


def _normalise(argv: list[str], variables: dict[str, tuple[str, bool]], p: argparse.ArgumentParser) -> list[str]:
    """doit's `name=value` words as flags, and `--shape-arg --shapes` as `--shape-arg=--shapes`.

    `variables` maps a variable to its flag and whether it is a switch (written name=1); a word
    that is a flag's value (`--tol-table f32=1e-5`) stays that value."""
    dash_valued = {flag for declared in declared_options() if declared.option.dash_led for flag in declared.flags}
    valued = {flag for action in p._actions if action.nargs != 0 for flag in action.option_strings}
    joined, index = [], 0
    while index < len(argv):
        word = argv[index]
        if word[:1] != "-" and "=" in word and not (index and argv[index - 1] in valued):
            name, value = word.split("=", 1)
            if name not in variables:
                raise UsageError(f"{name!r} is no variable of this command; it takes {', '.join(variables)}")
            flag, switch = variables[name]
            if not switch:
                joined.append(f"{flag}={value}")
            elif value not in ("", "0"):
                joined.append(flag)
        elif word in dash_valued and index + 1 < len(argv):
            joined.append(f"{word}={argv[index + 1]}")
            index += 1
        else:
            joined.append(word)
        index += 1
    return joined


def _request_variables() -> dict[str, tuple[str, bool]]:
    return {variable: (declared.flags[0], declared.option.switch)
            for declared in declared_options() for variable in declared.variables}


# findings no --fail-on lets pass: a CI gate must not go green on a run that tested nothing for want of
# the repository's own dependencies
ALWAYS_FAIL = ("environment.incomplete",)


def gate_code(bodies: list[dict], code: int, fail_on: str) -> int:
    """The exit code a CI gate sees: a run whose verdicts all lie below --fail-on exits 0, unless a
    report carries a finding no --fail-on lets pass."""
    if any(finding["rule"] in ALWAYS_FAIL for body in bodies for finding in body["findings"]):
        return code or 2
    if bodies and all(SEVERITY_ORDER.index(body["verdict"]) < SEVERITY_ORDER.index(FAIL_ON[fail_on])
                      for body in bodies):
        return 0
    return code


def _run(command: str, build_namespace, options: dict, workspace: Workspace, site: errors.CrashSite) -> int:
    """Run a door's graph and turn its outcome into the exit code and output asked for."""
    if options["report_url"]:
        os.environ[comment.REPORT_URL_VARIABLE] = options["report_url"]
    as_json = options["format"] == "json"
    built: dict = {}

    def namespace():
        built.update(build_namespace())
        labels = [request.label for request in built.get(graph.REQUESTS, [])]
        site.label = labels[0] if len(labels) == 1 else None  # a crash is kept beside the one report
        if options["verbose"]:
            print(f"validate-kernel-pr: workspace {workspace.root}", file=sys.stderr)
            for request in built.get(graph.REQUESTS, []):
                print(f"validate-kernel-pr: {request.label}: {request.repo} target {request.target}, report "
                      f"{workspace.report_paths(request)[0]}", file=sys.stderr)
        return errors.namespace_through_doit(built)

    try:
        code = graph.execute(namespace, command, quiet=options["quiet"] or as_json, verbose=options["verbose"])
    except (pr_targets.NotValidated, errors.Escaped) as stopped:
        said = stopped.error if isinstance(stopped, errors.Escaped) else stopped
        if as_json and isinstance(said, pr_targets.NotValidated):  # a bot reads its INCONCLUSIVE report too
            print(json.dumps(machine_summary.machine_summary(command, said.exit_code, [said.report]), indent=2))
        raise
    reports = [workspace.reports / request.label / "validation_report.json"
               for request in built.get(graph.REQUESTS, [])]
    bodies = [json.loads(path.read_text()) for path in reports if path.is_file()]
    code = gate_code(bodies, code, options["fail_on"]) if len(bodies) == len(reports) else code
    if as_json:
        print(json.dumps(machine_summary.machine_summary(command, code, reports), indent=2))
    return code


def parse_validation(argv: list[str], demo: bool = False,
                     flags: argparse.ArgumentParser | None = None) -> tuple[dict, dict]:
    """A validation's options (the Request's fields, and `demo`) and the front door's output
    options, from flags or doit words."""
    variables = {**_request_variables(), "demo": ("--demo", False), "quiet": ("--quiet", True)}
    flags = flags or parser(demo)
    options = vars(flags.parse_args(_normalise(argv, variables, flags)))
    return options, {name: options.pop(name) for name in OUTPUT_OPTIONS}


def _validate(argv: list[str], demo: bool, workspace: Workspace, site: errors.CrashSite) -> int:
    options, output = parse_validation(argv, demo)
    given = {name: value for name, value in options.items() if value not in (None, [], False)}
    if "out" not in given and "repo" in given:
        given["default_out"] = DEFAULT_OUT

    def validation():
        progress.show(output["quiet"] or output["format"] == "json")
        namespace = front_doors.validation(workspace, given, demo_without_repo=demo)
        requests = namespace[graph.REQUESTS]
        if "default_out" in given and len(requests) == 1 and requests[0].out is None:
            print(f"validate-kernel-pr: ./{DEFAULT_OUT} would lie inside the worktree, so the report is written "
                  f"only to {workspace.report_paths(requests[0])[0]}", file=sys.stderr)
        return namespace
    return _run("validate", validation, output, workspace, site)


def _check(argv: list[str], workspace: Workspace) -> int:
    """`validate-kernel-pr check`: the validation's flags (the checkout as it is, so no patch or
    refs; no --repo: the embedded demo) and --json FILE."""
    description, _, exits = check.__doc__.partition("Exit codes:")
    flags = parser(prog="validate-kernel-pr check", description=description.strip(), epilog="Exit codes:" + exits)
    flags.add_argument("--json", dest="json_out", metavar="FILE", help="also write what was found as JSON to FILE")
    flags.add_argument("-k", dest="keyword", metavar="EXPR", help="run only the items pytest's -k EXPR selects")
    flags.add_argument("--suggest-config", action="store_true",
                       help="print the [tool.kvtasks] table the checkout's impact map infers (runs its tests once)")
    options, output = parse_validation(argv, flags=flags)
    json_out, keyword, suggest = options.pop("json_out"), options.pop("keyword"), options.pop("suggest_config")
    given = {name: value for name, value in options.items() if value not in (None, [], False)}
    if suggest:
        if "repo" not in given:
            raise UsageError("--suggest-config maps a repository's tests: give --repo")
        progress.show(output["quiet"])
        print("\n".join(inference.suggested_config(workspace, Path(str(given["repo"])).expanduser(), given)))
        return 0
    request = check.request_of(workspace, given)
    progress.show(output["quiet"])
    return check.said(request, json_out, workspace.store.grid_secret(request.host.grid_secret), keyword)


def _door(command: str, argv: list[str], workspace: Workspace, site: errors.CrashSite) -> int:
    door = front_doors.FRONT_DOORS[command]
    variables = {variable: (f"--{variable.replace('_', '-')}", variable == "quiet") for variable in door.variables}
    flags = door_parser(command)
    options = vars(flags.parse_args(_normalise(argv, variables, flags)))
    output = {name: options.pop(name) for name in OUTPUT_OPTIONS}
    given = {name: value for name, value in options.items() if value is not None}
    quiet = output["quiet"] or output["format"] == "json"
    return _run(command, lambda: front_doors.namespace(command, workspace, given, quiet), output, workspace, site)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    worktree.forget_callers_repository()  # run from a git hook, git's variables name the caller's repository
    if argv[:1] == ["--version"]:
        print(f"validate-kernel-pr {__version__} (report schema {report.SCHEMA_VERSION})")
        return 0
    if argv[:1] == ["schema"]:  # the report's JSON Schema, or with --config the repository configuration's
        schema = {"--config": KvtasksTable.model_json_schema, "--summary": machine_summary.json_schema}.get(
            "".join(argv[1:2]), REPORT.json_schema)()
        print(json.dumps(schema, indent=2))
        return 0
    workspace = Workspace(workspace_root())
    site = errors.CrashSite(workspace.reports)

    def command() -> int:
        if argv[:1] == ["fleet-node"]:
            from kvtasks.fleet import join  # Ray is an optional extra: only this command needs it
            return join.main(argv[1:])
        if argv[:1] == ["check"]:  # the validation's flags, not a door's variables as flags
            return _check(argv[1:], workspace)
        if argv[:1] == ["validate"]:
            return _validate(argv[1:], True, workspace, site)
        if argv and argv[0] in front_doors.FRONT_DOORS:
            return _door(argv[0], argv[1:], workspace, site)
        return _validate(argv, False, workspace, site)
    try:
        return errors.handled(command, site)
    except SystemExit as stopped:  # argparse's --help has printed what was asked
        if stopped.code == 0:
            return 0
        raise


if __name__ == "__main__":
    sys.exit(main())
