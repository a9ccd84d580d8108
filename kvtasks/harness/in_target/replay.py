"""Route calls as data, and their replay outside any test.

A call is a folder: `call.json` (the route, the test it ran in, its arguments, and what it produced:
the value it returned and each argument as it was after the call) and one `.npy` file per array,
written and read with `allow_pickle=False`: data only, so loading a capture never runs code of the
PR's. Arrays are read as the plain type, never through their own methods: an ndarray through a
base-class view, a tensor with torch's subclass dispatch off, copied to the host; the type a value
had is kept by name.

Run as a script, `python replay.py OUT CALLS...` in a tree: a fresh interpreter that imports no
test framework and none of kvtasks imports each call's route from the tree (the working directory), and
for each captured call restores its RNG state, calls the route on the decoded arguments and writes what
it produced into OUT in the same format. Standard library only at import (the in-target package
imports it for `encode`); numpy and torch are used where a value is theirs.
"""
import importlib
import json
import os
import sys

ARRAY_FILE = "a{}.npy"
# what makes a value of another type pass for an array (numpy and torch take it as one)
ARRAY_LIKE = ("__array__", "__array_ufunc__", "__array_function__", "__array_interface__", "__torch_function__")
ARRAY_LIKE_PREFIX = "an array-like "
# a tensor dtype numpy has no type for is stored as the integers of its width
_WIDTHS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


class Uncapturable(Exception):
    """Why a value cannot be kept as data (its type, in words)."""


def type_name(value) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


class Writer:
    """Encodes values into a call's folder, within a byte budget shared by the run's captures."""

    def __init__(self, folder: str, budget: list):
        self.folder, self.budget, self.files = folder, budget, 0

    def _array(self, data) -> str:
        numpy = sys.modules["numpy"]
        self.budget[0] -= int(data.nbytes)
        if self.budget[0] < 0:
            raise Uncapturable("past the capture's byte cap")
        name = ARRAY_FILE.format(self.files)
        self.files += 1
        numpy.save(os.path.join(self.folder, name), data, allow_pickle=False)
        return name

    def encode(self, value, depth: int = 0) -> dict:
        numpy, torch = sys.modules.get("numpy"), sys.modules.get("torch")
        if numpy is not None and isinstance(value, numpy.generic):  # before Python's: numpy.float64 is a float
            if value.dtype.kind not in "biuf":
                raise Uncapturable(f"a numpy {value.dtype} scalar")
            return {"kind": "npscalar", "dtype": str(value.dtype), "value": float(value) if value.dtype.kind == "f"
                    else value.item()}
        if value is None or type(value) in (bool, int, float, str):
            if isinstance(value, float) and value != value:
                return {"kind": "float", "value": "nan"}
            if isinstance(value, float) and value in (float("inf"), float("-inf")):
                return {"kind": "float", "value": repr(value)}
            return {"kind": "json", "value": value}
        if numpy is not None and isinstance(value, numpy.ndarray):
            plain = numpy.ndarray.view(value, numpy.ndarray)
            if plain.dtype.hasobject:
                raise Uncapturable("an ndarray of objects")
            return {"kind": "ndarray", "file": self._array(numpy.array(plain, copy=True, order="C")),
                    "dtype": str(plain.dtype), "type": type_name(value)}
        if numpy is not None and isinstance(value, numpy.dtype):
            return {"kind": "npdtype", "value": value.str}
        if torch is not None and isinstance(value, torch.Tensor):
            return self._tensor(value, torch)
        if torch is not None and isinstance(value, torch.dtype):
            return {"kind": "torchdtype", "value": str(value).removeprefix("torch.")}
        if torch is not None and isinstance(value, torch.device):
            return {"kind": "torchdevice", "value": str(value)}
        if type(value) in (list, tuple) and depth < 4:  # a subclass (a namedtuple, torch.Size) would come back plain
            return {"kind": type(value).__name__, "items": [self.encode(item, depth + 1) for item in value]}
        if type(value) is dict and depth < 4 and all(isinstance(key, str) for key in value):
            return {"kind": "dict", "items": {key: self.encode(item, depth + 1) for key, item in value.items()}}
        if any(hasattr(type(value), name) for name in ARRAY_LIKE):
            raise Uncapturable(f"{ARRAY_LIKE_PREFIX}{type_name(value)}")
        raise Uncapturable(type_name(value))

    def _tensor(self, value, torch) -> dict:
        if value.layout != torch.strided or value.device.type == "meta":
            raise Uncapturable(f"a {value.layout} tensor on {value.device}")
        with torch._C.DisableTorchFunctionSubclass():
            plain = value.detach().to("cpu").contiguous().clone()
        dtype = str(plain.dtype).removeprefix("torch.")
        try:
            data, stored = plain.numpy(), ""
        except TypeError:  # bfloat16, float8: kept as the integers of their width
            stored = _WIDTHS[plain.element_size()]
            data = plain.view(getattr(torch, stored)).numpy()
        return {"kind": "tensor", "file": self._array(data), "dtype": dtype, "stored_as": stored,
                "device": str(value.device), "requires_grad": bool(value.requires_grad), "type": type_name(value)}


