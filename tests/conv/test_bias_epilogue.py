"""Execute mode's host fusion of a conv's bias pass into its conv vertices (``fuse_bias`` in
ipukern.conv.build, ``ipk_epi`` in ipk_conv.h).

When the conv vertex writes the final output (no partials: no reduction, no cast), the
vertex adds the bias -- and the fused ReLU/ReLU6 -- right after computing its outputs, and
the bias compute set's run is a no-op. The kernel must give the add_bias vertex's bits for
every value (NaN, signed zeros, infinities, the clip bounds), in every ISA variant and both
conv paths, and whole convs the same outputs and cycles with and without the fusion.
"""
from __future__ import annotations

import numpy as np
import pytest

import ipukern as ik
from ipukern._kernels import _conv, _vertices
from ipukern.conv import bias_codelets
from ipukern.conv.codelet import conv_scratch_floats
from ipukern.core.host import fused
from ipukern.ops._cache import cached_program

from tests._support.reference import conv2d_nchw
from tests._support.codelet import NP_DT, Batch, random_dims, store_tail_dims

_SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, -6.0, 1e-45, -1e-45], np.float32)


def _with_bias(rng, b: Batch, dt: int):
    """Append to every tile row of ``b`` a bias vector of Kb-strided groups; return
    (bias_off, bias_prm) for the vertices and the bias arrays."""
    V = b.dims.shape[0]
    isz = 4 if dt == 0 else 2
    prm = np.zeros((V, 2), np.int64)
    biases = []
    extra = 0
    for v in range(V):
        G, K = int(b.dims[v, 1]), int(b.dims[v, 3])
        Kb = K + int(rng.integers(0, 4))
        ks0 = int(rng.integers(0, Kb - K + 1))
        prm[v] = Kb, ks0
        vals = (rng.standard_normal(G * Kb) * 3).astype(NP_DT[dt])
        vals[rng.random(vals.size) < 0.3] = rng.choice(_SPECIAL, size=1)[0]
        biases.append(vals)
        extra = max(extra, vals.size * isz)
    row = b.data.shape[1]
    extra = (extra + 63) // 64 * 64
    data = np.concatenate([b.data, rng.integers(0, 256, (b.data.shape[0], extra), dtype=np.uint8)],
                          axis=1)
    off = np.full(V, row, np.int64)
    for v in range(V):
        data[b.tiles[v], row:row + biases[v].nbytes] = biases[v].view(np.uint8)
    b.data = data
    return off, prm, biases


def _reference(b: Batch, off, prm, dt: int, act: int, isa, direct):
    """The separate passes: the conv, then add_bias over each vertex's output."""
    data = b.data.copy()
    s = conv_scratch_floats(b.dims, *b.kernel, *b.stride, *b.dilation)
    assert _conv.conv_tiles(data, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, *b.kernel,
                            *b.stride, *b.dilation, dt, dt, np.zeros((2, s), np.float32), 2, isa,
                            direct) == 0
    d = b.dims
    n = d[:, 0] * d[:, 1] * d[:, 3] * d[:, 6] * d[:, 7]
    params = np.stack([np.zeros_like(n), n, d[:, 6] * d[:, 7], d[:, 3], d[:, 1], prm[:, 0], prm[:, 1]],
                      axis=1).astype(np.int64)
    keep = n > 0
    _vertices.add_bias(data, b.tiles[keep], b.out_off[keep], off[keep], params[keep], dt, 1, act)
    return data


ISAS = [i for i, name in enumerate(_conv.ISA_NAMES) if name in _conv.available_isas()]


@pytest.mark.parametrize("isa", ISAS, ids=[_conv.ISA_NAMES[i] for i in ISAS])
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "gemm"])
@pytest.mark.parametrize("config", [((1, 1), (1, 1)), ((3, 3), (1, 1)), ((3, 3), (2, 2))],
                         ids=["1x1", "3x3", "3x3s2"])
@pytest.mark.parametrize("dt, act", [(0, 0), (0, 1), (0, 2), (1, 0)],
                         ids=["f32", "f32-relu", "f32-relu6", "f16"])
def test_epilogue_bits_equal_conv_then_add_bias(isa, direct, config, dt, act):
    rng = np.random.default_rng(isa * 100 + 10 * dt + act + 3 * direct)
    kernel, stride = config
    # many output channels too (the direct path needs a full vector of them)
    dims = random_dims(rng, 5, kernel, stride, (1, 1), max_c=9, max_k=40)
    _check_epilogue(rng, Batch(rng, dims, kernel, stride, in_dt=dt, out_dt=dt), isa, direct,
                    dt, act)


