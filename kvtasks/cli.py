"""validate-kernel-pr: the seed's flags -> Request -> the same doit graph as `doit validate`.

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

from kvtasks import graph, report
from kvtasks.request import UsageError, build_request

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
    p = _Parser(prog="validate-kernel-pr", description=__doc__.splitlines()[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    add = p.add_argument
    add("--repo", help="worktree to validate (required)")
    add("--target", "--tests", dest="target", help="script file or pytest node/file the PR ships")
    add("--patch", help="base-to-head patch to apply; a conflict is a blocker")
    add("--head-sha", help="exact remote PR head (40 hex) the patch represents")
    add("--expected-route", default="", help="module:function the route probe must observe")
    add("--shape-vars", default="", help="comma-separated local names captured from each route call")
    add("--shape-env", default="", help="env var the target reads its shapes from")
    add("--shape-arg", default="", help="the target's own CLI flag that accepts shapes")
    add("--shape-argnames", default="", help="pytest parameter names the grid replaces")
    add("--grid", default="", help='shape rows "c1,c2,c3;c1,c2,c3"')
    add("--axis", action="append", default=[], help="repeatable NAME=--flag:v1;v2")
    add("--runner", help="force pytest or script")
    add("--tol-table", default="", help='reference tolerances "f32=1e-5,f16=2e-3"')
    add("--runtime-module", default="", help="module the runtime probe imports (default: by repository layout)")
    add("--perf-args", default="", help="benchmark entry point for the timing stage")
    add("--perf-control-column", default="", help="a timing column the patch does not touch")
    add("--no-perf", action="store_true", help="skip the timing stage")
    add("--cpu-tier", default="off", help="triton: run Triton kernels in the interpreter on the CPU with a bounds "
        "sanitizer; auto: only when no GPU was claimed and the target imports triton (default off)")
    add("--cpu-sparse-grid", default="4096", help="on the CPU tier, launches of more programs run only the first "
        "and last program of each axis (0 = never)")
    add("--cpu-device-capability", default="8.0", help="on the CPU tier, the compute capability torch.cuda "
        "reports (MAJOR.MINOR, default 8.0): it picks a repository's kernel paths and is recorded as an assumption")
    add("--python-path", action="append", default=[], help="repeatable: a checkout folder (relative to it) put on "
        "the target's import path after the roots its packaging declares")
    add("--sensitivity-error", default="", help="the sensitivity run applies this relative error to the last "
        "element of the route's output instead of 2*x + 1")
    add("--sensitivity-mode", default="tail", help="tail (last element wrong), nan (whole output NaN) or both "
        "(two runs); default tail")
    add("--sensitivity-output", default="", help="the argument the route writes its output into (for routes that "
        "return nothing): corrupted after each call")
    add("--no-network", action="store_true", help="run targets in a fresh network namespace (refused if impossible)")
    add("--sandbox", action="store_true", help="run targets in a mount namespace where the evidence store is "
        "read-only (refused if impossible)")
    add("--label", default="run", help="run name (default run)")
    add("--out", help=f"report path (default ./{DEFAULT_OUT}; run from inside the worktree, only the workspace's "
        "reports/<label>/ copy is written)")
    add("--quiet", action="store_true", help="no progress lines and no summary")
    return p


def _normalise(argv: list[str]) -> list[str]:
    """Accept `--shape-arg --shapes` as well as `--shape-arg=--shapes` for dash-led values."""
    dash_valued = {"--shape-arg", "--axis", "--perf-args"}
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
    if argv[:1] == ["schema"]:
        print(json.dumps(report.json_schema(), indent=2))
        return 0
    options = vars(parser().parse_args(_normalise(argv)))
    quiet = options.pop("quiet")
    if options["out"] is None:
        options["default_out"] = DEFAULT_OUT
    try:
        request = build_request(options)
    except UsageError as exc:
        print(f"validate-kernel-pr: error: {exc}", file=sys.stderr)
        return 2
    workspace = graph.Workspace(workspace_root())
    if "default_out" in options and request.out is None:
        print(f"validate-kernel-pr: ./{DEFAULT_OUT} would lie inside the worktree, so the report is written only to "
              f"{workspace.report_paths(request)[0]}", file=sys.stderr)
    return graph.run(request, workspace, quiet=quiet)


if __name__ == "__main__":
    sys.exit(main())
