"""Kernel splits (PopLibs' kernelSplit along the kernel rows): each tile convolves a block of
kernel rows over the whole kernel's window, and the partial sums of the in-chan x
kernel-block tiles are reduced like an in-channel split. Results equal the float64 NumPy
reference and torch, estimate == execute, a one-tile-per-block case costs what hand
arithmetic says, and the planner picks a split exactly where its cost wins (error bounds:
``reference.check_conv``).
"""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import ipukern as ik
from ipukern.conv import ConvParams, build_conv_program, plan_conv, search
from ipukern.conv.estimators import TileConv, conv_vertex_cycles

from tests._support.reference import check_conv as check, conv2d_nchw, conv_operands

M = ik.GC200
SMALL = ik.GC200.replace(n_tiles=96, name="GC200-96")


def executed(plan, x, w, bias=None):
    """The output of ``plan`` run on x, w, after checking that its estimate mode costs
    what its execute mode does."""
    prog = build_conv_program(plan)
    prog.write_inputs(x, w, bias)
    cycles = prog.device.run(prog.program, "execute").total_cycles
    assert prog.device.run(prog.program, "estimate").total_cycles == cycles
    return prog.device.read(prog.y)


CASES = [
    # x, w, stride, padding, dilation, groups, kernel split
    ((2, 8, 9, 9), (8, 8, 3, 3), 1, 1, 1, 1, 3),          # one kernel row per tile
    ((2, 8, 9, 9), (8, 8, 3, 3), 1, 1, 1, 1, 2),          # uneven blocks: 2 + 1 rows
    ((3, 24, 8, 13), (24, 1, 3, 3), 1, 1, 1, 24, 3),      # depthwise
    ((2, 32, 7, 7), (32, 1, 5, 5), 1, 2, 1, 32, 5),       # depthwise 5x5 on 7x7 (zoo-like)
    ((2, 16, 10, 7), (16, 8, 3, 3), 1, 1, 1, 2, 3),       # grouped, non-square
    ((2, 16, 12, 12), (16, 2, 3, 3), 1, 2, 2, 8, 3),      # dilation 2, padding 2
    ((1, 3, 31, 29), (16, 3, 7, 7), 2, 3, 1, 1, 4),       # 7x7 stem, stride 2, 2+2+2+1
    ((1, 8, 9, 9), (8, 8, 4, 5), (2, 1), (0, 2), 1, 1, 2),  # rectangular kernel and stride
    ((2, 20, 9, 9), (40, 20, 3, 3), 3, 0, 1, 1, 3),       # stride 3 = kernel span
    ((1, 4, 10, 10), (8, 4, 2, 2), 3, 1, 1, 1, 2),        # stride 3 > kernel span 2
    ((1, 8, 4, 6), (8, 8, 5, 3), 1, 3, 1, 1, 5),          # padding > kernel/2: rows of only padding
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"x{c[0]}w{c[1]}k{c[6]}")
def test_forced_kernel_split_matches_reference(case, dtype):
    xs, ws, s, pd, d, g, k = case
    x, w, b = conv_operands(xs, ws, dtype, seed=1)
    p = ConvParams.from_shapes(xs, ws, stride=s, padding=pd, dilation=d, groups=g, dtype=dtype)
    plan = plan_conv(p, SMALL, bias=True, kernel_split=k)
    assert plan.kernel_split == k and plan.split.kernel_rows == k and not plan.expand_dims
    assert plan.reduction_depth == plan.split.in_chans * k
    assert f"kernel rows {k}" in plan.describe() and plan.to_dict()["kernel_split"] == k
    check(x, w, executed(plan, x, w, b), dtype, b, stride=s, padding=pd, dilation=d, groups=g)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 2), g=st.integers(1, 3), cig=st.integers(1, 5), cog=st.integers(1, 4),
       h=st.integers(2, 12), w=st.integers(2, 12), kh=st.integers(2, 5), kw=st.integers(1, 4),
       sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 2), pw=st.integers(0, 2),
       dh=st.integers(1, 2), dw=st.integers(1, 2), k=st.integers(2, 5), half=st.booleans(),
       seed=st.integers(0, 9))