@pytest.mark.parametrize("isa", ISAS, ids=[_conv.ISA_NAMES[i] for i in ISAS])
@pytest.mark.parametrize("act", [0, 1, 2], ids=["none", "relu", "relu6"])
@pytest.mark.parametrize("K", [17, 40, 70])
def test_epilogue_in_direct_store_tails(isa, act, K):
    """The bias epilogue in the direct path's tail stores (runs of every length mod 16,
    blocks crossing images, channels off the vector widths): the separate passes' bits and
    NumPy's. Biases with NaN, infinities, zeros of both signs and the clip bounds; outputs
    of both signs and exact zeros (windows of zeros of both signs). Outputs stay finite:
    NaN + NaN keeps either payload (IEEE 754-2019, 6.2.3), so only one side has NaN."""
    rng = np.random.default_rng(7 * K + act)

    def values(rng, d):
        B, G, C, K, WR, WC = (int(v) for v in d[:6])
        win = rng.standard_normal((B, G, C, WR, WC)) * 4
        zero = rng.random(win.shape) < 0.4
        win[zero] = rng.choice([0.0, -0.0], size=int(zero.sum()))
        return win, rng.standard_normal((G, K, C, 1, 1))

    b = Batch(rng, store_tail_dims(K), (1, 1), values=values)
    _check_epilogue(rng, b, isa, True, 0, act)


def _check_epilogue(rng, b: Batch, isa, direct, dt, act):
    """conv_tiles with the fused epilogue, 1 and 2 threads, gives every byte of the conv then
    add_bias, and act(conv output + bias) as NumPy computes it."""
    kernel, stride, dims = b.kernel, b.stride, b.dims
    off, prm, biases = _with_bias(rng, b, dt)
    want = _reference(b, off, prm, dt, act, isa, direct)
    s = conv_scratch_floats(b.dims, *kernel, *stride, 1, 1)
    for n_threads in (1, 2):
        data = b.data.copy()
        assert _conv.conv_tiles(data, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, *kernel,
                                *stride, 1, 1, dt, dt, np.zeros((2, s), np.float32), n_threads, isa,
                                direct, off, prm, act) == 0
        assert np.array_equal(data, want)      # every byte: outputs, and nothing else written
    # and against NumPy: act(conv output + bias) in float32 (fp16: widened, rounded once)
    plain = b.data.copy()
    assert _conv.conv_tiles(plain, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, *kernel,
                            *stride, 1, 1, dt, dt, np.zeros((2, s), np.float32), 1, isa, direct) == 0
    for v in range(len(dims)):
        B, G, C, K, WR, WC, OR, OC = (int(x) for x in b.dims[v, :8])
        t, o = b.tiles[v], b.out_off[v]
        nb = B * G * K * OR * OC * (2 if dt else 4)
        y = plain[t, o:o + nb].view(NP_DT[dt]).reshape(B, G, K, OR, OC).astype(np.float32)
        Kb, ks0 = prm[v]
        bias = biases[v].reshape(G, Kb)[:, ks0:ks0 + K].astype(np.float32)
        with np.errstate(all="ignore"):
            y = y + bias[None, :, :, None, None]
            y = np.maximum(y, 0) if act == 1 else np.clip(y, 0, 6) if act == 2 else y
        got = want[t, o:o + nb].view(NP_DT[dt])
        assert np.array_equal(got.view(np.uint32 if dt == 0 else np.uint16),
                              y.astype(NP_DT[dt]).reshape(-1).view(np.uint32 if dt == 0 else np.uint16))


def test_epilogue_operands_are_checked_before_anything_is_written():
    rng = np.random.default_rng(5)
    b = Batch(rng, [(1, 2, 3, 4, 6, 6, 4, 4, 0, 0)], (3, 3))
    off, prm, _ = _with_bias(rng, b, 0)
    s = conv_scratch_floats(b.dims, 3, 3, 1, 1, 1, 1)
    before = b.data.copy()

    def call(off=off, prm=prm, act=0, dt=0):
        return _conv.conv_tiles(b.data, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, 3, 3, 1, 1,
                                1, 1, dt, dt, np.zeros((1, s), np.float32), 1, -1, True, off, prm, act)
    row = b.data.shape[1]
    assert call(off=np.array([row - 4], np.int64)) == _conv.STATUS_RANGE
    assert call(off=off + 2) == _conv.STATUS_ALIGN
    assert call(prm=np.array([[2 ** 40, 0]], np.int64)) == _conv.STATUS_RANGE
    assert call(prm=np.array([[4, -1]], np.int64)) == _conv.STATUS_RANGE
    assert call(act=3) == _conv.STATUS_PARAM
    assert call(prm=np.zeros((2, 2), np.int64)) == _conv.STATUS_DIMS
    assert _conv.conv_tiles(b.data, b.tiles, b.win_off, b.w_off, b.out_off, b.dims, 3, 3, 1, 1, 1,
                            1, 0, 0, np.zeros((1, s), np.float32), 1, -1, True, None, None,
                            1) == _conv.STATUS_PARAM      # an activation needs the bias
    assert np.array_equal(b.data, before)
    assert call(off=np.array([-1], np.int64)) == _conv.STATUS_OK   # -1: no bias for this vertex


