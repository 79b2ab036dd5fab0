"""expandDims (kernel dims folded into the input channels, PopLibs' ConvPlan transform):
results equal the float64 NumPy reference and torch, the on-chip transform is executed and
costed as planned, the planner picks it exactly where its hand-computed cost wins.

Bounds as tests/ops/test_conv.py: fp32 |out - ref| <= 1e-5 * sum|x*w|; fp16 (float
partials) |out - ref| <= 2^-11 * |ref| + 1e-6 * sum|x*w|.
"""
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import ipukern as ik
from ipukern.conv import ConvParams, build_conv_program, expand_candidates, expanded_params, plan_conv

from tests._support.reference import check_conv as check, conv2d_nchw, conv_operands

M = ik.GC200
ONE_TILE = ik.GC200.replace(n_tiles=1, name="GC200-1")


def run_plan(plan, x, w, bias=None):
    """Execute ``plan`` on x, w; return (output, execute profile, estimate profile)."""
    prog = build_conv_program(plan)
    prog.write_inputs(x, w, bias)
    prof = prog.device.run(prog.program, "execute")
    return prog.device.read(prog.y), prof, prog.device.run(prog.program, "estimate")


CASES = [
    # x, w, stride, padding, dilation, groups
    ((2, 3, 11, 13), (8, 3, 3, 3), 2, 1, 1, 1),        # 3-channel stem, stride 2
    ((1, 3, 31, 29), (16, 3, 7, 7), 2, 3, 1, 1),       # 7x7 stem
    ((1, 64, 7, 7), (64, 64, 3, 3), 1, 1, 1, 1),       # ResNet layer4-like 7x7 field
    ((2, 16, 10, 7), (16, 8, 3, 3), 1, 1, 1, 2),       # grouped, non-square
    ((2, 16, 12, 12), (16, 2, 3, 3), 1, 2, 2, 8),      # dilation 2
    ((3, 24, 8, 13), (24, 1, 3, 3), 1, 1, 1, 24),      # depthwise
    ((1, 8, 9, 9), (8, 8, 2, 5), (2, 1), (0, 2), 1, 1),  # rectangular kernel and stride
    ((2, 20, 9, 9), (40, 20, 3, 3), 3, 0, 1, 1),       # stride 3 = kernel span
    ((1, 4, 10, 10), (8, 4, 2, 2), 3, 1, 1, 1),        # stride 3 > kernel span 2
    ((2, 16, 14, 14), (24, 16, 1, 1), 2, 0, 1, 1),     # ResNet downsample: 1x1 stride 2
    ((1, 8, 11, 9), (8, 4, 1, 1), (3, 2), 0, 1, 2),    # 1x1, odd sizes, grouped
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("dims", ["h", "hw"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"x{c[0]}w{c[1]}")
def test_forced_expand_dims_matches_reference(case, dims, dtype):
    xs, ws, s, pd, d, g = case
    x, w, b = conv_operands(xs, ws, dtype, seed=0)
    p = ConvParams.from_shapes(xs, ws, stride=s, padding=pd, dilation=d, groups=g, dtype=dtype)
    plan = plan_conv(p, M, bias=True, expand_dims=dims)
    assert plan.expand_dims == dims and plan.conv_params == expanded_params(p, dims)
    out, prof, est = run_plan(plan, x, w, b)
    check(x, w, out, dtype, b, stride=s, padding=pd, dilation=d, groups=g)
    assert prof.total_cycles == est.total_cycles
    assert [r.name for r in prof.supersteps][:2] == [
        f"expandDims {dims} exchange", f"expandDims {dims} copy; exchange inputs and weights"]
    assert prof.breakdown()["transform"] > 0


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 2), g=st.integers(1, 3), cig=st.integers(1, 5), cog=st.integers(1, 4),
       h=st.integers(2, 12), w=st.integers(2, 12), kh=st.integers(1, 4), kw=st.integers(1, 4),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2),
       dh=st.integers(1, 2), dw=st.integers(1, 2), hw=st.booleans(), seed=st.integers(0, 9))
