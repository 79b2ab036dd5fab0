"""Convolution planner: choose a vertex method and a split of the conv over the tiles.

Like PopLibs' planner (reference/poplibs-planner.md §2), it enumerates vertex candidates
(AMP, SLIC, VMAC, HMAC, AMP on combined groups) and parallel split vectors over
(conv groups, input channels, batch, output rows, output columns, output channels), scores
each with the cycle model and keeps the fastest plan whose busiest tile fits its memory
budget. Scoring is vectorised over all split vectors of a method, with a lower-bound prune
(useful MACs / the method's peak rate), so planning a layer takes milliseconds.

The planner's score is an estimate of the program's cost computed from closed forms (the
busiest tile's bytes and vertex cycles). The program built from the plan is costed
exactly from its real copy tables and vertices; the profile reports that exact cost, and
``plan.estimated_cycles`` keeps the planner's figure for comparison.

When no split fits the tiles' memory, the planner adds a *serial* split of the output
channels (PopLibs' outChanSplit.serial): the input windows stay resident, and each
iteration exchanges one slice of the weights, computes that slice of the outputs and
reduces it. If even the largest serial split does not fit, :func:`plan_conv` raises
:class:`~ipukern.memory.TileMemoryError` with the smallest requirement it found.

Modelled and documented simplifications: kernel dimensions are never split across tiles;
input-channel splits are capped at ``MAX_REDUCTION_DEPTH`` and reduced in one
reduce-scatter stage; only output channels are split serially.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.cost import cast_cycles_array, ceil_div, elementwise_cycles_array, reduce_cycles_array
from .estimators import VertexMethod, candidate_methods, conv_vertex_cycles_array
from .layout import MAX_INPUT_OWNERS, Split
from ..dtypes import DTYPES
from ..machine import MachineSpec
from ..core.memory import TileMemoryError
from .params import ConvParams

__all__ = ["ConvPlan", "plan_conv", "split_candidates", "MAX_REDUCTION_DEPTH"]

#: input-channel splits are reduced in one reduce-scatter stage; PopLibs switches to two
#: stages at depth 16 (reference §4.3), which this planner does not model
MAX_REDUCTION_DEPTH = 16
#: before any plan is known, score only split vectors within this factor of the best
#: compute lower bound of the method
LB_SLACK = 2.0
#: plans this close to the fastest count as ties (see _score_method)
NEAR_TIE = 0.005
#: byte alignment of every per-tile buffer (TileMemory aligns to 8)
_ALIGN = 8


@dataclass(frozen=True)
class ConvPlan:
    """A conv mapped onto the tiles: method, split and the planner's estimates.

    Attributes
    ----------
    params : ConvParams
    machine : MachineSpec
    method : VertexMethod
        The vertex type (method, channel grouping, conv units / chains, combine factor).
    split : Split
        Parallel splits per axis (groups, in-chans, batch, rows, cols, out-chans).
    serial : int
        Serial split of each tile's output channels (1 = none).
    estimated_cycles : int
        The planner's closed-form estimate of the whole program.
    estimated_bytes_per_tile : int
        The planner's estimate of the busiest tile's data bytes.
    breakdown : dict
        Planner estimate by category (exchange, compute, reduction, cast, bias, sync).
    n_candidates : int
        Split vectors scored.
    """

    params: ConvParams
    machine: MachineSpec
    method: VertexMethod
    split: Split
    serial: int
    bias: bool
    estimated_cycles: int
    estimated_bytes_per_tile: int
    breakdown: dict = field(default_factory=dict, compare=False)
    n_candidates: int = 0

    @property
    def tiles_used(self) -> int:
        return self.split.n_tiles

    @property
    def reduction_depth(self) -> int:
        return self.split.in_chans

    def describe(self) -> str:
        s = self.split
        serial = f", {self.serial} serial out-chan slices" if self.serial > 1 else ""
        return (f"{self.method.label()}; splits groups {s.groups} x in-chans {s.in_chans} x "
                f"batch {s.batch} x rows {s.rows} x cols {s.cols} x out-chans {s.out_chans} "
                f"= {s.n_tiles} tiles{serial}")

    def to_dict(self) -> dict[str, Any]:
        s = self.split
        return {"method": self.method.label(), "vertex_method": self.method.method,
                "combine_groups": self.method.combine_groups,
                "splits": {"groups": s.groups, "in_chans": s.in_chans, "batch": s.batch,
                           "rows": s.rows, "cols": s.cols, "out_chans": s.out_chans},
                "serial_out_chan_split": self.serial,
                "tiles_used": s.n_tiles, "estimated_cycles": self.estimated_cycles,
                "estimated_bytes_per_tile": self.estimated_bytes_per_tile,
                "breakdown": dict(self.breakdown)}


def split_candidates(n_grains: int, limit: int) -> np.ndarray:
    """Split counts worth trying for ``n_grains``: for every distinct per-part size
    ceil(n/s), the smallest s giving it (larger s would only idle tiles), up to ``limit``."""
    n_grains = max(1, int(n_grains))
    out = []
    prev = None
    s = 1
    while s <= min(n_grains, limit):
        per = -(-n_grains // s)
        smallest = -(-n_grains // per)
        if per != prev:
            out.append(smallest)
            prev = per
        # jump to the next s that lowers the per-part size
        s = max(s + 1, -(-n_grains // (per - 1)) if per > 1 else n_grains + 1)
    return np.unique(np.array(out, dtype=np.int64))



def _aligned(nbytes):
    return ceil_div(nbytes, _ALIGN) * _ALIGN


def _method_grains(p: ConvParams, m: VertexMethod) -> tuple[int, int, int]:
    """(group grain, in-chan grain, out-chan grain) in the conv's own units."""
    F = m.combine_groups
    if F > 1:
        return F * m.conv_groups_per_group, p.in_per_group, p.out_per_group
    return m.conv_groups_per_group, m.in_chans_per_group, m.out_chans_per_group


