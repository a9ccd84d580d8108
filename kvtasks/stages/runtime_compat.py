"""runtime_compat: does the repository's own package import from this checkout, against the
runtime that is actually installed?

Profiles: aiter (imports from the checkout), FlyDSL (the pinned package from PYLIB when given,
its version compared with the checkout's python/flydsl), and a generic one for any other kernel
repository (`--runtime-module`, else inferred from what the target imports, then from the
packaging). The checkout's import roots (a src/ layout, --python-path) come first on the path and
are recorded in runtime_identity. On the Triton CPU tier the probe imports under the tier's hooks.
A mismatch is an environment fact: skip with reason runtime_mismatch, nothing blamed on the
author. Except when the import fails on head only: then base is probed too (only then: its answer
decides nothing else), and a package that imports on base and not on head is the PR's doing:
fail, with a blocker quoting the traceback's tail.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


from kvtasks import sources
from kvtasks.stages import Context, Report, StageResult, StageSpec, cpu_tier, result
from kvtasks.records import RuntimeFingerprint, RuntimeIdentity
from kvtasks.harness import layout
from kvtasks.stages.launches import ImportProbe
from kvtasks.worktree import PatchRefused, source_identity
from kvtasks.stages.payloads import GpuClaim, RuntimeCompat

NAME = "runtime_compat"


MISMATCH = "runtime_mismatch"
_RUNTIME_PREFIXES = ("python/flydsl/", "python/mlir_flydsl/", "lib/", "include/", "cmake/", "thirdparty/",
                     "tools/", "csrc/")
_PACKAGING = {"CMakeLists.txt", "MANIFEST.in", "setup.py", "setup.cfg", "pyproject.toml", "requirements.txt"}
_NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hip", ".cmake", ".pyx", ".pxd",
                    ".td", ".inc")
_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


@dataclass
class Profile:
    name: str
    module: str
    roots: list[str]
    expected_root: str
    expected_version: str | None = None


def _infer_module(ctx: Context) -> str | None:
    """The first checkout package the target imports: one the checkout's packaging declares or holds
    in its import roots (a src/ layout), else a regular package or module, before a folder that is only a namespace package (an installed
    `packaging` wins over a checkout's packaging/ folder of build scripts, as it does at import);
    else the package the checkout's packaging declares; else the checkout's only top-level package. Never a folder of benchmarks, docs,
    tests, examples or scripts. A package may be a namespace package (no __init__.py)."""
    worktree = ctx.worktree.path
    roots = [worktree / root for root in layout.checkout_roots(ctx.request)]
    bases = [*roots, *([worktree / "python"] if (worktree / "python").is_dir() else []), worktree]

    def in_checkout(name: str) -> bool:
        return not layout.is_tooling(name) and any(
            layout.is_package(base / name) or (base / f"{name}.py").is_file() for base in bases)

    def regular(name: str) -> bool:  # what an import finds first: a namespace portion loses to any regular package
        return in_checkout(name) and any((base / name / "__init__.py").is_file() or (base / f"{name}.py").is_file()
                                         for base in bases)

    imported = [name.split(".")[0] for name in
                sources.imported_modules(sources.parse(ctx.head_text(ctx.request.target_path)))]
    declared = [name for name in layout.declared_packages(worktree) if in_checkout(name)]

    def own(name: str) -> bool:  # declared by the packaging, or in one of its import roots (a src/ layout)
        return name in declared or (not layout.is_tooling(name) and any(
            layout.is_package(root / name) or (root / f"{name}.py").is_file() for root in roots))

    for name in [*(name for name in imported if own(name)), *(name for name in imported if regular(name)),
                 *(name for name in imported if in_checkout(name))]:
        return name
    if declared:
        return declared[0]
    packages = [p.parent.name for base in bases for p in base.glob("*/__init__.py") if in_checkout(p.parent.name)]
    if not packages:  # no regular package: a namespace package in an import root (a src/ layout) is the one
        packages = [folder.name for root in roots if root.is_dir() for folder in root.iterdir()
                    if in_checkout(folder.name)]
    packages = list(dict.fromkeys(packages))
    return packages[0] if len(packages) == 1 else None


def profile(ctx: Context) -> Profile | str:
    """The import check this repository calls for, or why none can be made."""
    request, worktree = ctx.request, str(ctx.worktree.path)
    pylib = request.host.pylib
    if request.runtime_module:
        roots = [worktree] + ([pylib] if pylib else [])
        return Profile("generic (--runtime-module)", request.runtime_module, roots, worktree)
    kind = ctx.worktree.kind()
    if kind == "aiter":
        return Profile("aiter", "aiter", [worktree], worktree)
    if kind == "flydsl":
        text = ctx.head_text("python/flydsl/__init__.py") or ""
        version = _VERSION.search(text)
        root = pylib or f"{worktree}/python"
        return Profile("flydsl", "flydsl", [root], root, version.group(1) if version else None)
    module = _infer_module(ctx)
    if module is None:
        return ("no runtime module could be inferred from the target's imports or the layout; "
                "name it with --runtime-module")
    roots = [worktree] + ([pylib] if pylib else [])
    return Profile("generic (inferred from the target's imports)", module, roots, worktree)


def runtime_sources_changed(ctx: Context, module: str) -> list[str]:
    if ctx.head_view is None:
        return []
    changed = []
    for path in ctx.head_view.changes:
        pure = PurePosixPath(path)
        if path.startswith(_RUNTIME_PREFIXES) or pure.name in _PACKAGING or pure.suffix in _NATIVE_SUFFIXES \
                or pure.parts[0] == module or pure.parts[:2] == ("python", module):
            changed.append(path)
    return changed


def _mismatch(note: str, **fields) -> StageResult:
    stage = result(NAME, "skip", note, reason=MISMATCH, **fields)
    stage.finding("runtime.compat-not-established", "note", f"runtime compatibility was not established ({note}); the correctness stages are "
                          "skipped rather than blamed on the PR")
    return stage


def run(ctx: Context) -> StageResult:
    chosen = profile(ctx)
    if isinstance(chosen, str):
        return _mismatch(chosen)
    pylib = ctx.request.host.pylib
    changed = runtime_sources_changed(ctx, chosen.module)
    if pylib and changed:
        return _mismatch(f"PYLIB holds a prebuilt runtime but the patch changes runtime sources "
                         f"({', '.join(changed[:5])}); a binary's provenance cannot be proved, so it is refused",
                         profile=chosen.name, runtime_sources_changed=changed)
    try:
        with ctx.worktree.lend("head"):
            # on the CPU tier the module is imported the way the target will be: under the tier's hooks
            tiered = cpu_tier.settings(ctx) if cpu_tier.wanted(ctx)[0] else None
            import_roots = layout.checkout_roots(ctx.request)
            seen, log = _probe(ctx, chosen, ctx.run_dir, tiered)
    except PatchRefused as refused:
        return _mismatch(f"the runtime was not probed: {refused}")
    fields = {"profile": chosen.name, "module": chosen.module, "expected_root": chosen.expected_root,
              "import_roots": import_roots}
    if tiered is not None:
        fields["cpu_tier_hooks"] = "installed" if seen and not seen.get("cpu_tier_error") else \
            f"not installed: {(seen or {}).get('cpu_tier_error') or 'the probe died'}"
    if seen is None:
        return _mismatch(f"the runtime probe died: {log[-300:]}", **fields)
    if seen["error"] and ctx.request.has_patch:
        # who broke the import? base answers: only then is it asked (the probe on the clean base tree)
        with ctx.worktree.lend("base"):
            base_seen, _ = _probe(ctx, chosen, ctx.run_dir / "base", tiered)
        fields["base_import"] = "imports" if base_seen and not base_seen["error"] and base_seen["inside_roots"] \
            else f"fails too: {(base_seen or {}).get('error') or 'the probe died'}"
    stage = _broken_by_pr(chosen, seen, fields) if fields.get("base_import") == "imports" else \
        _judge(chosen, seen, fields, ctx)
    stage.facts.pytest_module = seen.get("pytest")
    # what the cache keys need about the interpreter, whether or not the runtime matched
    stage.facts.runtime_fingerprint = RuntimeFingerprint(
        **{key: seen.get(key) for key in ("python_executable", "python_version", "distributions")},
        module_path=keyed_module_path(ctx, seen.get("module_path")),
        editable_sources=editable_sources(ctx, seen.get("editable") or {}))
    return stage


def keyed_module_path(ctx: Context, module_path: str | None) -> str | None:
    """The module's path as the cache keys name it: inside the worktree, relative to it (the base
    OID and the patch already name what is there, wherever the tree lies, so fleet nodes with
    homes of their own share base evidence); outside it, as imported."""
    if not module_path:
        return module_path
    tree = ctx.worktree.path.resolve()
    path = Path(module_path).resolve()
    return f"<worktree>/{path.relative_to(tree)}" if path.is_relative_to(tree) else module_path


def editable_sources(ctx: Context, editable: dict[str, str]) -> dict[str, str]:
    """Each editable-installed distribution's source identity; one inside the worktree is the tree
    under test itself, which the base OID and the patch already name."""
    tree = ctx.worktree.path.resolve()
    return {name: "the worktree under test" if Path(folder).resolve().is_relative_to(tree)
            else source_identity(folder) for name, folder in sorted(editable.items())}


def _probe(ctx: Context, chosen: Profile, run_dir, tiered: dict | None) -> tuple[dict | None, str]:
    return ctx.launch(ImportProbe(module=chosen.module, roots=tuple(chosen.roots), folder=run_dir, tier=tiered))


def _broken_by_pr(chosen: Profile, seen: dict, fields: dict) -> StageResult:
    tail = " | ".join((seen.get("traceback") or seen["error"]).strip().splitlines()[-4:])[-600:]
    stage = result(NAME, "fail", f"import {chosen.module} fails on head and succeeds on base: {seen['error']}",
                   traceback_tail=tail, **fields)
    return stage.finding("runtime.import-broken", "blocker", f"the PR breaks `import {chosen.module}` (base imports it from the same runtime): "
                                    f"{tail}")


# what an import of a module no folder of the interpreter holds says
_MISSING = re.compile(r"No module named '([\w.]+)'")


def missing_dependency(ctx: Context, module: str, error: str) -> str | None:
    """The library an import failed for when no module of the checkout is it: a dependency the
    target's interpreter lacks. Only a top-level name counts (Python names the first part it could
    not find: `a.b` missing means `a` was found, a version's matter, not a missing library), and not
    one any import root of the checkout holds, or a file of that name the PR deletes (a test helper)."""
    for named in _MISSING.finditer(error or ""):
        top = named.group(1)
        if "." in top or top == module.split(".", 1)[0]:  # found in part, or the module kvtasks was asked for
            continue
        # where the target's path finds the checkout's modules (kvtasks.harness.layout.python_path)
        prefixes = ["", "python/", *(root.rstrip("/") + "/" for root in layout.checkout_roots(ctx.request))]
        held = [f"{prefix}{top}/__init__.py" for prefix in prefixes] + [f"{prefix}{top}.py" for prefix in prefixes]
        folders = [ctx.worktree.path / prefix / top for prefix in prefixes]  # a namespace package has no __init__
        deleted = [path for path, change in (ctx.head_view.changes if ctx.head_view else {}).items()
                   if change == "D" and PurePosixPath(path).stem == top]
        if not (any(ctx.head_text(path) is not None for path in held) or any(f.is_dir() for f in folders) or deleted):
            return top
    return None


# where pytest says a test module or a conftest could not be imported: a missing library there means
# nothing of the target could run (a skip's own "No module named", importorskip's, is no such thing)
_COLLECTION_ERROR = re.compile(r"ImportError while (?:importing test module|loading conftest)|ERROR collecting ")
_COLLECTION_SPAN = 4000


def collection_errors(log: str) -> str:
    """What follows each of pytest's collection errors in a run's log (a few thousand characters each)."""
    return "\n".join(log[found.start():found.start() + _COLLECTION_SPAN] for found in _COLLECTION_ERROR.finditer(log))


def incomplete(ctx: Context, module: str, text: str, what: str) -> str | None:
    """environment.incomplete's detail when `text` (an import's error, a run's log) says `what` failed
    for a dependency the target's interpreter lacks; None when it does not."""
    missing = missing_dependency(ctx, module, text)
    if missing is None:
        return None
    return (f"the target's interpreter ({ctx.request.host.python_bin}) cannot import {missing!r}, which {what} "
            "needs: it lacks the repository's dependencies (install them into the interpreter PYTHON_BIN names), "
            "so nothing was tested; no --fail-on lets this pass")


