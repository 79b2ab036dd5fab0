"""A conv's partials exchange fused with its reduction (ipukern.core.host.fused_reduce): the
reduce vertices read the partials where they were computed; every output byte is the one
the two phases give, for any thread count; pairs where that would not hold are refused."""
from __future__ import annotations

import numpy as np
import pytest

from ipukern.conv import ConvParams, Split, build_conv_program, plan_conv
from ipukern.core.host.fused_reduce import ReduceStep, fuse_reduce
from ipukern.core.host import run as host_run
from ipukern.core.program import Program, Superstep
from ipukern.core.vertices import sum_rows

from tests._support.conv_runs import GC200_96, GC200_128, run_plan, two_ways

CASES = {
    "fp32 1x1 wide": dict(i=(1, 512, 3, 3), w=(32, 512, 1, 1), split=Split(in_chans=8)),
    "fp32 3x3 bias": dict(i=(2, 48, 6, 6), w=(24, 48, 3, 3), padding=1, split=Split(in_chans=3)),
    "fp32 uneven": dict(i=(1, 60, 5, 7), w=(20, 60, 3, 1), padding=(1, 0), split=Split(in_chans=5)),
    "fp16 half partials": dict(i=(2, 64, 4, 4), w=(16, 64, 3, 3), padding=1, dtype="float16",
                               partials="half", split=Split(in_chans=4)),
    "fp16 float partials": dict(i=(1, 96, 5, 5), w=(24, 96, 1, 1), dtype="float16",
                                split=Split(in_chans=6)),
}


def _program(case: dict, serial: int = 1):
    """The conv program of ``case`` with its in-channel split, inputs written and run once."""
    c = dict(case)
    split = c.pop("split")
    p = ConvParams.from_shapes(c.pop("i"), c.pop("w"), **c)
    return run_plan(p, split, serial=serial, machine=GC200_96)[1]


def _reduce_steps(prog: Program) -> list[int]:
    return [i for i in range(len(prog.steps)) if isinstance(host_run.fused_step(prog, i), ReduceStep)]


@pytest.mark.parametrize("case", list(CASES))
def test_fused_reduce_gives_the_same_bytes(case):
    cp = _program(CASES[case])
    prog = cp.program
    assert _reduce_steps(prog), "a single-stage partials reduction is fused"
    base, *runs = two_ways(prog, cp.device.arena.data)
    for r in runs:
        assert np.array_equal(r, base)


def test_planned_convs_with_partials_are_fused_and_exact():
    """Plans of the planner's own choosing, with a bias (its pass runs after the sums)."""
    seen = 0
    for i, w in [((2, 16, 9, 9), (24, 16, 3, 3)), ((1, 256, 6, 6), (64, 256, 1, 1))]:
        p = ConvParams.from_shapes(i, w, padding=(w[2] // 2, w[3] // 2))
        cp = build_conv_program(plan_conv(p, GC200_96, bias=True))
        rng = np.random.default_rng(1)
        cp.write_inputs(rng.standard_normal(p.input_shape).astype(p.dtype),
                        rng.standard_normal(p.weight_shape).astype(p.dtype),
                        rng.standard_normal(p.out_channels).astype(p.dtype))
        if cp.plan.split.reduction > 1 and len(cp.buffers.stages) == 1:
            assert _reduce_steps(cp.program)
            seen += 1
        base, *runs = two_ways(cp.program, cp.device.arena.data)
        for r in runs:
            assert np.array_equal(r, base)
    assert seen == 2


def test_multistage_reduction_is_not_fused():
    """Stages share one receive buffer: a later stage's exchange and sums touch it, so no
    stage is fused; the program still runs the same."""
    p = ConvParams(batch=1, in_channels=8 * 25, out_channels=48, in_h=1, in_w=12, kernel_h=1,
                   kernel_w=1)
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=25), serial=1, machine=GC200_128)
    assert len(cp.buffers.stages) > 1
    assert not _reduce_steps(cp.program)
    assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30)


def _hand_program(receive_only=True, reader=False, clobber=False):
    """Tile 0 sends 8 floats to tile 1's receive buffer (byte 64); tile 1 sums its own 8
    (byte 0) and the received ones into byte 128. ``reader``: a later step reads the
    receive buffer; ``clobber``: a second sum vertex on tile 0 overwrites the source."""
    m = GC200_96
    from ipukern.core.engine import Device
    dev = Device(m)
    dev.alloc("buf", np.full(m.n_tiles, 256, np.int64), "partials")
    x = dev.exchange([0], [0], [1], [64], [32], name="partials")
    x.receive_only = receive_only
    tiles, out, srcs, n = [1], [128], [[0], [64]], [8]
    if clobber:
        tiles, out, srcs, n = [1, 0], [128, 0], [[0, 32], [64, 64]], [8, 8]
    batch = sum_rows(m, np.array(tiles), np.array(out), [np.array(s) for s in srcs], np.array(n),
                     "float32", "float32")
    steps = [Superstep("conv", exchange=x), Superstep("reduce", compute=dev.compute_set([batch]))]
    if reader:
        steps.append(Superstep("read", compute=dev.compute_set([sum_rows(
            m, np.array([1]), np.array([192]), [np.array([64])], np.array([8]), "float32",
            "float32")])))
    return dev, dev.program(steps)


def test_hand_built_pair_is_fused_only_when_valid():
    dev, prog = _hand_program()
    assert isinstance(fuse_reduce(prog.steps, 0), ReduceStep)
    data = np.random.default_rng(3).standard_normal((GC200_96.n_tiles, 64)).astype(np.float32)
    data = data.view(np.uint8).copy()
    base, *runs = two_ways(prog, data)
    for r in runs:
        assert np.array_equal(r, base)
    # refused: not marked receive-only, a later reader, a vertex overwriting a source
    assert fuse_reduce(_hand_program(receive_only=False)[1].steps, 0) is None
    assert fuse_reduce(_hand_program(reader=True)[1].steps, 0) is None
    assert fuse_reduce(_hand_program(clobber=True)[1].steps, 0) is None
    assert fuse_reduce(prog.steps, 1) is None


