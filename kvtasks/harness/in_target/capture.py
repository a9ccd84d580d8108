"""The capture: a bounded sample of route calls kept as data for the replay (replay.py's format).

Every run captures alike (ordinary or corrupted, base or head): the first call of each route for each
distinct signature (the dtypes and shapes of its array arguments) and each grid cell, at most CALLS
calls and BYTES bytes a run. The arguments and the RNG state are taken before the call, what it
returned and its arguments after it; a call whose arguments cannot be kept as data (a module, an
object of the repository's) is counted by why, never captured.
"""
import json
import os
import shutil

from . import replay

CALLS = 32
BYTES = 256 << 20


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
        if not self.folder:
            return None
        try:
            signature = (route, _signature([*args, *kwargs.values()]), run.cells.get(run.test))
        except Exception:  # an argument whose shape cannot be read: not sampled
            return None
        with run.lock:
            if self.calls >= CALLS or signature in self.signatures:
                return None
            self.signatures.add(signature)
            folder = os.path.join(self.folder, f"{self.calls:04d}")
            self.calls += 1
        os.makedirs(folder, exist_ok=True)
        writer = replay.Writer(folder, self.budget)
        try:
            call = {"route": route, "test": run.test, "args": [writer.encode(item) for item in args],
                    "kwargs": {key: writer.encode(item) for key, item in kwargs.items()}, "rng": replay.rng_state()}
        except Exception as why:  # Uncapturable, or a value that refused to be read
            self._refused(run, folder, why)
            return None
        return folder, writer, call

    def after(self, run, token, value, args, kwargs) -> None:
        folder, writer, call = token
        try:
            call["returned"] = writer.encode(value)
            call["args_after"] = [writer.encode(item) for item in args]
            call["kwargs_after"] = {key: writer.encode(item) for key, item in kwargs.items()}
        except Exception as why:
            self._refused(run, folder, why)
            return
        with open(os.path.join(folder, "call.json"), "w") as handle:
            json.dump(call, handle)

    def _refused(self, run, folder, why) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        reason = str(why) if isinstance(why, replay.Uncapturable) else f"{type(why).__name__}: {why}"[:200]
        with run.lock:
            self.not_captured[reason] = self.not_captured.get(reason, 0) + 1
