"""Which failures read a corrupted output: the statements of the checkout's frames a failure passed
through, and the values their names hold (the corrupted output, memory it shares, a value it held)."""
import sys

import numpy as np
import pytest

from kvtasks.harness.in_target.memory import overlap
from kvtasks.harness.in_target.reads import Corrupted


def _corrupted(output, nan=False):
    corrupted = Corrupted(nan, {})
    if nan:
        output[...] = np.nan
    else:
        output.reshape(-1)[-1] = 2 * float(output.reshape(-1)[-1]) + 1
    corrupted.add(output, [])
    return corrupted


def _failure(function, *args):
    try:
        function(*args)
    except AssertionError:
        return sys.exc_info()[2]
    raise RuntimeError("no failure")


def _ratio_check(ref, tri, ratio):  # a helper judging by a ratio it computes (as a public repository does)
    error = float(np.abs(ref - tri).max() / np.abs(ref).max())
    assert error < ratio, f"ratio {error}"


def test_comparisons_of_the_output_or_of_what_holds_its_values_read_it(torch):
    ref = np.linspace(1, 2, 12, dtype=np.float32).reshape(3, 4)
    out = ref.copy()
    corrupted = _corrupted(out)
    assert corrupted.read_by(_failure(lambda: np.testing.assert_allclose(out, ref)))
    assert corrupted.read_by(_failure(lambda: np.testing.assert_allclose(out[:, 2:], ref[:, 2:])))  # a view
    widened = out.astype(np.float64)  # a copy in another dtype holds the corrupted value
    assert corrupted.read_by(_failure(lambda: np.testing.assert_allclose(widened, ref)))
    assert corrupted.read_by(_failure(_ratio_check, ref, out, 1e-3))  # a helper's error computed from it
    assert corrupted.read_by(_failure(_hand_written, out, ref))
    as_tensor = torch.from_numpy(out)  # a tensor over the output's memory
    assert corrupted.read_by(_failure(lambda: torch.testing.assert_close(as_tensor, torch.from_numpy(ref))))


def _hand_written(out, ref):
    error = np.abs(out - ref)
    worst = error.max()
    assert worst < 1e-3


def test_checks_of_inputs_shapes_or_anything_else_do_not():
    x = np.linspace(1, 2, 12, dtype=np.float32).reshape(3, 4)
    before = x * 1
    out = x * 2
    corrupted = _corrupted(out)
    x[0, 0] = 5
    assert not corrupted.read_by(_failure(lambda: np.testing.assert_array_equal(x, before)))
    assert not corrupted.read_by(_failure(lambda: np.testing.assert_equal(out.shape, (4, 3))))
    runs = 3
    assert not corrupted.read_by(_failure(lambda: _check_runs(out, runs)))


def _check_runs(out, runs):
    assert out.shape == (3, 4) and runs < 3


def test_in_the_nan_mode_a_nan_anywhere_it_reached_counts():
    ref = np.ones(5, dtype=np.float32)
    out = ref.copy()
    corrupted = _corrupted(out, nan=True)
    error = float(np.abs(out - ref).max())
    assert corrupted.read_by(_failure(lambda: _bounded(error)))


def _bounded(error):
    assert error < 1e-3


def test_memory_overlap_across_numpy_and_torch(torch):
    base = np.zeros(8, dtype=np.float32)
    assert overlap(base[4:], torch.from_numpy(base)) and overlap(torch.from_numpy(base)[2:], base)
    assert not overlap(base[:4], base[4:]) and not overlap(base, base.copy())


def test_a_comparison_of_a_call_s_unnamed_result_on_its_own_line_reads_it():
    ref = np.ones(4, dtype=np.float32)
    out = ref * 2
    corrupted = Corrupted(False, {})

    def kernel(x):
        return out

    def check():
        assert float(np.abs(kernel(ref) - ref).max()) < 1e-3

    frame_line = check.__code__.co_firstlineno + 1
    corrupted.add(out.copy(), [(__file__, frame_line)])  # another buffer: only the call's line says it
    assert corrupted.read_by(_failure(check))
