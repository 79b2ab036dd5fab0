"""The conv program's exchanges follow PopLibs' accounting (ExchangeEstimator.hpp): the
shared-bus 2x rate is for inputs only, and only when the out-channel split is even."""
import numpy as np

import ipukern as ik
from ipukern.conv import ConvParams, ConvPlan, Split, build_conv_program
from ipukern.conv.estimators import candidate_methods

M = ik.GC200.replace(exchange_bytes_per_cycle=4.0, exchange_overhead_cycles=100)


def first_exchange(p, split):
    """The first exchange of ``p`` built with this split and the first AMP candidate."""
    amp = next(c for c in candidate_methods(M, p.dtype, p.partials, p.in_per_group, p.out_per_group,
                                            p.kernel_w, p.stride[1]) if c.method == "AMP")
    plan = ConvPlan(params=p, machine=M, method=amp, split=split, serial=1, bias=False,
                    estimated_cycles=0, estimated_bytes_per_tile=0)
    cp = build_conv_program(plan)
    return cp.program.steps[0].exchange, cp


def test_weights_never_use_the_shared_bus_rate():
    # 4 row blocks, one out-chan block: the 8 x 16 fp32 weights (512 B, 8 out-chan rows of
    # 64 B) are homed by use in pieces of >= 256 B (PopLibs mapWeights): rows 0-3 on tile 0,
    # rows 4-7 on tile 1; every tile receives the pieces it does not hold. Tiles 2 and 3
    # share a bus and receive the same regions, but PopLibs charges weights at the plain
    # rate: 512 / 4 = 128 cycles, not 64.
    p = ConvParams.from_shapes((1, 16, 8, 4), (8, 16, 1, 1))
    x, cp = first_exchange(p, Split(rows=4))
    assert [int(b) for b in x.recv_bytes[:4]] == [256, 256, 512, 512]
    assert int(x.paired_bytes.sum()) == 0
    # (tiles 0 and 1 send their piece once each, a broadcast: 256 B -> 64 cycles)
    assert [int(b) for b in x.send_bytes[:4]] == [256, 256, 0, 0]
    assert [int(c) for c in x.tile_cycles[:4]] == [64, 64, 128, 128]
    assert x.cycles == 128 + 100 and x.transfer_cycles == 128
    # the profile keeps the fixed overhead apart (ipukern's addition to PopLibs' terms)
    rec = cp.program.records[0]
    assert (rec.exchange_cycles, rec.exchange_overhead_cycles) == (228, 100)


def test_inputs_share_the_bus_only_with_an_even_out_chan_split():
    # 16 x 4 x 4 fp32 input (1024 B, 4 rows of 256 B), 1x1 conv, out-channels split over
    # the tiles: each tile needs the whole input and owns 1/Os of it.
    p = ConvParams.from_shapes((1, 16, 4, 4), (12, 16, 1, 1))
    # Os = 4: tile 0 owns row 0 and receives rows 1-3 (768 B); its bus partner, tile 1,
    # also receives rows 2 and 3 from the same tiles: 512 B paired at 2x ->
    # (768 - 256) / 4 = 128 cycles
    x4, _ = first_exchange(p, Split(out_chans=4))
    assert int(x4.recv_bytes[0]) == 768 and int(x4.paired_bytes[0]) == 512
    assert int(x4.tile_cycles[0]) == (768 - 512 // 2) // 4 == 128
    # Os = 3 (odd): no 2x at all, although tiles 0 and 1 receive tile 2's share alike
    x3, _ = first_exchange(p, Split(out_chans=3))
    assert int(x3.paired_bytes.sum()) == 0
    recv = x3.recv_bytes[:3]
    assert (recv > 0).all()
    np.testing.assert_array_equal(x3.tile_cycles[:3], -(-recv // 4))
    shared = ik.Exchange(M, x3.src_tile, x3.src_offset, x3.dst_tile, x3.dst_offset, x3.nbytes)
    assert int(shared.paired_bytes[:2].sum()) > 0          # what the old rule granted
