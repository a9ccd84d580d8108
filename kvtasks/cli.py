"""validate-kernel-pr: the seed's flags -> Request -> the same doit graph as `doit validate`.

It owns only the front door (argv, exit codes, where the report copy goes): every flag is derived
from the options the Request declares, never listed here.

Exit codes: 0 PASS, 1 BLOCK or NEEDS_WORK, 2 INCONCLUSIVE or a usage error (no report written).
Evidence and published reports live under $KVTASKS_HOME (default ~/.cache/kvtasks), never in the
worktree; the report is also written to --out (default ./validation_report.json, unless that lies
inside the worktree: then the workspace's reports/<label>/ is the only copy, and a line says so).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from kvtasks import graph, report, worktree
from kvtasks.workspace import Workspace
from kvtasks.request import UsageError, build_request, declared_options

DEFAULT_OUT = "validation_report.json"


def workspace_root() -> Path:
    configured = os.environ.get("KVTASKS_HOME", "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache).expanduser().resolve() / "kvtasks"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own usage errors exit 2 with one line too
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    """The flags, derived from the options the Request declares, plus the CLI's own --quiet."""
    p = _Parser(prog="validate-kernel-pr", description=__doc__.splitlines()[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    for declared in declared_options():
        option = declared.option
        if option.switch:
            p.add_argument(*declared.flags, dest=declared.field, action="store_true", help=option.help)
        elif option.repeated:
            p.add_argument(*declared.flags, dest=declared.field, action="append", default=[], help=option.help)
        else:
            p.add_argument(*declared.flags, dest=declared.field, help=option.help)
    p.add_argument("--quiet", action="store_true", help="no progress lines and no summary")
    return p


def _normalise(argv: list[str]) -> list[str]:
    """Accept `--shape-arg --shapes` as well as `--shape-arg=--shapes` for dash-led values."""
    dash_valued = {flag for declared in declared_options() if declared.option.dash_led for flag in declared.flags}
    joined, index = [], 0
    while index < len(argv):
        if argv[index] in dash_valued and index + 1 < len(argv):
            joined.append(f"{argv[index]}={argv[index + 1]}")
            index += 2
        else:
            joined.append(argv[index])
            index += 1
    return joined


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    worktree.forget_callers_repository()  # run from a git hook, git's variables name the caller's repository
    if argv[:1] == ["schema"]:
        print(json.dumps(report.json_schema(), indent=2))
        return 0
    if argv[:1] == ["check"]:
        from kvtasks import check
        return check.main(argv[1:])
    if argv[:1] == ["fleet-node"]:
        from kvtasks.fleet import join  # Ray is an optional extra: only this command needs it
        return join.main(argv[1:])
    options = vars(parser().parse_args(_normalise(argv)))
    quiet = options.pop("quiet")
    if options["out"] is None:
        options["default_out"] = DEFAULT_OUT
    workspace = Workspace(workspace_root())
    try:
        request = build_request(options, clones_root=workspace.clones)
    except UsageError as exc:
        print(f"validate-kernel-pr: error: {exc}", file=sys.stderr)
        return 2
    if "default_out" in options and request.out is None:
        print(f"validate-kernel-pr: ./{DEFAULT_OUT} would lie inside the worktree, so the report is written only to "
              f"{workspace.report_paths(request)[0]}", file=sys.stderr)
    return graph.run(request, workspace, quiet=quiet)


if __name__ == "__main__":
    sys.exit(main())
