"""kvtasks.stages.grid.plan: the default grid generated from --shape-vars."""
from kvtasks.stages.grid import default_grid
from kvtasks.stages.grid.plan import grid_seed


def test_default_grid_covers_the_three_classes():
    for seed in ("", "a", grid_seed("secret", "0" * 40, "tests/test_x.py")):
        rows, basis = default_grid(["M", "N", "dtype_str"], ["4,64,bf16"], seed)
        assert rows[0] == ["256", "4096", "bf16"] and [row[2] for row in rows] == ["bf16"] * 3
        odd_m, odd_n, large_m = (int(rows[1][0]), int(rows[1][1]), int(rows[2][0]))
        assert odd_m % 2 == 1 and odd_n % 2 == 1 and odd_n > 4096  # no power-of-two tile divides them
        assert large_m * int(rows[2][1]) > 2**31
    assert "large M" in basis and "drawn" in basis


def test_the_drawn_cells_are_one_per_secret_base_and_target():
    cells = {key: default_grid(["M", "N"], None, grid_seed(*key))[0]
             for key in [("s1", "b1", "t"), ("s2", "b1", "t"), ("s1", "b2", "t"), ("s1", "b1", "u")]}
    assert default_grid(["M", "N"], None, grid_seed("s1", "b1", "t"))[0] == cells[("s1", "b1", "t")]
    assert len({str(rows) for rows in cells.values()}) == 4  # another secret, base or target draws anew
    assert default_grid(["heads", "N"], None)[0] == []