def test_sum_rows_from_checks_operands():
    from ipukern._kernels import _vertices
    data = np.zeros((2, 64), np.uint8)
    one = np.array([1], np.int32)
    args = dict(tiles=one, out_off=np.array([0], np.int64), src_ptr=np.array([0, 1], np.int64),
                src_row=np.array([5], np.int32), src_off=np.array([0], np.int64),
                n=np.array([4], np.int64))
    with pytest.raises(ValueError, match="outside the arena"):
        _vertices.sum_rows_from(data, *args.values(), 0, 0, 1)
    args["src_row"] = np.array([0], np.int32)
    with pytest.raises(ValueError, match="n_threads"):
        _vertices.sum_rows_from(data, *args.values(), 0, 0, 0)
    data[0, :16] = np.arange(4, dtype=np.float32).view(np.uint8)
    _vertices.sum_rows_from(data, *args.values(), 0, 0, 1)
    assert np.array_equal(data[1, :16].view(np.float32), np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("in_dt, out_dt", [("float32", "float32"), ("float16", "float32"),
                                           ("float32", "float16"), ("float16", "float16")])
@pytest.mark.parametrize("fn", ["sum_rows", "sum_rows_from"])
def test_sum_kernels_add_sources_in_order(fn, in_dt, out_dt, n_threads):
    """sum_rows / sum_rows_from against NumPy: out = ((s0 + s1) + s2) + ... in fp32, one
    rounding per addition, then once to the output dtype, bit for bit: 1 to 16 sources per
    vertex (the fp32 kernel adds up to 7 per pass over the output, so every pass width and
    remainder), 0 to 37 elements (vector tails), NaNs with a payload, infinity, -0, the
    output in place of the first source for every third vertex, 1-3 threads."""
    from ipukern._kernels import _vertices
    isz, osz = np.dtype(in_dt).itemsize, np.dtype(out_dt).itemsize
    rng = np.random.default_rng([len(fn), isz, osz, n_threads])
    n_tiles, V = 5, 48
    used = np.zeros(n_tiles, np.int64)

    def alloc(t, nbytes):
        used[t] += nbytes
        return int(used[t] - nbytes)

    tiles, out_off, ptr, src_row, src_off, ns = [], [], [0], [], [], []
    for v in range(V):
        t, n, k_n = v % n_tiles, int(rng.integers(0, 38)), v % 16 + 1
        for k in range(k_n):
            r = t if fn == "sum_rows" else (t + k) % n_tiles
            src_row.append(r)
            src_off.append(alloc(r, n * max(isz, osz)))
        inplace = v % 3 == 0 and isz == osz
        tiles.append(t)
        out_off.append(src_off[ptr[-1]] if inplace else alloc(t, n * osz))
        ptr.append(len(src_off))
        ns.append(n)
    row = int(used.max()) + 8
    vals = rng.standard_normal((n_tiles, row // isz)).astype(np.float32) * 8
    pick = rng.random(vals.shape)
    bits = vals.view(np.uint32)
    bits[pick < 0.02] = 0x7FC00000 | 0x1234     # quiet NaN with a payload
    bits[(pick >= 0.02) & (pick < 0.04)] = 0x80000000        # -0
    bits[(pick >= 0.04) & (pick < 0.06)] = 0x7F800000        # +inf
    # one NaN payload and no -inf (inf - inf is the default NaN): which operand's payload
    # NaN + NaN keeps is not something NumPy and the kernel need agree on
    data = np.zeros((n_tiles, row), np.uint8)
    data[:, :row // isz * isz] = vals.astype(in_dt).view(np.uint8)
    want = data.copy()
    for v in range(V):
        n = ns[v]
        srcs = [data[src_row[k], src_off[k]:src_off[k] + n * isz].view(in_dt).astype(np.float32)
                for k in range(ptr[v], ptr[v + 1])]
        # the fp32 kernel starts from source 0, the others from +0 (so -0 + -0... is +0)
        acc = srcs[0] if in_dt == out_dt == "float32" else np.float32(0) + srcs[0]
        with np.errstate(invalid="ignore", over="ignore"):
            for s in srcs[1:]:
                acc = acc + s      # float32 + float32: one IEEE rounding per addition
            acc = acc.astype(out_dt)
        want[tiles[v], out_off[v]:out_off[v] + n * osz] = acc.view(np.uint8)
    got = data.copy()
    t32, o64 = np.array(tiles, np.int32), np.array(out_off, np.int64)
    p64, n64 = np.array(ptr, np.int64), np.array(ns, np.int64)
    codes = _vertices.DTYPE_CODES
    if fn == "sum_rows":
        _vertices.sum_rows(got, t32, o64, p64, np.array(src_off, np.int64), n64,
                           codes[in_dt], codes[out_dt], n_threads)
    else:
        _vertices.sum_rows_from(got, t32, o64, p64, np.array(src_row, np.int32),
                                np.array(src_off, np.int64), n64, codes[in_dt], codes[out_dt],
                                n_threads)
    if out_dt == "float32":
        assert np.array_equal(got, want)
    else:   # fp16 NaNs: compared as NaNs (payloads of a narrowing conversion aside)
        g, w = got.view(np.float16), want.view(np.float16)
        assert np.array_equal(g, w, equal_nan=True)
        same = ~np.isnan(w)
        assert np.array_equal(got.view(np.uint16)[same], want.view(np.uint16)[same])