def _axis_sizes(n: int, grain: int, s: np.ndarray) -> np.ndarray:
    """Largest part (in items) when n items in grains of ``grain`` are split s ways."""
    return np.minimum(ceil_div(ceil_div(n, grain), s) * grain, n)


def _window_extent(n_out_t: np.ndarray, k: int, stride: int, dil: int, size: int) -> np.ndarray:
    """Input rows a block of n_out_t output rows needs (clipped to the input)."""
    return np.minimum((n_out_t - 1) * stride + (k - 1) * dil + 1, size)


def plan_conv(params: ConvParams, machine: MachineSpec, *, bias: bool = False,
              method: str | None = None) -> ConvPlan:
    """Choose the fastest plan whose busiest tile fits ``machine``'s per-tile budget.

    Parameters
    ----------
    params : ConvParams
    machine : MachineSpec
    bias : bool
        Whether the op adds a bias (one more element-wise pass and a small exchange).
    method : str, optional
        Restrict to one vertex method ("AMP", "SLIC", "VMAC", "HMAC"), e.g. to study it.

    Raises
    ------
    TileMemoryError
        If no candidate fits even with serial splits; the message gives the smallest
        per-tile requirement found and the budget.
    ValueError
        If ``method`` names no valid candidate for this conv.
    """
    p = params
    m_ = machine
    cands = candidate_methods(m_, p.dtype, p.partials, p.in_per_group, p.out_per_group,
                              p.kernel_w, p.stride[1], n_groups=p.groups)
    if method is not None:
        cands = [c for c in cands if c.method == method.upper()]
        if not cands:
            raise ValueError(f"no {method!r} vertex candidate for {p.describe()}")
    fg = _field_grid(p, m_.n_tiles)
    serials = _serial_candidates(p)
    smallest: tuple[int, VertexMethod, int] | None = None
    best = None
    n_scored = 0
    for cand in cands:
        # a method whose rate cannot beat the best plan even on a perfect split is skipped
        if best is not None and p.macs / (m_.n_tiles * cand.macs_per_cycle_bound(m_)) >= best[0]:
            continue
        res = _score_method(p, m_, cand, bias, serials, best[0] if best else None, fg)
        if res is None:
            continue
        n_scored += res["n"]
        if res["min_bytes"] is not None and (smallest is None or res["min_bytes"][0] < smallest[0]):
            smallest = (res["min_bytes"][0], cand, res["min_bytes"][1])
        if res["best"] is not None:
            cyc, nbytes, split, serial, breakdown = res["best"]
            # fewer serial slices first (PopLibs plans parallel splits before serial ones)
            key = (serial > 1, cyc, nbytes)
            if best is None or key < best[5]:
                best = (cyc, nbytes, cand, split, serial, key, breakdown)
    if best is not None:
        cyc, nbytes, cand, split, serial, _, breakdown = best
        return ConvPlan(params=p, machine=m_, method=cand, split=split, serial=serial,
                        bias=bias, estimated_cycles=int(cyc),
                        estimated_bytes_per_tile=int(nbytes), breakdown=breakdown,
                        n_candidates=n_scored)
    need, cand, serial = smallest if smallest else (0, None, 1)
    raise TileMemoryError(
        f"no plan for {p.describe()} fits {m_.name}'s tiles, even with serial splits: the "
        f"smallest busiest-tile requirement found is {need} B "
        f"({cand.label() if cand else '-'}, {serial} serial slices) but the budget is "
        f"{m_.tile_budget_bytes} B per tile ({m_.tile_bytes} B minus "
        f"{m_.reserved_bytes_per_tile} B reserved)",
        tile=-1, requested=int(need), used=0, budget=m_.tile_budget_bytes)


