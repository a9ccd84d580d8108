"""The corrupted run: what a route produced, corrupted.

Each floating array or tensor a route returns (alone, or in a tuple or list) that it produced is
replaced by a copy whose last element is 2*x + 1, or x plus a relative error E, or all NaN; a
returned value that is one of the call's inputs or shares memory with one is never corrupted, and
the receipt names each output corrupted or left alone; with an output argument named, that argument
is corrupted in place after the call. numpy and torch are never imported here: a value is
recognised through the module it came from, which is loaded."""
import math
import sys
from dataclasses import dataclass, field

from .configuration import Sensitivity
from .call_arguments import NotCorruptible, arguments, input_shared, output_argument
from .memory import loaded
from .reads import Corrupted, refused_nothing
from .receipt import OutcomeCounts, SensitivityPart, SensitivityReceipt
from . import loads, state
from .state import Corruption

LISTED = 50  # test names beyond this are counted, not listed


@dataclass
class Tally:
    """What the corruption did so far."""
    corrupted_calls: int = 0
    max_relative_error: float = 0.0
    nan_elements: int = 0
    not_corrupted: dict[str, int] = field(default_factory=dict)
    outputs_corrupted: dict[str, int] = field(default_factory=dict)
    outputs_left_alone: dict[str, str] = field(default_factory=dict)
    tests: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    failed_elsewhere: list[str] = field(default_factory=list)
    green: list[str] = field(default_factory=list)
    # what was corrupted in the test running now (objects: this call's), and the tests whose failure
    # read a corrupted value
    objects: list = field(default_factory=list)
    written_test: str = ""
    written: Corrupted | None = None
    read_failures: set[str] = field(default_factory=set)
    parsed: dict = field(default_factory=dict)  # the files a failure's statements were read from
    outside_tests: int = 0
    calls_by_part: dict[str, int] = field(default_factory=dict)


def corrupt_element(element, read, write, scale, error):
    """Replace one element; return the relative error injected (its change over |x|, or over the
    output's largest finite magnitude where x is 0 or not finite)."""
    old = read(element)
    finite = math.isfinite(old)
    reference = abs(old) if finite and old != 0 else (scale() or 1.0)
    if not finite:
        new = 0.0
    elif error is not None:
        new = old + error * reference
    else:
        new = 2 * old + 1 if old != -1 else 1.0  # -1 is 2*x + 1's fixed point
    write(element, new)
    realized = read(element)
    if not math.isfinite(realized):  # 2*x + 1 overflowed the dtype: a sign flip is as wrong and representable
        write(element, -old)
        realized = read(element)
    return 1.0 if not finite else abs(realized - old) / reference


