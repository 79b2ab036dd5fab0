"""The one copy table (ipukern.core.copies): validation errors, coalescing and reordering
equivalent to a plain NumPy copy, and results independent of the host thread count; bad
tables at the low-level Exchange/Device API raise clear errors, never crash."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.core.copies import (CopyTable, balanced_bounds, check_exchange_table, coalesce_runs,
                                 copy_runs, source_order)
from ipukern.core.program import Exchange, ExchangeError

from tests._support.copies import random_copy_table

SMALL = ik.GC200.replace(n_tiles=8, name="GC200-8")


def _reference(cols, dst, src):
    """The copies one by one in NumPy."""
    for sr, so, dr, do, nb in zip(*cols):
        dst[dr, do:do + nb] = src[sr, so:so + nb]


@pytest.mark.parametrize("seed", range(12))
def test_run_matches_the_reference_for_random_tables(seed):
    rng = np.random.default_rng(seed)
    n_rows, row = int(rng.integers(1, 6)), int(rng.integers(2, 400))
    cols = random_copy_table(rng, n_rows, row, int(rng.integers(1, 80)))
    src = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    start = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    want = start.copy()
    _reference(cols, want, src)
    for order in ("source", "given"):
        for n_threads in (None, 1, 2, 3):
            got = start.copy()
            CopyTable(*cols, host_order=order).run(got, src, n_threads)
            assert np.array_equal(got, want), (order, n_threads)
    got = start.copy()
    copy_runs(got, src, *cols)
    assert np.array_equal(got, want)


def test_coalescing_and_source_order_keep_every_byte():
    rng = np.random.default_rng(5)
    cols = random_copy_table(rng, 4, 1000, 200)
    merged = coalesce_runs(*cols)
    assert merged[4].sum() == cols[4].sum() and merged[4].size <= cols[4].size
    for table in (merged, source_order(*cols), source_order(*merged)):
        a = np.zeros((4, 1000), np.uint8)
        b = np.zeros((4, 1000), np.uint8)
        src = rng.integers(0, 256, (4, 1000), dtype=np.uint8)
        _reference(cols, a, src)
        _reference(table, b, src)
        assert np.array_equal(a, b)


def test_thread_count_does_not_change_the_result_of_large_tables():
    """Enough copies and bytes that the table really splits over threads; long copies cut
    into pieces give the same bytes."""
    rng = np.random.default_rng(9)
    n_rows, row = 16, 1 << 16
    cols = random_copy_table(rng, n_rows, row, 3000)
    src = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    want = np.zeros_like(src)
    _reference(cols, want, src)
    tab = CopyTable(*cols, host_order="given", piece_bytes=1 << 10)
    assert tab.thread_bounds(4).size == 5
    for n in (1, 2, 4):
        got = np.zeros_like(src)
        tab.run(got, src, n)
        assert np.array_equal(got, want)


def test_compiled_join_count_equals_the_numpy_masks():
    """``_runs.given_joins`` counts the copies contiguous on both sides with the one
    before, as the NumPy masks of ``coalesce_runs`` do (which it skips when none are)."""
    from ipukern._kernels import _runs
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(2, 400))
        nb = rng.integers(1, 4, n).astype(np.int64)
        sr = rng.integers(0, 2, n).astype(np.int64)
        dr = rng.integers(0, 2, n).astype(np.int64)
        so = np.cumsum(nb) - nb + rng.integers(0, 2, n) * rng.integers(0, 3, n)
        do = np.cumsum(nb) - nb + rng.integers(0, 2, n)
        want = ((sr[1:] == sr[:-1]) & (dr[1:] == dr[:-1]) & (so[:-1] + nb[:-1] == so[1:])
                & (do[:-1] + nb[:-1] == do[1:])).sum()
        assert _runs.given_joins(sr, so, dr, do, nb) == int(want)
    # no joins: the columns come back as they are
    cols = [np.array([0, 0], np.int64), np.array([0, 8], np.int64), np.array([0, 0], np.int64),
            np.array([4, 0], np.int64), np.array([4, 4], np.int64)]
    got = coalesce_runs(*cols)
    assert all(a is b for a, b in zip(got, cols))


def test_balanced_bounds_equal_the_float_target_search():
    """The integer targets find the same indices as the search for the float targets
    ``total * k / n`` they replaced (which converted the running sum to float64)."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        nb = rng.integers(0, rng.choice([2, 50, 1 << 20]), int(rng.integers(64, 3000)))
        nb[0] += 1 << 16
        for n in (2, 3, 7):
            cum = np.cumsum(nb)
            want = np.searchsorted(cum, cum[-1] * np.arange(1, n) / n, side="left") + 1
            assert balanced_bounds(nb, n)[1:-1].tolist() == want.tolist()