def _serial_candidates(p: ConvParams) -> np.ndarray:
    """1 first; then serial output-channel splits doubling up to one channel per slice."""
    most = max(1, p.out_per_group)
    out = [1]
    k = 2
    while k <= most:
        out.append(k)
        k *= 2
    if out[-1] != most:
        out.append(most)
    return np.array(out, dtype=np.int64)


def _field_grid(p: ConvParams, T: int) -> dict[str, np.ndarray]:
    """All (batch, rows, cols) split vectors using at most T tiles, with their busiest
    block's sizes. Shared by every vertex method."""
    b_ax = split_candidates(p.batch, T)
    h_ax = split_candidates(p.out_h, T)
    w_ax = split_candidates(p.out_w, T)
    bs, hs, ws = (a.ravel() for a in np.meshgrid(b_ax, h_ax, w_ax, indexing="ij"))
    # Columns are split only when that needs no column halos (1-wide kernels: matmuls,
    # 1x1 convs) or once every output row has its own block. Narrow rows pay the AMP
    # per-row work-list overheads, and column halos are a copy per row and channel, so
    # these splits rarely win and would make the copy tables (and host runs) large.
    ok = (bs * hs * ws <= T) & ((ws == 1) | (p.kernel_w == 1) | (hs == h_ax.max()))
    bs, hs, ws = bs[ok], hs[ok], ws[ok]
    return {"bs": bs, "hs": hs, "ws": ws, "n": bs * hs * ws,
            "B_t": _axis_sizes(p.batch, 1, bs), "OR": _axis_sizes(p.out_h, 1, hs),
            "OC": _axis_sizes(p.out_w, 1, ws)}


def _channel_axes(p: ConvParams, cand: VertexMethod, T: int):
    gg, ig, og = _method_grains(p, cand)
    n_i = ceil_div(p.in_per_group, ig)
    n_o = ceil_div(p.out_per_group, og)
    # methods that process exactly one channel block per tile fix their channel splits
    if cand.method == "SLIC":
        if p.dilation != (1, 1) or p.stride[1] > 2:
            return None
        i_ax, o_ax = np.array([n_i]), np.array([n_o])
    elif cand.method == "VMAC":
        if p.out_per_group > T:
            return None
        i_ax, o_ax = split_candidates(n_i, MAX_REDUCTION_DEPTH), np.array([p.out_per_group])
    else:
        i_ax, o_ax = split_candidates(n_i, MAX_REDUCTION_DEPTH), split_candidates(n_o, T)
    if i_ax.max() > MAX_REDUCTION_DEPTH:
        return None
    g_ax = split_candidates(ceil_div(p.groups, gg), T)
    return g_ax, i_ax, o_ax


