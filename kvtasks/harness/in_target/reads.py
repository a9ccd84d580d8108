"""Whether a corrupted run's failure read what the route produced.

A corrupted run is evidence that the suite can fail only where a test fails on a comparison of the
corrupted values, never where it fails on anything else that differs from the ordinary run (state an
earlier run left behind, a warning turned error, an input or a shape checked). The failure's
traceback says which statement of the checkout's code it was raised through last (the test's, a
helper's, the caller of a judging function); that statement is read (ast, once per file) for the
names whose values it reads, and, within its function, the names those were computed from (`err`
of `err = (out - ref).abs().max()`). A name counts when its value is a corrupted output, shares its
memory, or holds a corrupted element's value (in the "nan" mode, a NaN): `assert_allclose(out,
ref)`, a helper's ratio computed from `out`, `out.float().cpu()` or a list of outputs count;
`out.shape == x.shape` or `assert_array_equal(x, x_before)` do not. A value derived in another
function than the failing statement's, and returned to it, is read by its content only.
"""
import ast
import inspect
import linecache
import sys

from . import loads
from .memory import extent, loaded

# attributes that describe an array without reading its values (a tuple: a set's order differs between
# processes, and a corrupted run must read the same as the one it repeats)
_METADATA = ("shape", "dtype", "ndim", "size", "device", "layout", "stride", "strides", "is_contiguous", "numel", "dim",
             "nbytes", "itemsize", "requires_grad", "names", "flags", "T", "mT")


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _parsed(filename: str, parsed: dict):
    """A file's statements, and its functions and lambdas; kept in `parsed`, which belongs to the
    corruption's closure (no module of this package holds what a corrupted run did)."""
    if filename not in parsed:
        try:
            tree = ast.parse("".join(linecache.getlines(filename)))
        except (SyntaxError, ValueError):
            parsed[filename] = None
        else:
            nodes = list(ast.walk(tree))
            parsed[filename] = ([node for node in nodes if isinstance(node, ast.stmt)],
                                [node for node in nodes if isinstance(node, _SCOPES)])
    return parsed[filename]


def _innermost(nodes, lineno: int):
    spanning = [node for node in nodes if node.lineno <= lineno <= (node.end_lineno or node.lineno)]
    return min(spanning, key=lambda node: (node.end_lineno or node.lineno) - node.lineno, default=None)


def _names_read(*parts: ast.AST) -> set[str]:
    """The names these expressions read the values of (a name read only for `.shape`, `.dtype` and
    the like is not)."""
    metadata = {id(node.value) for part in parts for node in ast.walk(part)
                if isinstance(node, ast.Attribute) and node.attr in _METADATA}
    return {node.id for part in parts for node in ast.walk(part)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in metadata}


def _header(statement: ast.stmt) -> list[ast.AST]:
    """What a statement itself evaluates: of a compound one (if, for, with), its header only, since
    its body runs as statements of their own."""
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in statement.items]
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try)):
        return []
    return [statement]


def _sources(scope: ast.AST) -> dict[str, list[tuple[set[str], tuple[int, int]]]]:
    """Per name assigned in a function, what each of its assignments reads and the lines it spans:
    `err` of `err = (out - ref).abs().max()` reads out and ref."""
    found: dict[str, list[tuple[set[str], tuple[int, int]]]] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets, value = [node.target], node.iter
        else:
            continue
        read, span = _names_read(value), (value.lineno, value.end_lineno or value.lineno)
        for target in targets:
            for name in (item.id for item in ast.walk(target) if isinstance(item, ast.Name)):
                found.setdefault(name, []).append((read, span))
    return found


def statement_reads(filename: str, lineno: int, cache: dict) -> tuple[set[str], list[tuple[int, int]]]:
    """The names the statement running at `lineno` reads the values of, and, within its function,
    those the values of these were computed from; and the lines of those statements and
    assignments (where a call whose result no name holds happened)."""
    parsed = _parsed(filename, cache)
    statement = _innermost(parsed[0], lineno) if parsed else None
    if statement is None:
        return set(), []
    names = _names_read(*_header(statement))
    spans = [(part.lineno, part.end_lineno or part.lineno) for part in _header(statement)]
    scope = _innermost(parsed[1], lineno)
    sources = _sources(scope) if scope is not None else {}
    pending = list(names)
    while pending:
        for read, span in sources.get(pending.pop(), ()):
            spans.append(span)
            for name in read - names:
                names.add(name)
                pending.append(name)
    return names, spans


