"""kvtasks.stages.grid.plan: the default grid generated from --shape-vars."""
from kvtasks.stages.grid import default_grid


def test_default_grid_covers_the_three_classes():
    rows, basis = default_grid(["M", "N", "dtype_str"], ["4,64,bf16"])
    assert rows == [["256", "4096", "bf16"], ["67", "4099", "bf16"], ["524289", "4096", "bf16"]]
    assert int(rows[2][0]) * int(rows[2][1]) > 2**31 and int(rows[1][1]) % 64 != 0
    assert "large M" in basis
    assert default_grid(["heads", "N"], None)[0] == []