def _score_method(p: ConvParams, m_: MachineSpec, cand: VertexMethod, bias: bool,
                  serials: np.ndarray, bound: int | None, fg: dict[str, np.ndarray]) -> dict | None:
    """Score every split vector of one vertex method, each with the fewest serial
    out-chan slices (from ``serials``) that make its busiest tile fit."""
    T = m_.n_tiles
    gg, ig, og = _method_grains(p, cand)
    axes = _channel_axes(p, cand, T)
    if axes is None:
        return None
    cg, ci, co = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    cn = cg * ci * co
    keep_c = cn <= T
    cg, ci, co, cn = cg[keep_c], ci[keep_c], co[keep_c], cn[keep_c]
    # channel x field pairs that fit the machine; pairs leaving more than half of the
    # usable tiles idle are not scored (halving the busiest tile's work always beats them
    # in practice, and skipping them keeps planning in milliseconds)
    used = fg["n"][:, None] * cn[None, :]
    fits = used <= T
    if not fits.any():
        return None
    u_max = used[fits].max()
    fi, chi = np.nonzero(fits & (2 * used > u_max))
    gs, is_, os_ = cg[chi], ci[chi], co[chi]
    bs, hs, ws = fg["bs"][fi], fg["hs"][fi], fg["ws"][fi]
    G_t = _axis_sizes(p.groups, gg, gs)
    C_t = _axis_sizes(p.in_per_group, ig, is_)
    K_t = _axis_sizes(p.out_per_group, og, os_)
    B_t, OR, OC = fg["B_t"][fi], fg["OR"][fi], fg["OC"][fi]
    if cand.method == "VMAC" and K_t.max() > 1:
        return None
    n_all = int(gs.size)
    # --- lower bound: the busiest tile's useful MACs at the method's peak rate
    kk = p.kernel_h * p.kernel_w
    lb = (G_t * C_t * K_t * B_t * OR * OC * kk) / cand.macs_per_cycle_bound(m_)
    # without a plan to beat yet, first look near the best lower bound: the winner uses
    # the machine well, and its cost then prunes every other method's candidates
    cut = bound if bound is not None else LB_SLACK * lb.min()
    sel = np.flatnonzero(lb <= cut)
    if sel.size == 0:
        return {"n": n_all, "best": None, "min_bytes": None}
    gs, is_, os_, bs, hs, ws, G_t, C_t, K_t, B_t, OR, OC = (
        a[sel] for a in (gs, is_, os_, bs, hs, ws, G_t, C_t, K_t, B_t, OR, OC))
    # --- memory of the busiest tile
    isz = DTYPES[p.dtype].itemsize
    psz = DTYPES[p.partials].itemsize
    osz = isz
    WR = _window_extent(OR, p.kernel_h, p.stride[0], p.dilation[0], p.in_h)
    WC = _window_extent(OC, p.kernel_w, p.stride[1], p.dilation[1], p.in_w)
    # a window also holds its block's core, which is longer than the taps need when the
    # stride exceeds the kernel span
    WR = np.maximum(WR, np.minimum(ceil_div(p.in_h, hs) + p.stride[0], p.in_h))
    WC = np.maximum(WC, np.minimum(ceil_div(p.in_w, ws) + p.stride[1], p.in_w))
    win_b = B_t * WR * G_t * C_t * WC * isz
    M = bs * hs * ws                                          # tiles sharing a weight block
    R = is_
    reduce_needed = R > 1
    cast_needed = (~reduce_needed) & (p.partials != p.dtype)

    def memory(serial: np.ndarray) -> tuple[np.ndarray, ...]:
        K_s = np.minimum(ceil_div(ceil_div(K_t, og), serial) * og, K_t)  # out-chans per slice
        w_b = G_t * K_s * C_t * kk * isz                           # one slice of weights
        w_store = np.where(serial > 1, ceil_div(serial, M) * w_b, 0)  # owned slices
        out_s = B_t * G_t * K_s * OR * OC                          # outputs of one slice
        chunk = ceil_div(out_s, R)
        n_part_bufs = np.where(serial > 1, 2, 1)                   # double-buffered if serial
        part_b = np.where(reduce_needed | cast_needed, n_part_bufs * out_s * psz, 0)
        out_b = serial * np.where(reduce_needed, chunk, out_s) * osz
        recv_b = np.where(reduce_needed, (R - 1) * chunk * psz, 0)
        bias_b = G_t * K_t * osz if bias else 0
        mem = sum(_aligned(x) for x in (win_b, w_b, w_store, part_b, out_b, recv_b, bias_b))
        return mem, K_s, w_b, out_s, chunk

    # the fewest serial slices that fit (each tile needs a grain per slice)
    k_grains = ceil_div(K_t, og)
    serial = np.zeros_like(K_t)
    min_mem = None
    for k in serials:
        todo = (serial == 0) & (k_grains >= k)
        if not todo.any():
            continue
        mem_k = memory(np.full_like(K_t, k))[0]
        serial = np.where(todo & (mem_k <= m_.tile_budget_bytes), k, serial)
        cand_min = int(mem_k[todo].min())
        if min_mem is None or cand_min < min_mem[0]:
            min_mem = (cand_min, int(k))
        if (serial > 0).all():
            break
    fits = serial > 0
    if cand.method == "VMAC":
        fits &= serial == 1
    if not fits.any():
        return {"n": n_all, "best": None, "min_bytes": min_mem}
    sel = np.flatnonzero(fits)
    (gs, is_, os_, bs, hs, ws, G_t, C_t, K_t, B_t, OR, OC, WR, WC, win_b, M, R, reduce_needed,
     cast_needed, serial) = (a[sel] for a in (
        gs, is_, os_, bs, hs, ws, G_t, C_t, K_t, B_t, OR, OC, WR, WC, win_b, M, R,
        reduce_needed, cast_needed, serial))
    mem, K_s, w_b, out_s, chunk = memory(serial)
    # --- compute: the vertex on the busiest tile for one slice; 1x1 stride-1 unpadded
    # convs flatten the field into one row so the AMP 1x1 vertex applies (PopLibs'
    # flatten transform)
    flat = kk == 1 and p.stride == (1, 1) and p.padding == (0, 0)
    vb, vh, vw = (np.ones_like(B_t), np.ones_like(OR), B_t * OR * OC) if flat else (B_t, OR, OC)
    try:
        conv = conv_vertex_cycles_array(m_, cand, conv_groups=G_t, in_chans=C_t, out_chans=K_s,
                                        batch=vb, out_h=vh, out_w=vw, kernel_h=p.kernel_h,
                                        kernel_w=p.kernel_w, stride=p.stride)
    except ValueError:
        return None
    # --- exchange: the busiest receiver; bus pairs receiving the same data count once.
    # The tile owns 1/Os of its block's core; the rest of its window arrives from owners.
    CR = np.minimum(ceil_div(p.in_h, hs), WR)
    CC = np.minimum(ceil_div(p.in_w, ws), WC)
    core_b = B_t * CR * G_t * C_t * CC * isz
    # the busiest tile owns 1/Os of its core, or nothing when only the first few of the
    # Os tiles own shares (convlayout.MAX_INPUT_OWNERS)
    in_recv = win_b - np.where(os_ <= MAX_INPUT_OWNERS, core_b // os_, 0)
    in_eff = np.where(os_ >= 2, in_recv // 2, in_recv)
    w_recv = np.where((M > 1) | (serial > 1), w_b, 0)
    w_eff = np.where((os_ == 1) & (M > 1), w_recv // 2, w_recv)
    bpc16 = max(1, int(round(16 * m_.exchange_bytes_per_cycle)))
    def xch(nb):
        return np.where(nb > 0, -(-(16 * nb) // bpc16) + m_.exchange_overhead_cycles, 0)
    ex_in = xch(in_eff + w_eff)
    ex_w = xch(w_eff)                                          # each later slice's weights
    red_x = xch(np.where(reduce_needed, (R - 1) * chunk * psz, 0))
    red_c = np.where(reduce_needed, reduce_cycles_array(m_, chunk, R, p.partials, p.dtype), 0)
    cast_c = np.where(cast_needed, cast_cycles_array(m_, out_s, p.partials, p.dtype), 0)
    n_bias = np.where(reduce_needed, chunk, out_s)
    bias_c = elementwise_cycles_array(m_, n_bias, p.dtype) if bias else np.zeros_like(conv)
    # supersteps: exchange-in, one per slice (conv; plus the previous slice's reduce/cast
    # and bias), and a final one for the last slice's reduce/cast/bias
    finishing = reduce_needed | cast_needed | bias
    n_steps = 1 + serial + finishing.astype(np.int64)
    sync = n_steps * m_.sync_cycles
    total = (ex_in + serial * conv + (serial - 1) * ex_w + serial * (red_x + red_c + cast_c + bias_c)
             + sync)
    # Among plans within NEAR_TIE of the fastest, prefer no serial slices, then no column
    # split: the cycle model has no per-message exchange cost, but column halos are one
    # message per row and channel, so a near-tie should not pay for them.
    near = total <= total.min() * (1 + NEAR_TIE)
    order = np.lexsort((mem, total, ws > 1, serial > 1))
    j = int(order[near[order]][0])
    split = Split(groups=int(gs[j]), in_chans=int(is_[j]), batch=int(bs[j]), rows=int(hs[j]),
                  cols=int(ws[j]), out_chans=int(os_[j]), group_grain=gg, in_grain=ig,
                  out_grain=og)
    k = int(serial[j])
    breakdown = {"exchange": int(ex_in[j] + (k - 1) * ex_w[j] + k * red_x[j]),
                 "compute": int(k * conv[j]), "reduction": int(k * red_c[j]),
                 "cast": int(k * cast_c[j]), "bias": int(k * bias_c[j]), "sync": int(sync[j])}
    return {"n": n_all, "best": (int(total[j]), int(mem[j]), split, k, breakdown),
            "min_bytes": min_mem}
