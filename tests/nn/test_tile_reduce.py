"""Cross-tile per-channel reductions (batch-norm statistics, parameter gradients) equal a
float64 NumPy reference on arbitrary layouts, and their broadcast reaches every element."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukern as ik
from ipukern.nn.layout import Resident, linear_layout
from ipukern.nn.tile_reduce import ChannelReduce, _exchange_record


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 9), h=st.integers(1, 5), w=st.integers(1, 6),
       tiles=st.integers(1, 40), grain=st.integers(1, 7), permuted=st.booleans(), seed=st.integers(0, 99))
def test_channel_sums_and_broadcast_equal_numpy(n, c, h, w, tiles, grain, permuted, seed):
    m = ik.GC200.replace(n_tiles=tiles, name=f"GC200-{tiles}")
    shape = (n, c, h, w)
    lay = linear_layout(shape, "float32", tiles, grain=grain, perm=(0, 2, 1, 3) if permuted else None)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    res = Resident.from_host(lay, tiles, x)
    cr = ChannelReduce(m, lay, c, h * w, quantities=2, broadcast=2)
    v = res.view()
    got = cr.reduce([v, v * v])
    np.testing.assert_allclose(got[:, 0], x.astype(np.float64).sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[:, 1], (x.astype(np.float64) ** 2).sum(axis=(0, 2, 3)), rtol=1e-5,
                               atol=1e-5)
    vals = rng.standard_normal((c, 2)).astype(np.float32)
    b0, b1 = cr.broadcast(vals)
    # every element receives its channel's values: place them as a tensor and read it back
    for j, b in enumerate((b0, b1)):
        out = Resident(lay, tiles)
        out.view()[...] = b[:, :out.slot_elems]
        np.testing.assert_array_equal(out.to_host(), np.broadcast_to(vals[None, :, j, None, None], shape))
    # the exchanges are costed: owners other than the holders make them move bytes
    assert len(cr.records) == 4 and all(r.total_cycles >= 0 for r in cr.records)
    # the gather's loads are known without the table: equal to costing the table
    assert cr.records[1] == _exchange_record(m, cr.records[1].name, cr.gather,
                                             f"{cr.pair_ch.size} (tile, channel) partials to "
                                             f"{min(tiles, c)} owner tiles")
    # and the broadcast's: equal to costing its table (bus pairs included)
    assert cr.records[3] == _exchange_record(m, cr.records[3].name, cr.bcast,
                                             f"{c} channels x 2 values to their "
                                             f"{cr.pair_ch.size} tiles")


def test_channels_over_the_last_axis_and_owner_spread():
    m = ik.GC200.replace(n_tiles=8, name="GC200-8")
    lay = linear_layout((6, 20), "float32", 8, grain=20)        # rows of 20 features per tile
    x = np.arange(120, dtype=np.float32).reshape(6, 20)
    cr = ChannelReduce(m, lay, 20, 1, quantities=1)
    np.testing.assert_array_equal(cr.reduce([Resident.from_host(lay, 8, x).view()])[:, 0], x.sum(axis=0))
    assert set(cr.owner_of_ch.tolist()) == set(range(8))      # 20 channels over all 8 tiles
    assert cr.records[1].bytes_exchanged == 4 * cr.pair_ch.size
