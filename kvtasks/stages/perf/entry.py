"""perf entry: what is timed, chosen from the request and the head tree's sources.

Owns the choice of bench and its arguments (--perf-args, a harness the target exposes, the one
bench importing a changed module) and says why. Reads sources through git objects only (the tree
may be lent out); never runs anything and never judges a timing.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from kvtasks import sources
from kvtasks.stages import Context

_HARNESSES = (("--scenario", "bench", "--scenario bench", "the target exposes --scenario bench"),
              ("perftest", None, "", "perftest harness"), ("@benchmark", None, "", "@benchmark harness"),
              ("triton.testing.perf_report", None, "", "triton.testing.perf_report harness"),
              ("triton.testing.do_bench", None, "", "triton.testing.do_bench harness"))


@dataclass
class Entry:
    file: str
    argv: list[str]
    basis: str
    reason: str


def detect(text: str) -> tuple[str, str] | None:
    for first, second, args, basis in _HARNESSES:
        if first in text and (second is None or second in text):
            return args, basis
    return None


def _changed_modules(ctx: Context) -> set[str]:
    modules = set()
    for path, change in (ctx.head_view.changes.items() if ctx.head_view else []):
        pure = PurePosixPath(path)
        if pure.suffix == ".py" and change != "D":
            parts = list(pure.with_suffix("").parts)
            if parts and parts[-1] == "__init__":
                parts.pop()
            if parts:
                modules.add(".".join(parts))
    return modules


def _imported_names(text: str) -> set[str]:
    """The modules a source imports and the names it imports from them (`from kernels import op`
    names kernels.op, which may be a module): of the names its aliases bind, those directly below
    an imported module; not the bare package an `import a.b` binds. (A skip or comparison callee
    spelt at module level, `sk = pytest.skip`, passes too: it names a function, never a changed
    file's module.)"""
    tree = sources.parse(text)
    modules = set(sources.imported_modules(tree))
    return modules | {name for name in sources.aliases(tree).values() if name.rpartition(".")[0] in modules}


def choose_entry(ctx: Context) -> Entry | str:
    """The bench to time and why, or why there is none."""
    request = ctx.request
    if request.perf_args:
        argv = shlex.split(request.perf_args)
        if argv and argv[0].endswith(".py"):
            return Entry(argv[0], argv[1:], "declared-by-caller", "--perf-args names the bench and its arguments")
        return Entry(request.target_path, argv, "declared-by-caller", "--perf-args, on the correctness target")
    text = ctx.head_text(request.target_path) or ""
    found = detect(text)
    if found:
        return Entry(request.target_path, shlex.split(found[0]), "same-as-correctness-target", found[1])
    changed = _changed_modules(ctx)
    edited = ctx.head_view.changes if ctx.head_view else {}
    # one git grep narrows a large checkout to the files that mention a harness at all
    maybe = {path for path in ctx.worktree.grep_base([marker for marker, *_ in _HARNESSES]) if path not in edited}
    maybe |= {path for path, change in edited.items() if path.endswith(".py") and change != "D"}
    candidates = []
    for path in sorted(maybe - {request.target_path}):
        source = ctx.head_text(path) or ""
        if detect(source) and _imported_names(source) & changed:
            candidates.append(path)
    if len(candidates) == 1:
        args, basis = detect(ctx.head_text(candidates[0]) or "")
        return Entry(candidates[0], shlex.split(args), "discovered-bench",
                     f"the only bench with a harness that imports a changed module ({basis})")
    if candidates:
        return f"{len(candidates)} benches import a changed module ({', '.join(candidates[:4])}); name one with --perf-args"
    return "the target exposes no benchmark entry point and no bench imports a changed module"
