"""The compiled per-tile convolution kernel against the float64 NumPy reference.

Accuracy bounds (stated once, used everywhere):

- fp32 in, fp32 out: |got - ref| <= 1e-5 * S, with S = sum |x * w| over the taps of that
  output (the reference run on |x| and |w|): fp32 accumulation of up to a few thousand
  products.
- fp16 in: the fp16 inputs are exact in fp32 and so are their products; the sum is fp32 and
  is rounded once to the output dtype, so
  |got - ref| <= 2^-11 * |ref| (fp16 output only: one round-to-nearest) + 1e-6 * S
  (fp32 accumulation) + 2^-25 (half the fp16 subnormal spacing).
"""
from __future__ import annotations

import numpy as np
import pytest

from ipukern.conv import codelet as convkernel
from ipukern.conv.codelet import ConvKernelError, conv_scratch_floats, conv_tiles_checked
from ipukern._kernels import _conv

from tests._support.codelet import Batch, random_dims, store_tail_dims, tile_layout
from tests._support.reference import conv2d_nchw, conv_tile_reference

try:
    from hypothesis import given, strategies as st
except ImportError:  # pragma: no cover
    given = None


CONFIGS = [  # kernel, stride, dilation
    ((1, 1), (1, 1), (1, 1)),
    ((3, 3), (1, 1), (1, 1)),
    ((3, 3), (2, 2), (1, 1)),
    ((3, 3), (1, 1), (2, 2)),
    ((5, 5), (1, 1), (1, 1)),
    ((5, 5), (2, 2), (1, 1)),
    ((7, 7), (2, 2), (1, 1)),
    ((3, 1), (3, 2), (2, 1)),
    ((2, 3), (1, 3), (1, 2)),
    ((1, 1), (2, 2), (1, 1)),
]


