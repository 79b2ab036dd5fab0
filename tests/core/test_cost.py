"""Cycle estimators of the built-in vertices and of exchanges (array forms equal the scalar
ones; exchange loads equal tests/_support/reference.py)."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.core import cost

from tests._support.reference import exchange_loads


@pytest.mark.parametrize("machine", [ik.GC200, ik.GC2])
@pytest.mark.parametrize("pt, ot", [("float32", "float32"), ("float32", "float16"),
                                    ("float16", "float16"), ("float16", "float32")])
def test_reduce_array_equals_scalar(machine, pt, ot):
    rng = np.random.default_rng(0)
    n = rng.integers(1, 200_000, size=600)
    n[:100] = rng.integers(1, 40, size=100)
    d = rng.integers(1, 17, size=600)
    want = [cost.reduce_cycles(machine, int(a), int(b), pt, ot) for a, b in zip(n, d)]
    np.testing.assert_array_equal(cost.reduce_cycles_array(machine, n, d, pt, ot), want)


def test_cast_and_elementwise_arrays_equal_scalar():
    n = np.array([0, 1, 5, 100, 12345])
    m = ik.GC200
    np.testing.assert_array_equal(cost.cast_cycles_array(m, n, "float32", "float16"),
                                  [cost.cast_cycles(m, int(k), "float32", "float16") for k in n])
    np.testing.assert_array_equal(cost.elementwise_cycles_array(m, n, "float16"),
                                  [cost.elementwise_cycles(m, int(k), "float16") for k in n])


def test_reduce_hand_computed():
    # reference §4.3 worked example: 1024 outputs, depth 4, float -> half
    assert cost.reduce_cycles(ik.GC200, 1024, 4, "float32", "float16", vertex="multi") == 4836
    assert cost.reduce_cycles(ik.GC200, 1024, 4, "float32", "float16", vertex="single") == 3507


def test_elementwise_hand_computed():
    # 1200 floats on 6 workers: 200 each = 100 64-bit vectors x 2 loads + 58; x6 + 33
    assert cost.elementwise_cycles(ik.GC200, 1200, "float32", 2) == 6 * (58 + 200) + 33
    # zeroing 1200 halves: per worker 200/4 = 50 vectors + 5, x6
    assert cost.zero_cycles(ik.GC200, 1200, "float16") == 6 * 55


def _random_table(rng, n_tiles, n_copies, max_off):
    st = rng.integers(0, n_tiles, n_copies)
    so = rng.integers(0, 4, n_copies) * 64          # few distinct offsets: many broadcasts
    dt = rng.integers(0, n_tiles, n_copies)
    nb = rng.choice([0, 2, 64, 128], n_copies)
    return st, np.minimum(so, max_off), dt, nb


@pytest.mark.parametrize("tiles_per_bus", [1, 2, 4])
@pytest.mark.parametrize("seed", range(5))
def test_exchange_loads_matches_reference(seed, tiles_per_bus):
    rng = np.random.default_rng(seed)
    st, so, dt, nb = _random_table(rng, 16, 300, 1 << 20)
    got = cost.exchange_loads(st, so, dt, nb, 16, tiles_per_bus)
    want = exchange_loads(st, so, dt, nb, 16, tiles_per_bus)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_exchange_loads_wide_fields_use_the_stacked_path():
    # offsets and sizes too wide to pack into 63 bits with the tile ids
    rng = np.random.default_rng(7)
    st, so, dt, nb = _random_table(rng, 8, 200, 0)
    so = so + (1 << 40)
    nb = nb + (1 << 21)
    got = cost.exchange_loads(st, so, dt, nb, 8, 2)
    want = exchange_loads(st, so, dt, nb, 8, 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_exchange_loads_broadcast_by_hand():
    # tile 0 sends one 100 B region to tiles 2 and 3 (one bus) and to tile 4 (another bus)
    st, so, dt = np.array([0, 0, 0]), np.array([8, 8, 8]), np.array([2, 3, 4])
    nb = np.array([100, 100, 100])
    recv, paired, send = cost.exchange_loads(st, so, dt, nb, 6, 2)
    assert recv.tolist() == [0, 0, 100, 100, 100, 0]
    assert paired.tolist() == [0, 0, 100, 100, 0, 0]
    assert send.tolist() == [100, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("bandwidth", [1e9, 1e10, 1e11, 1.2e11, 5e11, 2e12])
def test_slow_exchange_rates_are_not_clamped(bandwidth):
    """Rates under 1/32 B/cycle used to round to 1/16 (~122 GB/s on a GC200): 1 GB/s and
    100 GB/s gave identical cycles. Now every rate is within 1.6% of bytes / rate."""
    m = ik.GC200.replace(exchange_bandwidth=bandwidth)
    exact = 10**6 / m.exchange_bytes_per_cycle
    got = cost.exchange_cycles(10**6, m)
    assert abs(got - exact) <= 0.016 * exact + 1
    recv = np.array([10**6, 0, 5])
    per_tile = cost.tile_exchange_cycles(recv, np.zeros(3, np.int64), np.zeros(3, np.int64), m)
    assert per_tile[0] == got and per_tile[1] == 0


def test_exchange_cycles_scale_with_bandwidth_and_preset_rates_are_unchanged():
    slow = cost.exchange_cycles(10**6, ik.GC200.replace(exchange_bandwidth=1e9))
    fast = cost.exchange_cycles(10**6, ik.GC200.replace(exchange_bandwidth=1e11))
    assert 95 < slow / fast < 105
    assert cost.exchange_rate(ik.GC200) == (16, 390)          # PopLibs' x16 integer rate
    assert cost.exchange_cycles(1000, ik.GC200) == 42
