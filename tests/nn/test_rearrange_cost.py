"""The rearrangement cost computed without a copy table equals the cost of the exact table.

:func:`ipukern.nn.layout.rearrangement_loads` derives the per-tile loads and the number of
copies of a rearrangement in closed form; ``exact=True`` builds the copy table and costs it
copy by copy with :func:`ipukern.core.cost.exchange_loads`. They must agree bit for bit on
every pair of layouts (random shapes, permutations, mappings, packed or explicit offsets,
overlapping offsets that force the exact path), and so must the cycles of a network.
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukern as ik
from ipukern.core import cost
from ipukern.core.tensor import TileMapping
from ipukern.machine import GC200
from ipukern.nn.layout import Layout, Rearrangement, copy_table, rearrangement_loads

N_TILES = 8


def _mapping(rng, n, n_tiles):
    """Random intervals covering [0, n), each on a random tile."""
    k = int(rng.integers(1, min(n, 12) + 1))
    cuts = np.sort(rng.choice(np.arange(1, n), size=k - 1, replace=False)) if k > 1 else []
    starts = np.r_[0, cuts].astype(np.int64)
    counts = np.diff(np.r_[starts, n])
    return TileMapping(n, rng.integers(0, n_tiles, starts.size), starts, counts)


def _offsets(rng, mapping, isz, kind):
    """None (packed), a random disjoint placement per tile, or overlapping bytes."""
    if kind == "packed":
        return None
    nb = mapping.count * isz
    off = np.zeros(nb.size, np.int64)
    for t in np.unique(mapping.tile):
        idx = np.flatnonzero(mapping.tile == t)
        order = rng.permutation(idx)
        gaps = rng.integers(0, 3, idx.size) * isz
        off[order] = np.cumsum(gaps + nb[order]) - nb[order]
    if kind == "overlap" and nb.size > 1:
        off[rng.integers(0, nb.size)] = off[rng.integers(0, nb.size)]
    return off


def _layout(rng, shape, dtype, perm, kind):
    n = int(np.prod(shape))
    m = _mapping(rng, n, N_TILES)
    isz = np.dtype(dtype).itemsize
    return Layout(shape, dtype, m, perm, offsets=_offsets(rng, m, isz, kind))


@st.composite
def layout_pairs(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nd = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=nd, max_size=nd)))
    dtype = draw(st.sampled_from(["float16", "float32"]))
    perms = [None] + [tuple(int(i) for i in rng.permutation(nd)) for _ in range(2)]
    p_src, p_dst = draw(st.sampled_from(perms)), draw(st.sampled_from(perms))
    dst_shape = shape
    if p_src is None and p_dst is None and draw(st.booleans()):
        dst_shape = (int(np.prod(shape)),)           # a reshape between the two
    kinds = ["packed", "disjoint", "overlap"]
    src = _layout(rng, shape, dtype, p_src, draw(st.sampled_from(kinds)))
    dst = _layout(rng, dst_shape, dtype, p_dst, draw(st.sampled_from(kinds)))
    return src, dst


@settings(max_examples=300, deadline=None)
@given(layout_pairs(), st.sampled_from([1, 2, 4]))
def test_closed_form_loads_equal_the_copy_table(pair, bus):
    src, dst = pair
    fast = rearrangement_loads(src, dst, N_TILES, bus)
    exact = rearrangement_loads(src, dst, N_TILES, bus, exact=True)
    for a, b in zip(fast[:3], exact[:3]):
        assert np.array_equal(a, b)
    assert fast[3] == exact[3]
    # and the table costed independently, copy by copy
    stl, so, dtl, _, nb = copy_table(src, dst)
    assert nb.size == fast[3] and int(nb.sum()) == src.n_elems * src.itemsize
    recv, paired, send = cost.exchange_loads(stl.astype(np.int64), so, dtl.astype(np.int64), nb,
                                             N_TILES, bus)
    assert np.array_equal(recv, fast[0]) and np.array_equal(send, fast[2])
    assert np.array_equal(paired, fast[1])


@settings(max_examples=60, deadline=None)
@given(layout_pairs())
def test_rearrangement_record_and_run(pair):
    """The lazily built table runs the copy the cost describes: every element arrives."""
    src, dst = pair
    m = GC200.replace(n_tiles=N_TILES)
    r = Rearrangement(m, src, dst)
    if r.identity:
        assert r.cycles == 0 and r.record() is None
        return
    rec = r.record()
    assert rec.n_copies == r.table[4].size and rec.bytes_exchanged == int(r.table[4].sum())
    st_, so, dt_, _, nb = r.table
    recv, paired, send = cost.exchange_loads(st_.astype(np.int64), so, dt_.astype(np.int64), nb,
                                             N_TILES, m.tiles_per_exchange_bus)
    per_tile = cost.tile_exchange_cycles(recv, paired, send, m)
    assert r.cycles == int(per_tile.max()) + m.exchange_overhead_cycles
    assert r.busiest_tile == int(np.argmax(per_tile))
    if dst.offsets is None and src.offsets is None:
        from ipukern.nn.layout import Resident
        x = np.arange(src.n_elems, dtype=src.dtype).reshape(src.shape)
        out = r.run(Resident.from_host(src, N_TILES, x))
        assert np.array_equal(out.to_host().reshape(-1), x.reshape(-1))


@settings(max_examples=100, deadline=None)
@given(st.sets(st.integers(0, 199)), st.sets(st.integers(0, 199)))
def test_count_common_bitmap_and_sorted(a, b):
    from ipukern.nn import layout
    x, y = np.array(sorted(a), np.int64)[::-1], np.array(sorted(b), np.int64)
    want = len(a & b)
    assert layout._count_common(x, y, 200) == want
    old = layout._BITMAP_ELEMS
    layout._BITMAP_ELEMS = 0
    try:
        assert layout._count_common(x, y, 200) == want
    finally:
        layout._BITMAP_ELEMS = old


def test_rearrangements_of_a_network_equal_their_tables():
    """Every rearrangement of a small compiled CNN (conv input layouts with permutations
    and window offsets) costs what its exact table costs."""
    from ipukern.nn.compile import compile_network
    from ipukern.nn.layers import PlanContext
    net = ik.models.mobilenet_v2(image_size=32)
    prog = compile_network(net, 2, PlanContext(GC200, "float16", "float16"), fold_bn=False)
    n = 0
    for s in prog.steps:
        for r in s.rearrs:
            if r is None or r.identity:
                continue
            exact = rearrangement_loads(r.src, r.dst, GC200.n_tiles, GC200.tiles_per_exchange_bus,
                                        exact=True)
            per_tile = cost.tile_exchange_cycles(*exact[:3], GC200)
            assert r.cycles == int(per_tile.max()) + GC200.exchange_overhead_cycles
            assert r.n_copies == exact[3]
            n += 1
    assert n > 10


@pytest.mark.parametrize("perm", [None, (0, 2, 1, 3), (0, 2, 3, 1)])
def test_count_of_copies_by_hand(perm):
    """A 2x2x2x2 tensor, one interval per tile, into a tensor cut in halves: the union of
    the boundaries, counted by hand."""
    shape = (2, 2, 2, 2)
    src = Layout(shape, "float32", TileMapping(16, np.arange(16) % 4, np.arange(16), np.ones(16)))
    dst = Layout(shape, "float32", TileMapping(16, [0, 1], [0, 8], [8, 8]), perm)
    # the source has a piece per element: every element is a copy
    assert Rearrangement(GC200, src, dst).n_copies == 16
    dst2 = Layout(shape, "float32", TileMapping(16, [0, 1], [0, 8], [8, 8]))
    src2 = Layout(shape, "float32", TileMapping(16, [2, 3], [0, 4], [4, 12]), perm)
    want = {None: 3, (0, 2, 1, 3): 8, (0, 2, 3, 1): 16}[perm]
    assert Rearrangement(GC200, src2, dst2).n_copies == want