def test_expand_dims_on_random_shapes(n, g, cig, cog, h, w, kh, kw, sh, sw, ph, pw, dh, dw, hw, seed):
    assume((kh - 1) * dh + 1 <= h + 2 * ph and (kw - 1) * dw + 1 <= w + 2 * pw)
    p = ConvParams(n, g * cig, g * cog, h, w, kh, kw, stride=(sh, sw), padding=(ph, pw),
                   dilation=(dh, dw), groups=g)
    cands = expand_candidates(p)
    assume(cands)
    dims = cands[-1] if hw else cands[0]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    wt = rng.standard_normal(p.weight_shape).astype(np.float32)
    out, prof, est = run_plan(plan_conv(p, M, expand_dims=dims), x, wt)
    check(x, wt, out, "float32", stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=g)
    assert prof.total_cycles == est.total_cycles


def test_transform_costs_what_hand_arithmetic_says_on_one_tile():
    """One tile holds everything: the copy writes the whole im2col (N Ho Wo C kh kw fp32
    values) at PopLibs' rate (5 / (min(memcpy 8, 4 B) x 4) cycles per byte, since C_in' x
    C_out = 36 x 8 is even), the exchange brings the whole input at the exchange rate."""
    p = ConvParams(1, 4, 8, 6, 6, 3, 3, padding=1)
    plan = plan_conv(p, ONE_TILE, expand_dims="hw")
    inner = plan_conv(expanded_params(p, "hw"), ONE_TILE, expand_dims="")
    written = 1 * 6 * 6 * (4 * 9) * 4
    copy = math.ceil(written * 5 / (4 * 4))
    rate = round(16 * ONE_TILE.exchange_bytes_per_cycle)
    exch = math.ceil(1 * 4 * 6 * 6 * 4 * 16 / rate)
    over, sync = ONE_TILE.exchange_overhead_cycles, ONE_TILE.sync_cycles
    assert plan.estimated_cycles == inner.estimated_cycles + copy + exch + over + sync
    prog = build_conv_program(plan)
    prof = prog.device.run(prog.program, "estimate")
    ex_step, copy_step = prof.supersteps[:2]
    assert ex_step.exchange_cycles == exch + over and ex_step.compute_cycles == 0
    assert copy_step.compute_cycles == copy
    assert prof.total_cycles == plan.estimated_cycles
    # the expanded input and the original rows are extra buffers: more bytes than direct
    direct = build_conv_program(plan_conv(p, ONE_TILE, expand_dims=""))
    assert prog.device.memory.used[0] > direct.device.memory.used[0]


@pytest.mark.parametrize("x, w, stride, wins", [
    ((8, 512, 7, 7), (512, 512, 3, 3), 1, True),     # ResNet-50 layer4 conv2 (batch 8)
    ((8, 3, 224, 224), (32, 3, 3, 3), 2, True),      # MobileNet v1 stem
    ((8, 64, 56, 56), (64, 64, 3, 3), 1, False),     # ResNet-50 layer1 conv2: direct wins
])
def test_planner_picks_expand_dims_exactly_where_it_is_cheaper(x, w, stride, wins):
    p = ConvParams.from_shapes(x, w, stride=stride, padding=1, dtype="float16")
    direct = plan_conv(p, M, expand_dims="")
    forced = {d: plan_conv(p, M, expand_dims=d) for d in expand_candidates(p)}
    for d, f in forced.items():
        # each candidate's score = the expanded conv's own plan + the transform
        inner = plan_conv(expanded_params(p, d), M, expand_dims="")
        assert f.estimated_cycles == (inner.estimated_cycles + f.breakdown["transform"]
                                      + f.breakdown["exchange"] - inner.breakdown["exchange"]
                                      + M.sync_cycles)
    best_d = min(forced, key=lambda d: forced[d].estimated_cycles)
    chosen = plan_conv(p, M)
    assert (forced[best_d].estimated_cycles < direct.estimated_cycles) == wins
    assert chosen.expand_dims == (best_d if wins else "")
    assert chosen.estimated_cycles == min(direct.estimated_cycles, forced[best_d].estimated_cycles)
    if wins:
        assert f"expandDims {best_d}" in chosen.describe()
        assert chosen.candidates(3)[0].expand_dims == best_d


