"""The compiled walk over two layouts (``ipukern._kernels._runs``): the copy table, the
packed offsets and the host order it builds must be those of the slow, obvious versions
(tests/_support/reference.py) and of the sort-based path it replaced."""
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukern.core import TileMapping
from ipukern.core import copies
from ipukern.core.copies import _row_order, coalesce_runs
from ipukern.nn import layout as L

from tests._support.reference import layout_copy_table


def _random_layout(rng, shape, n_tiles, packed):
    n = int(np.prod(shape))
    k = int(rng.integers(1, min(n, 30) + 1))
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False)) if k > 1 else []
    start = np.r_[0, cuts].astype(np.int64)
    m = TileMapping(n, rng.integers(0, n_tiles, size=k), start, np.diff(np.r_[start, n]))
    perm = tuple(int(p) for p in rng.permutation(len(shape))) if rng.random() < 0.7 else None
    off = None if packed else rng.integers(0, 500, size=k) * 4
    return L.Layout(shape, "float32", m, perm, off)


def _walk_tuple(lay):
    m = lay.mapping
    perm = tuple(range(len(lay.shape))) if lay.perm is None else lay.perm
    return lay.shape, perm, m.start, m.count, m.tile, lay.byte_offsets


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), nd=st.integers(1, 5), packed=st.booleans())
def test_walked_copy_table_is_the_reference_and_the_sorted_one(seed, nd, packed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(1, 5, size=nd))
    if int(np.prod(shape)) < 2:
        shape = shape + (2,)
    a = _random_layout(rng, shape, 4, packed)
    b = _random_layout(rng, shape, 4, not packed)
    got = L.copy_table(a, b)
    want = layout_copy_table(a.n_elems, 4, _walk_tuple(a), _walk_tuple(b))
    old = L._copy_table_sorted(a, b)
    for g, w, o in zip(got, want, old):
        assert g.dtype == np.int64
        assert g.tolist() == w.tolist() == o.tolist()


def test_packed_offsets_are_running_sums_per_tile():
    rng = np.random.default_rng(3)
    tile = rng.integers(0, 7, size=500)
    count = rng.integers(1, 9, size=500)
    m = TileMapping(int(count.sum()), tile, np.r_[0, np.cumsum(count)[:-1]], count)
    got = L.Layout((m.n_elems,), "float16", m).packed_offsets
    used = {}
    for i, (t, c) in enumerate(zip(tile.tolist(), count.tolist())):
        assert got[i] == used.get(t, 0)
        used[t] = used.get(t, 0) + 2 * c


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rising=st.booleans())
def test_row_order_is_the_stable_sort(seed, rising):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 5, size=200)
    off = np.arange(200) * 3 if rising else rng.integers(0, 50, size=200)
    got = _row_order(rows, off, 1000)
    assert got.tolist() == np.argsort(rows * 1000 + off, kind="stable").tolist()


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), pieces=st.integers(2, 60), shuffle=st.booleans())
def test_coalescing_merges_as_when_destination_order_is_always_tried(seed, pieces, shuffle):
    """Skipping the destination-order attempt when source order bounds its joins changes
    nothing: tables of rows cut in pieces, copied in a shuffled or a given order."""
    rng = np.random.default_rng(seed)
    nb = rng.integers(1, 4, size=pieces) * 4
    so = np.r_[0, np.cumsum(nb)[:-1]]
    st_ = np.zeros(pieces, np.int64)
    dperm = rng.permutation(pieces) if rng.random() < 0.5 else np.arange(pieces)
    do = np.empty(pieces, np.int64)
    do[dperm] = np.r_[0, np.cumsum(nb[dperm])[:-1]]
    dt = rng.integers(0, 2, size=pieces) if rng.random() < 0.5 else np.zeros(pieces, np.int64)
    cols = [st_, so, dt, do, nb]
    if shuffle:
        o = rng.permutation(pieces)
        cols = [c[o] for c in cols]
    got = coalesce_runs(*cols)
    with mock.patch.object(copies, "_dest_may_merge", lambda *a: True):
        want = coalesce_runs(*cols)
    assert [c.tolist() for c in got] == [c.tolist() for c in want]
