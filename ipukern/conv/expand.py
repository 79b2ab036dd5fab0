"""PopLibs' *expandDims* transform: kernel dimensions folded into the input channels.

expandDims (``ConvUtil.cpp``/``ConvModel.cpp`` ``expandDim``, reference/poplibs-planner.md
§2.2) rewrites a conv whose kernel has ``k_d`` taps along dim d as the conv of the *im2col
along d* of its input: ``C_in *= k_d``, the kernel becomes 1 wide along d, the input along d
becomes the output size, stride / padding / dilation along d vanish. The AMP vertex then sees
``k_d`` times more input channels and fewer kernel positions, which pays where the input
channels are few (3-channel stems) or the field is small (7x7 layers, where the nx1
vertex's per-row and per-kernel-position overheads dominate).

This module is the transform's model: the expanded conv itself is :func:`~.params.
expanded_params`, its plan :func:`~.planner.plan_expanded` and the choice between the
direct and the expanded plans :func:`~.compile.choose_plan`.

The expanded input does not exist: PopLibs builds it before the conv by a rearrangement
(copies and exchange) and charges it in ``addTransformCycleEstimate`` (``ConvModel.cpp``;
``rearrangeInput`` is set by expandDims): per used tile ``bytes = ceil(expanded elements x
element bytes / used tiles)``, copy cycles ``ceil(bytes x 5 / (min(memcpyBytesPerCycle,
element bytes) x f))`` (``f`` = 4 when ``C_in x C_out`` of the transformed conv is a
multiple of 2 (float) or 4 (half), else 3: ``getScaleFactorForTransform``) and exchange
cycles ``ceil(bytes / exchangeBytesPerCycle)``.

The program (:mod:`.expand_build`) really builds the expanded tensor: the original input
lives spread linearly over the plan's tiles (``mapTensorLinearly``); an exchange brings each
tile that owns a share of an expanded input core the original rows it needs, and an on-tile
copy vertex (im2col, zeros for the padding) writes that share where the expanded conv
expects its input; the expanded conv's program then runs unchanged. The copy is costed at
PopLibs' rate above on the bytes the tile writes, the exchange by the exchange model on the
bytes it receives (the original rows: fewer than PopLibs' expanded bytes). The planner
scores each candidate with those same terms for the expanded conv's chosen split
(:func:`transform_estimate`), plus one BSP sync and one exchange overhead (ipukern's
additions), on top of the expanded conv's own plan, and keeps the cheapest
(:func:`~.compile.choose_plan`). Simplifications: the expanded conv's split is the one its planner
chooses without the transform (PopLibs scores the transform inside its split search), and
PopLibs' ``rearrangeWeights`` term is not charged: weights are placed in the plan's layout
as for every ipukern conv (here the expanded weights are the original ones reshaped).

Candidates: ``"h"`` (kernel rows into channels) and ``"hw"`` (both kernel dims: the conv
becomes 1x1). Expanded channel ``c'`` of a group is ``c * kh * kw' + i * kw' + j`` (kw' = kw
for "hw", 1 for "h"), so the expanded weights (C_out, C_in * kh [* kw], 1, kw or 1) are the
original weights reshaped: nothing moves. PopLibs also tries expanding the width alone;
there the expanded weights are a transpose of the original ones (not built, README).
A 1-wide kernel dim with a stride is a candidate too: expanding it subsamples the input
(PopLibs ``expandSpatialDim``, ``slice.subSample(stride)``), so a strided 1x1 conv's
windows hold only the rows and columns it reads, and each tile receives only the input
rows it reads (:func:`box_row_step`; columns arrive as whole runs and the copy vertex
steps over them, as element-sized exchange runs would be).
"""
from __future__ import annotations

import numpy as np

from ..core.cost import exchange_cycles
from ..core import split_bounds
from ..machine import MachineSpec
from .layout import geometry, owned_input_segments
from .params import ConvParams, expanded_params
from .search import method_work_bound, vertex_candidates

