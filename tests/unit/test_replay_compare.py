"""kvtasks' own comparison of two calls' products: by the tolerance table per dtype, integers
exactly, NaN and Inf in the same places, and types, kinds and shapes as they are."""
import numpy as np
import pytest

from kvtasks.harness.in_target.replay import Reader, Uncapturable, Writer
from kvtasks.stages.replay.compare import DEFAULT_TABLE, Produced, difference


def produced(tmp_path, name, value) -> Produced:
    folder = tmp_path / name
    folder.mkdir()
    return Produced(folder, {"returned": Writer(str(folder), [1 << 30]).encode(value)})


@pytest.mark.parametrize("left,right,differs", [
    (np.float32([1, 2, 3]), np.float32([1, 2, 3 + 2e-5]), False),  # within f32's 1e-5 (relative and absolute)
    (np.float32([1, 2, 3]), np.float32([1, 2, 3.1]), True),
    (np.float32([1, np.nan, np.inf]), np.float32([1, np.nan, np.inf]), False),  # the same places
    (np.float32([1, np.nan]), np.float32([1, 0]), True),
    (np.float32([np.inf]), np.float32([-np.inf]), True),
    (np.int32([1, 2]), np.int32([1, 3]), True),  # integers exactly
    (np.float16([1, 2]), np.float16([1, 2.001]), False),  # f16's 2e-3
    (np.float32([1, 2]), np.float64([1, 2]), True),  # another dtype
    (np.float32([1, 2]), np.float32([[1, 2]]), True),  # another shape
    ((np.float32([1]), 3), (np.float32([1]), 4), True),  # a plain value in a returned tuple
])
def test_two_products_differ_only_beyond_the_table(tmp_path, left, right, differs):
    said, _ = difference(produced(tmp_path, "a", left), produced(tmp_path, "b", right), DEFAULT_TABLE)
    assert (said is not None) == differs, said


@pytest.mark.parametrize("last,differs", [(2.0078125, False), (2.5, True)])  # within bf16's 1.6e-2, and not
def test_two_bfloat16_products_differ_only_beyond_the_table(tmp_path, torch, last, differs):
    left, right = (torch.tensor([1.0, value], dtype=torch.bfloat16) for value in (2.0, last))
    said, _ = difference(produced(tmp_path, "a", left), produced(tmp_path, "b", right), DEFAULT_TABLE)
    assert (said is not None) == differs, said


def test_the_first_difference_is_named_with_both_values_and_noise_widens_it(tmp_path):
    one, other = produced(tmp_path, "a", np.float32([1, 2, 3])), produced(tmp_path, "b", np.float32([1, 2, 3.001]))
    said, _ = difference(one, other, DEFAULT_TABLE)
    assert said.startswith("return: at index (2,): ") and "3.0" in said and "3.00099" in said
    assert difference(one, other, DEFAULT_TABLE, widen=30.0)[0] is None  # 31 times the table: the caller caps it


def test_a_capture_is_data_and_reads_back_as_the_plain_types(tmp_path, torch):
    class Lying(np.ndarray):
        pass

    folder = tmp_path / "call"
    folder.mkdir()
    writer = Writer(str(folder), [1 << 30])
    encoded = writer.encode([np.arange(3.0).view(Lying), torch.ones(2, dtype=torch.bfloat16), np.float16(2), "x", None])
    assert encoded["items"][0]["type"].endswith("Lying") and encoded["items"][1]["stored_as"] == "int16"
    back = Reader(str(folder)).decode(encoded)
    assert type(back[0]) is np.ndarray and back[1].dtype == torch.bfloat16 and back[2:] == [np.float16(2), "x", None]

    class ArrayLike:
        def __array__(self):
            return np.zeros(2)

    with pytest.raises(Uncapturable, match="an array-like "):
        writer.encode(ArrayLike())
    with pytest.raises(Uncapturable, match="byte cap"):
        Writer(str(folder), [8]).encode(np.zeros(4))


def test_a_returned_float_is_compared_within_float32_s_tolerance_and_anything_else_exactly(tmp_path):
    assert difference(produced(tmp_path, "a", 1.0), produced(tmp_path, "b", 1.000001), DEFAULT_TABLE)[0] is None
    assert difference(produced(tmp_path, "c", 1.0), produced(tmp_path, "d", 1.1), DEFAULT_TABLE)[0] is not None
    assert difference(produced(tmp_path, "e", 3), produced(tmp_path, "f", 4), DEFAULT_TABLE)[0] is not None
    assert difference(produced(tmp_path, "g", "x"), produced(tmp_path, "h", "x"), DEFAULT_TABLE)[0] is None


def test_a_scalar_output_s_difference_is_seen_and_noise_widens_within_its_dtype(tmp_path, torch):
    assert difference(produced(tmp_path, "a", torch.tensor(1.0)), produced(tmp_path, "b", torch.tensor(100.0)),
                      DEFAULT_TABLE)[0] is not None
    assert difference(produced(tmp_path, "c", np.array(3)), produced(tmp_path, "d", np.array(4)), DEFAULT_TABLE)[0]
    off = produced(tmp_path, "e", np.float32([1.06])), produced(tmp_path, "f", np.float32([1.0]))
    assert difference(*off, DEFAULT_TABLE, widen=4.0)[0] is not None  # four times f32's table is no 0.06
    assert difference(produced(tmp_path, "g", torch.ones(2, dtype=torch.bfloat16)),
                      produced(tmp_path, "h", torch.ones(2)), DEFAULT_TABLE)[0] is not None  # bf16 against f32


def test_what_would_come_back_as_something_else_is_not_captured(tmp_path, torch):
    from collections import namedtuple

    writer = Writer(str(tmp_path), [1 << 30])
    for value in (namedtuple("Config", "scale")(2.0), torch.Size([2, 3]), np.complex64(1j)):
        with pytest.raises(Uncapturable):
            writer.encode(value)
    assert writer.encode(np.float64(0.1)) == {"kind": "npscalar", "dtype": "float64", "value": 0.1}