def test_balanced_bounds_split_bytes_evenly():
    nb = np.full(1000, 1 << 10, np.int64)
    b = balanced_bounds(nb, 4)
    assert b[0] == 0 and b[-1] == 1000 and (np.diff(b) > 0).all()
    assert balanced_bounds(nb[:10], 4).tolist() == [0, 10]   # too small for threads


def test_concat_joins_the_columns_in_order():
    a = CopyTable([0], [1], [2], [3], [4])
    b = CopyTable([5, 6], [7, 8], [9, 10], [11, 12], [13, 14])
    c = CopyTable.concat([a, CopyTable([], [], [], [], []), b])
    assert [x.tolist() for x in c.columns] == [[0, 5, 6], [1, 7, 8], [2, 9, 10], [3, 11, 12],
                                               [4, 13, 14]]
    assert len(CopyTable.concat([])) == 0


@pytest.mark.parametrize("cols, match", [
    (([0], [0], [0], [0], [-1]), "negative size"),
    (([0], [0], [9], [0], [4]), "destination row 9"),
    (([0], [14], [0], [0], [4]), r"source bytes \[14, 18\)"),
    (([0, 0], [0], [0], [0], [4]), "differ in length"),
    (([0.5], [0], [0], [0], [4]), "integers"),
])
def test_validate_names_the_bad_copy(cols, match):
    with pytest.raises(ValueError, match=match):
        CopyTable(*cols).validate((2, 16), (2, 16))


def test_run_refuses_bad_arrays_and_writes_nothing():
    tab = CopyTable([0], [0], [1], [8], [8])
    src = np.arange(32, dtype=np.uint8).reshape(2, 16)
    short = np.zeros((2, 12), np.uint8)
    with pytest.raises(ValueError, match="outside the arrays"):
        tab.run(short, src)
    assert not short.any()
    with pytest.raises(ValueError, match="distinct"):
        tab.run(src, src)
    with pytest.raises((TypeError, ValueError)):
        tab.run(np.zeros((2, 16), np.int16), src)
    with pytest.raises(ValueError, match="threads"):
        tab.run(np.zeros((2, 16), np.uint8), src, 0)


@pytest.mark.parametrize("cols, match", [
    (([0], [0], [8], [0], [4]), "destination tile 8"),
    (([0, 1], [0, 0], [2, 2], [0, 2], [4, 4]), "overlapping writes"),
    (([0], [0], [0], [2], [4]), "also reads"),
    (([0], [0], [1], [-2], [4]), "fall outside"),
    (([[0]], [0], [1], [0], [4]), "one-dimensional"),
    (([0], [0], [1], [0], [2**63 - 1]), "fall outside"),
])
def test_exchange_tables_get_clear_errors(cols, match):
    with pytest.raises(ExchangeError, match=match):
        Exchange(SMALL, *cols, row_bytes=64)
    if np.ndim(cols[0]) == 1:
        c = [np.asarray(x, np.int64) for x in cols]
        with pytest.raises(ExchangeError, match=match):
            check_exchange_table(*c, SMALL.n_tiles, 64, "t", ExchangeError)


def test_exchange_runs_its_table_bit_exactly():
    dev = ik.Device(SMALL)
    a = dev.alloc("a", np.full(SMALL.n_tiles, 64))
    b = dev.alloc("b", np.full(SMALL.n_tiles, 64))
    tiles = np.arange(SMALL.n_tiles)
    x = dev.exchange((tiles + 3) % SMALL.n_tiles, a, tiles, b, np.full(SMALL.n_tiles, 40))
    data = dev.arena.data
    data[...] = np.random.default_rng(0).integers(0, 256, data.shape, dtype=np.uint8)
    want = data.copy()
    _reference(x.table.columns, want, want.copy())
    x.run(data, 2)
    assert np.array_equal(data, want)
    with pytest.raises(ExchangeError):
        x.run(data[:, :16].copy(), 1)


def test_device_host_io_errors_are_clear():
    dev = ik.Device(SMALL)
    t = dev.add_tensor("t", (8, 4), "float32", ik.TileMapping(32, np.arange(8), np.arange(8) * 4,
                                                              np.full(8, 4)))
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    dev.write(t, x)
    assert np.array_equal(dev.read(t), x)
    host = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="leaves the host array"):
        dev.write_runs(host, [10], [0], [0], [8])
    with pytest.raises(ValueError, match="tile 9"):
        dev.read_runs(host, [0], [9], [0], [4])
    with pytest.raises(TypeError, match="integers"):
        dev.write_runs(host, [0.0], [0], [0], [4])
    dev.write_runs(host + 7, [0], [1], [0], [16])
    dev.read_runs(host, [0], [1], [0], [16])
    assert (host == 7).all()
