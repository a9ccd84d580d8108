"""The route monitor: each route is wrapped when its module is imported; the wrapper counts the call,
profiles only for its duration to read the shape vars at return, watches its outputs and hands them
to the corruption (the one path of every run, corrupted or not). No other function pays anything."""
import atexit
import functools
import json
import os
import sys

from . import after_import, corruption, impact, judges, loads, nonfinite, state, writes
from .configuration import decode
from .receipt import Loaded, PartReceipt, Receipt, to_json


def start(text: str) -> None:
    """Begin this process's run from its configuration's text: record loads, load the CPU tier."""
    configuration, sensitivity = decode(text)
    run = state.current = state.Run(configuration, corruption.make(sensitivity))
    if configuration.receipt:
        loads.watch()
    judges.install(after_import.watch)
    if configuration.cpu_tier is not None:
        # as the package loads (pytest plugin or python -m): before any conftest.py or script touches torch
        from . import cpu_tier

        cpu_tier.install(configuration.cpu_tier)
        run.tier = cpu_tier


def _capture(run, frame_locals):
    shape = nonfinite.shape_of(frame_locals, run.configuration.shape_vars)
    if shape is None:
        return
    with run.lock:
        run.shapes.append(shape)
        part = run.part()
        if part is not None:
            part.shapes.append(shape)


def _count(run, route):
    with run.lock:
        if run.routed_test != run.test:
            run.routed_test = run.test
            run.progress(f"route {run.test}")
        run.calls[route] = run.calls.get(route, 0) + 1
        if run.test:
            run.routed_tests.add(run.test)
        part = run.part()
        if part is not None:
            part.calls[route] = part.calls.get(route, 0) + 1


def _resolve(module, qualname):
    """Where the route lives (owner, attribute) and the code object that really runs: through
    Class.method and functools.wraps chains."""
    owner, obj = module, module
    for part in qualname.split("."):
        owner, obj = obj, getattr(obj, part)
    inner = getattr(obj, "__func__", obj)  # staticmethod / classmethod / bound method
    while hasattr(inner, "__wrapped__"):
        inner = inner.__wrapped__
    return owner, qualname.split(".")[-1], getattr(inner, "__code__", None)


def _watch_with_wrapper(run, route, owner, attribute, code):
    raw = owner.__dict__.get(attribute) if isinstance(owner, type) else getattr(owner, attribute)
    descriptor = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    target = raw.__func__ if descriptor else raw
    after_call = run.corruption.after_call
    seen = {}

    def read_return(frame, event, _arg):
        if event == "return" and frame.f_code is code:
            _capture(run, frame.f_locals)
            seen["locals"] = dict(frame.f_locals)

    @functools.wraps(target)
    def route_call(*args, **kwargs):
        _count(run, route)
        kept = run.capture.before(run, route, args, kwargs)
        before = writes.arrays_before(run, route, target, args, kwargs)
        if not run.configuration.shape_vars:
            value = loads.during("route-call", target, *args, **kwargs)
        else:
            previous = sys.getprofile()
            sys.setprofile(read_return)
            try:
                value = loads.during("route-call", target, *args, **kwargs)
            finally:
                sys.setprofile(previous)
        if kept is not None:
            run.capture.after(run, kept, value, args, kwargs)
        writes.note_written(run, route, before)
        nonfinite.watch_outputs(run, route, value, seen.pop("locals", None))
        return after_call(target, args, kwargs, value)

    setattr(owner, attribute, descriptor(route_call) if descriptor else route_call)


def _instrument(run, module):
    for route in run.configuration.routes:
        module_name, _, qualname = route.partition(":")
        if module_name != module.__name__:
            continue
        try:
            owner, attribute, code = _resolve(module, qualname)
        except AttributeError:
            run.unresolved.append(route)
            continue
        if code is None:
            run.unresolved.append(route)
        elif run.configuration.impact:
            impact.wrap(run, route, owner, attribute, code, _route_modules(run))
        else:
            _watch_with_wrapper(run, route, owner, attribute, code)


def _route_modules(run) -> frozenset:
    if run.route_modules is None:  # once: a map watches thousands of functions
        run.route_modules = frozenset(route.partition(":")[0] for route in run.configuration.routes)
    return run.route_modules


def install():
    """Watch the routes: those already imported now, the rest as they are; write the receipt at exit."""
    run = state.current
    if run is None or run.installed:
        return
    run.installed = True
    modules = {route.partition(":")[0] for route in run.configuration.routes}
    for name in modules:
        if name in sys.modules:
            _instrument(run, sys.modules[name])
    pending = modules - set(sys.modules)
    if pending:
        after_import.watch(pending, lambda module: _instrument(run, module), phase="route-import")
    atexit.register(write_receipt)


def _called(calls: dict[str, int]) -> list[str]:
    return sorted(route for route, count in calls.items() if count)


def _receipt(run) -> Receipt:
    configuration = run.configuration
    observed = _called(run.calls)
    corrupted = run.corruption.receipt()
    run.judges_replaced.update(loads.judges_replaced())
    pytest_loaded = vars(run.pytest_loaded) if run.pytest_loaded is not None else {}
    receipt = Receipt(
        nonce=configuration.nonce, route=",".join(observed), kernel_symbols=observed, route_calls=dict(run.calls),
        unresolved_routes=list(run.unresolved), executed_shapes=list(run.shapes),
        shape_vars=list(configuration.shape_vars), exit_status=run.exit,
        # a run that corrupts outputs on purpose proves nothing about them
        route_outputs=list(run.outputs.values()) if corrupted is None else [],
        loaded=Loaded(modules=loads.loaded_modules(run), opened=loads.opened_files(run), **pytest_loaded),
        judges_replaced=sorted(run.judges_replaced),
        written_arguments={route: list(names) for route, names in run.written_arguments.items()},
        cpu_tier=run.tier.report() if run.tier is not None else None, sensitivity=corrupted,
        judgments=list(run.judgments), judgments_dropped=run.judgments_dropped,
        captured_calls=run.capture.calls, not_captured=dict(run.capture.not_captured),
        routed_tests=sorted(run.routed_tests))
    if configuration.grid_argnames:
        receipt.cells = dict(run.cells)
    if configuration.merged:
        notes = run.session
        receipt.parts = {name: PartReceipt(",".join(_called(part.calls)), _called(part.calls), dict(part.calls),
                                           list(part.shapes)) for name, part in run.parts.items()}
        receipt.merged_marks, receipt.added = notes.merged_marks, dict(run.added)
        receipt.maxfail_dropped, receipt.session_stopped = notes.maxfail_dropped, notes.session_stopped
        receipt.exit_rewritten, receipt.xdist = notes.exit_rewritten, notes.xdist
        receipt.session_hooks, receipt.report_hooks = notes.session_hooks, notes.report_hooks
        receipt.added_teardown_failed = list(run.added_teardown_failed) or None
    return receipt


def write_receipt(exit_status=None):
    """Write the receipt once, on whichever exit path comes first."""
    run = state.current
    if run is None:
        return
    with run.lock:
        if run.written or not run.configuration.receipt:
            return
        run.written = True
        if exit_status is not None:
            run.exit = exit_status
        written = to_json(_receipt(run))
    temporary = run.configuration.receipt + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(written, handle)
    os.replace(temporary, run.configuration.receipt)
