"""The impact map's probe (kvtasks.run.impact): which of the checkout's functions each pytest item
called, with what.

Every function the validator lists (the configuration's routes) is wrapped lightly: a call counts
for the item running, and the first call of a function in an item keeps the dimensions of its array
arguments by name, the integers and short strings its frame held at return (the names a launcher
gives its dimensions and its dtype) and whether it was called from outside the listed modules (by a
test, not by another listed function); each item's line is appended to the map's file as it finishes,
with its seconds and whether the bound stopped it.
No output is watched and nothing is corrupted or captured: the map is base evidence about reach, not
a judgment. The items of a test function are sampled (SAMPLE, evenly spread): an operator
library's suite is large, and reach is a property of the function, seldom of its every cell.
"""
import functools
import inspect
import json
import os
import signal
import sys
import threading
import time

SAMPLE = 3  # items kept per test function
SCALAR_TEXT = 32  # a longer string in a route's frame is no dtype's name
# an item is stopped past this: its first calls were recorded as they began, and the Triton
# interpreter can spend minutes on one large cell the map learns nothing more from
ITEM_SECONDS = 20.0


# the item running: when it began, and whether the bound stopped it (what a CPU-tier target costs)
_ITEM = {"began": 0.0, "stopped": False}


def _stop_item(_signum, _frame):
    _ITEM["stopped"] = True
    raise TimeoutError(f"kvtasks' impact map stops an item after {ITEM_SECONDS:.0f} s")


def item_begins() -> None:
    _ITEM.update(began=time.perf_counter(), stopped=False)


def item_started() -> None:
    """Bound the test's own call (not its fixtures: a session fixture that builds an extension may
    take longer, and its failure would be every item's), unless the repository uses SIGALRM itself."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, _stop_item):
        signal.signal(signal.SIGALRM, _stop_item)
        signal.setitimer(signal.ITIMER_REAL, ITEM_SECONDS)


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
    """Each kept item's parametrize values, as data where they are plain; and where pytest's rootdir
    is below the checkout (an ini file in a subfolder), that folder, which the map's node ids get."""
    if items:
        root = os.path.relpath(str(items[0].config.rootpath)).replace(os.sep, "/")
        run.impact_root = "" if root == "." or root.startswith("..") else root + "/"
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
    if not inspect.isfunction(target):  # an lru_cache or other callable object: replacing it would lose its API
        return

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
        # recorded before its arguments are read: reading one (a `__getattr__` of the checkout's) may call it again
        seen = calls[route] = {"count": 1, "outside": caller not in listed_modules, "arrays": {}, "scalars": {}}
        seen["arrays"] = _dimensions(target, args, kwargs)

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


def item_stopped() -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGALRM) is _stop_item:
        signal.setitimer(signal.ITIMER_REAL, 0)


def item_done(run, nodeid: str) -> None:
    """Append the finished item's line to the map's file: a run killed at its timeout keeps every item
    that finished before it (an interpreter-bound suite is often cut there)."""
    line = json.dumps({"test": run.impact_root + nodeid, "params": run.impact_params.get(nodeid, {}),
                       "calls": run.impact_calls.pop(nodeid, {}), "stopped": _ITEM["stopped"],
                       "seconds": round(time.perf_counter() - _ITEM["began"], 3)})
    with open(run.configuration.impact, "a") as handle:
        handle.write(line + "\n")
