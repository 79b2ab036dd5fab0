"""Tests for ipukern/cost.py helpers not covered elsewhere: the exchange load of a copy table."""
import numpy as np
import pytest

from ipukern import cost

import reference


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
    want = reference.exchange_loads(st, so, dt, nb, 16, tiles_per_bus)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_exchange_loads_wide_fields_use_the_stacked_path():
    # offsets and sizes too wide to pack into 63 bits with the tile ids
    rng = np.random.default_rng(7)
    st, so, dt, nb = _random_table(rng, 8, 200, 0)
    so = so + (1 << 40)
    nb = nb + (1 << 21)
    got = cost.exchange_loads(st, so, dt, nb, 8, 2)
    want = reference.exchange_loads(st, so, dt, nb, 8, 2)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_exchange_loads_broadcast_by_hand():
    # tile 0 sends one 100 B region to tiles 2 and 3 (one bus) and to tile 4 (another bus)
    st = np.array([0, 0, 0]); so = np.array([8, 8, 8]); dt = np.array([2, 3, 4])
    nb = np.array([100, 100, 100])
    recv, paired, send = cost.exchange_loads(st, so, dt, nb, 6, 2)
    assert recv.tolist() == [0, 0, 100, 100, 100, 0]
    assert paired.tolist() == [0, 0, 100, 100, 0, 0]
    assert send.tolist() == [100, 0, 0, 0, 0, 0]