def corrupt_one(value, in_place, settings):
    """One array, tensor or float corrupted: (the corrupted value, relative error, NaN elements
    written), or raise NotCorruptible. `in_place` None: in place where it can be written (the
    object the route produced stays that object, its layout and attributes kept), else a copy of
    the same layout."""
    mode, error = settings.mode, settings.error
    ndarray, floating = loaded("numpy", "ndarray"), loaded("numpy", "floating")
    tensor = loaded("torch", "Tensor")
    if ndarray is not None and isinstance(value, ndarray):
        numpy = sys.modules["numpy"]
        if not numpy.issubdtype(value.dtype, numpy.floating):
            raise NotCorruptible(f"{value.dtype} ndarray")
        if value.size == 0:
            raise NotCorruptible("empty ndarray")
        if in_place and not value.flags.writeable:
            raise NotCorruptible("read-only ndarray")
        out = value if in_place or (in_place is None and value.flags.writeable) else value.copy(order="K")
        if mode == "nan":
            out[...] = numpy.nan
            return out, None, int(out.size)

        def scale():
            finite = numpy.abs(out[numpy.isfinite(out)])
            return float(finite.max()) if finite.size else 0.0

        index = (-1,) * out.ndim
        return out, corrupt_element(index, lambda i: float(out[i]), lambda i, v: out.__setitem__(i, v), scale,
                                     error), 0
    if tensor is not None and isinstance(value, tensor):
        if not value.is_floating_point():
            raise NotCorruptible(f"{str(value.dtype).replace('torch.', '')} tensor")
        if value.numel() == 0:
            raise NotCorruptible("empty tensor")
        out = value if in_place is not False else value.clone()
        if mode == "nan":
            out.data.fill_(float("nan"))
            return out, None, int(out.numel())

        def scale():
            flat = out.detach().float().abs()
            finite = flat[flat.isfinite()]
            return float(finite.max()) if finite.numel() else 0.0

        index = (-1,) * out.dim()
        return out, corrupt_element(index, lambda i: float(out.data[i]), lambda i, v: out.data.__setitem__(i, v),
                                     scale, error), 0
    if in_place:
        raise NotCorruptible(type(value).__name__)
    if floating is not None and isinstance(value, floating) or isinstance(value, float):
        if mode == "nan":
            return type(value)(float("nan")), None, 1
        box = [float(value)]
        realized = corrupt_element(0, lambda i: box[i], lambda i, v: box.__setitem__(i, float(type(value)(v))),
                                    lambda: abs(box[0]), error)
        return type(value)(box[0]), realized, 0
    raise NotCorruptible("nothing (None)" if value is None else type(value).__name__)


def corrupt_returned(value, settings, where, arguments, tally):
    """What the route returned with each floating value it produced corrupted; each output is
    counted in the tally as corrupted or, with why, left alone."""
    if isinstance(value, (tuple, list)) and value:
        items, errors, nans, kinds = [], [], 0, []
        for index, item in enumerate(value):
            try:
                item, error, written = corrupt_returned(item, settings, f"{where}[{index}]", arguments, tally)
                errors.append(error or 0.0)
                nans += written
            except NotCorruptible as why:
                kinds.append(str(why))
            items.append(item)
        if not errors:
            raise NotCorruptible(f"{type(value).__name__} of {', '.join(dict.fromkeys(kinds))}")
        rebuilt = type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        return rebuilt, (max(errors) if settings.mode != "nan" else None), nans
    try:
        shared = input_shared(value, arguments)
        if shared is not None:
            raise NotCorruptible(f"an input (argument {shared}, or memory shared with it)")
        corrupted = corrupt_one(value, None, settings)
    except NotCorruptible as why:
        tally.outputs_left_alone[where] = str(why)
        raise
    tally.outputs_corrupted[where] = tally.outputs_corrupted.get(where, 0) + 1
    tally.objects.append(corrupted[0])
    return corrupted


def _call_sites(frame, depth: int = 8) -> list[tuple[str, int]]:
    """The lines of the checkout's code a route call was made from (its caller's, and theirs)."""
    sites = []
    while frame is not None and depth:
        if loads.in_checkout(frame.f_code.co_filename) is not None:
            sites.append((frame.f_code.co_filename, frame.f_lineno))
        frame, depth = frame.f_back, depth - 1
    return sites


