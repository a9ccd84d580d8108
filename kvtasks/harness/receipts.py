"""The validator's side of the route probe: write a per-run probe module, read back its receipt."""
from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from kvtasks.harness import probe, triton_cpu

_CONFIG_LINE = next(line for line in Path(probe.__file__).read_text().splitlines() if line.startswith("CONFIG = "))


@dataclass(frozen=True)
class ProbeModule:
    name: str
    folder: Path
    receipt: Path
    nonce: str


def prepare(folder: Path, *, label: str, routes: list[str], shape_vars: list[str], receipt: Path,
            grid_argnames: list[str] = (), grid_rows: list[list[str]] = (), poisoned_row: list[str] = (),
            cpu_tier: dict | None = None, sensitivity: dict | None = None) -> ProbeModule:
    """A fresh, randomly named copy of the probe: a PR cannot pre-place a module with that name.

    With grid_argnames it also replaces the cells of the parametrize mark binding those names; with
    a poisoned_row too it adds the grid's cells and that row beside the mark's own instead (a
    merged session, kvtasks.harness.session);
    with cpu_tier (the tier's settings) it ships the Triton CPU hooks beside it, also randomly named;
    with sensitivity (mode, error, output) it corrupts what the routes produce."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"kvtasks_probe_{secrets.token_hex(8)}"
    nonce = secrets.token_hex(16)
    tier = {}
    if cpu_tier:
        tier = {**cpu_tier, "module": f"{name}_triton_cpu"}
        (folder / f"{tier['module']}.py").write_text(Path(triton_cpu.__file__).read_text())
    config = {"routes": routes, "shape_vars": shape_vars, "receipt": str(receipt), "nonce": nonce, "label": label,
              "grid_argnames": list(grid_argnames), "grid_rows": [list(row) for row in grid_rows],
              "poisoned_row": list(poisoned_row), "merged": bool(poisoned_row),
              "cpu_tier": tier, "sensitivity": dict(sensitivity or {})}
    source = Path(probe.__file__).read_text().replace(_CONFIG_LINE, f"CONFIG = {config!r}", 1)
    (folder / f"{name}.py").write_text(source)
    receipt.unlink(missing_ok=True)
    return ProbeModule(name, folder, receipt, nonce)


def read(module: ProbeModule) -> tuple[dict | None, str | None, str]:
    """(receipt, its SHA-256, a note): the receipt only when it exists, parses and is this run's."""
    if not module.receipt.is_file():
        return None, None, "the run wrote no execution receipt"
    raw = module.receipt.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        receipt = json.loads(raw)
    except ValueError as exc:
        return None, digest, f"the receipt is not valid JSON: {exc}"
    if not isinstance(receipt, dict) or receipt.get("nonce") != module.nonce:
        return None, digest, "the receipt did not come from this run's probe"
    return receipt, digest, ""