def test_kernel_split_on_random_shapes(n, g, cig, cog, h, w, kh, kw, sh, sw, ph, pw, dh, dw, k,
                                       half, seed):
    assume(k <= kh)
    assume((kh - 1) * dh + 1 <= h + 2 * ph and (kw - 1) * dw + 1 <= w + 2 * pw)
    dtype = "float16" if half else "float32"
    p = ConvParams(n, g * cig, g * cog, h, w, kh, kw, stride=(sh, sw), padding=(ph, pw),
                   dilation=(dh, dw), groups=g, dtype=dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(p.input_shape).astype(dtype)
    wt = rng.standard_normal(p.weight_shape).astype(dtype)
    out = executed(plan_conv(p, SMALL, kernel_split=k), x, wt)
    check(x, wt, out, dtype, stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=g)


def test_one_tile_per_kernel_row_costs_what_hand_arithmetic_says():
    """1 image, 1 channel, 5x5, 3x3 kernel, padding 1, on 3 tiles split 3 ways over the
    kernel rows: tile r convolves kernel row r over the whole 5x5 window (read from row
    r - 1, the first one padding), tile 0 owns the input and broadcasts it (100 B, sent
    once), each tile holds its own kernel row (no weight exchange), and the 25 fp32
    partials are reduce-scattered (each tile receives 2 pieces of its 8-9 outputs)."""
    three = ik.GC200.replace(n_tiles=3, name="GC200-3")
    p = ConvParams(1, 1, 1, 5, 5, 3, 3, padding=(1, 1))
    plan = plan_conv(p, three, kernel_split=3)
    s = plan.split
    assert (s.n_tiles, s.kernel_rows, s.in_chans, plan.reduction_stages) == (3, 3, 1, (3,))
    prog = build_conv_program(plan)
    geo = prog.geometry
    assert geo.kr0.tolist() == [0, 1, 2] and geo.KH.tolist() == [1, 1, 1]
    assert geo.WR.tolist() == [5, 5, 5] and geo.row_org.tolist() == [-1, 0, 1]
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5) - 12
    w = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) - 4
    prog.write_inputs(x, w)
    prof = prog.device.run(prog.program, "execute")
    np.testing.assert_array_equal(prog.device.read(prog.y), conv2d_nchw(x, w, padding=1))
    steps = {r.name: r for r in prof.supersteps}
    # inputs: tiles 1 and 2 each receive the 5x5 fp32 window (2 x 100 B); weights stay home
    assert steps["exchange inputs and weights"].bytes_exchanged == 200
    # partials: each tile receives its range from the 2 others: 2 x 25 x 4 B in all
    assert steps["conv"].bytes_exchanged == 200
    # every tile runs the vertex of a 1x3 kernel over 5x5 outputs
    want = conv_vertex_cycles(three, plan.method, TileConv(
        conv_groups=1, in_chans=1, out_chans=1, batch=1, out_h=5, out_w=5, kernel_h=1,
        kernel_w=3)).cycles
    assert steps["conv"].compute_cycles == want
    assert plan.breakdown["compute"] == want
    # the reduce: 3 partials of at most 9 outputs each, fp32 -> fp32
    assert "reduce 3 partials of 9 outputs" in steps["reduce"].compute_why


def test_kernel_split_argument_is_checked():
    p = ConvParams(1, 4, 4, 6, 6, 3, 3)
    for bad in (0, 4, 1.5, True, "2"):
        with pytest.raises(ValueError, match="kernel_split"):
            plan_conv(p, SMALL, kernel_split=bad)
    with pytest.raises(ValueError, match="expandDims"):
        plan_conv(p, SMALL, kernel_split=2, expand_dims="h")
    assert plan_conv(p, SMALL, kernel_split=1).kernel_split == 1


# zoo layers at batch 8, fp16, float partials (bench/zoo_transforms.py): where a kernel
# split wins and where it does not
ZOO = [
    ((8, 1152, 7, 7), (1152, 1, 5, 5), 1, 2, 1152, True),   # EfficientNet-B0 features.6.1
    ((8, 64, 56, 56), (64, 1, 3, 3), 1, 1, 64, False),      # MobileNet v1 conv_dw_2-like
    ((8, 256, 14, 14), (256, 256, 3, 3), 1, 1, 1, False),   # ResNet-50 layer3 conv2
]


@pytest.mark.parametrize("x, w, s, pad, g, wins", ZOO)
def test_planner_picks_kernel_split_exactly_where_it_wins(x, w, s, pad, g, wins):
    p = ConvParams.from_shapes(x, w, stride=s, padding=pad, groups=g, dtype="float16",
                               partials="float")
    chosen = plan_conv(p, M, expand_dims="")
    without = plan_conv(p, M, expand_dims="", kernel_split=1)
    forced = [plan_conv(p, M, expand_dims="", kernel_split=k) for k in range(2, p.kernel_h + 1)]
    best = min(forced, key=lambda q: q.estimated_cycles)
    assert (chosen.kernel_split > 1) == wins
    assert (best.estimated_cycles < without.estimated_cycles * (1 - search.NEAR_TIE)) == wins
    assert chosen.estimated_cycles == min(without.estimated_cycles, best.estimated_cycles)
    if wins:
        prog = build_conv_program(chosen)
        assert prog.device.run(prog.program, "estimate").total_cycles == chosen.estimated_cycles


def test_switch_off_plans_without_kernel_splits(monkeypatch):
    p = ConvParams.from_shapes(*ZOO[0][:2], stride=1, padding=2, groups=1152, dtype="float16",
                               partials="float")
    monkeypatch.setattr(search, "KERNEL_SPLITS", False)
    assert plan_conv(p, M).kernel_split == 1


def test_conv2d_reports_kernel_split_and_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 1152, 7, 7)).astype(np.float16)
    w = rng.standard_normal((1152, 1, 5, 5)).astype(np.float16)
    run = ik.conv2d(x, w, padding=2, groups=1152, partials="float")
    assert run.plan.kernel_split > 1
    assert run.profile.info["kernel_split"] == run.plan.kernel_split
    assert "kernel rows" in run.profile.info["plan"]
    # torch's float64 depthwise conv2d is ~20 s here (no fast double path); the same
    # sums in float64 by torch's unfold + einsum take 0.5 s (equal bits at batch 1)
    cols = torch.nn.functional.unfold(torch.tensor(x, dtype=torch.float64), 5, padding=2)
    ref = torch.einsum("ncke,ck->nce", cols.view(8, 1152, 25, 49),
                       torch.tensor(w, dtype=torch.float64).view(1152, 25)).view(8, 1152, 7, 7).numpy()
    check(x, w, run.output, "float16", padding=2, groups=1152)
    assert np.all(np.abs(run.output.astype(np.float64) - ref)
                  <= 2.0 ** -11 * np.abs(ref) + 1e-6 * conv2d_nchw(np.abs(x), np.abs(w), padding=2,
                                                                     groups=1152) + 1e-7)
    est = ik.estimate_conv2d(x.shape, w.shape, dtype="float16", padding=2, groups=1152,
                             partials="float")
    assert est.total_cycles == run.profile.total_cycles
