"""The validator's side of the route probe: a per-launch copy of it, its configuration and seal,
and its receipt read back."""
from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import string
from dataclasses import dataclass
from pathlib import Path

from kvtasks.harness import probe, triton_cpu

# what a receipt read back from this launch's own probe (its nonce matched) is stamped with; the
# probe itself carries no name of the validator's
PRODUCER = "validate-kernel-pr.validation_probe"


def neutral_name() -> str:
    """A random module name that names nothing: no prefix a PR could look for, none it can pre-place."""
    return secrets.choice(string.ascii_lowercase) + secrets.token_hex(7)


@dataclass(frozen=True)
class ProbeModule:
    name: str
    folder: Path
    receipt: Path
    nonce: str
    sensitivity: dict

    def seal(self) -> None:
        """Write what this launch corrupts: `prepare` does for the first attempt; the probe removes it
        as it loads, so a retry (without the repository's addopts) needs it written again."""
        lines = [f"{key}={value}" for key, value in self.sensitivity.items() if value not in (None, "")]
        (self.folder / f"{self.name}.seal").write_text("".join(f"{line}\n" for line in lines))


def prepare(folder: Path, *, routes: list[str], shape_vars: list[str], receipt: Path,
            grid_argnames: list[str] = (), grid_rows: list[list[str]] = (), poisoned_row: list[str] = (),
            cpu_tier: dict | None = None, sensitivity: dict | None = None) -> ProbeModule:
    """A fresh, randomly named copy of the probe in `folder` (a launch's own), its configuration
    beside it and, sealed apart, what it corrupts (nothing for an ordinary run): the files of a
    corrupted run and of the run it repeats differ only in the seal, which the probe reads and
    removes before anything else in the process runs.

    With grid_argnames it also replaces the cells of the parametrize mark binding those names; with
    a poisoned_row too it adds the grid's cells and that row beside the mark's own instead (a
    merged session, kvtasks.harness.session);
    with cpu_tier (the tier's settings) it ships the Triton CPU hooks beside it, also randomly named;
    with sensitivity (mode, error, output) it corrupts what the routes produce."""
    folder.mkdir(parents=True, exist_ok=True)
    name = neutral_name()
    nonce = secrets.token_hex(16)
    tier = {}
    if cpu_tier:
        tier = {**cpu_tier, "module": neutral_name()}
        shutil.copyfile(triton_cpu.__file__, folder / f"{tier['module']}.py")
    config = {"routes": routes, "shape_vars": shape_vars, "receipt": str(receipt), "nonce": nonce,
              "grid_argnames": list(grid_argnames), "grid_rows": [list(row) for row in grid_rows],
              "poisoned_row": list(poisoned_row), "merged": bool(poisoned_row), "cpu_tier": tier}
    shutil.copyfile(probe.__file__, folder / f"{name}.py")
    (folder / f"{name}.json").write_text(json.dumps(config))
    receipt.unlink(missing_ok=True)
    module = ProbeModule(name, folder, receipt, nonce, dict(sensitivity or {}))
    module.seal()
    return module


def read(module: ProbeModule, label: str) -> tuple[dict | None, str | None, str]:
    """(receipt, its SHA-256, a note): the receipt only when it exists, parses and is this run's;
    it is stamped with the producer and the run's label, which the process never knew."""
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
    return {**receipt, "producer": PRODUCER, "label": label}, digest, ""
