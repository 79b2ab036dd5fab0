"""Tile memory budgets, overflow reports, placement round trips."""
import numpy as np
import pytest

import ipukern as ik
from ipukern import TileMapping


def test_budget_error_names_tile_bytes_and_budget():
    mem = ik.TileMemory(ik.GC200)
    budget = ik.GC200.tile_bytes - ik.GC200.reserved_bytes_per_tile
    sizes = np.full(ik.GC200.n_tiles, 1000)
    mem.alloc("a", sizes, "inputs")
    sizes = np.zeros(ik.GC200.n_tiles, dtype=np.int64)
    sizes[17] = budget
    sizes[900] = budget
    with pytest.raises(ik.TileMemoryError) as e:
        mem.alloc("big", sizes, "weights")
    msg = str(e.value)
    assert f"tile 17: allocating {budget} B for 'big'" in msg
    assert f"(1000/{budget} B used" in msg and "1 other tiles" in msg
    assert isinstance(e.value, MemoryError)
    assert (e.value.tile, e.value.requested, e.value.used, e.value.budget) == (17, budget, 1000, budget)
    # nothing was recorded by the failed allocation
    assert mem.high_water == 1000 and len(mem.allocations) == 1


def test_overflow_mode_reports_tiles():
    mem = ik.TileMemory(ik.GC200, allow_overflow=True)
    sizes = np.zeros(ik.GC200.n_tiles, dtype=np.int64)
    sizes[[3, 4]] = ik.GC200.tile_bytes
    mem.alloc("too_big", sizes, "partials")
    rep = mem.report()
    assert list(rep.overflow_tiles) == [3, 4]
    assert rep.max_bytes == ik.GC200.tile_bytes + ik.GC200.reserved_bytes_per_tile
    assert "OVER BUDGET on 2 tiles" in rep.summary()


def test_report_categories_and_alignment():
    mem = ik.TileMemory(ik.GC2)
    mem.alloc("x", np.full(ik.GC2.n_tiles, 5), "inputs")
    mem.alloc("w", np.full(ik.GC2.n_tiles, 8), "weights")
    rep = mem.report()
    assert int(rep.by_category["inputs"][0]) == 5
    assert int(rep.by_category["alignment"][0]) == 3      # w starts at offset 8
    assert rep.max_bytes == rep.min_bytes == 16 + ik.GC2.reserved_bytes_per_tile
    d = rep.to_dict()
    assert d["by_category"]["weights"]["max"] == 8


def test_bad_allocations():
    mem = ik.TileMemory(ik.GC200)
    with pytest.raises(ValueError, match="negative size"):
        mem.alloc("n", np.full(ik.GC200.n_tiles, -1))
    with pytest.raises(ValueError, match="per-tile sizes"):
        mem.alloc("n", np.ones(3, dtype=np.int64))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_placement_round_trip_bit_exact(rng, dtype):
    dev = ik.Device(ik.GC200)
    shape = (37, 1001)
    vals = rng.standard_normal(shape).astype(dtype)
    vals.flat[::97] = np.nan
    vals.flat[5] = np.inf
    t = dev.add_tensor("t", shape, dtype, TileMapping.linear(vals.size, ik.GC200.n_tiles, grain=3))
    dev.write(t, vals)
    back = dev.read(t)
    assert back.dtype == vals.dtype
    np.testing.assert_array_equal(back.view(np.uint8), vals.view(np.uint8))


def test_placement_with_irregular_mapping(rng):
    dev = ik.Device(ik.GC2)
    n = 5000
    tiles = rng.integers(0, ik.GC2.n_tiles, size=n)        # every element on a random tile
    m = TileMapping.from_element_tiles(tiles)
    t = dev.add_tensor("t", (n,), "float32", m)
    vals = rng.standard_normal(n).astype(np.float32)
    dev.write(t, vals)
    np.testing.assert_array_equal(dev.read(t), vals)
    assert dev.memory.used.sum() >= n * 4


def test_mapping_validation():
    with pytest.raises(ValueError, match="exactly once"):
        TileMapping(10, np.array([0, 1]), np.array([0, 4]), np.array([5, 6]))
    with pytest.raises(ValueError, match="exactly once"):
        TileMapping(10, np.array([0]), np.array([1]), np.array([9]))
    dev = ik.Device()
    with pytest.raises(ValueError, match="covers"):
        dev.add_tensor("x", (4, 4), "float32", TileMapping.linear(15, 4))
    with pytest.raises(ValueError, match="outside"):
        dev.add_tensor("x", (4,), "float32", TileMapping.single(4, 5000))
    x = dev.add_tensor("x", (4,), "float32", TileMapping.single(4, 3))
    with pytest.raises(ValueError, match="shape"):
        dev.write(x, np.zeros(5, np.float32))
    with pytest.raises(TypeError):
        dev.write(x, np.zeros(4, np.complex64))
    with pytest.raises(ValueError, match="already exists"):
        dev.add_tensor("x", (4,), "float32", TileMapping.single(4, 3))


def test_tensor_too_big_for_tiles():
    dev = ik.Device(ik.GC200)
    n = 2 * ik.GC200.tile_bytes // 4
    with pytest.raises(ik.TileMemoryError, match="tile 0"):
        dev.add_tensor("huge", (n,), "float32", TileMapping.single(n, 0))
