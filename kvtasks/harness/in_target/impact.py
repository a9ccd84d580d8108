"""The impact map's probe (kvtasks.run.impact): which of the checkout's functions each pytest item
called, with what.

Every function the validator lists (the configuration's routes) is wrapped lightly: a call counts
for the item running, and the first call of a function in an item keeps the dimensions of its array
arguments by name, the integers and short strings its frame held at return (the names a launcher gives
its dimensions and its dtype)
and whether it was called from outside the listed modules (by a test, not by another listed
function). No output is watched and nothing is corrupted or captured: the map is base evidence about
reach, not a judgment. The items of a test function are sampled (SAMPLE, evenly spread): an operator
library's suite is large, and reach is a property of the function, seldom of its every cell.
"""
import functools
import inspect
import json
import os
import sys

SAMPLE = 3  # items kept per test function
SCALAR_TEXT = 32  # a longer string in a route's frame is no dtype's name


def sample(items: list) -> tuple[list, list]:
    """(kept, dropped): at most SAMPLE items of each test function, the first, the last and between."""
    by_function: dict[str, list] = {}
    for item in items:
        by_function.setdefault(item.nodeid.partition("[")[0], []).append(item)
    kept_ids = set()
    for group in by_function.values():
        step = max(1, (len(group) - 1) / max(1, SAMPLE - 1))
        kept_ids.update(id(group[min(len(group) - 1, round(index * step))]) for index in range(min(SAMPLE, len(group))))
    return [item for item in items if id(item) in kept_ids], [item for item in items if id(item) not in kept_ids]


def _value(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return repr(value)[:80]


def note_params(run, items) -> None:
    """Each kept item's parametrize values, as data where they are plain."""
    for item in items:
        spec = getattr(item, "callspec", None)
        run.impact_params[item.nodeid] = {name: _value(value) for name, value in (spec.params if spec else {}).items()}


def _dimensions(target, args, kwargs) -> dict[str, list[int]]:
    try:
        bound = inspect.signature(target).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {f"arg{index}": value for index, value in enumerate(args)} | dict(kwargs)
    found = {}
    for name, value in bound.items():
        shape = getattr(value, "shape", None)
        if shape is not None and hasattr(value, "dtype"):
            try:
                found[name] = [int(extent) for extent in shape]
            except (TypeError, ValueError):
                continue
    return found


def wrap(run, route, owner, attribute, code, listed_modules: frozenset) -> None:
    """Replace owner.attribute by a counting wrapper for the map."""
    raw = owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute)
    descriptor = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    target = raw.__func__ if descriptor else raw

    @functools.wraps(target)
    def mapped(*args, **kwargs):
        test = run.test
        if not test:
            return target(*args, **kwargs)
        calls = run.impact_calls.setdefault(test, {})
        seen = calls.get(route)
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if seen is not None:
            seen["count"] += 1
            seen["outside"] = seen["outside"] or caller not in listed_modules
            return target(*args, **kwargs)
        seen = calls[route] = {"count": 1, "outside": caller not in listed_modules,
                               "arrays": _dimensions(target, args, kwargs), "scalars": {}}

        def at_return(frame, event, _arg):
            if event == "return" and frame.f_code is code:
                seen["scalars"] = {name: value for name, value in frame.f_locals.items()
                                   if type(value) is int or (type(value) is str and len(value) <= SCALAR_TEXT)}

        previous = sys.getprofile()
        sys.setprofile(at_return)
        try:
            return target(*args, **kwargs)
        finally:
            sys.setprofile(previous)

    setattr(owner, attribute, descriptor(mapped) if descriptor else mapped)


def write(run) -> None:
    """The map's file: per item its parameters and the listed functions it called."""
    path = run.configuration.impact
    items = {test: {"params": run.impact_params.get(test, {}), "calls": calls}
             for test, calls in run.impact_calls.items()}
    for test, params in run.impact_params.items():
        items.setdefault(test, {"params": params, "calls": {}})
    temporary = path + ".tmp"
    with open(temporary, "w") as handle:
        json.dump({"items": items}, handle)
    os.replace(temporary, path)
