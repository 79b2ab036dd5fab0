"""In-channel splits beyond 16 with PopLibs' multi-stage reduction (ConvReducePlan.cpp):
the stage rule, the reduce-scatter tree built from it, executed against NumPy, and the
planner choosing deep splits for large-K matmuls.

fp16 bounds as in tests/ops/test_matmul.py; with half partials every reduction stage
rounds its sums to fp16 once more, so the bound grows by one 2^-11 * sum|a*b| per stage.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ipukern as ik
from ipukern.conv import ConvParams, ConvPlan, Split, build_conv_program, plan_conv, search
from ipukern.ops.matmul import matmul_conv_params
from ipukern.conv.estimators import candidate_methods
from ipukern.core.tensor import split_candidates
from ipukern.conv.reduce import (planner_tries_depth, poplibs_reduce_plan, poplibs_stage_depths,
                                 reduce_stages, stage_range)

from tests._support.conv_runs import GC200_128, run_plan

U = 2.0 ** -11


# --------------------------------------------------------------------------- the stage rule
def test_poplibs_stage_counts_and_depths():
    # 1 stage below 16, 2 from 16, 3 from 125; intermediate depth ~ R^((n-1)/n), rounded
    # the way that gives fewer messages (R/d + d), ties rounding up
    assert poplibs_reduce_plan(15) == ()
    assert poplibs_reduce_plan(16) == (4,)           # 16/4 + 4 = 8 < 16/5 + 5 = 8.2
    assert poplibs_reduce_plan(20) == (5,)           # 20/4 + 4 = 9 = 20/5 + 5: rounds up
    assert poplibs_reduce_plan(124) == (11,)         # 124/11 + 11 = 22.27 < 124/12 + 12
    assert len(poplibs_reduce_plan(125)) == 2
    assert poplibs_stage_depths(16) == (4, 4)
    assert poplibs_stage_depths(20) == (4, 5)        # ceil(20/5) = 4, then ceil(20/4) = 5
    assert poplibs_stage_depths(17) == (5, 4)        # overshoots: 5 x 4 = 20 > 17
    assert poplibs_stage_depths(1000) == (10, 10, 10)


def test_executed_stages_multiply_to_the_depth():
    assert reduce_stages(16) == (4, 4)               # PopLibs' own when exact
    assert reduce_stages(1000) == (10, 10, 10)
    assert reduce_stages(17) == (17,)                # prime: one stage (never planned)
    assert reduce_stages(32) == (4, 8)               # PopLibs' 6 x 6 overshoots; 4 + 8 = 12
    assert not planner_tries_depth(17) and planner_tries_depth(32) and planner_tries_depth(8)
    for r in range(1, 2000):
        stg = reduce_stages(r)
        assert math.prod(stg) == r and len(stg) <= len(poplibs_stage_depths(r))
        if r >= 16 and planner_tries_depth(r):
            assert len(stg) == len(poplibs_stage_depths(r))


@given(P=st.integers(0, 5000), R=st.integers(1, 600))
@settings(max_examples=60, deadline=None)
def test_stage_ranges_nest_and_partition(P, R):
    stg = reduce_stages(R)
    ii = np.arange(R)
    prev_lo, prev_hi = stage_range(P, ii, stg, 0)
    for s in range(1, len(stg) + 1):
        lo, hi = stage_range(P, ii, stg, s)
        assert np.all(prev_lo <= lo) and np.all(hi <= prev_hi) and np.all(lo <= hi)
        prev_lo, prev_hi = lo, hi
    # the final ranges partition [0, P) and are balanced
    cover = np.zeros(P, dtype=np.int64)
    for a, b in zip(prev_lo, prev_hi):
        cover[a:b] += 1
    assert np.all(cover == 1)
    assert (prev_hi - prev_lo).max() - (prev_hi - prev_lo).min() <= len(stg)


# --------------------------------------------------------------------------- executed trees
@given(R=st.sampled_from([2, 5, 16, 18, 20, 24, 30, 32, 36, 45, 64, 125]),
       cols=st.integers(1, 2), out=st.integers(1, 24), width=st.integers(1, 40),
       half=st.booleans())
@settings(max_examples=20, deadline=None)
def test_reduce_tree_equals_numpy(R, cols, out, width, half):
    if R * cols > GC200_128.n_tiles:
        cols = 1
    dtype = "float16" if half else "float32"
    grain = 16 if half else 8
    p = ConvParams(batch=1, in_channels=grain * R + 3, out_channels=out, in_h=1, in_w=width,
                   kernel_h=1, kernel_w=1, dtype=dtype)
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=R, cols=min(cols, width)))
    assert len(plan.reduction_stages) == len(reduce_stages(R))
    if half:
        assert np.all(np.abs(y - ref) <= U * np.abs(ref) + 1e-6 * mag + 1e-7)
    else:
        assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30)
    # one reduction superstep per stage (the first stage's exchange rides the conv's)
    assert sum(r.category == "reduction" for r in run.supersteps) == len(plan.reduction_stages)


def test_serial_slices_with_a_three_stage_reduction():
    # 125 in-chan tiles (5 x 5 x 5) and 3 serial out-chan slices: each slice runs its
    # intermediate stages right after its conv superstep, the last stage with the next conv
    p = ConvParams(batch=1, in_channels=8 * 125, out_channels=48, in_h=1, in_w=12,
                   kernel_h=1, kernel_w=1)
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=125), serial=3)
    assert plan.reduction_stages == (5, 5, 5)
    assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30)
    names = [s.name for s in cp.program.steps]
    assert names.count("reduce stage 1 slice 0") == 1 and "reduce stage 2 slice 2" in names


def test_half_partials_round_once_per_stage():
    p = ConvParams(batch=1, in_channels=16 * 64, out_channels=16, in_h=1, in_w=24, kernel_h=1,
                   kernel_w=1, dtype="float16", partials="half")
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=64))
    assert plan.reduction_stages == (8, 8)
    n = len(plan.reduction_stages)
    assert np.all(np.abs(y - ref) <= U * np.abs(ref) + ((n + 1) * U + 1e-6) * mag + 1e-7)


def test_stage_exchanges_by_hand():
    # R = 16 = 4 x 4, 8 x 1 block of outputs per tile (P = 8 fp32 partials, 32 B): stage 1
    # cuts P into 4 parts of 2 and each tile receives 3 x 2 x 4 B = 24 B; stage 2 cuts each
    # part into 4 (0 or 1 outputs: 2 = 0 + 1 + 0 + 1) and a tile receives 3 x 1 x 4 B = 12 B
    M = ik.GC200.replace(n_tiles=16, exchange_bytes_per_cycle=4.0, exchange_overhead_cycles=100)
    p = ConvParams(batch=1, in_channels=8 * 16, out_channels=8, in_h=1, in_w=1, kernel_h=1,
                   kernel_w=1)
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=16), machine=M)
    steps = cp.program.steps
    assert [s.name for s in steps] == ["exchange inputs and weights", "conv", "reduce stage 1",
                                       "reduce"]
    x1, x2 = steps[1].exchange, steps[2].exchange
    assert int(x1.recv_bytes[:16].max()) == 24 and int(x1.recv_bytes[:16].min()) == 24
    assert int(x2.recv_bytes[:16].max()) == 12 and int(x2.recv_bytes[:16].min()) == 0
    assert x1.transfer_cycles == 24 // 4 and x2.transfer_cycles == 12 // 4
    assert np.all(np.abs(y - ref) <= 1e-5 * mag + 1e-30)
    # every profile category sums to the total
    prof = run
    assert sum(prof.breakdown().values()) == prof.total_cycles


# --------------------------------------------------------------------------- the planner
def _cap16(n_grains, T):
    return split_candidates(n_grains, 16)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_large_k_matmul_plans_a_deep_split_and_runs(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 65536)).astype(dtype)
    b = rng.standard_normal((65536, 64)).astype(dtype)
    run = ik.matmul(a, b)
    plan = plan_conv(matmul_conv_params(a.shape, b.shape, dtype), ik.GC200)
    assert plan.split.in_chans > 16 and len(plan.reduction_stages) >= 2
    assert "stages" in run.profile.info["plan"]
    ref = a.astype(np.float64) @ b.astype(np.float64)
    mag = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    out = run.output.astype(np.float64)
    if dtype == "float32":
        assert np.all(np.abs(out - ref) <= 1e-5 * mag + 1e-30)
    else:
        assert np.all(np.abs(out - ref) <= U * np.abs(ref) + 1e-6 * mag + 1e-7)
    assert ik.estimate_matmul(a.shape, b.shape, dtype=dtype).total_cycles == run.profile.total_cycles


def test_deep_split_beats_the_old_cap_of_16(monkeypatch):
    # (64, 65536) @ (65536, 64) fp16: with at most 16 in-chan tiles each tile holds 4096
    # in-chans and only HMAC fits (56k cycles); a 3-stage reduction over 342 in-chan tiles
    # lets AMP run on 192 in-chans per tile (15k cycles)
    shape_a, shape_b = (64, 65536), (65536, 64)
    ik.clear_plan_cache()
    new = ik.estimate_matmul(shape_a, shape_b, dtype="float16")
    monkeypatch.setattr(search, "in_chan_splits", _cap16)
    ik.clear_plan_cache()
    old = ik.estimate_matmul(shape_a, shape_b, dtype="float16")
    ik.clear_plan_cache()
    assert "HMAC" in old.info["method"] and "AMP" in new.info["method"]
    assert old.total_cycles / new.total_cycles > 3.0, (old.total_cycles, new.total_cycles)


def test_deep_split_search_is_bounded():
    # K = 2^31 in-chans: a few dozen in-chan splits, not one per tile
    splits = search.in_chan_splits(2 ** 27, 1472)
    assert splits.max() >= 1000 and len(splits) < 40
    assert all(s < 16 or planner_tries_depth(int(s)) for s in splits)


def _conv_ref(x, w, pad):
    """float64 direct conv (stride 1, groups 1) and the same with |x|, |w|."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    ho, wo = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, k, ho, wo))
    mag = np.zeros_like(out)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + ho, j:j + wo]
            out += np.einsum("nchw,kc->nkhw", win, w[:, :, i, j].astype(np.float64))
            mag += np.einsum("nchw,kc->nkhw", np.abs(win), np.abs(w[:, :, i, j]).astype(np.float64))
    return out, mag