def test_conv2d_reports_expand_dims_and_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 128, 7, 7)).astype(np.float32)
    w = rng.standard_normal((128, 128, 3, 3)).astype(np.float32)
    run = ik.conv2d(x, w, padding=1)
    assert run.plan.expand_dims == "hw"
    assert run.profile.info["expand_dims"] == "hw" and "expandDims hw" in run.profile.info["plan"]
    ref = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float64),
                                     torch.tensor(w, dtype=torch.float64), padding=1).numpy()
    mag = conv2d_nchw(np.abs(x), np.abs(w), padding=1)
    assert np.all(np.abs(run.output - ref) <= 1e-5 * mag)
    est = ik.estimate_conv2d(x.shape, w.shape, dtype="float32", padding=1)
    assert est.total_cycles == run.profile.total_cycles


def test_network_stem_uses_expand_dims_and_matches_torch():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    net = ik.nn.Network("stem")
    x_in = net.input("x", (3, 32, 32))
    h = net.add(ik.nn.Conv2d(3, 16, 3, stride=2, padding=1), x_in, name="stem")
    h = net.add(ik.nn.ReLU(), h, name="relu")
    h = net.add(ik.nn.Conv2d(16, 16, 3, padding=1), h, name="conv")
    net.output(h)
    prm = net.init_params(seed=0)
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    run = ik.nn.run_network(net, x, prm)
    t = lambda a: torch.tensor(np.asarray(a, np.float64))  # noqa: E731
    ref = F.conv2d(F.relu(F.conv2d(t(x), t(prm["stem.weight"]), stride=2, padding=1)),
                   t(prm["conv.weight"]), padding=1).numpy()
    assert np.abs(run.output - ref).max() <= 1e-4 * np.abs(ref).max()
    est = ik.nn.estimate_network(net, batch=2, dtype="float32", partials="float")
    assert est.total_cycles == run.profile.total_cycles
    stem = plan_conv(ConvParams.from_shapes((2, 3, 32, 32), (16, 3, 3, 3), stride=2, padding=1), M)
    assert stem.expand_dims == "hw"


def test_copy_blocks_kernel_rejects_blocks_outside_the_tile():
    from ipukern._kernels import _vertices
    data = np.zeros((2, 64), np.uint8)
    t = np.array([0], np.int32)
    shape = np.array([[1, 1, 2, 8]], np.int64)
    stride = np.array([[0, 0, 32, 4]], np.int64)
    _vertices.copy_blocks(data, t, np.array([-1]), np.array([0]), shape, stride, stride, 4, 1)
    with pytest.raises(ValueError, match="destination reaches outside"):
        _vertices.copy_blocks(data, t, np.array([0]), np.array([8]), shape, stride, stride, 4, 1)
    with pytest.raises(ValueError, match="outside the arena"):
        _vertices.copy_blocks(data, np.array([2], np.int32), np.array([0]), np.array([0]), shape,
                              stride, stride, 4, 1)


