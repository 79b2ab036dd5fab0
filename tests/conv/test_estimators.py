"""Per-tile conv vertex cycle estimators: hand-computed values, the reference note's worked
numbers (shared/reference/poplibs-planner.md §3.10, §4.3), limits and edge cases.

Notation in the hand derivations: W_i = worker i's cycles, K = max(6*max W, 6*min W + tag),
IG/OG/CG = in/out/conv group blocks on the tile, wl = weight-load cycles.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from ipukern.conv.estimators import (
    TileConv, VertexMethod, amp_1x1_cycles, amp_nx1_cycles, amp_uses_1x1, candidate_methods,
    cast_cycles, combine_group_factors, conv_vertex_cycles, conv_vertex_cycles_array,
    hmac_cycles, reduce_cycles, slic_cycles, useful_macs, vertex_cycles_lower_bound, vmac_cycles,
    worker_segments, zeroing_cycles,
)
from ipukern.machine import GC2, GC200

HF8 = VertexMethod("AMP", "half", "float", 1, 16, 8, conv_units=8)
HH16 = VertexMethod("AMP", "half", "half", 1, 16, 16, conv_units=16)
FF16 = VertexMethod("AMP", "float", "float", 1, 8, 16, conv_units=16)
FF8 = VertexMethod("AMP", "float", "float", 1, 8, 8, conv_units=8)


def slic(cgpg: int, chans: int, chains: int, partials: str = "half") -> VertexMethod:
    return VertexMethod("SLIC", "half", partials, cgpg, chans, chans, slic_chains=chains)


def rate(machine, method, tile, **kw) -> float:
    return useful_macs(tile) / conv_vertex_cycles(machine, method, tile, **kw).cycles


# --------------------------------------------------------------------------- worker split
def brute_segments(batch, out_h, out_w, n_workers):
    """Reference implementation of the worker split: walk every position."""
    n = batch * out_h * out_w
    out = []
    for i in range(n_workers):
        segs, run, prev_row = [], 0, None
        for p in range(i * n // n_workers, (i + 1) * n // n_workers):
            row = p // out_w
            if row != prev_row and run:
                segs.append(run)
                run = 0
            run, prev_row = run + 1, row
        out.append(segs + ([run] if run else []))
    return out


def test_worker_segments_8x8():
    # 64 positions: workers get [0,10) [10,21) [21,32) [32,42) [42,53) [53,64), cut at rows of 8
    assert worker_segments(1, 8, 8, 6) == [[8, 2], [6, 5], [3, 8], [8, 2], [6, 5], [3, 8]]


def test_worker_segments_edge_cases():
    assert worker_segments(1, 1, 1, 6) == [[], [], [], [], [], [1]]       # 1 position
    assert worker_segments(1, 1, 7, 6) == [[1], [1], [1], [1], [1], [2]]  # odd width
    assert worker_segments(2, 2, 3, 6) == [[2], [1, 1], [2], [2], [1, 1], [2]]  # batch 2
    assert worker_segments(1, 5, 7, 6) == [[5], [2, 4], [3, 3], [4, 2], [5, 1], [6]]


def test_worker_segments_closed_form_matches_walk():
    for b, h, w in itertools.product((1, 2, 3), (1, 2, 5, 13), (1, 2, 3, 7, 16)):
        assert worker_segments(b, h, w, 6) == brute_segments(b, h, w, 6), (b, h, w)


# --------------------------------------------------------------------------- AMP nx1
def test_amp_nx1_hand_derivation_8x8_half_float():
    # Ci = Co = 16, 3x3, 8 units, pcpg 8 -> IG 1, OG 2, weight height 1, 1 pass.
    # Segments [8,2],[6,5],[3,8] (x2). Entry cost = 3 + f(n) - 9 with f(2) = 33 + 1 (hf8
    # stride), f(n>=3) = 34 + 4(n-3): every worker is 17 + 48 + 28 = 17 + 40 + 36 = 17 + 28 + 48
    # = 93 -> K = max(558, 558 + 9) = 567.
    # wl = 8 units x 32 B / (16 / 2) B/cycle = 32; per load 32 + 15 + 3 = 50.
    # kernel loop = 3 x (14 + 3 x (12 + 50)) + 9 x 567 = 600 + 5103 = 5703.
    # supervisor: 109 + 6x9 + 6x9 + (2x17 + 6 + 1) + 1 = 259; + 16 + 14 + 2 x (14 + 5703) -> 11723
    # zeroing: 64 x 8 = 512 elems -> ceil(ceil(512/6)/2) + 5 = 48; x 6 workers x 2 groups = 576
    cost = conv_vertex_cycles(GC200, HF8, TileConv(1, 16, 16, 1, 8, 8, 3, 3))
    assert cost.cycles == 12299
    assert cost.vertex == "AMP nx1"
    assert dict(cost.breakdown) == {"weight_load": 18 * 32, "workers": 18 * 567,
                                    "zeroing": 576, "supervisor": 941}
    assert "9 kernel positions x 1 in-groups x 2 out-groups" in cost.why
    assert "64 positions over 6 workers, 4 cycles/position" in cost.why


@pytest.mark.parametrize("hw, hf8, hh16, ff16, ff8_mk1", [
    (8, 12299, 6877, 9031, 16727),
    (14, 24425, 13468, 20374, 38357),
    (28, 76649, 41932, 69844, 132593),
    (56, 271721, 148876, 261244, 496577),
])
def test_amp_nx1_worked_numbers(hw, hf8, hh16, ff16, ff8_mk1):
    # §3.10 dense table. The float columns are Ci = 8 (one 8-channel in-group), Co = 16: only
    # that reproduces the note's cycles *and* its MAC/cycle (e.g. 9031 cycles at 8.2 MAC/c is
    # 8 x 16 x 9 x 64 MACs), although the table header says Ci = Co = 16.
    t16 = TileConv(1, 16, 16, 1, hw, hw, 3, 3)
    t8 = TileConv(1, 8, 16, 1, hw, hw, 3, 3)
    assert amp_nx1_cycles(GC200, HF8, t16) == hf8
    assert amp_nx1_cycles(GC200, HH16, t16) == hh16
    assert amp_nx1_cycles(GC200, FF16, t8) == ff16
    assert amp_nx1_cycles(GC2, FF8, t8) == ff8_mk1
    assert round(useful_macs(t16) / hh16, 1) == {8: 21.4, 14: 33.5, 28: 43.1, 56: 48.5}[hw]


def test_amp_nx1_one_position():
    # 1 position -> only worker 5 busy: W = 17 + (3 + 29 - 9) = 40, idle W = 17,
    # K = max(240, 102 + 9) = 240. kernel loop = 600 + 9 x 240 = 2760.
    # 259 + 16 + 14 + 2 x (14 + 2760) = 5837; zeroing: 8 elems -> (1 + 5) x 12 = 72.
    assert amp_nx1_cycles(GC200, HF8, TileConv(1, 16, 16, 1, 1, 1, 3, 3)) == 5909


def test_amp_nx1_odd_width_half_half():
    # 5x7 output, 1x1 kernel (5 rows -> nx1). Segments [5],[2,4],[3,3],[4,2],[5,1],[6].
    # hh16: f(2) = 34; entry e(n) = f(n) - 6: e1 23, e2 28, e3 28, e4 32, e5 36, e6 40;
    # start 18 (half partials): W = 54, 78, 74, 78, 77, 58 -> K = max(468, 333) = 468.
    # wl = 16 x 32 / 8 = 64 -> per load 82; kernel loop = 14 + 12 + 82 + 468 = 576.
    # supervisor 109 + 54 + 60 + 18 + 1 = 242; + 16 + 14 + 14 + 576 = 862.
    # zeroing 35 x 16 = 560 -> ceil(94 / 2) + 5 = 52, x 6 = 312.
    tile = TileConv(1, 16, 16, 1, 5, 7, 1, 1)
    assert not amp_uses_1x1(HH16, tile)
    assert amp_nx1_cycles(GC200, HH16, tile) == 1174


def test_amp_nx1_batch_on_tile():
    # batch 2 x 3x5: 30 positions, each worker one row of 5: W = 17 + (3 + 42 - 9) = 53,
    # K = max(318, 327) = 327. kernel loop = 600 + 9 x 327 = 3543.
    # 259 + 30 + 2 x (14 + 3543) = 7403; zeroing 240 -> (20 + 5) x 12 = 300.
    tile = TileConv(1, 16, 16, 2, 3, 5, 3, 3)
    assert conv_vertex_cycles(GC200, HF8, tile).cycles == 7703
    # a batch on the tile rules the 1x1 vertex out even for a 1x1 kernel
    assert conv_vertex_cycles(GC200, HF8, TileConv(1, 16, 16, 2, 1, 5)).vertex == "AMP nx1"


def test_amp_nx1_7x7_kernel_weight_height_4():
    # icpg 4 -> weight height 16 / 4 = 4: kernel rows padded to 8, kOuter 2, kInner 7.
    # 6 positions, one each: W = 40, K = max(240, 249) = 249.
    # wl = 32 (height 4 halves the rate only above 8 B/cycle; it is already 8)
    # per load 32 + 60 + 3 = 95; kernel loop = 2 x (14 + 7 x 107) + 14 x 249 = 5012.
    # 109 + 108 + 17 + 1 + 1 = 236; + 16 + 14 + 14 + 5012 = 5292; zeroing 48 -> 9 x 6 = 54.
    m = VertexMethod("AMP", "half", "float", 1, 4, 8, conv_units=8)
    assert m.amp_weight_height == 4
    assert amp_nx1_cycles(GC200, m, TileConv(1, 4, 8, 1, 1, 6, 7, 7)) == 5346


def test_amp_stride_2_uses_nx1():
    # the 1x1 vertex needs stride 1 (PopLibs: input dilation == stride); the tile's output
    # size is already strided, so stride does not change the nx1 estimate itself
    t1 = TileConv(1, 16, 16, 1, 1, 24)
    t2 = TileConv(1, 16, 16, 1, 1, 24, stride=(2, 2))
    assert amp_uses_1x1(HF8, t1) and not amp_uses_1x1(HF8, t2)
    assert conv_vertex_cycles(GC200, HF8, t2).vertex == "AMP nx1"
    assert conv_vertex_cycles(GC200, HF8, t2).cycles == amp_nx1_cycles(GC200, HF8, t1)


# --------------------------------------------------------------------------- AMP 1x1
def test_amp_1x1_hand_derivation_w96():
    # K = 64 -> IG 4, M = 16 -> OG 2 (pcpg 8, 8 units). 16 positions per worker, common
    # path: zeroing 37 + 4 x 13 - 7 = 82, accumulating 38 + 52 - 7 = 83.
    # inner: zero max(492, 506) = 506, acc max(498, 512) = 512.
    # 50 + 6 x (7 + 3 x 3) = 146; 12 + 1 + 3 x (15 + 2 x (19 + 6 + 32 + 512))
    # + 11 + 2 x (18 + 7 + 32 + 506) = 4609 -> 4755
    cost = conv_vertex_cycles(GC200, HF8, TileConv(1, 64, 16, 1, 1, 96))
    assert cost.vertex == "AMP 1x1"
    assert cost.cycles == 4755


@pytest.mark.parametrize("width, hf8, hh16", [(96, 4755, 2613), (192, 7827, 4149),
                                              (768, 26259, 13365)])
def test_amp_1x1_worked_numbers(width, hf8, hh16):
    tile = TileConv(1, 64, 16, 1, 1, width)
    assert amp_1x1_cycles(GC200, HF8, tile) == hf8
    assert amp_1x1_cycles(GC200, HH16, tile) == hh16


def test_amp_1x1_one_position():
    # worker 5 alone: zeroing 31 + 1 - 7 = 25, acc 26; idle workers cost 0 so the tag term
    # gives max(150, 0 + 14) = 150 and 156.
    # 50 + 6 x 7 = 92; 12 + 1 + 11 + 2 x (18 + 7 + 32 + 150) = 438 -> 530
    assert amp_1x1_cycles(GC200, HF8, TileConv(1, 16, 16, 1, 1, 1)) == 530


def test_amp_1x1_rejects_nx1_tiles():
    with pytest.raises(ValueError, match="1x1 vertex"):
        amp_1x1_cycles(GC200, HF8, TileConv(1, 16, 16, 1, 2, 8))
    icpg8 = VertexMethod("AMP", "half", "float", 1, 8, 8, conv_units=8)  # weight height 2
    assert not amp_uses_1x1(icpg8, TileConv(1, 16, 16, 1, 1, 8))


# --------------------------------------------------------------------------- SLIC
GROUPED = TileConv(16, 1, 1, 1, 56, 56, 3, 3)   # 16 depthwise groups, 56x56, 3x3


@pytest.mark.parametrize("method, cycles, macs_per_cycle", [
    (slic(16, 1, 4), 41891, 10.8),
    (slic(8, 1, 4), 45664, 9.9),
    (slic(4, 1, 4), 53991, 8.4),
    (slic(4, 1, 2, "float"), 99567, 4.5),
])
def test_slic_depthwise_worked_numbers_literal(method, cycles, macs_per_cycle):
    # §3.10 grouped table, PopLibs' literal arithmetic
    assert slic_cycles(GC200, method, GROUPED, poplibs_literal=True) == cycles
    assert round(useful_macs(GROUPED) / cycles, 1) == macs_per_cycle


def test_slic_gt4_groups_default_repeats_zeroing_pass():
    # Default model: the zeroing pass also runs once per 4-group stride, so 16x1 / 8x1 are
    # 4x1 plus loop overhead. Difference to literal = (strides - 1) x one zeroing pass, plus
    # the sub-kernel loops of the extra conv-group blocks (next test): 16x1 has one block.
    assert slic_cycles(GC200, slic(16, 1, 4), GROUPED) == 55463
    assert slic_cycles(GC200, slic(8, 1, 4), GROUPED) == 55535    # 54712 + 823 (2 blocks)
    assert slic_cycles(GC200, slic(4, 1, 4), GROUPED) == 55083    # 53991 + 3 x 364 (4 blocks)
    # a 1-row kernel (one sub-kernel) shows why: PopLibs' literal 16x1 would beat the unit
    one_row = TileConv(16, 1, 1, 1, 56, 56, 1, 3)
    literal = rate(GC200, slic(16, 1, 4), one_row, poplibs_literal=True)
    assert literal > 16 > rate(GC200, slic(16, 1, 4), one_row)


@pytest.mark.parametrize("cpg, method, cycles", [
    (2, slic(2, 2, 4), 107631), (2, slic(2, 2, 2, "float"), 198783),
    (4, slic(1, 4, 4), 214614), (4, slic(1, 4, 2, "float"), 396918),
])
def test_slic_grouped_worked_numbers(cpg, method, cycles):
    # §3.10 is PopLibs' estimator, which loads SLIC weights once per sub-kernel: literal mode
    tile = TileConv(16, cpg, cpg, 1, 56, 56, 3, 3)
    assert slic_cycles(GC200, method, tile, poplibs_literal=True) == cycles
    assert round(useful_macs(tile) / cycles, 1) == {107631: 16.8, 198783: 9.1,
                                                   214614: 33.7, 396918: 18.2}[cycles]


def test_slic_weights_reload_per_conv_group_block():
    """The SLIC supervisor runs its sub-kernel loop (a weight load each) inside the conv-group
    block loop (ConvPartial1x4SLIC*.S), so every block after the first pays the sub-kernels
    again: (blocks - 1) x (sub-kernels x (weight load + body) + brnzdec(sub-kernels))."""
    # (1,4), 4 chains: 16 blocks of 1 group, 3x3 kernel = 3 sub-kernels of 1x4;
    # weight load 34 (4 chans), body 20, brnzdec(3) = 6 x 2 + 1 = 13 -> 3 x 54 + 13 = 175
    tile = TileConv(16, 4, 4, 1, 56, 56, 3, 3)
    hw, literal = (slic_cycles(GC200, slic(1, 4, 4), tile, poplibs_literal=lit) for lit in (False, True))
    assert hw - literal == 15 * 175
    # (4,1), 2 chains, float partials: 4 blocks; weight load 37 + 6 x 10 = 97, body 20:
    # 3 x 117 + 13 = 364 per extra block
    hw, literal = (slic_cycles(GC200, slic(4, 1, 2, "float"), GROUPED, poplibs_literal=lit)
                   for lit in (False, True))
    assert hw - literal == 3 * 364
    bd = conv_vertex_cycles(GC200, slic(4, 1, 2, "float"), GROUPED).breakdown
    assert bd["weight_load"] == 4 * 3 * 97
    # small depthwise fields pay it most: 11-15% of the vertex at 14x14 and 7x7
    for f, share in ((14, 0.11), (7, 0.15)):
        t = TileConv(16, 1, 1, 1, f, f, 3, 3)
        hw, literal = (slic_cycles(GC200, slic(4, 1, 4), t, poplibs_literal=lit) for lit in (False, True))
        assert (hw - literal) / hw == pytest.approx(share, abs=0.01)


def test_slic_stride_2_hand_derivation():
    # (4,1), 4 chains, half partials; 4 groups, 1x12 output, 1x3 kernel (1 sub-kernel).
    # 2 positions per worker: stride-2 row(2) = 7 + 5 + 3 = 15; segment = 10 + 1 (zeroing)
    # + 15 = 26; worker = 17 + 26 = 43 -> 6 x 43 = 258.
    # weights: 37 + 6 x 10 = 97; sub-kernel body 97 + 20 = 117.
    # 28 + 15 + 1 + 117 + 1 + 258 = 420
    tile = TileConv(4, 1, 1, 1, 1, 12, 1, 3, stride=(1, 2))
    assert slic_cycles(GC200, slic(4, 1, 4), tile) == 420
    with pytest.raises(ValueError, match="stride_w"):
        slic_cycles(GC200, slic(4, 1, 4), TileConv(4, 1, 1, 1, 1, 12, 1, 3, stride=(1, 3)))


def test_slic_needs_one_channel_group_and_16_units():
    with pytest.raises(ValueError, match="one in- and out-channel group"):
        slic_cycles(GC200, slic(4, 1, 4), TileConv(4, 2, 1, 1, 4, 4, 3, 3))
    with pytest.raises(ValueError, match="16 half->half conv units"):
        slic_cycles(GC2, slic(4, 1, 4), GROUPED)          # Mk1: 8 units, 2 chains only


# --------------------------------------------------------------------------- VMAC
def test_vmac_hand_derivation():
    # cgpg 4, float partials; 4 groups, 2x3 output (6 positions), 3x3 kernel.
    # 6 rows / 6 workers -> the busiest worker has 1 position x 3 kernel rows = 3 entries of 3
    # taps: W = 19 + 3 x (7 + 5 + 3 + 2 x 2) = 76 -> 456.
    # zero 4 + 6/2 = 7; reduction 10 - 1 + (7 + 2 + 2 x 5) x 1 // 4 = 13.
    # state retention 25 + 1 (float partials; poplibs 38f82620 fixed the old "= 1").
    # 61 + 14 + 26 + (7 + 32 + 24 + 456 + 13) = 633
    m = VertexMethod("VMAC", "half", "float", 4, 1, 1)
    cost = conv_vertex_cycles(GC200, m, TileConv(4, 1, 1, 1, 2, 3, 3, 3))
    assert cost.cycles == 633
    assert cost.breakdown["reduction"] == 13 and cost.breakdown["zeroing"] == 7


@pytest.mark.parametrize("cgpg, partials, cycles", [
    (4, "float", 733297), (4, "half", 651024), (8, "half", 587884), (16, "half", 585848)])
def test_vmac_depthwise_worked_range(cgpg, partials, cycles):
    # §3.10: "VMAC: 0.6-0.8" useful MACs/cycle for the 16-group 56x56 3x3 depthwise tile
    m = VertexMethod("VMAC", "half", partials, cgpg, 1, 1)
    assert vmac_cycles(GC200, m, GROUPED) == cycles
    assert 0.6 <= useful_macs(GROUPED) / cycles <= 0.8


def test_vmac_needs_one_output_channel():
    with pytest.raises(ValueError, match="one output channel"):
        vmac_cycles(GC200, VertexMethod("VMAC", "half", "half", 4, 1, 1),
                    TileConv(4, 1, 2, 1, 4, 4, 3, 3))


# --------------------------------------------------------------------------- HMAC
def test_hmac_hand_derivation_float():
    # float, icpg 8, pcpg 1; Ci 8, Co 2 -> IG 1, OG 2; 1x12 output, 1x3 kernel.
    # 1 row over 6 workers -> split 6, busiest worker: one part-row of (12 + 5) // 6 = 2.
    # dot(8 floats) = 3 + 3 + 1 + 8/2 = 11; per kernel position 16 + 19 + 2 x (7 + 11) = 71;
    # worker 3 x 71 + 16 = 229 -> 1374.
    # 58 + 6 x 9 + 0 + 23 + 15 + 2 x (10 + 1374) = 2918; zeroing 12 -> (1 + 5) x 12 = 72
    m = VertexMethod("HMAC", "float", "float", 1, 8, 1)
    assert hmac_cycles(GC200, m, TileConv(1, 8, 2, 1, 1, 12, 1, 3)) == 2990


def test_hmac_half_partials_literal_vs_default():
    # half->half, icpg 4, pcpg 2; 12x4 output, 1x1 kernel: 12 rows -> 2 segments of 4.
    # dot = 2 x 3 + 1 + 3 + 1 + 4/4 - 1 = 11.
    # default: 2 x (19 + 4 x (7 + 11)) = 182; 16 - 6 + 182 = 192; (192 + 16) x 6 = 1248
    # literal: the 2nd segment costs no dot product: 91 + 19 + 4 x 7 = 138 -> (148 + 16) x 6
    # = 984. supervisor 65 + 60 + 36 + 23 + 15 + 10 = 209; zeroing 96 -> (8 + 5) x 6 = 78
    m = VertexMethod("HMAC", "half", "half", 1, 4, 2)
    tile = TileConv(1, 4, 2, 1, 12, 4)
    assert hmac_cycles(GC200, m, tile) == 209 + 1248 + 78
    assert hmac_cycles(GC200, m, tile, poplibs_literal=True) == 209 + 984 + 78


def test_hmac_1x1_variant_skips_zeroing():
    # half->float with a 1x1 kernel, one row, one in-group and pcpg 1: no zero vertex
    m = VertexMethod("HMAC", "half", "float", 1, 16, 1)
    cost = conv_vertex_cycles(GC200, m, TileConv(1, 16, 4, 1, 1, 600))
    assert cost.breakdown["zeroing"] == 0
    assert cost.vertex == "HMAC 1x1"
    assert conv_vertex_cycles(GC200, m, TileConv(1, 32, 4, 1, 1, 600)).breakdown["zeroing"] > 0


# --------------------------------------------------------------------------- grouped curve
def best(machine, tile, in_dtype="half", partials=("half", "float"), **kw):
    found = []
    for pt in partials:
        for m in candidate_methods(machine, in_dtype, pt, tile.in_chans, tile.out_chans,
                                   tile.kernel_w, tile.stride[1], n_groups=tile.conv_groups):
            try:
                found.append((conv_vertex_cycles(machine, m, tile, **kw).cycles, m))
            except ValueError:     # e.g. SLIC/VMAC that need a different tile split
                continue
    return min(found, key=lambda x: x[0])


@pytest.mark.parametrize("cpg, label, macs_per_cycle, lo, hi", [
    # SLIC rows pay the weight loads per conv-group block (PopLibs' §3.10 numbers, which
    # load once per sub-kernel, were 8.36 / 16.78 / 33.67)
    (1, "SLIC 4x1 4ch half->half", 8.20, 0.07, 0.17),
    (2, "SLIC 2x2 4ch half->half", 16.36, 0.24, 0.28),
    (4, "SLIC 1x4 4ch half->half", 33.26, 0.48, 0.55),
    (8, "AMP 8u 8x8 half->float", 19.03, 0.55, 0.65),
    (16, "AMP 16u 16x16 half->half", 48.60, 0.75, 0.85),
])
def test_grouped_efficiency_curve(cpg, label, macs_per_cycle, lo, hi):
    # §3.10: best candidate per channels-per-group on 16 groups, 56x56, 3x3, relative to the
    # AMP peak of the chosen types (64 half->half, 32 half->float on Mk2)
    tile = TileConv(16, cpg, cpg, 1, 56, 56, 3, 3)
    cycles, m = best(GC200, tile)
    assert m.label() == label
    assert round(useful_macs(tile) / cycles, 2) == macs_per_cycle
    assert lo <= useful_macs(tile) / cycles / GC200.amp_macs_per_cycle(m.in_dtype,
                                                                       m.partials_dtype) <= hi


def test_grouped_literal_best_depthwise_is_slic_16x1():
    cycles, m = best(GC200, GROUPED, poplibs_literal=True)
    assert (cycles, m.label()) == (41891, "SLIC 16x1 4ch half->half")


def test_grouped_amp_rows_of_table():
    # cpg 4: AMP icpg 4 8.4; cpg 8: AMP icpg 8 19.0; cpg 16: half->float 8 units 26.6
    assert amp_nx1_cycles(GC200, VertexMethod("AMP", "half", "float", 1, 4, 8, conv_units=8),
                          TileConv(16, 4, 4, 1, 56, 56, 3, 3)) == 861348
    assert amp_nx1_cycles(GC200, VertexMethod("AMP", "half", "float", 1, 8, 8, conv_units=8),
                          TileConv(16, 8, 8, 1, 56, 56, 3, 3)) == 1518836
    assert amp_nx1_cycles(GC200, HF8, TileConv(16, 16, 16, 1, 56, 56, 3, 3)) == 4344356


@pytest.mark.parametrize("factor, method, cycles", [
    (16, HH16, 148876),                                                       # 3.0
    (8, VertexMethod("AMP", "half", "float", 1, 8, 8, conv_units=8), 190040),  # 2.4
    (4, VertexMethod("AMP", "half", "half", 1, 4, 16, conv_units=16), 266142),  # 1.7
])
def test_combine_conv_groups_depthwise(factor, method, cycles):
    # §3.10: "AMP after combineConvGroups F = 4/8/16: 1.7-3.0". 16 groups of 1 channel become
    # 16/F groups of F channels with block-diagonal weights; F = 16 is one dense 16x16 conv
    combined = VertexMethod(method.method, method.in_dtype, method.partials_dtype, 1,
                            method.in_chans_per_group, method.out_chans_per_group,
                            conv_units=method.conv_units, combine_groups=factor)
    assert conv_vertex_cycles(GC200, combined, GROUPED).cycles == cycles
    assert 1.7 <= round(useful_macs(GROUPED) / cycles, 1) <= 3.0
    if factor == 16:
        assert cycles == amp_nx1_cycles(GC200, HH16, TileConv(1, 16, 16, 1, 56, 56, 3, 3))


# --------------------------------------------------------------------------- limits
@pytest.mark.parametrize("machine, method, limit", [
    (GC200, HH16, 64), (GC200, HF8, 32), (GC200, FF16, 16),
    (GC2, VertexMethod("AMP", "half", "half", 1, 16, 8, conv_units=8), 32),
    (GC2, HF8, 32), (GC2, FF8, 8),
])
def test_amp_asymptotic_macs_per_cycle(machine, method, limit):
    # §3.9: large per-tile work approaches the unit rate from below, on both vertices. The
    # 1x1 vertex zeroes partials inside its first in-group pass (up to 16 cycles/position
    # for float instead of 8), so it needs many in-groups to amortise that pass.
    ci = method.in_chans_per_group * 16
    nx1 = TileConv(1, ci, 64, 1, 112, 112, 3, 3)
    x1 = TileConv(1, ci, 64, 1, 1, 12000)
    assert method.macs_per_cycle_bound(machine) == limit
    for tile in (nx1, x1):
        r = rate(machine, method, tile)
        assert 0.9 * limit < r < limit


@pytest.mark.parametrize("method, limit", [
    (slic(1, 4, 4), 64), (slic(2, 2, 4), 32), (slic(4, 1, 4), 16), (slic(16, 1, 4), 16),
    (slic(1, 4, 2, "float"), 32), (slic(4, 1, 2, "float"), 8)])
def test_slic_asymptotic_macs_per_cycle(method, limit):
    # kernel width 4 (no window padding), long rows, many sub-kernels
    c = method.in_chans_per_group
    tile = TileConv(method.conv_groups_per_group, c, c, 1, 24, 2000, 8, 4)
    assert method.macs_per_cycle_bound(GC200) == limit
    assert 0.85 * limit < rate(GC200, method, tile) < limit


def test_bound_holds_for_every_candidate():
    # macs_per_cycle_bound must bound the default estimators on any tile (planner pruning)
    tiles = [TileConv(g, c, c, b, h, w, kh, kw) for g, c, b, h, w, kh, kw in [
        (16, 1, 1, 56, 56, 3, 3), (16, 2, 1, 7, 7, 1, 4), (32, 4, 2, 1, 3000, 1, 8),
        (1, 16, 1, 1, 9000, 1, 1), (4, 8, 3, 5, 33, 5, 5), (16, 1, 1, 1, 1, 1, 1)]]
    for machine, pt, tile in itertools.product((GC200, GC2), ("half", "float"), tiles):
        for m in candidate_methods(machine, "half", pt, tile.in_chans, tile.out_chans,
                                   tile.kernel_w, 1, n_groups=tile.conv_groups):
            try:
                r = rate(machine, m, tile)
            except ValueError:
                continue
            assert r < m.macs_per_cycle_bound(machine), (m.label(), tile)


# --------------------------------------------------------------------------- reduce, cast, zero
def test_reduce_worked_example():
    # §4.3: 1024 outputs, depth 4, float partials -> half.
    # multi: 256 loops, 42 r 4 -> 43 per worker; 32 + (3 x 4 + 6) x 43 = 806; x 6 = 4836
    # single: reads depth - 1 = 3; 20 + (2 x 3 + 7) x 43 = 579; x 6 + 33 = 3507
    assert reduce_cycles(GC200, 1024, 4, "float", "half", vertex="multi") == 4836
    assert reduce_cycles(GC200, 1024, 4, "float", "half", vertex="single") == 3507
    # 3 x 1024 x 4 B = 12 KiB of partials < 624 KiB / 16: PopLibs picks single-input
    assert reduce_cycles(GC200, 1024, 4, "float", "half") == 3507


def test_reduce_variants():
    # 1001 outputs: 250 loops + 1 remainder bit = 251, 41 r 5 per worker, remainder not a
    # multiple of 4 -> one short loop 2 x 4 + 13; 32 + 21 + 18 x 41 = 791 -> 4746 (multi)
    assert reduce_cycles(GC200, 1001, 4, "float", "half") == 4746
    with pytest.raises(ValueError, match="multiple of 4"):
        reduce_cycles(GC200, 1001, 4, "float", "half", vertex="single")
    # half partials: 8-wide accumulator, 128 loops, 22 per worker, 2 cycles per partial
    # 20 + (2 x 1 + 9) x 22 = 262 -> 1605
    assert reduce_cycles(GC200, 1024, 2, "half", "half") == 1605
    # fast reduce (interleaved partials): 1 cycle per partial: 20 + (3 + 7) x 43 -> 2733
    assert reduce_cycles(GC200, 1024, 4, "float", "half", fast_reduce=True) == 2733
    # big partials buffer -> multi-input: 3 x 16384 x 4 B > 624 KiB / 16
    assert (reduce_cycles(GC200, 16384, 4, "float", "float")
            == reduce_cycles(GC200, 16384, 4, "float", "float", vertex="multi"))
    # depth 1: no reduction, only a cast when the types differ
    assert reduce_cycles(GC200, 1024, 1, "float", "float") == 0
    assert reduce_cycles(GC200, 1024, 1, "float", "half") == cast_cycles(GC200, 1024, "float",
                                                                         "half")


def test_cast_and_zeroing():
    # 1024 / 6 -> 171 per worker; max(86 float vectors, 43 half vectors) + 26 = 112; x 6
    assert cast_cycles(GC200, 1024, "float", "half") == 672
    assert cast_cycles(GC200, 1024, "half", "half") == 0
    assert cast_cycles(GC200, 0, "float", "half") == 0
    assert zeroing_cycles(GC200, 512, 2) == 576           # (43 + 5) x 6 x 2, as in AMP nx1
    assert zeroing_cycles(GC200, 512, 2, "half") == 324   # (22 + 5) x 6 x 2


# --------------------------------------------------------------------------- candidates
def test_candidates_gc200_half_half():
    ms = candidate_methods(GC200, "half", "half", 16, 16, 3, 1)
    by = {k: [m for m in ms if m.method == k] for k in ("AMP", "SLIC", "HMAC", "VMAC")}
    assert {(m.conv_units, m.in_chans_per_group, m.out_chans_per_group) for m in by["AMP"]} == {
        (16, 16, 16), (16, 8, 16), (16, 4, 16), (8, 16, 8), (8, 8, 8), (8, 4, 8)}
    assert {(m.conv_groups_per_group, m.in_chans_per_group, m.slic_chains)
            for m in by["SLIC"]} == {(g, c, ch) for (g, c) in [(1, 4), (2, 2), (4, 1), (8, 1),
                                                               (16, 1)] for ch in (2, 4)}
    # 10, 12, 14 give the same 2 in-groups as 8 and are skipped
    assert sorted(m.in_chans_per_group for m in by["HMAC"]) == [2, 4, 6, 8, 16]
    assert {m.conv_groups_per_group for m in by["VMAC"]} == {4, 8, 16}
    assert ms[0] == HH16


def test_work_bound_holds_for_every_candidate():
    # vertex_cycles_lower_bound (the planner prunes whole methods and split vectors by it)
    # must bound the estimators from below on any tile: small and large fields, rows of 1-9
    # positions (the short-row and entry constants), padded channels, kernel rows that do
    # not fill the weight height, combined groups, stride 1 and 2, both machines
    rng = np.random.default_rng(0)
    fields = [(1, 1, 1), (1, 1, 2), (1, 2, 3), (2, 3, 5), (1, 7, 9), (3, 1, 13), (1, 56, 56),
              (1, 1, 3000)]
    checked = set()
    for machine, dt, pt in itertools.product((GC200, GC2), ("half", "float"), ("half", "float")):
        if dt == "float" and pt == "half":
            continue
        for g, c, k, kh, kw, sw in [(16, 1, 1, 3, 3, 1), (240, 1, 1, 5, 5, 2), (1, 16, 16, 1, 1, 1),
                                    (4, 8, 8, 5, 5, 1), (32, 4, 4, 3, 3, 2), (1, 3, 64, 7, 7, 2),
                                    (2, 24, 40, 1, 4, 1)]:
            for m in candidate_methods(machine, dt, pt, c, k, kw, sw, n_groups=g):
                n = 64
                b, h, w = (np.array([fields[i][j] for i in rng.integers(0, len(fields), n)])
                           for j in range(3))
                gt, ct, kt = (rng.integers(1, v + 1, n) for v in (g, c, k))
                kht = rng.integers(1, kh + 1, n)
                try:
                    cyc = conv_vertex_cycles_array(machine, m, conv_groups=gt, in_chans=ct,
                                                   out_chans=kt, batch=b, out_h=h, out_w=w,
                                                   kernel_h=kht, kernel_w=kw, stride=(1, sw))
                except ValueError:
                    continue
                lb = vertex_cycles_lower_bound(machine, m, conv_groups=gt, in_chans=ct,
                                               out_chans=kt, positions=b * h * w,
                                               kernel_h=kht, kernel_w=kw)
                if lb is None:
                    continue
                assert (lb <= cyc).all(), (m.label(), machine.name)
                # and a real bound, not 0: within 4x of the estimate on large fields, where
                # the fixed overheads it leaves out are small
                big = b * h * w >= 3000
                assert (4 * lb[big] >= cyc[big]).all(), (m.label(), machine.name)
                checked.add(m.method)
    assert checked == {"AMP", "SLIC", "HMAC"}


def test_candidates_float_partials_and_mk1():
    ms = candidate_methods(GC200, "half", "float", 16, 16, 3, 1)
    assert {(m.conv_units, m.out_chans_per_group) for m in ms if m.method == "AMP"} == {
        (8, 8), (8, 16)}
    assert {(m.conv_groups_per_group, m.slic_chains) for m in ms if m.method == "SLIC"} == {
        (1, 2), (2, 2), (4, 2)}
    assert {m.conv_groups_per_group for m in ms if m.method == "VMAC"} == {4}
    mk1 = candidate_methods(GC2, "half", "half", 16, 16, 3, 1)
    assert {m.slic_chains for m in mk1 if m.method == "SLIC"} == {2}
    assert {m.conv_units for m in mk1 if m.method == "AMP"} == {8}
    ff = candidate_methods(GC200, "float", "float", 8, 8, 3, 1)
    assert {m.method for m in ff} == {"AMP", "HMAC"}
    assert {(m.conv_units, m.in_chans_per_group, m.out_chans_per_group)
            for m in ff if m.method == "AMP"} == {(16, 8, 16), (16, 4, 16), (16, 2, 16),
                                                  (8, 8, 8), (8, 4, 8), (8, 2, 8)}
    # stride 3 rules SLIC out
    assert not [m for m in candidate_methods(GC200, "half", "half", 4, 4, 3, 3)
                if m.method == "SLIC"]


def test_combine_group_candidates():
    assert combine_group_factors(GC200, "half", 1, 16) == [4, 8, 16]
    assert combine_group_factors(GC200, "half", 2, 16) == [2, 4, 8]
    assert combine_group_factors(GC200, "float", 1, 16) == [2, 4, 8]
    assert combine_group_factors(GC200, "half", 4, 16) == []
    assert combine_group_factors(GC200, "half", 1, 1) == []
    ms = candidate_methods(GC200, "half", "half", 1, 1, 3, 1, n_groups=32)
    assert {m.combine_groups for m in ms if m.method == "AMP"} == {1, 4, 8, 16}
    m16 = next(m for m in ms if m.combine_groups == 16 and m.conv_units == 16
               and m.in_chans_per_group == 16)
    assert m16.macs_per_cycle_bound(GC200) == 4.0   # 64 executed, 1/16 useful
    # depthwise: the 4-chain 1x4 SLIC leads by bound, PopLibs' sort keys
    assert ms[0].method == "SLIC"


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("args, kwargs, msg", [
    (("XMAC", "half", "half", 1, 16, 16), {}, "method must be"),
    (("SLIC", "float", "float", 4, 1, 1), dict(slic_chains=2), "float16 inputs"),
    (("SLIC", "half", "half", 2, 1, 1), dict(slic_chains=4), "SLIC grouping"),
    (("SLIC", "half", "half", 4, 1, 1), dict(slic_chains=3), "slic_chains"),
    (("VMAC", "half", "float", 8, 1, 1), {}, "VMAC conv_groups_per_group"),
    (("AMP", "half", "half", 1, 16, 12), dict(conv_units=8), "multiple of conv_units"),
    (("AMP", "half", "half", 2, 16, 16), dict(conv_units=16), "conv_groups_per_group = 1"),
    (("HMAC", "half", "half", 1, 4, 1), {}, "HMAC out_chans_per_group"),
    (("AMP", "float", "half", 1, 8, 8), dict(conv_units=8), "half partials"),
    (("HMAC", "half", "float", 1, 0, 1), {}, "in_chans_per_group"),
])
def test_vertex_method_validation(args, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        VertexMethod(*args, **kwargs)


def test_tile_and_machine_validation():
    with pytest.raises(ValueError, match="out_w"):
        TileConv(1, 16, 16, 1, 4, 0)
    with pytest.raises(ValueError, match="stride"):
        TileConv(1, 16, 16, stride=2)
    with pytest.raises(ValueError, match="16 conv units is not a mode"):
        conv_vertex_cycles(GC200, VertexMethod("AMP", "half", "float", 1, 16, 16,
                                               conv_units=16), TileConv(1, 16, 16))
    with pytest.raises(ValueError, match="TileConv"):
        conv_vertex_cycles(GC200, HH16, (1, 16, 16))
    with pytest.raises(ValueError, match="depth"):
        reduce_cycles(GC200, 16, 0, "float", "float")


# --------------------------------------------------------------------------- entry points
def test_breakdown_sums_and_useful_macs():
    tile = TileConv(2, 24, 40, 2, 9, 11, 3, 3)
    assert useful_macs(tile) == 2 * 24 * 40 * 2 * 9 * 11 * 9
    for m in candidate_methods(GC200, "half", "half", 24, 40, 3, 1):
        if m.method in ("AMP", "HMAC"):
            cost = conv_vertex_cycles(GC200, m, tile)
            assert sum(cost.breakdown.values()) == cost.cycles
            assert min(cost.breakdown.values()) >= 0
            assert cost.why


def test_array_variant_matches_scalar():
    rng = np.random.default_rng(7)
    n = 40
    sizes = dict(conv_groups=rng.integers(1, 20, n), in_chans=rng.integers(1, 40, n),
                 out_chans=rng.integers(1, 40, n), batch=rng.integers(1, 3, n),
                 out_h=rng.integers(1, 15, n), out_w=rng.integers(1, 30, n),
                 kernel_h=rng.integers(1, 6, n), kernel_w=rng.integers(1, 6, n))
    methods = candidate_methods(GC200, "half", "half", 2, 2, 3, 1, n_groups=8)
    methods += [HF8, FF16]
    for m, stride, literal in itertools.product(methods, ((1, 1), (1, 2)), (False, True)):
        s = dict(sizes)
        if m.method == "SLIC":
            s.update(in_chans=rng.integers(1, m.in_chans_per_group + 1, n),
                     out_chans=rng.integers(1, m.in_chans_per_group + 1, n))
        if m.method == "VMAC":
            s.update(out_chans=np.ones(n, dtype=np.int64))
        if m.method == "AMP" and m.amp_weight_height == 1:
            s.update(kernel_h=rng.integers(1, 3, n), kernel_w=rng.integers(1, 3, n),
                     out_h=rng.integers(1, 3, n), batch=rng.integers(1, 3, n))
        got = conv_vertex_cycles_array(GC200, m, stride=stride, poplibs_literal=literal, **s)
        for i in range(n):
            tile = TileConv(*(int(s[k][i]) for k in ("conv_groups", "in_chans", "out_chans",
                                                     "batch", "out_h", "out_w", "kernel_h",
                                                     "kernel_w")), stride=stride)
            want = conv_vertex_cycles(GC200, m, tile, poplibs_literal=literal).cycles
            assert got[i] == want, (m.label(), tile)


def test_array_variant_rejects_invalid():
    with pytest.raises(ValueError, match="out_chans"):
        conv_vertex_cycles_array(GC200, HH16, conv_groups=1, in_chans=16, out_chans=[4, 0])
    with pytest.raises(ValueError, match="one output channel"):
        conv_vertex_cycles_array(GC200, VertexMethod("VMAC", "half", "half", 4, 1, 1),
                                 conv_groups=4, in_chans=1, out_chans=[1, 2])