@pytest.mark.parametrize("R, rows, out_split", [(20, 2, 2), (27, 1, 2), (36, 3, 1)])
def test_3x3_conv_with_halos_and_a_staged_reduction(R, rows, out_split):
    p = ConvParams(batch=2, in_channels=8 * R + 5, out_channels=32, in_h=7, in_w=6, kernel_h=3,
                   kernel_w=3, padding=1)
    amp = next(c for c in candidate_methods(GC200_128, p.dtype, p.partials, p.in_per_group,
                                            p.out_per_group, p.kernel_w, p.stride[1])
               if c.method == "AMP")
    split = Split(in_chans=R, rows=rows, out_chans=out_split, in_grain=amp.in_chans_per_group,
                  out_grain=amp.out_chans_per_group)
    plan = ConvPlan(params=p, machine=GC200_128, method=amp, split=split, serial=1, bias=True,
                    estimated_cycles=0, estimated_bytes_per_tile=0)
    cp = build_conv_program(plan)
    rng = np.random.default_rng(R)
    x = rng.standard_normal(p.input_shape).astype(np.float32)
    w = rng.standard_normal(p.weight_shape).astype(np.float32)
    b = rng.standard_normal(p.out_channels).astype(np.float32)
    cp.write_inputs(x, w, b)
    run = cp.device.run(cp.program, "execute")
    assert cp.device.run(cp.program, "estimate").total_cycles == run.total_cycles
    ref, mag = _conv_ref(x, w, 1)
    y = cp.device.read(cp.y).astype(np.float64)
    assert np.all(np.abs(y - ref - b[None, :, None, None]) <= 1e-5 * (mag + np.abs(b)[None, :, None, None]))
    assert sum(run.breakdown().values()) == run.total_cycles