TINY = ik.GC200.replace(n_tiles=64, tile_bytes=96 * 1024, reserved_bytes_per_tile=8 * 1024,
                        name="GC200/64-tiles-96KiB")

CONVS = [  # shape, weight shape, conv kwargs, dtype, machine
    ((2, 64, 7, 9), (64, 16, 1, 1), dict(groups=4), "float32", ik.GC200),   # no partials
    ((2, 64, 7, 9), (64, 16, 1, 1), dict(groups=4), "float16", ik.GC200),   # cast partials
    ((2, 16, 12, 12), (64, 16, 3, 3), dict(padding=1), "float32", ik.GC200),  # reduction
    ((2, 16, 12, 12), (32, 16, 3, 3), dict(padding=1, stride=2), "float16", ik.GC200),
    ((1, 512, 4, 4), (16, 512, 3, 3), dict(padding=1), "float32", ik.GC200),  # deep reduction
    ((1, 256, 8, 16), (2048, 256, 1, 1), dict(), "float32", TINY),           # serial slices
]


def _program(shape, wshape, kw, dtype, machine):
    from ipukern.conv import ConvParams
    return cached_program(ConvParams.from_shapes(shape, wshape, dtype=dtype, partials="float", **kw),
                          machine, True, None)


@pytest.mark.parametrize("fused_exchange", [True, False], ids=["fused-exchange", "plain"])
@pytest.mark.parametrize("shape, wshape, kw, dtype, machine", CONVS)
def test_conv_with_fused_bias_equals_separate_pass(shape, wshape, kw, dtype, machine,
                                                   fused_exchange, monkeypatch):
    """The bias pass done by the vertices writing the outputs (conv vertex or reduction)
    gives the bits and cycles of the separate pass, and matches the float64 reference."""
    monkeypatch.setattr(fused, "FUSED_EXCHANGE", fused_exchange)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(wshape).astype(dtype)
    b = rng.standard_normal(wshape[0]).astype(dtype)
    b[:3] = [np.inf, -0.0, np.nan]
    run = ik.conv2d(x, w, b, machine=machine, **kw)
    prog = _program(shape, wshape, kw, dtype, machine)
    assert prog.plan is run.plan
    passes = bias_codelets(prog.program)
    assert passes and all(c.fused for c in passes)
    try:
        for c in passes:
            c.fused = False
        plain = ik.conv2d(x, w, b, machine=machine, **kw)
    finally:
        for c in passes:
            c.fused = True
    assert np.array_equal(run.output.view(np.uint8), plain.output.view(np.uint8))
    assert run.profile.total_cycles == plain.profile.total_cycles
    ref = conv2d_nchw(x, w, b, **kw)
    finite = np.isfinite(ref)
    mag = conv2d_nchw(np.abs(x), np.abs(w), np.where(np.isfinite(b), np.abs(b), 0), **kw)
    with np.errstate(invalid="ignore"):     # inf - inf where the output is not finite
        err = np.abs(run.output.astype(np.float64) - ref)[finite]
    tol = (1e-5 * mag if dtype == "float32" else 2.0 ** -10 * mag + 2.0 ** -10 * np.abs(ref))[finite]
    assert (err <= tol + 1e-6).all()
    assert np.array_equal(np.isnan(run.output), np.isnan(ref))
    assert np.array_equal(np.isposinf(run.output), np.isposinf(ref))