class Corrupted:
    """What the corruption wrote in one test: the memory of the outputs (never the outputs: a corrupted
    run must keep no object alive that its ordinary run would not), the values it put there, and
    the lines of the checkout's code the corrupted calls were made from."""

    def __init__(self, nan: bool, parsed: dict):
        self.nan, self.extents, self.values, self.sites, self.parsed = nan, [], [], set(), parsed

    def add(self, output, sites) -> None:
        found = extent(output)
        if found is not None:
            self.extents.append(found)
        last = _last(output)
        if last is not None:
            self.values.append(last)
        self.sites |= set(sites)

    def held_by(self, value, depth: int = 0) -> bool:
        mine = extent(value)
        if mine is not None and any(mine[0] < end and first < mine[1] for first, end in self.extents):
            return True
        if isinstance(value, (list, tuple)) and depth < 2:
            return any(self.held_by(item, depth + 1) for item in value[:64])
        if isinstance(value, dict) and depth < 2:
            return any(self.held_by(item, depth + 1) for item in list(value.values())[:64])
        return _contains(value, self.values, self.nan)

    def read_by(self, traceback) -> bool:
        """Whether the statement of the checkout's code the failure was raised through last (a test, a
        helper, a judge's caller) read a corrupted value, computed what it read from one, or passed
        one to the function it called (`assert_close(kernel(x), ref)` holds the output in no name)."""
        frame, lineno, callee = None, 0, None
        while traceback is not None:
            if loads.in_checkout(traceback.tb_frame.f_code.co_filename) is not None:
                frame, lineno, callee = traceback.tb_frame, traceback.tb_lineno, None
            elif frame is not None and callee is None:
                callee = traceback.tb_frame
            traceback = traceback.tb_next
        if frame is None:
            return False
        names, spans = statement_reads(frame.f_code.co_filename, lineno, self.parsed)
        filename = frame.f_code.co_filename
        if any(site == filename and first <= line <= last for site, line in self.sites for first, last in spans):
            return True  # the corrupted call itself is on these lines: `(kernel(x) - ref).max() < tol`
        values = [frame.f_locals[name] if name in frame.f_locals else frame.f_globals.get(name) for name in names]
        return any(self.held_by(value) for value in values + _arguments(callee))


def _arguments(frame) -> list:
    """The values a frame's function was called with (its parameters, *args and **kwargs as they are now)."""
    if frame is None:
        return []
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    values = [frame.f_locals.get(name) for name in code.co_varnames[:count]]
    return [item for value in values for item in (value.values() if isinstance(value, dict) else [value])]


def _last(output):
    """The value the corruption left at an output's last element."""
    try:
        if isinstance(output, float):
            return output
        flat = output.reshape(-1)
        return float(flat[-1])
    except Exception:
        return None


def _contains(value, values, nan: bool) -> bool:
    """Whether an array, tensor or number holds one of `values` (cast to its dtype), or a NaN."""
    ndarray, tensor = loaded("numpy", "ndarray"), loaded("torch", "Tensor")
    try:
        if ndarray is not None and isinstance(value, ndarray):
            numpy = sys.modules["numpy"]
            plain = ndarray.view(value, ndarray)
            if not numpy.issubdtype(plain.dtype, numpy.floating):
                return False
            if nan:
                return bool(numpy.isnan(plain).any())
            return any(bool(numpy.equal(plain, plain.dtype.type(number)).any()) for number in values)
        if tensor is not None and isinstance(value, tensor):
            torch = sys.modules["torch"]
            with torch._C.DisableTorchFunctionSubclass():
                plain = value.detach()
                if not plain.is_floating_point():
                    return False
                if nan:
                    return bool(plain.isnan().any())
                return any(bool((plain == number).any()) for number in values)
        if isinstance(value, float) or type(value).__module__ == "numpy" and hasattr(value, "dtype"):
            number = float(value)
            return number != number if nan else number in values
    except Exception:  # a value that cannot be read as numbers reads no corrupted one
        return False
    return False


def refused_nothing(answer) -> bool:
    """Whether a judging function's answer is a yes (True, every element true, or anything else it
    returns: `pytest.approx`'s object, an assertion's None)."""
    try:
        if isinstance(answer, bool):
            return answer
        every = getattr(answer, "all", None)
        return True if every is None else bool(every())
    except Exception:
        return True