def _judge(chosen: Profile, seen: dict, fields: dict, ctx: Context) -> StageResult:
    if seen["error"]:
        stage = _mismatch(f"import {chosen.module} failed: {seen['error']}", **fields)
        said = incomplete(ctx, chosen.module, seen["error"], f"`import {chosen.module}`")
        if said:
            stage.finding("environment.incomplete", "note", said)
        return stage
    if not seen["inside_roots"]:
        return _mismatch(f"{chosen.module} resolved to {seen['module_path']}, outside {', '.join(chosen.roots)}",
                         **fields)
    if chosen.expected_version and seen["module_version"] != chosen.expected_version:
        return _mismatch(f"{chosen.module} {seen['module_version']} is installed but the checkout is "
                         f"{chosen.expected_version}", **fields)
    identity = RuntimeIdentity(**{
        "module": chosen.module,
        "module_path": seen["module_path"],
        "module_version": seen["module_version"],
        "expected_root": chosen.expected_root,
        "python_executable": seen["python_executable"],
        "python_version": seen["python_version"],
        "source_sha": ctx.worktree.head_oid() + ("-dirty" if ctx.request.has_patch else ""),
        "native_artifacts": seen["native_artifacts"],
        "native_artifacts_basis": "shared libraries mapped by this import, restricted to the roots; an empty list "
                                  "only means this import loaded none, not evidence about the target",
        "roots": chosen.roots,
        "import_roots": fields["import_roots"],
    })
    stage = result(NAME, "pass", f"{chosen.module} imports from {seen['module_path']} "
                                 f"(python {seen['python_version']}, {len(seen['native_artifacts'])} native artifacts)",
                   **fields)
    stage.facts.runtime_identity = identity
    return stage


def established(ctx: Context) -> bool:
    compat = ctx.get(RuntimeCompat)
    return compat is not None and compat.status == "pass"


def passes(report: Report) -> list[str]:
    """PASS names the runtime the target imported, wholly."""
    identity = report.runtime_identity.model_fields_set if report.runtime_identity else set()
    return [f"runtime_identity.{key} missing" for key in
            ("module", "module_path", "python_executable", "python_version", "native_artifacts") if key not in identity]


STAGE = StageSpec(NAME, run, payload=RuntimeCompat, requires=(GpuClaim,),
                  provides=(RuntimeFingerprint, RuntimeIdentity), sets=("pytest_module",), passes=passes)