def _sum_case(rng, dt, V=5, depth=3):
    """V sum vertices (each on its own tile) with ``depth`` sources, and their add_bias params."""
    isz = 4 if dt == 0 else 2
    n = rng.integers(1, 200, V).astype(np.int64)
    nmax = int(n.max())
    row = (depth + 2) * nmax * isz + 4096
    data = rng.integers(0, 256, (V + 2, row), dtype=np.uint8)
    tiles = rng.permutation(V + 2)[:V].astype(np.int32)
    src_off = np.stack([np.arange(V) * 0 + k * nmax * isz for k in range(depth)], 1).astype(np.int64)
    out_off = np.full(V, depth * nmax * isz, np.int64)
    bias_off = np.full(V, (depth + 1) * nmax * isz, np.int64)
    for v in range(V):
        vals = (rng.standard_normal(depth * nmax) * 4).astype(NP_DT[dt])
        vals[rng.random(vals.size) < 0.1] = rng.choice(_SPECIAL)
        data[tiles[v], :vals.nbytes] = vals.view(np.uint8)
        bias = (rng.standard_normal(1024 // isz) * 3).astype(NP_DT[dt])
        bias[rng.random(bias.size) < 0.2] = rng.choice(_SPECIAL)
        data[tiles[v], bias_off[v]:bias_off[v] + bias.nbytes] = bias.view(np.uint8)
    inner = rng.integers(1, 9, V)
    kj = rng.integers(1, 4, V)
    G = rng.integers(1, 3, V)
    K = kj + rng.integers(0, 3, V)
    ks0 = rng.integers(0, 2, V)
    e0 = rng.integers(0, 50, V)
    params = np.stack([e0, n, inner, kj, G, K, ks0], 1).astype(np.int64)
    ptr = np.arange(V + 1, dtype=np.int64) * depth
    return data, tiles, out_off, ptr, np.ascontiguousarray(src_off.ravel()), n, bias_off, params


@pytest.mark.parametrize("dt, act", [(0, 0), (0, 1), (0, 2), (1, 0)],
                         ids=["f32", "f32-relu", "f32-relu6", "f16"])
@pytest.mark.parametrize("depth", [1, 2, 4, 7])
def test_sum_epilogue_bits_equal_sum_then_add_bias(dt, act, depth):
    rng = np.random.default_rng(depth * 10 + dt + 3 * act)
    data, tiles, out_off, ptr, src_off, n, bias_off, params = _sum_case(rng, dt, depth=depth)
    want = data.copy()
    _vertices.sum_rows(want, tiles, out_off, ptr, src_off, n, dt, dt, 2)
    _vertices.add_bias(want, tiles, out_off, bias_off, params, dt, 2, act)
    got = data.copy()
    _vertices.sum_rows(got, tiles, out_off, ptr, src_off, n, dt, dt, 2, bias_off, params, act)
    assert np.array_equal(got, want)
    got = data.copy()      # sum_rows_from: every source on its own tile row (here: the same)
    _vertices.sum_rows_from(got, tiles, out_off, ptr, np.repeat(tiles, depth), src_off, n, dt, dt, 1,
                            bias_off, params, act)
    assert np.array_equal(got, want)


def test_sum_epilogue_is_checked_before_anything_is_written():
    rng = np.random.default_rng(2)
    data, tiles, out_off, ptr, src_off, n, bias_off, params = _sum_case(rng, 0)
    before = data.copy()
    bad_n = params.copy()
    bad_n[0, 1] += 1
    far = bias_off.copy()
    far[1] = data.shape[1] - 4
    for kw, match in [(dict(bias_prm=params), "go together"), (dict(act=1), "needs the bias"),
                      (dict(bias_off=bias_off, bias_prm=bad_n), "elements"),
                      (dict(bias_off=far, bias_prm=params), "outside"),
                      (dict(bias_off=bias_off, bias_prm=params, act=3), "act must be")]:
        with pytest.raises(ValueError, match=match):
            _vertices.sum_rows(data, tiles, out_off, ptr, src_off, n, 0, 0, 1, **kw)
        with pytest.raises(ValueError, match=match):
            _vertices.sum_rows_from(data, tiles, out_off, ptr, np.repeat(tiles, 3), src_off, n, 0, 0,
                                    1, **kw)
    assert np.array_equal(data, before)


@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50"])
def test_network_with_fused_bias_equals_separate_passes(model):
    """Whole networks (BN folded into conv biases, ReLU/ReLU6 fused into the bias pass): the
    same output bits with the bias passes done by the conv and reduction vertices and as
    their own passes."""
    from ipukern.nn import plan_context
    from ipukern.nn.compile import compile_network
    net = ik.models.MODELS[model](image_size=32)
    params = net.init_params(seed=0)
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    prog = compile_network(net, 2, plan_context("float32", "float", ik.GC200))
    feeds = {net.inputs[0]: x}
    got = prog.execute(feeds, params)[net.outputs[0]]
    passes = [c for s in prog.steps if s.plan is not None and "program" in s.plan.info
              for c in bias_codelets(s.plan.info["program"].program)]
    assert passes and all(c.fused for c in passes)
    try:
        for c in passes:
            c.fused = False
        plain = prog.execute(feeds, params)[net.outputs[0]]
    finally:
        for c in passes:
            c.fused = True
    assert np.array_equal(got.view(np.uint32), plain.view(np.uint32))