def test_outputs_are_exchanged_only_where_the_consumer_wants_them_elsewhere():
    # Issue 10 item 4: a conv's outputs stay where its last reduction stage leaves them, and
    # are exchanged (and charged) only into a layout that wants them elsewhere. R = 16 in-chan
    # tiles reduce P = 8 fp32 outputs in 4 x 4 stages: stage 1 gives each tile 2 of them,
    # stage 2 splits those 2 into 0, 1, 0, 1, so 8 of the 16 tiles hold one output each
    # and tile 0 holds none.
    from ipukern.core.tensor import TileMapping
    from ipukern.nn.layout import Layout, Rearrangement
    M = ik.GC200.replace(n_tiles=16, exchange_bytes_per_cycle=4.0, exchange_overhead_cycles=100)
    p = ConvParams(batch=1, in_channels=8 * 16, out_channels=8, in_h=1, in_w=1, kernel_h=1,
                   kernel_w=1)
    plan, cp, run, y, ref, mag = run_plan(p, Split(in_chans=16), machine=M)
    held = np.bincount(cp.y.mapping.tile, weights=cp.y.mapping.count, minlength=16)
    assert held.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    out = Layout(p.output_shape, "float32", cp.y.mapping, offsets=cp.y.offset)
    # the conv's own output layout (what a consumer planned on it reads): no exchange
    assert Rearrangement(M, out, out).cycles == 0
    # a consumer wanting all 8 outputs on tile 0: it receives 8 x 4 B = 32 B -> 8 cycles
    # plus the exchange overhead; the producing tiles each send 4 B
    on0 = Layout(p.output_shape, "float32", TileMapping(8, np.array([0]), np.array([0]),
                                                         np.array([8])))
    r = Rearrangement(M, out, on0)
    assert int(r.recv_bytes[0]) == 32 and r.cycles == 32 // 4 + 100
    rec = r.record()
    assert rec.exchange_cycles + rec.sync_cycles == r.cycles + M.sync_cycles
