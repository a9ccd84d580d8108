"""What a route call was given: its arguments by name (and the items of those that hold more), which
of them a returned value is or shares memory with, and the one named as the output it writes into."""
import inspect  # loaded in every run: a corrupted run needs it, and must not be told by it

from .memory import overlap


class NotCorruptible(Exception):
    """Why one value cannot be corrupted (its kind, in words)."""


def arguments(function, args, kwargs):
    """(name, value) of each argument of a call, and of each item of an argument that is a list,
    tuple or dict: what a returned value may be, or share memory with, without being produced."""
    try:
        named = list(inspect.signature(function).bind_partial(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        named = [(f"#{index}", arg) for index, arg in enumerate(args)] + list(kwargs.items())
    found = []
    for name, arg in named:
        found.append((name, arg))
        if isinstance(arg, (list, tuple)):
            found += [(f"{name}[{index}]", item) for index, item in enumerate(arg)]
        elif isinstance(arg, dict):
            found += [(f"{name}[{key!r}]", item) for key, item in arg.items()]
        elif hasattr(arg, "__dict__") and not isinstance(arg, type) and type(arg).__name__ not in ("module", "function"):
            found += [(f"{name}.{key}", item) for key, item in list(vars(arg).items())[:64]]
    return found


def input_shared(value, arguments):
    """The argument `value` is, is a view of, or shares memory with (an ndarray and a tensor over one
    buffer too); None when the route produced it."""
    for name, arg in arguments:
        if arg is value or overlap(value, arg):
            return name
    return None


def output_argument(function, args, kwargs, name):
    try:
        bound = inspect.signature(function).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        bound = None
    if bound is None or name not in bound.arguments:
        raise NotCorruptible(f"a call without an argument named {name!r}")
    return bound.arguments[name]