__all__ = ["box_row_step", "transform_estimate", "transform_copy_cycles", "source_boxes",
           "with_transform", "expanded_lower_bound", "transform_lower_bound"]

def box_row_step(p: ConvParams) -> int:
    """Row step of a tile's received box of original rows: the row stride when the kernel is
    one row without padding (the rows between are never read, so they are not received);
    else 1 (whole row ranges)."""
    return p.stride[0] if p.kernel_h == 1 and p.padding[0] == 0 else 1


def transform_copy_cycles(machine: MachineSpec, nbytes, e: ConvParams):
    """PopLibs' rearrangement copy estimate for ``nbytes`` of the expanded conv ``e``'s input
    on one tile (``addTransformCycleEstimate``: ``ceil(bytes x 5 / (min(memcpyBytesPerCycle,
    element bytes) x f))``, ``f`` from ``getScaleFactorForTransform``)."""
    granularity = 2 if e.dtype == "float32" else 4
    f = 4 if (e.in_per_group * e.out_per_group) % granularity == 0 else 3
    rate = min(machine.memcpy_bytes_per_cycle, e.itemsize) * f
    return -(-(nbytes * 5) // rate)


def transform_estimate(machine: MachineSpec, p: ConvParams, dims: str, split) -> dict[str, int]:
    """The transform's cost for the expanded conv split ``split``, from the bytes its program
    moves (:mod:`.expand_build`): the busiest tile's received box of original rows
    (exchange cycles, plus one exchange overhead) and its expanded bytes written (PopLibs'
    rearrangement copy rate), one BSP sync (ipukern's addition), and the busiest tile's
    transform bytes (the original input's linear share and the received box). The owners
    of the largest core stand for every tile (the program costs each tile exactly).

    PopLibs spreads the expanded tensor over all used tiles (``bytes / usedTiles``); here it
    is written where the expanded conv's input cores live, shared by all the tiles that
    share a window (not only ``MAX_INPUT_OWNERS`` of them, as for other convs: the copy's
    work is then spread as in PopLibs), and the busiest tile is costed as it is."""
    e = expanded_params(p, dims)
    geo = geometry(e, split, max_owners=split.out_chans)
    nt, isz = machine.n_tiles, p.itemsize
    # the block with the largest core stands for all (its owners are the busiest)
    first = np.flatnonzero(geo.oi == 0)
    core = geo.B * (geo.cr1 - geo.cr0) * geo.planes * (geo.cc1 - geo.cc0)
    seg = owned_input_segments(geo, np.zeros(nt, np.int64), isz,
                               blocks=first[[int(np.argmax(core[first]))]], planes=True)
    written = np.bincount(seg.tile, weights=seg.n_planes * seg.width * isz, minlength=nt)
    box = source_boxes(p, e, dims, seg, nt)
    home = np.zeros(nt, np.int64)
    home[:geo.n_tiles] = np.diff(split_bounds(p.batch * p.in_h * p.in_channels * p.in_w,
                                              geo.n_tiles, p.in_w)) * isz
    recv = box["elems"] * isz
    return {"transform": int(transform_copy_cycles(machine, int(written.max()), e)),
            "exchange": int(exchange_cycles(int(recv.max()), machine, with_overhead=True)),
            "sync": machine.sync_cycles, "bytes": int((recv + home).max())}


def source_boxes(p, e, dims: str, seg, nt: int) -> dict[str, np.ndarray]:
    """Per tile, the box of the original input its owned segments read: images [na, nb),
    rows [ra, rb) every :func:`box_row_step` rows (``"nr"`` of them), global channels
    [cha, chb), columns [ca, cb); ``elems`` its size."""
    kk = e.in_per_group // p.in_per_group
    g = seg.channel // e.in_per_group
    cl = seg.channel - g * e.in_per_group
    ch0 = g * p.in_per_group + cl // kk
    ch1 = g * p.in_per_group + (cl + seg.n_planes - 1) // kk + 1
    (sh, sw), (ph, pw), (dh, dw) = p.stride, p.padding, p.dilation
    r0 = np.maximum(seg.row * sh - ph, 0)
    r1 = np.minimum(seg.row * sh - ph + (p.kernel_h - 1) * dh + 1, p.in_h)
    if "w" in dims:
        c0 = np.maximum(seg.col * sw - pw, 0)
        c1 = np.minimum((seg.col + seg.width - 1) * sw - pw + (p.kernel_w - 1) * dw + 1, p.in_w)
    else:
        c0, c1 = seg.col, seg.col + seg.width
    ok = (r0 < r1) & (c0 < c1)
    t = seg.tile[ok]
    out = {}
    for name, lo, hi in (("n", seg.image, seg.image + 1), ("r", r0, r1), ("ch", ch0, ch1),
                         ("c", c0, c1)):
        a = np.full(nt, np.iinfo(np.int64).max, np.int64)
        b = np.zeros(nt, np.int64)
        np.minimum.at(a, t, lo[ok])
        np.maximum.at(b, t, hi[ok])
        a = np.minimum(a, b)
        out[name + "0"], out[name + "1"] = a, b
    step = box_row_step(p)
    out["nr"] = -(-(out["r1"] - out["r0"]) // step)
    out["elems"] = ((out["n1"] - out["n0"]) * out["nr"]
                    * (out["ch1"] - out["ch0"]) * (out["c1"] - out["c0"]))
    return out


def with_transform(cycles: int, nbytes: int, breakdown: dict, t: dict) -> dict:
    """A plan's estimate fields with the transform ``t`` added."""
    out = dict(breakdown)
    for k in ("transform", "exchange", "sync"):
        out[k] = out.get(k, 0) + t[k]
    return {"estimated_cycles": int(cycles + t["transform"] + t["exchange"] + t["sync"]),
            "estimated_bytes_per_tile": int(nbytes), "breakdown": out}


def expanded_lower_bound(p: ConvParams, machine: MachineSpec, dims: str, bias: bool = False) -> int:
    """A lower bound on :func:`~.planner.plan_expanded`'s cycles for any split, without planning:
    the expanded conv's least compute bound over its vertex candidates (each the larger of
    its MACs spread over every tile at the candidate's peak rate and its work bound,
    :func:`~.search.method_work_bound`), two supersteps (exchange-in, one slice), and the transform's
    copy of an even share of the expanded input plus its superstep. The busiest owner of
    the largest window core writes at least that share: the cores partition the expanded
    input over the blocks, each shared by at most out-chans owners."""
    e = expanded_params(p, dims)
    nt = machine.n_tiles
    cands = vertex_candidates(e, machine)
    if not cands:
        return 0
    # the plan's method, whichever it is, is bounded by its rate and by its own work bound;
    # the least over the methods, skipping the work bound where the rate's alone cannot
    # lower it (the same minimum)
    least = float("inf")
    for c in cands:
        rate_bound = e.macs / (nt * c.macs_per_cycle_bound(machine))
        if rate_bound < least:
            least = min(least, max(rate_bound, method_work_bound(e, machine, c)))
    conv = int(least)
    return conv + 2 * machine.sync_cycles + transform_lower_bound(p, machine, dims)


def transform_lower_bound(p: ConvParams, machine: MachineSpec, dims: str) -> int:
    """A lower bound on what :func:`transform_estimate` adds to the expanded conv's plan for
    any split (:func:`with_transform`): the copy of an even share of the expanded input
    (the busiest owner writes at least that, see :func:`expanded_lower_bound`) and the
    transform's superstep; its exchange costs >= 0."""
    e = expanded_params(p, dims)
    share = e.batch * e.in_channels * e.in_h * e.in_w * e.itemsize // machine.n_tiles
    return machine.sync_cycles + int(transform_copy_cycles(machine, share, e))
