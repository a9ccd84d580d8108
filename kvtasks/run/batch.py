"""Batches: a manifest read into requests (shared options at the top, one entry per PR under `prs`),
and the batch's index drawn from the published reports (publish_index writes every batch's index,
a fleet's too). It runs no stage and knows no doit.
"""
from __future__ import annotations

import json
from pathlib import Path

from kvtasks.report import pages
from kvtasks.run import phases
from kvtasks.worktree import clones
from kvtasks.errors import UsageError
from kvtasks.gpu import picker
from kvtasks.request import Request, config_model, path_variables
from kvtasks.stages import run_facts
from kvtasks.evidence.workspace import Workspace
from kvtasks.worktree import Worktree


ENGINES = ("local", "ray")


def manifest_engine(path: str, engine: str | None) -> tuple[str, list[str] | None]:
    """Where the batch runs (`engine=` given, else the manifest's `engine`, else local) and the
    architectures every PR is validated on (the manifest's `archs`; None: any GPU)."""
    data = _load(path)
    engine = engine or data.get("engine") or "local"
    if engine not in ENGINES:
        raise UsageError(f"engine={engine!r} is not an engine; it is one of {', '.join(ENGINES)}")
    archs = data.get("archs")
    if archs is not None and (not isinstance(archs, list) or not archs or
                              not all(isinstance(arch, str) and arch for arch in archs)):
        raise UsageError(f"manifest {path!r}: `archs` is a list of architecture names, e.g. [\"gfx942\", \"gfx950\"]")
    if archs and engine != "ray":
        raise UsageError(f"manifest {path!r} lists `archs`: they are validated on a fleet, with engine=ray")
    return engine, archs


def _load(path: str) -> dict:
    manifest = Path(path).expanduser().resolve()
    try:
        text = manifest.read_text()
    except OSError as exc:
        raise UsageError(f"manifest {path!r} is unreadable: {exc.strerror or exc}")
    try:
        if manifest.suffix == ".json":
            data = json.loads(text)
        else:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
    except ValueError as exc:
        raise UsageError(f"manifest {path!r} does not parse: {exc}")
    return data


def manifest_requests(path: str, build) -> tuple[str, list[Request]]:
    """A batch manifest (TOML or JSON): shared options at the top, one entry per PR under `prs`,
    typed as `[tool.kvtasks]` is (kvtasks.request.config_model: a table for a tolerance table, arrays
    for names and grid rows); a path is relative to the manifest."""
    manifest = Path(path).expanduser().resolve()
    checked = config_model.manifest(path, _load(path))
    shared = {key: _relative(manifest, key, value)
              for key, value in config_model.options(checked, config_model.ManifestOptions).items()}
    requests = [build({**shared, **{key: _relative(manifest, key, value) for key, value in
                                    config_model.options(entry, config_model.ManifestOptions).items()}})
                for entry in checked.prs]
    labels = [request.label for request in requests]
    if len(set(labels)) != len(labels):
        raise UsageError(f"manifest labels must be unique: {labels}")
    return manifest.stem, requests


def check_base(path: str, requests: list[Request]) -> None:
    """The manifest's `base`, when it names one, is the worktree's HEAD (read once the worktree is held)."""
    expected_base = _load(path).get("base")
    if expected_base:
        actual = Worktree(requests[0].repo, None).head_oid()
        if actual != expected_base:
            raise UsageError(f"the manifest's base {expected_base} is not the worktree's HEAD {actual}")


def _relative(manifest: Path, key: str, value):
    if key == "repo" and isinstance(value, str) and clones.is_url(value):
        return value
    if key in path_variables() and isinstance(value, str) and not Path(value).expanduser().is_absolute():
        return str((manifest.parent / value).resolve())
    return value


def write_index(requests: list[Request], workspace: Workspace, name: str) -> tuple[int, str]:
    """A local batch's index (markdown and its page); return the worst exit code among its PRs (a
    failed verdict before an inconclusive one) and where the index is."""
    picker.release_all()
    store = workspace.store
    rows, codes = [], []
    for request in requests:
        composed = phases.compose(workspace, request.label)
        codes.append(composed.process_exit_code)
        count = {severity: sum(f.severity == severity for f in composed.findings) for severity in ("blocker",
                                                                                                    "should-fix")}
        headline = getattr(composed.stages.perf, "median_ratio", None)
        record = store.label(request.label) or {}
        rows.append([request.label, composed.verdict, str(count["blocker"]), str(count["should-fix"]),
                     str(headline) if headline is not None else "not measured", record.get("report", "")])
    return publish_index(workspace, name, ["PR", "verdict", "blockers", "should-fix", "perf headline", "report"],
                         rows, [request.label for request in requests], codes)


def publish_index(workspace: Workspace, name: str, header: list[str], rows: list[list[str]], labels: list[str],
                  codes: list[int]) -> tuple[int, str]:
    """The one writer of a batch's index, local or fleet: reports/<name>/index.md (a table, one row
    per PR), printed, and the batch's page; the worst of the PRs' exit `codes` and the index's path."""
    lines = [header, ["---"] * len(header), *rows]
    index = workspace.reports / name / "index.md"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_text(f"# kvtasks batch: {name}\n\n" + "\n".join(f"| {' | '.join(line)} |" for line in lines) + "\n")
    print(index.read_text())
    batch_page = pages.write_batch_page(workspace.reports, name, labels, run_facts.utc_now())
    print(f"pages: {batch_page} and {pages.write_index(workspace.reports)}")
    worst = 1 if 1 in codes else 2 if 2 in codes else 0
    return worst, str(index)
