"""Device host I/O: checked byte runs in and out of tile memory, tensors of another device,
and the core all-reduce on raw tensors."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.core.collectives import all_reduce
from tests._support.threads import race


@pytest.fixture
def dev():
    return ik.Device(ik.GC200.replace(n_tiles=8))


def test_write_and_read_runs_round_trip(dev, rng):
    dev.alloc("buf", np.full(8, 64))
    host = rng.standard_normal(16).astype(np.float32)
    dev.write_runs(host, [0, 32], [3, 5], [0, 8], [32, 32])
    back = np.zeros(16, np.float32)
    dev.read_runs(back, [0, 32], [3, 5], [0, 8], [32, 32])
    np.testing.assert_array_equal(back, host)
    np.testing.assert_array_equal(dev.arena.data[5, 8:40].view(np.float32), host[8:])


@pytest.mark.parametrize("args, match", [
    (([0], [8], [0], [64]), "allocated memory"),                   # one byte past the tile's 64 B
    (([0], [2**63 - 8], [0], [16]), "allocated memory"),           # offset + nbytes wraps int64
    (([0], [0], [0], [-1]), "leaves"),
    (([60], [0], [0], [8]), "host array"),                          # past the host buffer
    (([0], [8], [0], [0.5]), "integers"),
])
def test_runs_outside_memory_are_refused(dev, args, match):
    dev.alloc("buf", np.full(8, 64))
    host = np.zeros(64, np.uint8)
    with pytest.raises((ValueError, TypeError), match=match):
        dev.write_runs(host, args[0], [1], args[1], args[3])


def test_tile_out_of_range_and_foreign_tensor(dev):
    dev.alloc("buf", np.full(8, 64))
    with pytest.raises(ValueError, match="tile 8 outside"):
        dev.read_runs(np.zeros(8, np.uint8), 0, 8, 0, 8)
    other = ik.Device(ik.GC200.replace(n_tiles=8))
    t = other.add_tensor("t", (8,), "float32", ik.TileMapping.linear(8, 8))
    with pytest.raises(ValueError, match="belongs to another device"):
        dev.read(t)
    with pytest.raises(TypeError, match="TileTensor"):
        dev.check_tensor(np.zeros(3))


def test_core_all_reduce_on_a_raw_tensor(dev, rng):
    x = dev.add_tensor("x", (4, 6), "float32", ik.TileMapping.linear(24, 4, tiles=[1, 2, 5, 7]))
    v = rng.standard_normal((4, 6)).astype(np.float32)
    dev.write(x, v)
    steps = all_reduce(dev, x)
    dev.run(dev.program(steps))
    np.testing.assert_allclose(dev.read(x), np.broadcast_to(v.sum(0), (4, 6)), rtol=1e-6, atol=1e-6)
    y = dev.add_tensor("y", (10,), "float32", ik.TileMapping.linear(10, 3))
    with pytest.raises(ValueError, match="same number of elements"):
        all_reduce(dev, y)


def test_threads_racing_to_the_first_arena_get_the_same_one():
    """Device.arena used to be created without a lock: two threads could each make one and
    run unserialised (different arena locks) on whichever was stored last."""
    for _ in range(100):
        dev = ik.Device(ik.GC200.replace(n_tiles=32))
        dev.alloc("x", 1000)
        arenas, errors = race(getattr, [(dev, "arena")] * 6)
        assert not errors and len({id(a) for a in arenas}) == 1
