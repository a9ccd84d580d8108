"""Which arguments a route writes into: callers' inputs overwritten, or a reference computed from an
input after the call that now holds the route's own output. Watching never fails the route's call."""
import hashlib
import os
import sys

from .call_arguments import arguments

# the first calls of each route whose array arguments are read before and after the call (later, one in
# eight): enough to see which arguments a route writes into, few enough to keep the copies cheap
WATCHED_CALLS = 8
SAMPLED, TAIL = 2**20, 2**16  # elements of a larger argument read: evenly spaced, and its tail


def fingerprint(value):
    """A digest of an array argument's elements (of a large one: elements at an odd stride, so every
    column of a power-of-two row is among them, and its whole tail, where a tail tile writes); None
    for anything else, or what cannot be read."""
    try:
        if not (hasattr(value, "dtype") and hasattr(value, "shape")) or isinstance(value, type):
            return None
        size = 1
        for extent in value.shape:
            size *= int(extent)
        stride = (size // SAMPLED) | 1
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            flat = value.detach().reshape(-1)
            if size > SAMPLED:
                flat = torch.cat([flat[::stride], flat[-TAIL:]])
            data = flat.cpu().contiguous().view(torch.uint8).numpy().tobytes()
        else:
            flat = value.reshape(-1)
            if size > SAMPLED:
                flat = sys.modules["numpy"].concatenate([flat[::stride], flat[-TAIL:]])
            data = flat.tobytes()
        if not isinstance(data, bytes):
            return None
        return hashlib.blake2b(data, digest_size=16).digest()
    except Exception:  # a meta tensor, a stand-in with an array's names, a library without bytes: not watched
        return None


def arrays_before(run, route, function, args, kwargs):
    """(name, argument, digest) of the call's array arguments: for a route's first calls, then for one
    call in eight drawn at random, so a route cannot count its way past the watching."""
    if run.calls.get(route, 0) > WATCHED_CALLS and os.urandom(1)[0] >= 32:
        return []
    found = []
    for name, value in arguments(function, args, kwargs):
        digest = fingerprint(value)
        if digest is not None:
            found.append((name, value, digest))
    return found


def note_written(run, route, before):
    written = [name for name, value, digest in before if fingerprint(value) != digest]
    if written:
        with run.lock:
            known = run.written_arguments.setdefault(route, [])
            known += [name for name in written if name not in known]