# --------------------------------------------------------------------------- reference itself
def test_reference_conv2d_matches_torch(rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for (n, c, k, h, w, g, ks, s, p, d) in [(2, 8, 4, 9, 11, 2, 3, 2, 1, 1),
                                            (1, 6, 6, 7, 8, 6, 5, 1, 2, 2),
                                            (3, 4, 8, 5, 5, 1, 1, 1, 0, 1),
                                            (1, 4, 4, 10, 7, 4, 3, 1, "same", 2),
                                            (1, 3, 6, 9, 9, 3, 3, 2, "valid", 1)]:
        x = rng.standard_normal((n, c, h, w))
        wt = rng.standard_normal((k, c // g, ks, ks))
        b = rng.standard_normal(k)
        ref = conv2d_nchw(x, wt, b, stride=s, padding=p, dilation=d, groups=g)
        want = F.conv2d(torch.tensor(x), torch.tensor(wt), torch.tensor(b), stride=s, padding=p,
                        dilation=d, groups=g).numpy()
        np.testing.assert_allclose(ref, want, rtol=1e-12, atol=1e-12)


def test_reference_zero_padding_gives_nan_for_inf_weights():
    out = conv2d_nchw(np.ones((1, 1, 3, 3)), np.full((1, 1, 3, 3), np.inf), padding=1)[0, 0]
    assert np.isposinf(out[1, 1])                    # the only output that sees no padding
    out[1, 1] = np.nan
    assert np.isnan(out).all()
    win = np.ones((1, 1, 1, 2, 2))
    wts = np.full((1, 1, 1, 3, 3), np.inf)
    assert np.isnan(conv_tile_reference(win, wts, 2, 2, -1, -1, (3, 3))).all()


# --------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("kernel,stride,dilation", CONFIGS)
def test_ragged_vertices_fp32(rng, kernel, stride, dilation):
    dims = random_dims(rng, 14, kernel, stride, dilation)
    Batch(rng, dims, kernel, stride, dilation).run().check()


@pytest.mark.parametrize("in_dt,out_dt", [(1, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("kernel,stride,dilation", CONFIGS[:6])
def test_ragged_vertices_fp16(rng, kernel, stride, dilation, in_dt, out_dt):
    dims = random_dims(rng, 6, kernel, stride, dilation)
    Batch(rng, dims, kernel, stride, dilation, in_dt=in_dt, out_dt=out_dt).run().check()


@pytest.mark.parametrize("kernel,stride,dilation", [CONFIGS[1], CONFIGS[2], CONFIGS[0]])
def test_many_channels(rng, kernel, stride, dilation):
    dims = random_dims(rng, 5, kernel, stride, dilation, max_c=80, max_k=80, groups=(1, 2),
                       batch=(1, 2))
    Batch(rng, dims, kernel, stride, dilation).run().check()


def test_groups_one_to_depthwise_and_wide_channels(rng):
    """Shapes from the layers: dense with many channels, small groups, depthwise, 1x1 GEMM."""
    dims = [
        (1, 1, 64, 70, 4, 20, 2, 20, -1, -1),     # dense, K not a multiple of 8
        (1, 1, 33, 9, 5, 17, 3, 17, 0, -1),
        (2, 2, 8, 8, 6, 23, 4, 23, -1, -1),       # cpg 8
        (1, 8, 4, 4, 5, 19, 3, 19, 0, -1),        # cpg 4
        (1, 16, 2, 2, 4, 9, 2, 9, -1, -1),        # cpg 2
        (3, 32, 1, 1, 4, 15, 4, 15, -1, -1),      # depthwise
        (1, 5, 1, 3, 7, 7, 7, 7, -1, -1),         # channel multiplier 3
    ]
    Batch(rng, dims, (3, 3)).run().check()
    mm = [(1, 1, 67, 20, 1, 37, 1, 37, 0, 0), (1, 1, 128, 17, 1, 64, 1, 64, 0, 0),
          (1, 3, 5, 9, 1, 130, 1, 130, 0, 0)]
    Batch(rng, mm, (1, 1)).run().check()


def test_1472_vertices_one_call(rng):
    V = 1472
    base = np.array([(1, 1, 3, 5, 4, 9, 2, 9, -1, -1), (1, 2, 2, 3, 3, 8, 3, 8, -1, -1)])
    dims = base[rng.integers(0, 2, size=V)]
    b = Batch(rng, dims, (3, 3), n_rows=V, row_bytes=2048).run()
    for v in rng.choice(V, size=40, replace=False):   # spot-check; the guard check sees all
        got, ref, s = b.output(v), b.reference(v), b.reference(v, absolute=True)
        assert (np.abs(got - ref) <= 1e-5 * s).all()


def test_every_output_written_and_empty_cases(rng):
    dims = [
        (1, 1, 0, 3, 4, 4, 2, 2, 0, 0),     # C = 0: the sum is empty -> +0.0
        (1, 1, 2, 0, 4, 4, 2, 2, 0, 0),     # K = 0: nothing to write
        (0, 2, 2, 2, 4, 4, 2, 2, 0, 0),     # B = 0
        (1, 1, 2, 2, 0, 0, 2, 3, 0, 0),     # empty window: all padding
        (1, 1, 2, 2, 3, 3, 4, 5, -9, 7),    # taps entirely outside the window
    ]
    b = Batch(rng, dims, (3, 3)).run()
    b.check()
    assert (b.output(0) == 0).all() and (b.output(3) == 0).all() and (b.output(4) == 0).all()


# --------------------------------------------------------------------------- IEEE specials
def test_inf_weight_against_padding_gives_nan(rng):
    def values(rng, d):
        B, G, C, K, WR, WC = (int(x) for x in d[:6])
        w = rng.standard_normal((G, K, C, 3, 3))
        w[0, 0, 0, 0, 0] = np.inf          # top-left tap: reads padding at y = 0 or x = 0
        return np.ones((B, G, C, WR, WC)), w
    for in_dt in (0, 1):
        b = Batch(rng, [(1, 1, 2, 2, 5, 6, 5, 6, -1, -1)], (3, 3), values=values, in_dt=in_dt).run()
        got = b.output(0)[0, 0].astype(np.float64)
        ref = b.reference(0)[0, 0]
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        assert np.isnan(got[0, 0, :]).all() and np.isnan(got[0, :, 0]).all()   # padding -> NaN
        assert np.isposinf(got[0, 1:, 1:]).all()                           # 1 * inf -> inf
        assert np.isfinite(got[1]).all()                                   # other channel


def test_nan_input_reaches_exactly_the_outputs_that_use_it(rng):
    def values(rng, d):
        B, G, C, K, WR, WC = (int(x) for x in d[:6])
        x = rng.standard_normal((B, G, C, WR, WC))
        x[0, 0, 1, 4, 3] = np.nan
        x[0, 0, 0, 0, 7] = -np.inf
        return x, rng.standard_normal((G, K, C, 3, 3))
    for kernel_cfg in [((1, 1), (1, 1)), ((2, 1), (1, 2))]:
        stride, dilation = kernel_cfg
        b = Batch(rng, [(1, 1, 3, 5, 9, 11, 6, 5, -1, 0)], (3, 3), stride, dilation,
                  values=values).run()
        got, ref = b.output(0), b.reference(0)
        assert np.isnan(ref).any()
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        finite = np.isfinite(ref)
        assert np.allclose(got[finite], ref[finite], rtol=1e-4, atol=1e-4)


def test_fp16_overflow_rounds_to_inf(rng):
    def values(rng, d):
        return np.full((1, 1, 1, 1, 4), 200.0), np.full((1, 2, 1, 1, 1), 400.0)
    b = Batch(rng, [(1, 1, 1, 2, 1, 4, 1, 4, 0, 0)], (1, 1), values=values, in_dt=1, out_dt=1).run()
    assert np.isposinf(b.output(0)).all()          # 80000 > 65504


# --------------------------------------------------------------------------- determinism
def test_results_do_not_depend_on_thread_count(rng):
    dims = random_dims(rng, 40, (3, 3), (1, 1), (1, 1), max_c=20, max_k=20)
    one = Batch(np.random.default_rng(7), dims, (3, 3))
    two = Batch(np.random.default_rng(7), dims, (3, 3))
    one.run(n_threads=1)
    two.run(n_threads=2)
    assert np.array_equal(one.data, two.data)
    three = Batch(np.random.default_rng(7), dims, (3, 3)).run(n_threads=3)
    assert np.array_equal(one.data, three.data)


def test_isa_variants_agree(rng):
    """Every variant computes the same fused FMA chains (the baseline with C99 fmaf, AVX2 and
    AVX-512 with FMA instructions): bitwise equal, fp32 and fp16."""
    isas = convkernel.available_isas()
    dims = random_dims(rng, 12, (3, 3), (2, 1), (1, 2), max_c=20, max_k=20)
    runs = {}
    for isa in isas:
        for in_dt, out_dt in [(0, 0), (1, 1)]:
            b = Batch(np.random.default_rng(3), dims, (3, 3), (2, 1), (1, 2), in_dt=in_dt,
                      out_dt=out_dt).run(isa=isa)
            b.check()
            runs[isa, in_dt] = b.data
    assert isas[0] == "baseline"
    for in_dt in (0, 1):
        for isa in isas[1:]:
            assert np.array_equal(runs["baseline", in_dt], runs[isa, in_dt]), isa


@pytest.mark.parametrize("ks", [1, 3, 5])
def test_small_channel_shapes_all_variants_agree(rng, ks):
    """Few channels per group (C <= 8, K <= 16: the AVX-512 variant has its own kernels for
    these, reading fp32 windows in place and packing fp16 ones): depthwise and cpg 2..8, K
    blocks rounded up, odd sizes, rows 1..15, columns past 64, padding on every side;
    bitwise equal to the GEMM path of the AVX2 variant and of the baseline, which run the same
    FMA chains."""
    dims = []
    shapes = [(1, 1, 1, 1), (2, 56, 1, 1), (7, 28, 2, 2), (15, 17, 4, 4), (5, 100, 8, 8),
              (3, 64, 1, 3), (6, 65, 3, 5), (13, 33, 8, 16), (2, 50, 5, 11), (4, 47, 1, 1)]
    for OR, OC, C, K in shapes:
        p = ks // 2
        ro, co = int(rng.integers(-p - 1, 2)), int(rng.integers(-p - 1, 2))
        WR, WC = OR + ks - 1 + int(rng.integers(-2, 2)), OC + ks - 1 + int(rng.integers(-3, 2))
        dims.append((int(rng.integers(1, 3)), int(rng.integers(1, 4)), C, K, max(WR, 1), max(WC, 1),
                     OR, OC, ro, co))
    # windows much narrower / further left than the outputs: mostly padding
    dims += [(1, 2, 1, 1, 4, 5, 3, 60, -1, -2), (1, 1, 2, 4, 9, 40, 6, 70, 0, -30),
             (1, 1, 1, 1, 3, 3, 2, 20, -5, 1)]
    isas = convkernel.available_isas()
    for in_dt, out_dt in [(0, 0), (1, 1), (1, 0)]:
        runs = {}
        for isa in isas:
            b = Batch(np.random.default_rng(11), dims, (ks, ks), in_dt=in_dt, out_dt=out_dt).run(isa=isa)
            b.check()
            runs[isa] = b.data
        for isa in isas[1:]:
            assert np.array_equal(runs["baseline"], runs[isa]), (isa, in_dt, out_dt)


def test_long_rows_take_the_general_packing(rng):
    """Rows past 1024 packed columns leave the AVX-512 row packer and the depthwise kernel
    for the general code: same results."""
    dims = [(1, 1, 2, 3, 3, 1100, 1, 1100, -1, -1), (1, 2, 1, 1, 3, 1030, 2, 1030, -1, -1)]
    Batch(rng, dims, (3, 3)).run().check()


# --------------------------------------------------------------------------- scratch + errors
def test_scratch_floats_is_max_over_vertices_and_enough(rng):
    dims = random_dims(rng, 10, (5, 5), (2, 2), (1, 1))
    per = [conv_scratch_floats(np.array([d]), 5, 5, 2, 2, 1, 1) for d in dims]
    s = conv_scratch_floats(np.array(dims), 5, 5, 2, 2, 1, 1)
    assert s == max(per)
    scratch = np.full((2, s), np.nan, dtype=np.float32)      # exactly enough, garbage inside
    Batch(rng, dims, (5, 5), (2, 2)).run(scratch=scratch).check()


def test_raw_kernel_returns_status_and_writes_nothing(rng):
    b = Batch(rng, [(1, 1, 2, 3, 4, 4, 2, 2, 0, 0)], (3, 3))
    kw = dict(in_dt=0, out_dt=0)
    s = conv_scratch_floats(b.dims, 3, 3, 1, 1, 1, 1)

    def call(tiles=b.tiles, out_off=b.out_off, scratch_cols=s, n_threads=1, dims=b.dims):
        return _conv.conv_tiles(b.data, tiles, b.win_off, b.w_off, out_off, dims, 3, 3, 1, 1, 1, 1,
                                kw["in_dt"], kw["out_dt"], np.zeros((2, scratch_cols), np.float32),
                                n_threads)
    assert call(tiles=np.array([b.data.shape[0]], np.int32)) == _conv.STATUS_TILE
    assert call(out_off=np.array([b.data.shape[1] - 4], np.int64)) == _conv.STATUS_RANGE
    assert call(out_off=b.out_off + 2) == _conv.STATUS_ALIGN
    assert call(scratch_cols=s - 1) == _conv.STATUS_SCRATCH
    assert call(n_threads=3) == _conv.STATUS_THREADS
    bad = b.dims.copy()
    bad[0, 2] = -1
    assert call(dims=bad) == _conv.STATUS_DIMS
    assert np.array_equal(b.data, b.before)
    assert call() == _conv.STATUS_OK


def test_wrapper_errors_name_the_vertex(rng):
    b = Batch(rng, [(1, 1, 2, 3, 4, 4, 2, 2, 0, 0), (1, 1, 2, 3, 4, 4, 2, 2, 0, 0)], (3, 3))
    args = [b.data, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, 3, 3]
    with pytest.raises(ConvKernelError, match="vertex 1: tile 99"):
        conv_tiles_checked(b.data, np.array([b.tiles[0], 99]), *args[2:])
    with pytest.raises(ConvKernelError, match="vertex 0 .* outside the tile"):
        conv_tiles_checked(*args[:4], np.array([b.data.shape[1], 0]), *args[5:])
    with pytest.raises(ConvKernelError, match="not aligned"):
        conv_tiles_checked(*args[:4], b.out_off + np.array([0, 2]), *args[5:])
    with pytest.raises(ConvKernelError, match="overlaps"):       # output onto own window
        conv_tiles_checked(*args[:4], b.win_off.copy(), *args[5:])
    same = np.array([b.tiles[0], b.tiles[0]], np.int32)           # two outputs, same bytes
    with pytest.raises(ConvKernelError, match="overlap"):
        conv_tiles_checked(b.data, same, b.win_off, b.w_off, np.full(2, b.out_off[0]), b.dims, 3, 3)
    with pytest.raises(ConvKernelError, match="kh must be"):
        conv_tiles_checked(*args[:6], 0, 3)
    with pytest.raises(ConvKernelError, match="negative"):
        d = b.dims.copy()
        d[1, 3] = -2
        conv_tiles_checked(*args[:5], d, 3, 3)
    with pytest.raises(ConvKernelError, match="scratch"):
        conv_tiles_checked(*args, scratch=np.zeros((1, 8), np.float32), n_threads=1)
    with pytest.raises(ConvKernelError, match="float32 or float16"):
        conv_tiles_checked(*args, in_dt="float64")
    huge = b.dims.copy()
    huge[0, :6] = 2**20                     # 2^100 bytes: must not wrap past the range check
    with pytest.raises(ConvKernelError, match="operand"):
        conv_tiles_checked(*args[:5], huge, 3, 3)
    assert _conv.conv_tiles(b.data, b.tiles, b.win_off, b.w_off, b.out_off, huge, 3, 3, 1, 1, 1, 1,
                            0, 0, np.zeros((1, 64), np.float32), 1) != _conv.STATUS_OK
    assert np.array_equal(b.data, b.before)


def test_reads_may_overlap_between_vertices(rng):
    """Two vertices on one tile reading the same window and weights into separate outputs
    are fine (a planner does this for output-channel splits)."""
    win = rng.standard_normal((1, 1, 2, 6, 6)).astype(np.float32)
    wts = rng.standard_normal((1, 3, 2, 3, 3)).astype(np.float32)
    data = np.zeros((2, 4096), np.uint8)
    data[1, :win.nbytes] = tile_layout(win).view(np.uint8)
    data[1, 512:512 + wts.nbytes] = wts.reshape(-1).view(np.uint8)
    dims = np.array([(1, 1, 2, 3, 6, 6, 4, 4, 0, 0)] * 2)
    conv_tiles_checked(data, [1, 1], [0, 0], [512, 512], [1024, 2048], dims, 3, 3)
    ref = conv_tile_reference(win, wts, 4, 4, 0, 0, (3, 3))
    for off in (1024, 2048):
        got = data[1, off:off + 3 * 16 * 4].view(np.float32).reshape(ref.shape)
        bound = 1e-5 * conv_tile_reference(np.abs(win), np.abs(wts), 4, 4, 0, 0, (3, 3))
        assert (np.abs(got - ref) <= bound).all()


def test_codelet_runs_a_batch_and_reuses_scratch(rng):
    from types import SimpleNamespace
    b = Batch(rng, random_dims(rng, 6, (3, 3), (1, 1), (1, 1)), (3, 3), in_dt=1, out_dt=1)
    s = conv_scratch_floats(b.dims, 3, 3, 1, 1, 1, 1)
    codelet = convkernel.ConvCodelet((3, 3), in_dtype="float16", out_dtype="float16", scratch_floats=s)
    batch = SimpleNamespace(tiles=b.tiles, args={"win": b.win_off, "w": b.w_off, "out": b.out_off,
                                                 "dims": b.dims})
    codelet.run(b.data, batch, 2)
    b.check()
    first = codelet.scratch(2)
    codelet.run(b.data, batch, 2)
    assert codelet.scratch(2) is first
    # a codelet sizes its scratch from the batches it runs: a smaller hint only grows
    small = convkernel.ConvCodelet((3, 3), in_dtype="float16", out_dtype="float16",
                                   scratch_floats=s - 1)
    small.run(b.data, batch, 1)
    assert small.scratch(1).shape[1] >= s
    b.check()
    # the kernel itself refuses a scratch that is too small, before writing anything
    before = b.data.copy()
    st = _conv.conv_tiles(b.data, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, 3, 3, 1, 1, 1, 1,
                          1, 1, np.zeros((1, s - 1), np.float32), 1)
    assert st == _conv.STATUS_SCRATCH and np.array_equal(b.data, before)


# --------------------------------------------------------------------------- property test
if given is not None:
    @given(seed=st.integers(0, 2**32 - 1), kh=st.integers(1, 4), kw=st.integers(1, 4),
           sh=st.integers(1, 3), sw=st.integers(1, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
           dts=st.sampled_from([(0, 0), (1, 0), (1, 1)]), n=st.integers(1, 4))
    def test_property_random_vertices(seed, kh, kw, sh, sw, dh, dw, dts, n):
        rng = np.random.default_rng(seed)
        dims = random_dims(rng, n, (kh, kw), (sh, sw), (dh, dw), max_c=9, max_k=11)
        Batch(rng, dims, (kh, kw), (sh, sw), (dh, dw), in_dt=dts[0], out_dt=dts[1]).run().check()


# --------------------------------------------------------------------------- direct path
def interior_dims(rng, n, kernel, stride, dilation, *, max_c=40, max_k=40, groups=(1, 3),
                  batch=(1, 4)):
    """Vertices whose every tap lies inside the window (the direct path's case): origins
    >= 0, windows at least as large as the tap range, sometimes larger."""
    kh, kw = kernel
    dims = []
    for _ in range(n):
        OR, OC = int(rng.integers(1, 10)), int(rng.integers(1, 30))
        ro, co = int(rng.integers(0, 3)), int(rng.integers(0, 3))
        span_r = ro + (OR - 1) * stride[0] + (kh - 1) * dilation[0] + 1
        span_c = co + (OC - 1) * stride[1] + (kw - 1) * dilation[1] + 1
        dims.append((int(rng.integers(batch[0], batch[1] + 1)), int(rng.integers(groups[0], groups[1] + 1)),
                     int(rng.integers(1, max_c + 1)), int(rng.integers(1, max_k + 1)),
                     span_r + int(rng.integers(0, 3)), span_c + int(rng.integers(0, 3)), OR, OC, ro, co))
    return dims


def _direct_vs_packing(dims, kernel, stride=(1, 1), dilation=(1, 1), in_dt=0, out_dt=0, seed=5):
    """The direct path (default) and the packing path give the same bytes, every ISA variant
    this CPU runs, and both are within the float64 reference's bound."""
    runs = []
    for isa in convkernel.available_isas():
        for direct in (True, False):
            b = Batch(np.random.default_rng(seed), dims, kernel, stride, dilation, in_dt=in_dt,
                      out_dt=out_dt).run(isa=isa, direct=direct)
            runs.append((isa, direct, b.data))
    b.check()
    for isa, direct, data in runs[1:]:
        assert np.array_equal(runs[0][2], data), (isa, direct)


@pytest.mark.parametrize("kernel,stride,dilation", CONFIGS)
def test_direct_path_bitwise_equals_packing(rng, kernel, stride, dilation):
    """fp32 windows without padding (every 1x1 layer of a network) are read in place with
    the lanes over output channels; per output the same FMA chain as the packing path.
    K from 1 to past four vectors (blocks and a zero-padded last vector), positions of
    several images in one block, outputs fp32 and fp16; mixed with padded vertices, which
    keep the packing path in the same call."""
    dims = interior_dims(rng, 14, kernel, stride, dilation)
    if kernel == (1, 1):   # a ResNet-50 tile's shape; K past four vectors, odd
        dims += [(8, 1, 256, 16, 2, 2, 2, 2, 0, 0), (3, 1, 70, 67, 3, 5, 3, 5, 0, 0)]
    dims += random_dims(rng, 4, kernel, stride, dilation)
    _direct_vs_packing(dims, kernel, stride, dilation)
    _direct_vs_packing(dims[:6], kernel, stride, dilation, out_dt=1)


@pytest.mark.parametrize("K", [16, 17, 24, 31, 40, 64, 70])
def test_direct_path_store_tails_bitwise(K):
    """The direct path's output stores (AVX-512: 16 positions x 16 channels per transpose,
    rows of blocks that cross an image's end stored with masks; AVX2: 8 x 8 and scalar
    tails) for runs of every length mod 16, several images per vertex and channel counts
    off the vector widths: the same bytes in every ISA variant and as the packing path,
    within the reference's bound, nothing outside the outputs written."""
    _direct_vs_packing(store_tail_dims(K), (1, 1))


def test_direct_path_store_tails_specials():
    """NaN, infinities and signed zeros through the tail stores: the same bytes both paths."""
    _specials_direct_vs_packing(store_tail_dims(19, batches=(2, 3)), (1, 1),
                                [0.0, -0.0, 1.0, -1.0, np.inf, np.nan, 3e38],
                                [0.0, -0.0, 2.0, -2.0, -np.inf])


def test_direct_path_signed_zeros_and_specials(rng):
    """Signed zeros, infinities and NaN go through the same FMA chain: -0.0 products summed
    from +0.0, inf * 0 = NaN, overflow to inf."""
    dims = [(2, 1, 3, 9, 2, 3, 2, 3, 0, 0), (1, 2, 1, 17, 1, 4, 1, 4, 0, 0)]
    _specials_direct_vs_packing(dims, (1, 1), [0.0, -0.0, 1.0, -1.0, np.inf, 3e38],
                                [0.0, -0.0, 2.0, -2.0, -np.inf])


def _specials_direct_vs_packing(dims, kernel, win_values, w_values):
    """Windows and weights drawn from the given special values: same bytes both paths."""
    def values(rng, d):
        B, G, C, K, WR, WC = (int(v) for v in d[:6])
        return (rng.choice(win_values, size=(B, G, C, WR, WC)),
                rng.choice(w_values, size=(G, K, C) + kernel))
    runs = [Batch(np.random.default_rng(2), dims, kernel, values=values).run(direct=d).data
            for d in (True, False)]
    assert np.array_equal(runs[0], runs[1])


if given is not None:
    @given(seed=st.integers(0, 2**32 - 1), kh=st.integers(1, 3), kw=st.integers(1, 3),
           sh=st.integers(1, 2), sw=st.integers(1, 2), dh=st.integers(1, 2), n=st.integers(1, 4))
    def test_property_direct_path_bitwise(seed, kh, kw, sh, sw, dh, n):
        rng = np.random.default_rng(seed)
        dims = interior_dims(rng, n, (kh, kw), (sh, sw), (dh, 1), max_c=20, max_k=36)
        _direct_vs_packing(dims, (kh, kw), (sh, sw), (dh, 1), seed=seed % 1000)


def padded_dims(rng, n, kernel, stride, dilation, *, max_c=24, k=(8, 40), batch=(1, 4)):
    """Vertices whose taps reach outside the window (zero padding: negative origins, windows
    shorter than the tap range) with a full vector of output channels or more: the direct
    path's padded case (a zero-padded copy of the window)."""
    kh, kw = kernel
    dims = []
    for _ in range(n):
        OR, OC = int(rng.integers(1, 9)), int(rng.integers(1, 20))
        ro, co = int(rng.integers(-2, 2)), int(rng.integers(-2, 2))
        span_r = ro + (OR - 1) * stride[0] + (kh - 1) * dilation[0] + 1
        span_c = co + (OC - 1) * stride[1] + (kw - 1) * dilation[1] + 1
        WR = max(1, span_r + int(rng.integers(-2, 2)))
        WC = max(1, span_c + int(rng.integers(-2, 2)))
        if ro >= 0 and co >= 0 and WR >= span_r and WC >= span_c:
            ro = -1   # make sure this one needs padding
        dims.append((int(rng.integers(batch[0], batch[1] + 1)), int(rng.integers(1, 3)),
                     int(rng.integers(1, max_c + 1)), int(rng.integers(k[0], k[1] + 1)),
                     WR, WC, OR, OC, ro, co))
    return dims


@pytest.mark.parametrize("kernel,stride,dilation", CONFIGS)
def test_direct_path_padded_bitwise_equals_packing(rng, kernel, stride, dilation):
    """fp32 windows that need padding (every 3x3 layer's border tiles) take the direct path
    on a zero-padded copy: the padded taps are FMAs with +0.0 as in the packing path, so the
    bits are the same; mixed with in-place and few-channel vertices in one call."""
    dims = padded_dims(rng, 10, kernel, stride, dilation)
    dims += [(8, 1, 64, 64, 3, 4, 3, 4, -1, -1)]     # a ResNet-50 3x3 corner tile
    dims += interior_dims(rng, 3, kernel, stride, dilation) + random_dims(rng, 3, kernel, stride,
                                                                          dilation)
    _direct_vs_packing(dims, kernel, stride, dilation)
    _direct_vs_packing(dims[:5], kernel, stride, dilation, out_dt=1)


def test_direct_path_padded_specials(rng):
    """Padded taps multiply +0.0 by the weight in both paths: an infinite weight gives NaN
    at the borders, and -0.0 sums stay as the packing path leaves them."""
    dims = [(2, 1, 3, 9, 3, 4, 3, 4, -1, -1), (1, 2, 2, 17, 2, 5, 3, 5, -1, 0),
            (3, 1, 1, 8, 4, 4, 4, 4, 0, -1)]
    _specials_direct_vs_packing(dims, (3, 3), [0.0, -0.0, 1.0, -1.0, np.inf, 3e38, -1e-45],
                                [0.0, -0.0, 2.0, -2.0, -np.inf, 1e-30])


if given is not None:
    @given(seed=st.integers(0, 2**32 - 1), kh=st.integers(1, 5), kw=st.integers(1, 5),
           sh=st.integers(1, 2), sw=st.integers(1, 2), dh=st.integers(1, 2), n=st.integers(1, 4))
    def test_property_direct_path_padded_bitwise(seed, kh, kw, sh, sw, dh, n):
        rng = np.random.default_rng(seed)
        dims = padded_dims(rng, n, (kh, kw), (sh, sw), (dh, 1), max_c=12, k=(8, 36))
        _direct_vs_packing(dims, (kh, kw), (sh, sw), (dh, 1), seed=seed % 1000)
