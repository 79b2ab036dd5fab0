"""Where a network's tensors live: weights homed over the tiles that use them (PopLibs
mapWeights by use), not on each plan's first tiles; per-tile liveness on hand-built cases."""
import numpy as np

import ipukern as ik
from ipukern import nn
from ipukern.conv import ConvParams, ConvPlan, Split, build_conv_program, plan_conv
from ipukern.ops._cache import execute

from tests._support.reference import conv2d_nchw

SMALL = ik.GC200.replace(n_tiles=64)


def deep_cnn(layers: int = 12, c: int = 32, hw: int = 8) -> nn.Network:
    net = nn.Network("deep")
    y = net.input("x", (c, hw, hw))
    for i in range(layers):
        y = net.add(nn.Conv2d(c, c, 3, padding=1), y, name=f"conv{i}")
        y = net.add(nn.ReLU(), y, name=f"relu{i}")
    net.output(y)
    return net


def test_many_layer_weights_spread_over_the_tiles():
    # 12 identical 3x3 convs (18 KiB of fp16 weights each): every plan numbers its tiles
    # from 0, so homing each block on its group's first tile stacked all 12 layers'
    # weights on the same few tiles. Homed by use, a tile holds about total / tiles.
    net = deep_cnn()
    prog = nn.compile_network(net, 4, nn.plan_context("float16", "half", SMALL))
    _, w = prog.liveness()
    total = 12 * 32 * 32 * 9 * 2
    assert int(w.sum()) == total
    assert int(w.max()) <= 2 * total / SMALL.n_tiles
    assert (w > 0).sum() >= SMALL.n_tiles // 2


def test_weight_home_pieces_by_hand():
    # 4 row blocks x 2 out-chan blocks share weights by out-chan block (M = 4 members,
    # Os = 2). Each block: 8 out-chans x 16 in-chans x 3x3 fp32 = 8 rows of 576 B: pieces
    # of whole rows >= 256 B, spread evenly over the 4 members (2 rows each).
    p = ConvParams.from_shapes((1, 16, 8, 4), (16, 16, 3, 3), padding=1, dtype="float32",
                               partials="float32")
    best = plan_conv(p, ik.GC200)
    plan = ConvPlan(params=p, machine=ik.GC200, method=best.method,
                    split=Split(rows=4, out_chans=2), serial=1, bias=False,
                    estimated_cycles=0, estimated_bytes_per_tile=0)
    cp = build_conv_program(plan)
    per_tile = cp.w.mapping.elems_per_tile(8) * 4
    assert list(per_tile) == [2 * 576] * 8
    # tile t = member * 2 + out-chan block: out-chans 0-7 on even tiles, 8-15 on odd ones
    m = cp.w.mapping
    rows = m.start // (16 * 9)
    assert set(rows[m.tile % 2 == 0]) <= set(range(8)) and set(rows[m.tile % 2 == 1]) <= set(range(8, 16))
    # the first exchange gives each tile the 6 rows it does not hold (plus its halos)
    x = cp.program.steps[0].exchange
    w_runs = x.nbytes % 576 == 0
    got = np.bincount(x.dst_tile[w_runs], weights=x.nbytes[w_runs], minlength=8)[:8]
    assert list(got.astype(int)) == [6 * 576] * 8
    # each tile sends its piece once (a broadcast)
    assert (x.send_bytes[:8] >= 2 * 576).all()
    # and the conv still computes the right thing
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(p.input_shape).astype(np.float32)
    ws = rng.standard_normal(p.weight_shape).astype(np.float32)
    out, _ = execute(cp, xs, ws, None, {})
    ref = conv2d_nchw(xs.astype(np.float64), ws.astype(np.float64), padding=1)
    assert np.abs(out - ref).max() <= 1e-4 * np.abs(ref).max()


