"""The capture: a bounded sample of route calls kept as data for the replay (replay.py's format).

The runs the replay reads capture (base's and head's repository tests and grid, and the corrupted
runs seen as them, which must do all they do): the first call of each route for each distinct
signature (the dtypes and shapes of its array arguments) and each grid cell, at most CALLS calls
and BYTES bytes a run, none with arrays of more than CALL_BYTES. The arguments and the RNG state
are taken before the call, what it returned and its arguments after it; a call whose arguments
cannot be kept as data (a module, an object of the repository's) is counted by why, never captured.
"""
import json
import os
import shutil

from . import memory, replay

CALLS = 32
BYTES = 64 << 20
CALL_BYTES = 16 << 20  # a call whose arrays are larger is counted, not kept
RETURNED = "returned "  # the reason a call was not kept, when its return value is what could not be


def _nbytes(values, depth=0) -> int:
    total = 0
    for value in values:
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            size = getattr(value, "nbytes", None)
            total += int(size) if isinstance(size, int) else int(value.numel() * value.element_size())
        elif isinstance(value, (list, tuple)) and depth < 2:
            total += _nbytes(value, depth + 1)
    return total


def _aliased(values) -> bool:
    """Whether two array arguments share memory (`op(x, x)`, an output over an input): kept apart, they
    would come back as copies that no longer do."""
    arrays = [value for value in values if hasattr(value, "shape") and hasattr(value, "dtype")]
    return any(memory.overlap(one, other) for index, one in enumerate(arrays) for other in arrays[index + 1:])


def _signature(values, depth=0) -> tuple:
    found = []
    for value in values:
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is not None and dtype is not None:
            found.append((str(dtype), tuple(int(extent) for extent in shape)))
        elif isinstance(value, (list, tuple)) and depth < 2:
            found.append(_signature(value, depth + 1))
        elif isinstance(value, (bool, int, str)) or value is None:
            found.append(value)
    return tuple(found)


class Capture:
    def __init__(self, folder: str):
        self.folder, self.budget, self.signatures, self.calls = folder, [BYTES], set(), 0
        self.not_captured: dict[str, int] = {}

    def before(self, run, route, args, kwargs):
        """Keep this call's arguments and RNG state when it is one to capture: a token for `after`."""
        if not self.folder or self.calls >= CALLS:  # every route call passes here: the full sample costs nothing
            return None
        values = [*args, *kwargs.values()]
        try:
            signature = (route, _signature(values), run.cells.get(run.test))
        except Exception:  # an argument whose shape cannot be read: not sampled
            return None
        with run.lock:
            if self.calls >= CALLS or signature in self.signatures:
                return None
            self.signatures.add(signature)
            try:
                size = _nbytes(values)
            except Exception:  # a stand-in with an array's names but not its sizes: not sampled
                return None
            if size > CALL_BYTES:
                why = f"arrays of {size >> 20} MiB, past the {CALL_BYTES >> 20} MiB a call"
                self.not_captured[why] = self.not_captured.get(why, 0) + 1
                return None
            folder = os.path.join(self.folder, f"{self.calls:04d}")
            self.calls += 1
        os.makedirs(folder, exist_ok=True)
        writer = replay.Writer(folder, self.budget)
        try:
            if _aliased([*args, *kwargs.values()]):
                raise replay.Uncapturable("arguments that share memory")
            call = {"route": route, "test": run.test, "args": [writer.encode(item) for item in args],
                    "kwargs": {key: writer.encode(item) for key, item in kwargs.items()}, "rng": replay.rng_state()}
        except Exception as why:  # Uncapturable, or a value that refused to be read
            self._refused(run, folder, why)
            return None
        return folder, writer, call

    def after(self, run, token, value, args, kwargs) -> None:
        folder, writer, call = token
        try:
            try:
                call["returned"] = writer.encode(value)
            except replay.Uncapturable as why:  # what the route returned, named apart from its arguments
                raise replay.Uncapturable(f"{RETURNED}{why}") from None
            call["args_after"] = [writer.encode(item) for item in args]
            call["kwargs_after"] = {key: writer.encode(item) for key, item in kwargs.items()}
            text = json.dumps(call)
        except Exception as why:
            self._refused(run, folder, why)
            return
        written = os.path.join(folder, "call.json.tmp")
        with open(written, "w") as handle:
            handle.write(text)
        os.replace(written, os.path.join(folder, "call.json"))

    def _refused(self, run, folder, why) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        reason = str(why) if isinstance(why, replay.Uncapturable) else f"{type(why).__name__}: {why}"[:200]
        with run.lock:
            self.not_captured[reason] = self.not_captured.get(reason, 0) + 1