def make(settings: Sensitivity | None) -> Corruption:
    """This launch's corruption: with settings, after_call corrupts what each route call produced;
    without, it hands the value back. The settings and what the corruption did live only in these
    closures, which exist in every run."""
    tally = Tally()

    def refused(reason):
        with state.current.lock:
            tally.not_corrupted[reason] = tally.not_corrupted.get(reason, 0) + 1

    def after_call(function, args, kwargs, value):
        if settings is None:
            return value
        output = settings.output
        tally.objects.clear()
        try:
            if output:
                argument = output_argument(function, args, kwargs, output)
                _, error, written = corrupt_one(argument, True, settings)
                tally.objects.append(argument)
                where = f"argument {output}"
                tally.outputs_corrupted[where] = tally.outputs_corrupted.get(where, 0) + 1
            else:
                value, error, written = corrupt_returned(value, settings, "return", arguments(function, args, kwargs),
                                                         tally)
        except NotCorruptible as why:
            refused(f"argument {output}: {why}" if output else f"returned {why}")
            return value
        except Exception as exc:  # a value that refuses the write (an inference tensor, a view of a constant)
            refused(f"the write failed: {type(exc).__name__}: {exc}"[:200])
            return value
        run = state.current
        with run.lock:
            tally.corrupted_calls += 1
            part = run.added.get(run.test, "repo")
            tally.calls_by_part[part] = tally.calls_by_part.get(part, 0) + 1
            tally.nan_elements += written
            if error is not None:
                tally.max_relative_error = max(tally.max_relative_error, error)
            if run.test:
                tally.tests.add(run.test)
                if tally.written_test != run.test:  # what the running test's calls wrote, and from where
                    tally.written_test, tally.written = run.test, Corrupted(settings.mode == "nan", tally.parsed)
                sites = _call_sites(sys._getframe(1))
                for corrupted in tally.objects:
                    tally.written.add(corrupted, sites)
            else:
                tally.outside_tests += 1
            tally.objects.clear()
        return value

    def failure(nodeid, excinfo):
        """A phase of a test raised: note whether the failure read a corrupted value."""
        if settings is not None and excinfo is not None and nodeid == tally.written_test \
                and tally.written.read_by(excinfo.tb):
            tally.read_failures.add(nodeid)

    def judged(args, kwargs, answer):
        """A judging function answered (`assert torch.allclose(kernel(x), ref)` raises in the test, with
        the output in no name): a no to a corrupted value makes the test's failure the comparison's."""
        run = state.current
        if settings is None or not run.test or run.test != tally.written_test or refused_nothing(answer):
            return
        if any(tally.written.held_by(value) for value in (*args, *kwargs.values())):
            tally.read_failures.add(run.test)

    def outcome(report):
        """Which tests saw a corrupted route call, and whether they went red."""
        nodeid = report.nodeid
        if nodeid not in tally.tests:
            return
        if report.failed and nodeid not in tally.failed:
            if nodeid in tally.read_failures:
                tally.failed.append(nodeid)
                if nodeid in tally.failed_elsewhere:
                    tally.failed_elsewhere.remove(nodeid)
            elif nodeid not in tally.failed_elsewhere:
                tally.failed_elsewhere.append(nodeid)
        elif report.when == "call" and report.passed:  # a skipped test is neither red nor green
            tally.green.append(nodeid)

    def receipt() -> SensitivityReceipt | None:
        if settings is None:
            return None
        run = state.current

        def tests(part) -> OutcomeCounts:
            """The outcome counts of one part's tests (None: every test but the poisoned cell's)."""
            def mine(names):
                return [test for test in names if (run.added.get(test, "repo") == part if part
                                                   else run.added.get(test) != "proof")]
            failed, green, elsewhere = mine(tally.failed), mine(tally.green), mine(tally.failed_elsewhere)
            return OutcomeCounts(failed[:LISTED], len(failed), green[:LISTED], len(green), elsewhere[:LISTED],
                                 len(elsewhere))

        parts = {part: SensitivityPart(**vars(tests(part)), corrupted_calls=tally.calls_by_part.get(part, 0))
                 for part in ("repo", "grid")} if run.configuration.merged else {}
        return SensitivityReceipt(
            **vars(tests(None)), mode=settings.mode, error=settings.error, output=settings.output,
            corrupted_calls=tally.corrupted_calls,
            max_relative_error=tally.max_relative_error if settings.mode != "nan" else None,
            nan_elements=tally.nan_elements, not_corrupted=dict(tally.not_corrupted),
            outputs_corrupted=dict(tally.outputs_corrupted), outputs_left_alone=dict(tally.outputs_left_alone),
            tests_corrupted=len(tally.tests), parts=parts, corrupted_outside_tests=tally.outside_tests)

    return Corruption(after_call, outcome, receipt, failure, judged)
