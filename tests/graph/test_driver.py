"""Tile-function drivers: Numba thread count restored, user exceptions surfaced with their
own type, out-of-block indices caught by default, cycle estimates bounded."""
import numba
import numpy as np
import pytest

import ipukern as ik
from ipukern.graph import _driver


@ik.tile_function(per_element_cycles=1)
def fails_on_negative(x):
    for i in range(x.size):
        if x[i] < 0:
            raise ValueError("negative input")
        x[i] += np.float32(1)


@ik.tile_function(per_element_cycles=1)                  # default: bounds-checked
def writes_one_past_its_block(x):
    x[x.size] = np.float32(7)


@ik.tile_function(per_element_cycles=1)
def inc(x):
    for i in range(x.size):
        x[i] += np.float32(1)


@pytest.fixture(scope="module")
def small():
    return ik.GC200.replace(n_tiles=16, name="GC200-16")


def one_step(g, fn, t):
    return g.program([ik.Superstep(fn.name, compute=g.compute(fn, t))])


def test_numba_thread_count_is_restored_after_a_run(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 64)
    prog = one_step(g, inc, x)
    g.write(x, np.zeros(64, np.float32))
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        ik.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        g.run(prog)
        assert numba.get_num_threads() == 1
    finally:
        ik.set_num_threads(None)
        numba.set_num_threads(before)
    np.testing.assert_array_equal(g.read(x), np.ones(64, np.float32))


def test_user_exception_keeps_its_type_from_the_parallel_driver(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 64)
    prog = one_step(g, fails_on_negative, x)
    assert fails_on_negative.parallel
    v = np.zeros(64, np.float32)
    v[37] = -1
    g.write(x, v)
    with pytest.raises(ValueError, match="negative input") as e:
        g.run(prog)
    assert not isinstance(e.value, SystemError)
    g.write(x, np.zeros(64, np.float32))              # the runtime is usable afterwards
    g.run(prog)
    np.testing.assert_array_equal(g.read(x), np.ones(64, np.float32))


def test_writing_one_element_past_the_block_is_caught_by_default(small):
    g = ik.Graph(small)
    x = g.linear_tensor("x", 32, tiles=[small.n_tiles - 1])   # the arena's last row
    y = g.linear_tensor("y", 32, tiles=[small.n_tiles - 1])
    g.write(y, np.arange(32, dtype=np.float32))
    assert writes_one_past_its_block.boundscheck and writes_one_past_its_block.parallel
    with pytest.raises(ik.TileFunctionError, match="indexed outside its tile-local block"):
        g.run(one_step(g, writes_one_past_its_block, x))
    np.testing.assert_array_equal(g.read(y), np.arange(32, dtype=np.float32))   # neighbour intact


def test_cycle_estimates_cannot_overflow(small):
    huge = ik.tile_function(per_element_cycles=1e30)(inc.py_func)
    g = ik.Graph(small)
    x = g.linear_tensor("x", 64)
    with pytest.raises(ik.TileFunctionError, match="overflow"):
        g.compute(huge, x)


def test_driver_source_names_this_module():
    src = _driver.driver_source("k", (("float32", 2),), parallel=True, cache=True, boundscheck=True,
                                origin="here")
    assert "from ipukern.graph._driver import _registered" in src
    assert "prange" in src and "boundscheck=True" in src
    assert "reshape((shape[v, 0, 0], shape[v, 0, 1],))" in src
