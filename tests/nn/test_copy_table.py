"""Copy tables run on the host as coalesced runs (:func:`ipukern.core.copies.coalesce_runs`):
merged and reordered, they must write exactly the bytes the original copies write, in
every order the copies could come in (random tables of disjoint destination runs, some
contiguous in both arrays, some not)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipukern.core.copies import CopyTable, coalesce_runs, source_order

from tests._support.copies import random_copy_table
from tests._support.nets import small_residual_net, small_residual_torch


def _run_plain(cols, dst, src):
    for sr, so, dr, do, nb in zip(*cols):
        dst[dr, do:do + nb] = src[sr, so:so + nb]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(1, 5), row=st.integers(2, 300),
       n=st.integers(1, 60))
def test_coalesced_table_writes_the_same_bytes(seed, n_rows, row, n):
    rng = np.random.default_rng(seed)
    cols = random_copy_table(rng, n_rows, row, n)
    src = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    want = rng.integers(0, 256, (n_rows, row), dtype=np.uint8)
    got = want.copy()
    _run_plain(cols, want, src)
    CopyTable(*cols).run(got, src)
    assert np.array_equal(got, want)
    merged = coalesce_runs(*cols)
    assert merged[4].sum() == cols[4].sum() and merged[4].size <= cols[4].size
    # the table reads in source order: the same copies, permuted
    tab = CopyTable(*cols).kernel_columns
    key = tab[0].astype(np.int64) * (row + 1) + tab[1]
    assert (np.diff(key) >= 0).all()
    assert sorted(zip(*(c.tolist() for c in tab))) == sorted(zip(*(c.tolist() for c in merged)))


def test_source_order_sorts_by_row_then_offset_and_keeps_each_copy_whole():
    cols = [np.array([2, 0, 2, 1]), np.array([8, 4, 0, 4]), np.array([0, 1, 2, 3]),
            np.array([0, 4, 8, 12]), np.array([4, 4, 8, 4])]
    got = [c.tolist() for c in source_order(*cols)]
    assert got == [[0, 1, 2, 2], [4, 4, 0, 8], [1, 3, 2, 0], [4, 12, 8, 0], [4, 4, 8, 4]]
    one = [np.array([5]), np.array([3]), np.array([1]), np.array([0]), np.array([2])]
    assert [c.tolist() for c in source_order(*one)] == [[5], [3], [1], [0], [2]]


def test_contiguous_runs_merge_to_one_per_row():
    """A row cut in 100 pieces copied in a shuffled order: one copy per row."""
    rng = np.random.default_rng(0)
    off = np.arange(100) * 12
    cols = [np.repeat([0, 1], 100), np.tile(off, 2), np.repeat([1, 0], 100), np.tile(off, 2),
            np.full(200, 12)]
    order = rng.permutation(200)
    merged = coalesce_runs(*(c[order] for c in cols))
    assert merged[4].tolist() == [1200, 1200]


def test_a_table_is_range_checked_once_per_pair_of_array_shapes():
    """Checked on the first run between arrays of given shapes, unchecked after; arrays of
    other shapes (too short for a copy) are checked again and refused, nothing written."""
    tab = CopyTable([0, 1], [0, 4], [1, 0], [8, 0], [8, 4])
    src = np.arange(32, dtype=np.uint8).reshape(2, 16)
    dst = np.zeros((2, 16), np.uint8)
    tab.run(dst, src)
    assert tab._checked == {((2, 16), (2, 16))}
    assert dst[1, 8:16].tolist() == list(range(8)) and dst[0, :4].tolist() == [20, 21, 22, 23]
    dst[...] = 0
    tab.run(dst, src)
    assert dst[1, 8:16].tolist() == list(range(8))
    short = np.zeros((2, 12), np.uint8)
    with pytest.raises(ValueError, match="outside the arrays"):
        tab.run(short, src)
    assert not short.any() and ((2, 12), (2, 16)) not in tab._checked


def test_aliased_arrays_are_refused():
    a = np.zeros((2, 8), np.uint8)
    with pytest.raises(ValueError, match="distinct"):
        CopyTable([0], [0], [1], [0], [4]).run(a, a)


def test_network_bits_do_not_depend_on_the_conv_kernel_path(monkeypatch):
    """A small network (1x1 convs, plain and strided, take the conv kernel's direct path
    in place, the padded 3x3 convs the direct path on a zero-padded window copy; coalesced
    copy tables; max pooling with padding) gives the same bits and cycles with the direct
    path switched off (every conv on the packing path)."""
    import ipukern as ik
    from ipukern.conv import codelet
    net, params, x, small = small_residual_net(1)
    on = ik.run_network(net, x, params, machine=small)
    monkeypatch.setattr(codelet, "DIRECT_PATH", False)
    off = ik.run_network(net, x, params, machine=small)
    assert np.array_equal(on.output.view(np.uint32), off.output.view(np.uint32))
    assert on.profile.total_cycles == off.profile.total_cycles
    torch = pytest.importorskip("torch")
    want = small_residual_torch(torch, params, x)
    assert np.abs(on.output - want).max() <= 1e-4 * np.abs(want).max()