def test_copy_blocks_codelet_checks_each_table_once_per_arena_shape():
    """The codelet runs a table checked the first time on an arena of a given shape and
    unchecked after that; an arena of another shape (here too short for the block) is
    checked again and refused, with nothing written."""
    from ipukern.conv.expand_build import _CopyBlocksCodelet
    cd = _CopyBlocksCodelet(4)
    shape = np.array([[1, 1, 2, 8]], np.int64)
    stride = np.array([[0, 0, 32, 4]], np.int64)
    batch = type("B", (), {})()
    batch.tiles = np.array([1], np.int32)
    batch.args = {"src": np.array([0]), "dst": np.array([64]), "shape": shape,
                  "src_stride": stride, "dst_stride": stride}
    data = np.arange(2 * 128, dtype=np.uint8).reshape(2, 128)
    want = data.copy()
    want[1, 64:128] = want[1, 0:64]
    cd.run(data, batch, 1)
    assert np.array_equal(data, want)
    assert cd._checked[(id(batch), data.shape)] is batch
    data[1, 64:] = 0
    cd.run(data, batch, 1)                       # unchecked: the same bytes
    assert np.array_equal(data, want)
    short = np.zeros((2, 96), np.uint8)
    with pytest.raises(ValueError, match="destination reaches outside"):
        cd.run(short, batch, 1)
    assert not short.any()


@pytest.mark.parametrize("elem", [1, 2, 4, 8])
@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("max_w", [4, 20])
def test_copy_blocks_kernel_equals_numpy(elem, n_threads, max_w):
    """copy_blocks against an element-by-element reference: 4-D blocks with random extents
    and strides (rows contiguous or strided on either side, as the expandDims im2col makes
    them), zero blocks (source -1), empty blocks, more blocks than one chunk of a thread.
    Rows of up to ``max_w`` elements reach the kernel's paths for rows of <= 64 and > 64
    bytes (zeros too) and, for 4-byte elements at a source stride of 8 bytes, its vector
    gather with every tail length; NaN payloads and -0 in the source keep their bits."""
    from ipukern._kernels import _vertices
    rng = np.random.default_rng(elem * 100 + n_threads * 10 + max_w)
    n_tiles, V = 3, 700
    src_bytes = 1024 + elem * (40 + 2 * max_w)     # every source inside, before the outputs
    tiles = rng.integers(0, n_tiles, V).astype(np.int32)
    shape = np.zeros((V, 4), np.int64)
    sst = np.zeros((V, 4), np.int64)
    dst = np.zeros((V, 4), np.int64)
    src_off = np.zeros(V, np.int64)
    dst_off = np.zeros(V, np.int64)
    for v in range(V):
        # 1..2 x 1..2 x 1..3 x 0..max_w elements; sources in the first src_bytes of the tile
        shape[v] = [rng.integers(1, 3), rng.integers(1, 3), rng.integers(1, 4),
                    rng.integers(0, max_w + 1)]
        sst[v] = [elem * 7, elem * 3, elem * 11, elem * rng.integers(1, 3)]
        src_off[v] = -1 if rng.random() < 0.15 else int(rng.integers(0, 1024))
    # destinations past the sources, blocks back to back on each tile: none overlap
    used = np.zeros(n_tiles, np.int64)
    for v in range(V):
        d3 = elem * int(rng.integers(1, 3))
        dst[v] = [0, 0, 0, d3]
        dst[v, 2] = d3 * max(int(shape[v, 3]), 1)
        dst[v, 1] = dst[v, 2] * int(shape[v, 2])
        dst[v, 0] = dst[v, 1] * int(shape[v, 1])
        dst_off[v] = src_bytes + used[tiles[v]]
        used[tiles[v]] += dst[v, 0] * int(shape[v, 0])
    data = rng.integers(0, 256, (n_tiles, src_bytes + int(used.max())), dtype=np.uint8)
    if elem == 4:   # signalling and quiet NaNs with payloads, -0: moved as bits, not floats
        words = data[:, :src_bytes // 4 * 4].view(np.uint32)
        pick = rng.random(words.shape)
        words[pick < 0.05] = 0x7FA00001
        words[(pick >= 0.05) & (pick < 0.1)] = 0xFFC00123
        words[(pick >= 0.1) & (pick < 0.15)] = 0x80000000
    want = data.copy()
    for v in range(V):
        t = tiles[v]
        for i in np.ndindex(*shape[v]):
            d = dst_off[v] + int(np.dot(i, dst[v]))
            if src_off[v] < 0:
                want[t, d:d + elem] = 0
            else:
                s = src_off[v] + int(np.dot(i, sst[v]))
                want[t, d:d + elem] = data[t, s:s + elem]
    _vertices.copy_blocks(data, tiles, src_off, dst_off, shape, sst, dst, elem, n_threads)
    assert np.array_equal(data, want)


@pytest.mark.parametrize("x, w, stride", [
    ((1, 512, 7, 7), (512, 512, 3, 3), 1),       # ResNet-50 layer4.1.conv2
    ((1, 512, 14, 14), (512, 512, 3, 3), 2),     # ResNet-50 layer4.0.conv2
    ((1, 3, 224, 224), (32, 3, 3, 3), 2),        # MobileNet v1/v2 stem
])
def test_zoo_layers_that_gain_run_expanded_and_exactly(x, w, stride):
    """The zoo layers expandDims speeds up (batch 1), fp16 as the conv tests run it: the
    planner's choice is executed on the tiles and equals the float64 reference."""
    rng = np.random.default_rng(7)
    xs = rng.standard_normal(x).astype(np.float16)
    ws = (rng.standard_normal(w) / np.sqrt(w[1] * 9)).astype(np.float16)
    run = ik.conv2d(xs, ws, stride=stride, padding=1)
    assert run.plan.expand_dims == "hw"
    check(xs, ws, run.output, "float16", stride=stride, padding=1)


@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from([1, 2, 16]), g=st.sampled_from([1, 2, 32]), cig=st.sampled_from([1, 3, 4, 16, 64]),
       cog=st.sampled_from([1, 4, 64]), hw=st.sampled_from([7, 14, 56]), k=st.sampled_from([3, 5, 7]),
       s=st.sampled_from([1, 2]), dims=st.sampled_from(["h", "hw"]),
       dtype=st.sampled_from([("float16", "float32"), ("float16", "float16"), ("float32", "float32")]),
       machine=st.sampled_from(["GC200", "GC200-64"]))
