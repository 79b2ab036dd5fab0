"""Conv data layout: after the first exchange every tile's window and weights hold exactly
the input and weight slices its outputs need (checked with NumPy slicing, no conv kernel)."""
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

import ipukern as ik
from ipukern.conv.estimators import candidate_methods
from ipukern.conv.layout import Split, split_ranges
from ipukern.conv import ConvParams, ConvPlan, build_conv_program


def make_plan(params, split, serial=1, bias=False, machine=ik.GC200):
    amp = [c for c in candidate_methods(machine, params.dtype, params.partials, params.in_per_group,
                                        params.out_per_group, params.kernel_w, params.stride[1])
           if c.method == "AMP"][0]
    return ConvPlan(params=params, machine=machine, method=amp, split=split, serial=serial,
                    bias=bias, estimated_cycles=0, estimated_bytes_per_tile=0)


def arena_view(dev, tile, off, n, dtype):
    itemsize = np.dtype(dtype).itemsize
    return dev.arena.data[tile, off:off + n * itemsize].view(dtype)


def check_first_exchange(params, split, serial=1, seed=0):
    rng = np.random.default_rng(seed)
    plan = make_plan(params, split, serial)
    cp = build_conv_program(plan)
    dev, geo = cp.device, cp.geometry
    x = rng.standard_normal(params.input_shape).astype(params.dtype)
    w = rng.standard_normal(params.weight_shape).astype(params.dtype)
    cp.write_inputs(x, w)
    np.testing.assert_array_equal(dev.read(cp.x), x.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(dev.read(cp.w), w)
    first = dev.program(cp.program.steps[:1])
    dev.run(first)
    win_alloc = next(a for a in dev.memory.allocations if a.name == "conv.window")
    w_alloc = next(a for a in dev.memory.allocations if a.name == "conv.weights")
    cig, cog = params.in_per_group, params.out_per_group
    for t in range(geo.n_tiles):
        g0, g1, c0, c1 = (int(v[t]) for v in (geo.g0, geo.g1, geo.c0, geo.c1))
        chans = np.concatenate([np.arange(g * cig + c0, g * cig + c1) for g in range(g0, g1)])
        want = x[geo.n0[t]:geo.n1[t]][:, chans][:, :, geo.wr0[t]:geo.wr1[t], geo.wc0[t]:geo.wc1[t]]
        want = want.transpose(0, 2, 1, 3)                       # [B][WR][G*C][WC]
        got = arena_view(dev, t, int(win_alloc.offsets[t]), want.size, params.dtype)
        np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=f"window of tile {t}")
        # weights of slice 0: [G][K_0][C][kh][kw]
        ng = -(-int(geo.K[t]) // split.out_grain)
        k_end = min((ng // serial) * split.out_grain, int(geo.K[t])) if serial > 1 else int(geo.K[t])
        outs = np.concatenate([np.arange(g * cog + geo.k0[t], g * cog + geo.k0[t] + k_end)
                               for g in range(g0, g1)])
        want_w = w[outs][:, c0:c1]
        got_w = arena_view(dev, t, int(w_alloc.offsets[t]), want_w.size, params.dtype)
        np.testing.assert_array_equal(got_w, want_w.ravel(), err_msg=f"weights of tile {t}")


@pytest.mark.parametrize("shape, conv, split", [
    # halos from the next row block, out-chan replication, batch split
    ((2, 8, 10, 12), dict(w=(8, 8, 3, 3), padding=1), Split(batch=2, rows=4, out_chans=3)),
    # column split with halos on both axes, groups and in-chan split
    ((1, 12, 9, 11), dict(w=(6, 4, 3, 3), padding=1, groups=3), Split(groups=3, in_chans=2, rows=3, cols=3)),
    # stride larger than the kernel span: input rows nobody reads still have a home
    ((1, 4, 13, 13), dict(w=(4, 4, 1, 1), stride=3), Split(rows=3, cols=2, out_chans=2)),
    # dilation, big kernel, more row blocks than the kernel spans
    ((2, 6, 16, 9), dict(w=(6, 3, 5, 3), padding=(2, 1), dilation=(2, 1), groups=2),
     Split(groups=2, rows=6, cols=2, out_chans=3)),
    # depthwise
    ((3, 16, 7, 7), dict(w=(16, 1, 3, 3), padding=1, groups=16), Split(groups=8, batch=3, rows=7)),
])
def test_windows_and_weights_after_first_exchange(shape, conv, split):
    w = conv.pop("w")
    p = ConvParams.from_shapes(shape, w, **conv)
    check_first_exchange(p, split)


def test_serial_slices_weights():
    p = ConvParams.from_shapes((1, 8, 6, 6), (32, 8, 3, 3), padding=1)
    check_first_exchange(p, Split(rows=2, out_chans=2, out_grain=1), serial=4)


@given(n=st.integers(1, 3), cpg=st.integers(1, 4), g=st.integers(1, 3), h=st.integers(3, 12),
       wid=st.integers(3, 12), k=st.sampled_from([1, 2, 3, 5]), s=st.integers(1, 3),
       pad=st.integers(0, 2), d=st.integers(1, 2), seed=st.integers(0, 10**6))
def test_random_layouts(n, cpg, g, h, wid, k, s, pad, d, seed):
    if d * (k - 1) + 1 > h + 2 * pad or d * (k - 1) + 1 > wid + 2 * pad:
        return
    p = ConvParams.from_shapes((n, cpg * g, h, wid), (2 * g, cpg, k, k), stride=s, padding=pad,
                               dilation=d, groups=g)
    rng = np.random.default_rng(seed)
    split = Split(groups=int(rng.integers(1, g + 1)), in_chans=int(rng.integers(1, cpg + 1)),
                  batch=int(rng.integers(1, n + 1)), rows=int(rng.integers(1, p.out_h + 1)),
                  cols=int(rng.integers(1, p.out_w + 1)), out_chans=int(rng.integers(1, 3)))
    assume(split.n_tiles <= ik.GC200.n_tiles)     # a split the machine can hold
    check_first_exchange(p, split, seed=seed)


def test_a_split_larger_than_the_machine_is_refused():
    p = ConvParams.from_shapes((3, 9, 12, 12), (6, 3, 1, 1), padding=2, groups=3)
    split = Split(groups=3, in_chans=3, batch=3, rows=14, cols=4, out_chans=1)
    with pytest.raises(ValueError, match="needs 1512 tiles"):
        build_conv_program(make_plan(p, split, 1))


def test_split_ranges():
    a, b = split_ranges(10, 3)
    assert list(a) == [0, 3, 6] and list(b) == [3, 6, 10]
    a, b = split_ranges(10, 2, grain=4)          # 3 grains -> 1 and 2 grains
    assert list(a) == [0, 4] and list(b) == [4, 10]
    with pytest.raises(ValueError):
        split_ranges(3, 4)
