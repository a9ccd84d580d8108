"""kvtasks.stages.grid.plan: the default grid generated from --shape-vars."""
from kvtasks.stages.grid import default_grid
from kvtasks.stages.grid.plan import grid_seed


def test_the_default_grid_spans_scales_and_changes_n_between_consecutive_cells():
    for seed in ("", "a", grid_seed("secret", "0" * 40, "tests/test_x.py"), *(str(n) for n in range(200))):
        rows, basis = default_grid(["M", "N", "dtype_str"], ["4,64,bf16"], seed)
        assert [row[2] for row in rows] == ["bf16"] * 4
        (m, small), (same_m, mid), (again_m, past), (large_m, wide) = [(int(r[0]), int(r[1])) for r in rows]
        assert m == same_m == again_m and m % 2 == 1  # one M, three N: a plan cached per M meets another N
        assert small < 64 and 65 <= mid <= 4095 and small % 2 == mid % 2 == 1
        power = 1 << (past.bit_length() - 1)
        assert 64 <= power <= 4096 and 0 < past - power < 16 and past % 2 == 1  # just past a power of two
        assert len({small, mid, past}) == 3  # each call changes N
        assert large_m % 2 == 1 and large_m * wide > 2**31
    assert "below 64" in basis and "just past a power of two" in basis and "drawn" in basis


def test_the_drawn_cells_are_one_per_secret_base_and_target():
    cells = {key: default_grid(["M", "N"], None, grid_seed(*key))[0]
             for key in [("s1", "b1", "t"), ("s2", "b1", "t"), ("s1", "b2", "t"), ("s1", "b1", "u")]}
    assert default_grid(["M", "N"], None, grid_seed("s1", "b1", "t"))[0] == cells[("s1", "b1", "t")]
    assert len({str(rows) for rows in cells.values()}) == 4  # another secret, base or target draws anew
    assert default_grid(["heads", "N"], None)[0] == []