def rng_state() -> dict:
    """numpy's global RNG state, torch's CPU one and its grad mode, as data."""
    state = {}
    numpy, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if numpy is not None:
        name, keys, position, has_gauss, gauss = numpy.random.get_state()
        state["numpy"] = [name, keys.tolist(), int(position), int(has_gauss), float(gauss)]
    if torch is not None:
        state["torch"] = torch.get_rng_state().tolist()
        state["torch_grad"] = bool(torch.is_grad_enabled())
    return state


class Reader:
    """Decodes a call's folder back into values: arrays loaded as data only."""

    def __init__(self, folder: str):
        self.folder = folder

    def decode(self, encoded: dict):
        kind = encoded["kind"]
        if kind == "json":
            return encoded["value"]
        if kind == "float":
            return float(encoded["value"])
        if kind in ("list", "tuple"):
            items = [self.decode(item) for item in encoded["items"]]
            return items if kind == "list" else tuple(items)
        if kind == "dict":
            return {key: self.decode(item) for key, item in encoded["items"].items()}
        import numpy

        if kind == "ndarray":
            return self.array(encoded)
        if kind == "npscalar":
            return numpy.dtype(encoded["dtype"]).type(encoded["value"])
        if kind == "npdtype":
            return numpy.dtype(encoded["value"])
        import torch

        if kind == "torchdtype":
            return getattr(torch, encoded["value"])
        if kind == "torchdevice":
            return torch.device(encoded["value"])
        if kind == "tensor":
            tensor = torch.from_numpy(self.array(encoded))
            if encoded["stored_as"]:
                tensor = tensor.view(getattr(torch, encoded["dtype"]))
            tensor = tensor.to(encoded["device"])
            return tensor.requires_grad_(True) if encoded["requires_grad"] and tensor.is_floating_point() else tensor
        raise ValueError(f"an encoded value of unknown kind {kind!r}")

    def array(self, encoded: dict):
        import numpy

        return numpy.load(os.path.join(self.folder, encoded["file"]), allow_pickle=False)


def restore_rng(state: dict) -> None:
    if "numpy" in state:
        import numpy

        name, keys, position, has_gauss, gauss = state["numpy"]
        numpy.random.set_state((name, numpy.array(keys, dtype=numpy.uint32), position, has_gauss, gauss))
    if "torch" in state:
        import torch

        torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
        torch.set_grad_enabled(state.get("torch_grad", True))


def resolve(route: str):
    module_name, _, qualname = route.partition(":")
    found = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def replay(out: str, folders: list[str]) -> None:
    """Call each captured call's route on its arguments (the calls under each of `folders`); write
    what it produced under out/<folder's index>/<call>."""
    routes = {}
    for index, calls in enumerate(folders):
        for name in sorted(os.listdir(calls)):
            folder = os.path.join(calls, name)
            if not os.path.isfile(os.path.join(folder, "call.json")):
                continue  # a call that raised in the run, or was not kept
            try:
                with open(os.path.join(folder, "call.json")) as handle:
                    call = json.load(handle)
            except ValueError:  # a capture the run wrote badly is no call to replay
                continue
            written = os.path.join(out, str(index), name)
            os.makedirs(written, exist_ok=True)
            outcome = {"route": call["route"]}
            try:
                if call["route"] not in routes:
                    routes[call["route"]] = resolve(call["route"])
                reader = Reader(folder)
                args = [reader.decode(item) for item in call["args"]]
                kwargs = {key: reader.decode(item) for key, item in call["kwargs"].items()}
                restore_rng(call.get("rng", {}))
                value = routes[call["route"]](*args, **kwargs)
                writer = Writer(written, [1 << 62])
                outcome["returned"] = writer.encode(value)
                outcome["args_after"] = [writer.encode(item) for item in args]
                outcome["kwargs_after"] = {key: writer.encode(item) for key, item in kwargs.items()}
            except Exception as exc:  # a call that raises here is what the replay saw
                outcome["raised"] = f"{type(exc).__name__}: {exc}"[:500]
            with open(os.path.join(written, "out.json"), "w") as handle:
                json.dump(outcome, handle)


if __name__ == "__main__":
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [os.getcwd(), *(entry for entry in sys.path if os.path.realpath(entry or ".") != here)]  # the tree's modules, as `python -c` in the tree would see them
    replay(sys.argv[1], sys.argv[2:])