def test_expanded_lower_bound_bounds_the_expanded_plan(n, g, cig, cog, hw, k, s, dims, dtype, machine):
    """The bound choose_plan prunes expandDims candidates with is below their plan's cycles
    (so the pruned choice equals the exhaustive one: tests/conv/test_planner_prune.py)."""
    from ipukern.conv.expand import expanded_lower_bound
    from ipukern.conv.planner import plan_expanded
    from ipukern.core.memory import TileMemoryError
    m = ik.GC200 if machine == "GC200" else ik.GC200.replace(n_tiles=64, name="GC200-64")
    p = ConvParams.from_shapes((n, cig * g, hw, hw), (cog * g, cig, k, k), stride=s, padding=k // 2,
                               groups=g, dtype=dtype[0], partials=dtype[1])
    try:
        plan = plan_expanded(p, m, dims)
    except (ValueError, TileMemoryError):
        return
    assert expanded_lower_bound(p, m, dims) <= plan.estimated_cycles


def test_strided_1x1_expansion_receives_only_the_rows_it_reads():
    """A 1x1 stride-2 conv expanded over both dims subsamples its input (PopLibs
    expandSpatialDim: ``subSample(stride)``): the expanded conv's input is the N x C x 7 x 7
    subsample of the 14 x 14 input, and on one tile the received box holds the 7 used rows
    (0, 2, .., 12) of columns 0..12 (columns arrive as whole runs, the copy vertex steps
    over them): 2 x 16 x 7 x 13 fp32 values instead of the 2 x 16 x 14 x 14 input the
    direct conv's window holds."""
    p = ConvParams(2, 16, 24, 14, 14, 1, 1, stride=2)
    assert expand_candidates(p) == ["h", "hw"]
    assert expanded_params(p, "hw") == ConvParams(2, 16, 24, 7, 7, 1, 1)
    plan = plan_conv(p, ONE_TILE, expand_dims="hw")
    prog = build_conv_program(plan)
    ex = prog.program.steps[0].exchange
    assert int(ex.nbytes.sum()) == 2 * 16 * 7 * 13 * 4
    used = {a.name: int(a.nbytes[0]) for a in prog.device.memory.allocations}
    assert used["conv.expand_recv"] == 2 * 16 * 7 * 13 * 4
    direct = build_conv_program(plan_conv(p, ONE_TILE, expand_dims=""))
    d_used = {a.name: int(a.nbytes[0]) for a in direct.device.memory.allocations}
    assert d_used["conv.window"] == 2 * 16 * 14 * 14 * 4
    rng = np.random.default_rng(5)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weight_shape).astype(np.float32)
    out, prof, est = run_plan(plan, x, w)
    check(x, w, out, "float32", stride=2)
    assert prof.total_cycles == est.total_cycles


