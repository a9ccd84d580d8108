"""What memory an array or tensor spans, and whether two overlap: numpy's and torch's alike, read
through the modules the values came from (never imported here). No import of this package's: the
capture, the corruption and the reads all use it."""
import sys


def loaded(module, kind):
    """module.kind when `module` is already imported, else None: a value of it proves it loaded."""
    found = sys.modules.get(module)
    return getattr(found, kind, None) if found is not None else None


def extent(value):
    """(first, last) byte address an ndarray or tensor spans, or None."""
    ndarray, tensor = loaded("numpy", "ndarray"), loaded("torch", "Tensor")
    try:
        if ndarray is not None and isinstance(value, ndarray):
            numpy = sys.modules["numpy"]
            bounds = getattr(getattr(numpy.lib, "array_utils", numpy), "byte_bounds", None) or numpy.byte_bounds
            first, end = bounds(ndarray.view(value, ndarray))
            return (first, end) if end > first else None
        if tensor is not None and isinstance(value, tensor):
            storage = value.untyped_storage()
            first = storage.data_ptr()
            return (first, first + storage.nbytes()) if first and storage.nbytes() else None
    except Exception:  # a meta or sparse tensor, an array without memory of its own to name
        return None
    return None


def overlap(one, other) -> bool:
    """Whether two values' memory overlaps (numpy and torch alike, either way round)."""
    first, second = extent(one), extent(other)
    return first is not None and second is not None and first[0] < second[1] and second[0] < first[1]
