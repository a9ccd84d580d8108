"""The validator's side of the in-target package: a per-launch copy of it, its configuration, and
its receipt read back and validated."""
from __future__ import annotations

import functools
import hashlib
import signal
import importlib.util
import json
import py_compile
import secrets
import shutil
import string
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from kvtasks.harness import in_target
from kvtasks.harness.in_target.configuration import Configuration, Sensitivity, TierSettings, encode
from kvtasks.harness.in_target.receipt import Receipt

# what a receipt read back from this launch's own package (its nonce matched) is stamped with; the
# package itself carries no name of the validator's
PRODUCER = "validate-kernel-pr.validation_probe"


_PACKAGE = Path(in_target.__file__).parent


@functools.cache
def _compiled_package() -> dict[str, bytes]:
    """The package's modules compiled once per validator, as `__pycache__` files keyed by their
    source's hash (not its path or time): every copy, whatever its name, loads them instead of
    compiling its modules again at each of a validation's launches. An interpreter of another
    version looks for its own files, finds none, and compiles the sources as before."""
    compiled = {}
    with tempfile.TemporaryDirectory(prefix="kvtasks-in-target-") as scratch:
        for source in sorted(_PACKAGE.glob("*.py")):
            cache = Path(importlib.util.cache_from_source(str(source)))
            output = Path(scratch) / cache.name
            py_compile.compile(str(source), cfile=str(output), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
            compiled[f"{cache.parent.name}/{cache.name}"] = output.read_bytes()
    return compiled


def copy_package(destination: Path) -> None:
    """The in-target package at `destination`, whose last part is the name it is imported by."""
    shutil.copytree(_PACKAGE, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for relative, compiled in _compiled_package().items():
        (destination / relative).parent.mkdir(exist_ok=True)
        (destination / relative).write_bytes(compiled)


def neutral_name() -> str:
    """A random module name that names nothing: no prefix a PR could look for, none it can pre-place."""
    return secrets.choice(string.ascii_lowercase) + secrets.token_hex(7)


class ReadReceipt(BaseModel):
    """A receipt as read back: every field of the package's own definition, of its type, nothing else."""
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    receipt: Receipt


@dataclass
class StampedReceipt(Receipt):
    """A validated receipt of this launch's own package, as every reader gets it (`TargetRun.receipt`):
    the package's definition, stamped with what the process never knew."""
    producer: str = PRODUCER
    label: str = ""  # the run's

    @classmethod
    def of(cls, receipt: Receipt, label: str) -> "StampedReceipt":
        return cls(**{item.name: getattr(receipt, item.name) for item in fields(Receipt)}, label=label)


@dataclass(frozen=True)
class ProbeModule:
    """One launch's copy of the in-target package: `python -m <name>` with `folder` first on the path
    and `environment` in the environment."""
    name: str
    folder: Path
    receipt: Path
    nonce: str
    configuration: Configuration
    sensitivity: Sensitivity | None

    @property
    def configuration_file(self) -> Path:
        return self.folder / f"{self.name}.json"

    @property
    def environment(self) -> dict[str, str]:
        """The variable naming the configuration file: the package's name in capitals."""
        return {self.name.upper(): str(self.configuration_file)}

    def write_configuration(self) -> None:
        """Write the configuration: `prepare` does for the first attempt; the package removes it as it
        loads, so a retry (without the repository's addopts) needs it written again."""
        self.configuration_file.write_text(encode(self.configuration, self.sensitivity))


def prepare(folder: Path, *, routes: list[str], shape_vars: list[str], receipt: Path,
            grid_argnames: list[str] = (), grid_rows: list[list[str]] = (), poisoned_row: list[str] = (),
            cpu_tier: dict | None = None, sensitivity: dict | None = None, captures: Path | None = None,
            impact: Path | None = None) -> ProbeModule:
    """A fresh, randomly named copy of the in-target package in `folder` (a launch's own), and its
    configuration beside it, which says what it corrupts (nothing for an ordinary run): the files of
    a corrupted run and of the run it repeats differ only there, and the package reads and removes
    it before anything else in the process runs.

    With grid_argnames it also replaces the cells of the parametrize mark binding those names; with
    a poisoned_row too it adds the grid's cells and that row beside the mark's own instead (a
    merged session, kvtasks.harness.session); with cpu_tier (the tier's settings) it installs the
    Triton CPU hooks; with sensitivity (mode, error, output) it corrupts what the routes produce; with
    impact (a file), it only maps which item called which route there (kvtasks.run.impact)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = neutral_name()
    copy_package(folder / name)
    configuration = Configuration(
        routes=list(routes), shape_vars=list(shape_vars), receipt=str(receipt), nonce=secrets.token_hex(16),
        grid_argnames=list(grid_argnames), grid_rows=[list(row) for row in grid_rows],
        poisoned_row=list(poisoned_row),
        cpu_tier=TierSettings.of(cpu_tier) if cpu_tier else None, captures=str(captures or ""),
        impact=str(impact or ""))
    receipt.unlink(missing_ok=True)
    receipt.with_name(receipt.name + ".progress").unlink(missing_ok=True)
    corrupted = {key: value for key, value in (sensitivity or {}).items() if value not in (None, "")}
    module = ProbeModule(name, folder, receipt, configuration.nonce, configuration,
                         Sensitivity(**corrupted) if corrupted else None)
    module.write_configuration()
    return module


def validated(raw: bytes | str) -> Receipt:
    """The receipt a file holds, validated against the package's definition (raises ValidationError)."""
    return ReadReceipt.model_validate_json(b'{"receipt": ' + (raw.encode() if isinstance(raw, str) else raw) + b"}"
                                           ).receipt


def read(module: ProbeModule, label: str) -> tuple[StampedReceipt | None, str | None, str]:
    """(receipt, its SHA-256, a note): the receipt only when it exists, parses, matches the package's
    definition and is this run's; it is stamped with the producer and the run's label, which the
    process never knew."""
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
    try:
        return StampedReceipt.of(validated(raw), label), digest, ""
    except ValidationError as exc:
        return None, digest, f"the receipt does not match its definition: {exc.errors()[0]['loc']}: " \
                             f"{exc.errors()[0]['msg']}"


def death(module: ProbeModule, exit_status: int | None, timed_out: bool) -> str | None:
    """How a run that reached the route died before its end, with the last test it started; None
    when it ended (or kvtasks ended it at its timeout), or died before any route call. Died: a
    signal, or an end before its receipt was written (neither pytest's session end nor the
    interpreter's exit ran: os._exit, an abort under the sandbox's shell), read from the progress
    lines the run wrote as it went (kvtasks.harness.in_target.state.Run.progress)."""
    progress = module.receipt.with_name(module.receipt.name + ".progress")
    try:
        lines = progress.read_text(errors="replace").splitlines()
    except OSError:
        return None
    if timed_out or not any(line.startswith("route ") for line in lines):
        return None
    signalled = -exit_status if exit_status is not None and exit_status < 0 else \
        exit_status - 128 if exit_status is not None and 128 < exit_status < 128 + signal.NSIG else None
    if exit_status is not None and exit_status < 0:
        how = f"killed by {_signal_name(signalled)}"
    elif not module.receipt.is_file():
        how = f"ended with status {exit_status} before its end" + \
            (f" (as {_signal_name(signalled)} does)" if signalled else "")
    else:
        return None
    started = [line.removeprefix("start ") for line in lines if line.startswith("start ")]
    return how + (f", in {started[-1]}, the last test it started" if started else ", in its script")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