def _both_blocks(p, dims, machine=M):
    """The im2col blocks of the expandDims plan of ``p``: (compiled, NumPy) columns."""
    from ipukern._kernels import _im2col
    from ipukern.conv import expand_build
    got = []
    real = expand_build._im2col_batch

    def spy(*args):
        got.append((_im2col.im2col_blocks(*expand_build._im2col_args(*args)),
                    expand_build._im2col_blocks_numpy(*args)))
        return real(*args)

    expand_build._im2col_batch = spy
    try:
        build_conv_program(plan_conv(p, machine, bias=True, expand_dims=dims))
    finally:
        expand_build._im2col_batch = real
    assert len(got) == 1
    return got[0]


def _assert_same_columns(fast, ref):
    assert len(fast) == len(ref) == 8
    for k, (a, b) in enumerate(zip(fast, ref)):
        assert a.dtype == np.int64 and a.shape == b.shape, k
        assert np.array_equal(a, b), k


@pytest.mark.parametrize("dims", ["h", "hw"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"x{c[0]}w{c[1]}")
def test_compiled_im2col_blocks_equal_numpy_ones(case, dims):
    """The compiled im2col build (ipukern._kernels._im2col) emits the NumPy build's blocks,
    column by column and in its order (tile, kind, segment, tap): the same bytes, the same
    per-tile cycles."""
    xs, ws, s, pd, d, g = case
    p = ConvParams.from_shapes(xs, ws, stride=s, padding=pd, dilation=d, groups=g)
    fast, ref = _both_blocks(p, dims)
    assert ref[0].size > 0
    _assert_same_columns(fast, ref)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), g=st.integers(1, 3), cig=st.integers(1, 5), cog=st.integers(1, 4),
       h=st.integers(2, 12), w=st.integers(2, 12), kh=st.integers(1, 4), kw=st.integers(1, 4),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2),
       dh=st.integers(1, 2), dw=st.integers(1, 2), hw=st.booleans())
def test_compiled_im2col_blocks_equal_numpy_ones_on_random_shapes(n, g, cig, cog, h, w, kh, kw,
                                                                   sh, sw, ph, pw, dh, dw, hw):
    """As above on random shapes, strides, paddings (the negative floor divisions of the
    padding columns and rows) and dilations, on a 16-tile machine so segments share tiles."""
    assume((kh - 1) * dh + 1 <= h + 2 * ph and (kw - 1) * dw + 1 <= w + 2 * pw)
    p = ConvParams(n, g * cig, g * cog, h, w, kh, kw, stride=(sh, sw), padding=(ph, pw),
                   dilation=(dh, dw), groups=g)
    cands = expand_candidates(p)
    assume(cands)
    fast, ref = _both_blocks(p, cands[-1] if hw else cands[0], M.replace(n_tiles=16, name="GC200-16"))
    _assert_same_columns(fast, ref)