def test_input_copied_and_dying_is_freed_before_the_compute_phase():
    # x (nt/2 channels of 4x8 fp32) -> relu a -> 2x2 max pool. a lies linearly over all
    # tiles (64 B each); the pool wants whole planes (one 128 B plane on each of the first
    # nt/2 tiles) and writes 2x4 outputs (32 B) there. a is read only through that copy and
    # dies at the pool: live in the copy phase (a + copy), dead in the compute phase
    # (copy + output), as Poplar frees a variable after the last program reading it.
    m = ik.GC200
    nt = m.n_tiles
    net = nn.Network("pool")
    x = net.input("x", (nt // 2, 4, 8))
    a = net.add(nn.ReLU(), x, name="a")
    net.output(net.add(nn.MaxPool2d(2), a, name="pool"))
    prof = nn.estimate_network(net, batch=1, dtype="float32", partials="float")
    r = m.reserved_bytes_per_tile
    # step a: x + a; step pool: max(a + copy, copy + output) = max(64 + 128, 128 + 32)
    assert [int(v) - r for v in prof.step_peak_bytes] == [128, 192]
    prog = nn.compile_network(net, 1, nn.plan_context("float32", "float", m))
    live, _ = prog.liveness()
    assert list(live[1, [0, nt // 2 - 1, nt // 2, nt - 1]]) == [192, 192, 64, 64]
    # the same layer with a read later (a skip): a stays live through the compute phase
    net2 = nn.Network("pool_skip")
    x = net2.input("x", (nt // 2, 4, 8))
    a = net2.add(nn.ReLU(), x, name="a")
    net2.output(net2.add(nn.MaxPool2d(2), a, name="pool"))
    net2.output(a)
    prof2 = nn.estimate_network(net2, batch=1, dtype="float32", partials="float")
    assert [int(v) - r for v in prof2.step_peak_bytes] == [128, 64 + 128 + 32]


def _position_add(nt: int) -> "nn.Network":
    """x + p with p of the per-sample shape (nt, 8): BERT's position add, one row per tile."""
    net = nn.Network("posadd")
    x = net.input("x", (nt, 8))
    net.output(net.add(nn.AddParam((nt, 8)), x, name="pos"))
    return net


def test_per_channel_parameters_live_linearly_and_are_copied_only_where_used():
    # x + p with p of the per-sample shape (nt, 8) fp32 (BERT's position add): 8 elements
    # per tile. p's home is mapped like mapTensorLinearly (>= 128 B per tile, grains of one
    # 64-bit vector): 32 entries on each of the first nt / 4 tiles; while the op runs each
    # tile also holds the 8 entries its elements use. Before, every tile kept all of p
    # (nt * 32 B) for the whole program.
    m = ik.GC200
    nt = m.n_tiles
    net = _position_add(nt)
    prog = nn.compile_network(net, 1, nn.plan_context("float32", "float", m))
    live, w = prog.liveness()
    assert int(w.sum()) == nt * 8 * 4
    assert list(w[[0, nt // 4 - 1, nt // 4, nt - 1]]) == [128, 128, 0, 0]
    # x (32 B) + output (32 B) + the 8 entries used (32 B) + the home
    assert list(live[0, [0, nt // 4, nt - 1]]) == [32 * 3 + 128, 32 * 3, 32 * 3]


def test_resnet_batch_norm_parameters_do_not_pile_up_in_training():
    # training keeps every batch norm unfolded: 2 x C parameters per layer. Their resident
    # bytes per tile stay a small multiple of the total spread over the tiles.
    bn = nn.Network("bn")
    y = bn.input("x", (32, 8, 8))
    for i in range(6):
        y = bn.add(nn.Conv2d(32, 32, 3, padding=1), y, name=f"conv{i}")
        y = bn.add(nn.BatchNorm2d(32), y, name=f"bn{i}")
        y = bn.add(nn.ReLU(), y, name=f"relu{i}")
    bn.output(y)
    prog = nn.compile_network(bn, 4, nn.plan_context("float16", "half", SMALL), fold_bn=False)
    _, w = prog.liveness()
    conv_w = 6 * 32 * 32 * 9 * 2
    bn_w = 6 * 2 * 32 * 2
    assert int(w.sum()) == conv_w + bn_w
    assert int(w.max()) <= 2 * (conv_w + bn_w) / SMALL.n_tiles + 6 * 128


def deep_mlp(layers: int = 8, tokens: int = 64, features: int = 256) -> nn.Network:
    net = nn.Network("mlp")
    y = net.input("x", (tokens, features))
    for i in range(layers):
        y = net.add(nn.Linear(features, features, bias=False), y, name=f"fc{i}")
    net.output(y)
    return net


def test_linear_weights_spread_over_every_tile_of_their_plan():
    # A Linear weight is its matmul's conv *input* (K in-chans x N columns). Each block of
    # the plan's (in-chan, column) split is read by the Os out-chan tiles sharing it and
    # was homed on at most 4 of them (MAX_INPUT_OWNERS), so layers of one shape (one plan)
    # piled their weights on those few tiles (BERT: 3.1 MB on tile 258). Now all Os tiles
    # own a share of whole channel rows (PopLibs createInput over the plan's tiles): per
    # tile exactly layers x (rows share) x (block width) x 2 B, computed here by hand.
    L, T, F = 8, 64, 256
    net = deep_mlp(L, T, F)
    ctx = nn.plan_context("float16", "half", SMALL)
    prog = nn.compile_network(net, 2, ctx)
    _, w = prog.liveness()
    assert int(w.sum()) == L * F * F * 2
    cp = nn.convops.conv_program(ConvParams(batch=1, in_channels=F, out_channels=2 * T, in_h=1,
                                            in_w=F, kernel_h=1, kernel_w=1, dtype="float16",
                                            partials="half"), SMALL, False, resident_input=True)
    s = cp.plan.split
    assert s.out_chans > 4                     # the case the old cap got wrong
    want = np.zeros(SMALL.n_tiles, np.int64)
    c_lo = np.arange(s.in_chans) * F // s.in_chans
    for i in range(s.in_chans):
        rows = (i + 1) * F // s.in_chans - c_lo[i]
        for j in range(s.cols):
            width = (j + 1) * F // s.cols - j * F // s.cols
            for o in range(s.out_chans):
                t = (i * s.cols + j) * s.out_chans + o
                want[t] = L * ((o + 1) * rows // s.out_chans - o * rows // s.out_chans) * width * 2
    assert list(w) == list(want)
    assert int(w.max()) <= 2 * int(w.sum()) // s.n_tiles


def test_parameter_broadcast_is_an_exchange_costed_by_hand():
    # x + p with p of the per-sample shape (nt, 8) fp32: p's home is 32 entries (128 B) on
    # each of the first nt / 4 tiles; every tile needs the 8 entries (32 B) its elements
    # use. The exchange before the add: tiles 0..nt/4-1 send 128 B (a broadcast, sent
    # once), every tile receives 32 B: the busiest tile moves 128 B at the exchange rate.
    from ipukern.core.cost import exchange_cycles
    m = ik.GC200
    nt = m.n_tiles
    net = _position_add(nt)
    prof = nn.estimate_network(net, batch=1, dtype="float32", partials="float")
    xrec = [r for r in prof.supersteps if r.name == "add_param parameters"]
    assert len(xrec) == 1
    assert xrec[0].exchange_cycles == exchange_cycles(128, m) + m.exchange_overhead_cycles
    assert xrec[0].bytes_exchanged == nt * 32 and xrec[0].sync_cycles == m.sync_cycles
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((1, nt, 8)).astype(np.float32)
    prm = {"pos.weight": rng.standard_normal((nt, 8)).astype(np.float32)}
    run = nn.run_network(net, xs, prm)
    assert np.array_equal(run.output, xs + prm["pos.weight"])
    assert run.profile.total_cycles == prof.total_cycles
