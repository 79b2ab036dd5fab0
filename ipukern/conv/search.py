"""The conv planner's search: vertex candidates x split vectors, scored and pruned.

Like PopLibs' planner (reference/poplibs-planner.md §2), :func:`search` enumerates vertex
candidates (AMP, SLIC, VMAC, HMAC, AMP on combined groups) and parallel split vectors over
(conv groups, input channels, kernel rows, batch, output rows, output columns, output
channels), scores each with the cycle model and keeps the fastest split whose busiest tile
fits its memory budget. Scoring is vectorised over all split vectors of a method, with a
lower-bound prune (useful MACs / the method's peak rate) and an exact branch and bound
(:func:`_costs`), so planning a layer takes milliseconds. :mod:`.planner` turns what it
finds into a :class:`~.planner.ConvPlan` (or the error saying why none fits).

The score is an estimate of the program's cost computed from closed forms (the busiest
tile's bytes and vertex cycles). The program built from the plan is costed exactly from its
real copy tables and vertices; the profile reports that exact cost, and
``plan.estimated_cycles`` keeps the planner's figure for comparison.

When no split fits the tiles' memory, the search adds a *serial* split of the output
channels (PopLibs' outChanSplit.serial): the input windows stay resident, and each
iteration exchanges one slice of the weights, computes that slice of the outputs and
reduces it.

Names in the scoring code (one row per candidate split vector, for its busiest tile):

========  ==========================================================================
gs, is_,  splits of conv groups, input channels, output channels (tiles per axis)
os_
bs, hs,   splits of batch, output rows, output columns
ws
G_t, C_t  conv groups, input channels per group on the tile
K_t, K_s  output channels per group on the tile; in one serial slice
B_t       batch images on the tile
OR, OC    output rows / columns on the tile; WR, WC the input window they need
kr, KH_t  kernel-row split (PopLibs' kernelSplit along the height), kernel rows on the tile
M         tiles sharing one weight block (bs x hs x ws)
R         reduction depth (= is_ x kr): partials summed per output
T         tiles on the machine
========  ==========================================================================

Input-channel splits range up to the tile count; their partial sums are reduced in
PopLibs' stages (:mod:`.reduce`: 1 stage below depth 16, 2 from 16, 3 from 125). Below
``MAX_SINGLE_STAGE_DEPTH`` every split is scored; above it a geometric subset (ratio
``DEEP_SPLIT_RATIO``) of the splits whose exact stages stay close to PopLibs' plan, which
bounds the search at a few dozen in-channel splits however large K is.

Kernel splits: a kernel with more than one row may be split into blocks of rows across
tiles (PopLibs' ``kernelSplit``). Each tile runs the vertex of its smaller kernel and holds
its block of the weights; the partial sums of the in-chan x kernel-block tiles of an output
block are reduced like an in-channel split (depth ``is_ x kr``, same stages). Every kernel
block holds the whole kernel's input window (the tiles of block 0 own it; the later blocks
receive the same pieces, so each is sent once): PopLibs gives a kernel block only the rows
it reads, which here would make the owner send each overlapping piece once per block.

Modelled and documented simplifications: kernel columns are never split across tiles
(only rows); only output channels are split serially.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from .._kernels import loop_columns, plan_kernels
from ..core.cost import (cast_cycles_array, ceil_div, elementwise_cycles_array, exchange_cycles,
                         exchange_rate, reduce_cycles_array)
from ..core.tensor import expand, split_candidates
from ..dtypes import DTYPES
from ..machine import MachineSpec
from .estimators import (VertexMethod, candidate_methods, conv_vertex_cycles_array,
                         direct_output_candidates, vertex_cycles_lower_bound, vertex_field)
from .estimators import candidates as _estimator_candidates
from .layout import MAX_INPUT_OWNERS, Split
from .params import ConvParams
from .reduce import planner_tries_depth
from .sizing import Table, fewest_serial_slices, with_windows

__all__ = ["SearchResult", "search", "score_each_method", "vertex_candidates",
           "writes_output_type", "in_chan_splits", "clear_planner_caches",
           "MAX_SINGLE_STAGE_DEPTH", "DEEP_SPLIT_RATIO", "LB_SLACK", "NEAR_TIE", "BNB_SEED",
           "PRUNE", "KERNEL_SPLITS", "method_work_bound"]

#: input-channel splits below this depth are reduced in one stage and all scored; deeper
#: ones are reduced in 2-3 stages (PopLibs' ConvReducePlan.cpp, reference §4.3)
MAX_SINGLE_STAGE_DEPTH = 16
#: deeper in-channel splits are scored on a geometric grid of this ratio (the cost is
#: smooth in the split, and this keeps planning time flat in K)
DEEP_SPLIT_RATIO = 1.5
#: before any plan is known, score only split vectors within this factor of the best
#: compute lower bound of the method
LB_SLACK = 2.0
#: plans this close to the fastest count as ties (see _score_method)
NEAR_TIE = 0.005
#: branch and bound (see _costs): cost this many split vectors of least lower bound in full
#: first, and prune the rest with their best. PRUNE = False costs every split vector in
#: full (the exhaustive search the tests compare with); both give the same plan
BNB_SEED = 16
PRUNE = True
#: score kernel-row splits (PopLibs' kernelSplit); False plans without them (baselines)
KERNEL_SPLITS = True


def _method_grains(p: ConvParams, m: VertexMethod) -> tuple[int, int, int]:
    """(group grain, in-chan grain, out-chan grain) in the conv's own units."""
    F = m.combine_groups
    if F > 1:
        return F * m.conv_groups_per_group, p.in_per_group, p.out_per_group
    return m.conv_groups_per_group, m.in_chans_per_group, m.out_chans_per_group


def _axis_sizes(n: int, grain: int, s: np.ndarray) -> np.ndarray:
    """Largest part (in items) when n items in grains of ``grain`` are split s ways."""
    return np.minimum(ceil_div(ceil_div(n, grain), s) * grain, n)


#: why a forced method may have no candidate (the rules of estimators.candidate_methods)
_METHOD_NEEDS = {
    "SLIC": ": SLIC takes float16 inputs and a column stride of at most 2 (PopLibs' SLIC vertices)",
    "VMAC": ": VMAC takes float16 inputs",
}


def vertex_candidates(p: ConvParams, machine: MachineSpec) -> list[VertexMethod]:
    """The vertex candidates the planner scores for ``p`` (a new list): the methods'
    candidates, then the direct-output ones last, so a tie keeps the requested partials
    type. :func:`~.expand.expanded_lower_bound` bounds an expanded conv's rate with them."""
    cands = candidate_methods(machine, p.dtype, p.partials, p.in_per_group, p.out_per_group,
                              p.kernel_w, p.stride[1], n_groups=p.groups)
    cands += direct_output_candidates(machine, p.dtype, p.partials, p.in_per_group,
                                      p.kernel_h, p.kernel_w)
    return cands


class SearchResult(NamedTuple):
    """What :func:`search` found over the vertex methods of one conv: the method of the best
    plan and its split (None when no split fits), the split vectors scored, the smallest
    busiest-tile requirement seen as ``(bytes, method, serial slices)`` (None when no method
    got as far as sizing a tile) and the methods tried."""

    method: VertexMethod | None
    best: "_Scored | None"
    n_scored: int
    smallest: tuple[int, VertexMethod, int] | None
    tried: list[VertexMethod]


def search(p: ConvParams, machine: MachineSpec, *, bias: bool, method: str | None = None,
           temp_bound: int | None = None, kernel_split: int | None = None,
           beat: int | None = None) -> SearchResult:
    """The fastest split of ``p`` over every vertex method (or only ``method``) whose busiest
    tile fits the budget and whose temporary bytes stay within ``temp_bound``: fewer serial
    slices first, then cycles, then bytes. Methods whose peak rate cannot beat the best plan
    so far are skipped, and each method's search is bounded by it (:func:`_score_method`).

    ``beat``: only a plan without serial slices and of fewer cycles is wanted (the caller
    keeps a plan of ``beat`` cycles otherwise). The search starts from a plan of ``beat``
    cycles that wins every tie, so it prunes from the first method on; when nothing beats
    it, the result has no best (``best`` None). What beats it is what the search finds
    without ``beat``: the bound is one more "best plan so far", which the pruning is
    exact for.

    Raises
    ------
    ValueError
        If ``method`` names no vertex candidate of ``p``."""
    cands = vertex_candidates(p, machine)
    if method is not None:
        cands = [c for c in cands if c.method == method.upper()]
        if not cands:
            raise ValueError(f"no {method!r} vertex candidate for {p.describe()}"
                             + _METHOD_NEEDS.get(method.upper(), ""))
    fg = _field_grid(p, machine.n_tiles, kernel_split)
    serials = _serial_candidates(p)
    smallest: tuple[int, VertexMethod, int] | None = None
    best: tuple[tuple, VertexMethod | None, _Scored] | None = None
    if beat is not None:
        # the caller's plan: (no serial slices, beat cycles, -1 B) wins every tie
        best = ((False, int(beat), -1), None, _Scored(int(beat), -1, None, 1, {}))
    n_scored = 0
    for cand in cands:
        # a method whose rate cannot beat the best plan even on a perfect split is skipped
        if (best is not None and p.macs / (machine.n_tiles * cand.macs_per_cycle_bound(machine))
                >= best[2].cycles):
            continue
        # a method can only replace a best plan without serial slices by beating its cycles
        beat = best[2].cycles if best is not None and best[2].serial == 1 else None
        if PRUNE and beat is not None and method_work_bound(p, machine, cand) > beat * (1 + NEAR_TIE):
            continue     # _beat_prune would drop every split vector (see method_work_bound)
        res = _score_method(p, machine, cand, bias, serials, best[2].cycles if best else None, fg,
                            beat=beat, temp_bound=temp_bound)
        if res is None:
            continue
        n_scored += res.n_scored
        if res.smallest is not None and (smallest is None or res.smallest[0] < smallest[0]):
            smallest = (res.smallest[0], cand, res.smallest[1])
        if res.best is not None:
            # fewer serial slices first (PopLibs plans parallel splits before serial ones)
            key = (res.best.serial > 1, res.best.cycles, res.best.nbytes)
            if best is None or key < best[0]:
                best = (key, cand, res.best)
    if best is None or best[1] is None:
        return SearchResult(None, None, n_scored, smallest, cands)
    return SearchResult(best[1], best[2], n_scored, smallest, cands)


def method_work_bound(p: ConvParams, machine: MachineSpec, cand: VertexMethod) -> float:
    """A lower bound on the busiest tile's vertex cycles for every split of ``p`` with
    ``cand`` (0 when the estimators give no work bound): the whole conv's work bound
    (:func:`~.estimators.vertex_cycles_lower_bound`) spread evenly over the machine. Per
    axis the busiest tile's padded size times the split covers the conv's padded size, and
    a split uses at most every tile, so no split's busiest tile does less (serial slices
    together do at least the whole tile's work). :func:`search` skips a method by it before
    building its split table (:func:`_beat_prune` would drop every one of them), and
    :func:`~.expand.expanded_lower_bound` bounds an expandDims candidate with it."""
    work = vertex_cycles_lower_bound(machine, cand, conv_groups=p.groups,
                                     in_chans=p.in_per_group, out_chans=p.out_per_group,
                                     positions=p.batch * p.out_h * p.out_w,
                                     kernel_h=p.kernel_h, kernel_w=p.kernel_w)
    return 0.0 if work is None else work / machine.n_tiles


def score_each_method(p: ConvParams, machine: MachineSpec, *, bias: bool
                      ) -> list[tuple[VertexMethod, "_MethodScore"]]:
    """Every vertex method of ``p`` scored on its own (no pruning across methods): its best
    split that fits, or the smallest requirement it saw (see :func:`rank_candidates
    <ipukern.conv.planner.rank_candidates>`). Methods with no valid split are left out."""
    fg = _field_grid(p, machine.n_tiles)
    serials = _serial_candidates(p)
    out = []
    for cand in vertex_candidates(p, machine):
        res = _score_method(p, machine, cand, bias, serials, None, fg)
        if res is not None:
            out.append((cand, res))
    return out


def writes_output_type(p: ConvParams, method: VertexMethod) -> bool:
    """Whether ``method`` is a direct-output candidate: an AMP accumulating in the output
    type although the conv asked for other partials (no reduction may follow it)."""
    return (method.method == "AMP" and method.partials_dtype == p.dtype
            and method.partials_dtype != p.partials)


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


def _field_grid(p: ConvParams, T: int, kernel_split: int | None = None) -> dict[str, Any]:
    """All (batch, rows, cols) split vectors using at most T tiles, with their busiest
    block's sizes, and a memo of the split tables built on them (``_tables``, see
    :func:`_split_vectors`). Shared by every vertex method of one conv (as is the forced
    ``kernel_split``, see :func:`_kernel_axis`)."""
    b_ax = _splits(p.batch, T)
    h_ax = _splits(p.out_h, T)
    w_ax = _splits(p.out_w, T)
    bs, hs, ws = (a.ravel() for a in np.meshgrid(b_ax, h_ax, w_ax, indexing="ij"))
    # Columns are split only when that needs no column halos (1-wide kernels: matmuls,
    # 1x1 convs) or once every output row has its own block. Narrow rows pay the AMP
    # per-row work-list overheads, and column halos are a copy per row and channel, so
    # these splits rarely win and would make the copy tables (and host runs) large.
    ok = (bs * hs * ws <= T) & ((ws == 1) | (p.kernel_w == 1) | (hs == h_ax.max()))
    bs, hs, ws = bs[ok], hs[ok], ws[ok]
    return {"_tables": {}, "kernel_split": kernel_split, "bs": bs, "hs": hs, "ws": ws, "n": bs * hs * ws,
            "B_t": _axis_sizes(p.batch, 1, bs), "OR": _axis_sizes(p.out_h, 1, hs),
            "OC": _axis_sizes(p.out_w, 1, ws)}


def _kernel_axis(p: ConvParams, cand: VertexMethod, T: int, forced: int | None) -> np.ndarray:
    """Kernel-row splits to score: ``forced`` when given; else every useful split of a
    kernel with more than one row (none when ``KERNEL_SPLITS`` is off). A vertex that
    writes the output type allows no reduction, so no kernel split."""
    if writes_output_type(p, cand):
        return np.array([1]) if not forced or forced == 1 else np.zeros(0, np.int64)
    if forced is not None:
        return np.array([forced])
    if p.kernel_h > 1 and KERNEL_SPLITS:
        return _splits(p.kernel_h, T)
    return np.array([1])


def _channel_axes(p: ConvParams, cand: VertexMethod, T: int, forced: int | None = None):
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
        i_ax, o_ax = _in_chan_splits(n_i, T), np.array([p.out_per_group])
    elif writes_output_type(p, cand):
        i_ax, o_ax = np.array([1]), _splits(n_o, T)   # no reduction may follow
    else:
        i_ax, o_ax = _in_chan_splits(n_i, T), _splits(n_o, T)
    g_ax = _splits(ceil_div(p.groups, gg), T)
    return g_ax, i_ax, o_ax, _kernel_axis(p, cand, T, forced)


def _tried_depths(R: np.ndarray) -> np.ndarray:
    """:func:`~.reduce.planner_tries_depth` per element (the staged reductions the
    planner scores; a kernel split multiplies the in-chan split's depth)."""
    uniq, inv = np.unique(R, return_inverse=True)
    return np.array([planner_tries_depth(int(r)) for r in uniq], dtype=bool)[inv.reshape(-1)]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@lru_cache(maxsize=1024)
def _splits(n_grains: int, T: int) -> np.ndarray:
    """:func:`split_candidates`, memoised (read-only): every method of a conv asks for the
    same few axes. Cleared by :func:`clear_planner_caches`."""
    return _frozen(split_candidates(n_grains, T))


@lru_cache(maxsize=1024)
def _in_chan_splits(n_grains: int, T: int) -> np.ndarray:
    return _frozen(in_chan_splits(n_grains, T))


def clear_planner_caches() -> None:
    """Forget the planner's memoised split axes and vertex candidates (for cold timings;
    plans do not change)."""
    _splits.cache_clear()
    _in_chan_splits.cache_clear()
    _estimator_candidates._candidate_methods.cache_clear()
    _estimator_candidates._method.cache_clear()


def in_chan_splits(n_grains: int, T: int) -> np.ndarray:
    """In-channel splits the planner scores for ``n_grains`` in-channel grains on ``T``
    tiles: every useful split below ``MAX_SINGLE_STAGE_DEPTH``; above it the splits whose
    staged reduction PopLibs would run (:func:`~.reduce.planner_tries_depth`), thinned to a
    geometric grid of ratio ``DEEP_SPLIT_RATIO`` (always keeping the deepest)."""
    cands = split_candidates(n_grains, T)
    small = cands[cands < MAX_SINGLE_STAGE_DEPTH]
    deep = [int(r) for r in cands[cands >= MAX_SINGLE_STAGE_DEPTH] if planner_tries_depth(int(r))]
    kept: list[int] = []
    for r in deep:
        if not kept or r >= kept[-1] * DEEP_SPLIT_RATIO:
            kept.append(r)
    if deep and kept[-1] != deep[-1]:
        kept.append(deep[-1])
    return np.concatenate([small, np.array(kept, dtype=np.int64)])


class _Scored(NamedTuple):
    """The best split vector of one vertex method."""

    cycles: int
    nbytes: int
    split: Split | None     # None only for search()'s seed plan of ``beat`` cycles
    serial: int
    breakdown: dict
    temp: int = 0           # its temporary bytes (all but the output), as the bound sees them


class _MethodScore(NamedTuple):
    """What scoring one vertex method found: how many split vectors it considered, the
    best one that fits (or None), and the smallest busiest-tile requirement it saw as
    ``(bytes, serial slices)`` (or None when it found no candidate at all)."""

    n_scored: int
    best: _Scored | None
    smallest: tuple[int, int] | None


def _score_method(p: ConvParams, machine: MachineSpec, cand: VertexMethod, bias: bool,
                  serials: np.ndarray, bound: int | None,
                  fg: dict[str, Any], beat: int | None = None,
                  temp_bound: int | None = None) -> _MethodScore | None:
    """Score every split vector of one vertex method, each with the fewest serial
    out-chan slices (from ``serials``) that make its busiest tile fit.

    Phases: enumerate the split vectors, prune by the compute lower bound, size the
    busiest tile's buffers and choose the serial slices, then cost compute, exchange,
    reduction and syncs, and pick the fastest (near ties broken towards simpler plans).
    ``beat``: the cycles of the best plan so far when it has no serial slices; a pick
    slower than it cannot win, so it need not be exact (see :func:`_costs`).
    """
    c = _split_vectors(p, machine, cand, fg)
    if c is None:
        return None
    n_all = len(c.gs)
    c = _lower_bound_prune(p, machine, cand, c, bound)
    if c is None:
        return _MethodScore(n_all, None, None)
    c = with_windows(p, c, writes_output_type(p, cand))
    if PRUNE and beat is not None:
        c = _beat_prune(p, machine, cand, c, bias, beat)
        if c is None:
            return _MethodScore(n_all, None, None)     # nothing here beats the best plan
    og = _method_grains(p, cand)[2]
    serial, smallest, sizes = fewest_serial_slices(p, machine, og, c, serials, bias, temp_bound)
    fits = serial > 0
    if cand.method == "VMAC":
        fits &= serial == 1
    if not fits.any():
        return _MethodScore(n_all, None, smallest)
    fits = np.flatnonzero(fits)
    c = c.take(fits)
    c["serial"] = serial[fits]
    c.update({k: v[fits] for k, v in sizes.items()})
    try:
        sel, costs = _costs(p, machine, cand, c, bias, beat)
    except ValueError:
        return None
    c = c.take(sel)
    j = _pick_near_tie(c, costs["total"])
    gg, ig, og = _method_grains(p, cand)
    split = Split(groups=int(c.gs[j]), in_chans=int(c.is_[j]), batch=int(c.bs[j]),
                  rows=int(c.hs[j]), cols=int(c.ws[j]), out_chans=int(c.os_[j]),
                  kernel_rows=int(c.kr[j]), group_grain=gg, in_grain=ig, out_grain=og)
    k = int(c.serial[j])
    breakdown = {"exchange": int(costs["ex_in"][j] + (k - 1) * costs["ex_w"][j]
                                 + k * costs["red_x"][j]),
                 "compute": int(k * costs["conv"][j]), "reduction": int(k * costs["red_c"][j]),
                 "cast": int(k * costs["cast_c"][j]), "bias": int(k * costs["bias_c"][j]),
                 "sync": int(costs["sync"][j])}
    return _MethodScore(n_all, _Scored(int(costs["total"][j]), int(c.mem[j]), split, k,
                                       breakdown, int(c.mem[j] - c.out_b[j])), smallest)


def _split_vectors(p: ConvParams, machine: MachineSpec, cand: VertexMethod,
                   fg: dict[str, Any]) -> Table | None:
    """Every (channel split x field split) vector that fits the machine, with the busiest
    tile's sizes (G_t, C_t, K_t, B_t, OR, OC)."""
    T = machine.n_tiles
    gg, ig, og = _method_grains(p, cand)
    # methods with the same grains and axes share their table (the callers never modify a
    # table in place: the first thing done with it is a take)
    key = (cand.method if cand.method in ("SLIC", "VMAC") else "", writes_output_type(p, cand),
           gg, ig, og)
    memo = fg["_tables"]
    if key not in memo:
        memo[key] = _new_split_vectors(p, cand, fg, T, gg, ig, og)
    return memo[key]


def _new_split_vectors(p: ConvParams, cand: VertexMethod, fg: dict[str, Any], T: int,
                       gg: int, ig: int, og: int) -> Table | None:
    axes = _channel_axes(p, cand, T, fg["kernel_split"])
    if axes is None:
        return None
    cg, ci, co, ck = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    cn = cg * ci * co * ck
    keep_c = (cn <= T) & ((ck == 1) | _tried_depths(ci * ck))
    cg, ci, co, ck, cn = cg[keep_c], ci[keep_c], co[keep_c], ck[keep_c], cn[keep_c]
    # the block sizes of the channel axes are computed per channel split and then
    # gathered with it (the table has up to ~13k rows per channel split's few hundred)
    chan = {"gs": cg, "is_": ci, "os_": co, "kr": ck, "KH_t": _axis_sizes(p.kernel_h, 1, ck),
            "G_t": _axis_sizes(p.groups, gg, cg), "C_t": _axis_sizes(p.in_per_group, ig, ci),
            "K_t": _axis_sizes(p.out_per_group, og, co)}
    kernel = plan_kernels()
    if kernel is not None:
        if "_sorted_n" not in fg:
            fg["_sorted_n"] = _i64(np.sort(fg["n"]))
        pairs = kernel.field_pairs(_i64(fg["n"]), fg["_sorted_n"], _i64(cn), T)
        if pairs is None:
            return None
        cols = kernel.gather_pairs(*pairs, loop_columns(fg, _FIELD_COLUMNS),
                                   loop_columns(chan, chan))
        c = dict(zip(_FIELD_COLUMNS + tuple(chan), cols))
    else:
        if "_by_n" not in fg:
            order = np.argsort(fg["n"], kind="stable")
            fg["_by_n"] = (order, fg["n"][order])
        pairs = _field_pairs(fg["_by_n"], cn, T)
        if pairs is None:
            return None
        fi, chi = pairs
        c = {k: fg[k][fi] for k in _FIELD_COLUMNS} | {k: v[chi] for k, v in chan.items()}
    c = Table((k, c[k]) for k in _TABLE_ORDER)
    if cand.method == "VMAC" and c.K_t.max() > 1:
        return None
    return c


#: the field split's columns of a split-vector table, and all its columns in order
_FIELD_COLUMNS = ("bs", "hs", "ws", "B_t", "OR", "OC")
_TABLE_ORDER = ("gs", "is_", "os_", "kr", *_FIELD_COLUMNS, "KH_t", "G_t", "C_t", "K_t")


def _i64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _field_pairs(by_n: tuple[np.ndarray, np.ndarray], cn: np.ndarray, T: int
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """The (field, channel) index pairs whose tiles ``n * cn`` fit the machine, in
    row-major order (field first), without those leaving more than half of the most
    tiles any pair uses idle (halving the busiest tile's work always beats them in
    practice, and skipping them keeps planning in milliseconds). None if no pair fits.
    Found per channel split by bisection over the sorted field sizes (``by_n``: the
    stable order of the fields' tile counts ``n`` and ``n`` in it, shared by the methods
    of a conv), not by forming every pair."""
    if not cn.size:
        return None
    order, ns = by_n
    hi = np.searchsorted(ns, T // cn, side="right")          # n * cn <= T below hi
    has = np.flatnonzero(hi > 0)
    if not has.size:
        return None
    u_max = int((ns[hi[has] - 1] * cn[has]).max())
    lo = np.searchsorted(ns, u_max // (2 * cn), side="right")  # 2 * n * cn > u_max from lo
    counts = np.maximum(hi - lo, 0)
    chi, k = expand(counts)
    fi = order[lo[chi] + k]
    rank = np.argsort(fi * cn.size + chi)     # distinct keys: the (field, channel) order
    return fi[rank], chi[rank]


def _lower_bound_prune(p: ConvParams, machine: MachineSpec, cand: VertexMethod, c: Table,
                       bound: int | None) -> Table | None:
    """Keep the split vectors whose busiest tile's useful MACs, at the method's peak rate,
    could beat ``bound`` (the best plan so far). Without a plan to beat yet, look near the
    best lower bound first: the winner uses the machine well, and its cost then prunes
    every other method's candidates."""
    kernel = plan_kernels()
    if kernel is not None:
        red = (() if bound is None else
               (DTYPES[p.partials].itemsize, 2 * machine.exchange_bytes_per_cycle,
                machine.sync_cycles, bound))
        sel = kernel.lower_bound_keep(
            loop_columns(c, _LB_COLUMNS),
            p.kernel_w, cand.macs_per_cycle_bound(machine), red, LB_SLACK)
        return c.take(sel) if sel.size else None
    kk = c.KH_t * p.kernel_w
    lb = (c.G_t * c.C_t * c.K_t * c.B_t * c.OR * c.OC * kk) / cand.macs_per_cycle_bound(machine)
    if bound is not None:
        # a reduction's first stage moves at least half of the tile's partials, at the
        # exchange rate, and adds a superstep (sync) per stage: also a lower bound
        outs = c.G_t * c.K_t * c.B_t * c.OR * c.OC
        red = (outs * DTYPES[p.partials].itemsize / (2 * machine.exchange_bytes_per_cycle)
               + machine.sync_cycles)
        lb = lb + np.where(c.is_ * c.kr > 1, red, 0)
    cut = bound if bound is not None else LB_SLACK * lb.min()
    sel = np.flatnonzero(lb <= cut)
    return c.take(sel) if sel.size else None


#: the columns the compiled lower-bound prune reads, in its order
_LB_COLUMNS = ("G_t", "C_t", "K_t", "B_t", "OR", "OC", "KH_t", "is_", "kr")


def _costs(p: ConvParams, machine: MachineSpec, cand: VertexMethod, c: Table, bias: bool,
           beat: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Cycles of the split vectors that can be picked: the busiest tile's vertex per slice,
    its exchanges (inputs + weights, later slices' weights, partials), reduction or cast,
    bias, syncs. Returns the rows costed (indices into ``c``, ascending) and their costs.

    Branch and bound, exact: the vertex, the input exchange and the syncs are costed for
    every row; with the first stage of its reduction or its cast (:func:`_finishing_bound`)
    they bound its total from below (the other terms are >= 0). The rows of
    least bound are costed in full first; a row whose bound exceeds their best total by
    more than ``NEAR_TIE`` can be neither the fastest nor a near tie, so it is dropped.
    Rows beyond ``beat`` (by the same margin) are dropped too: a pick slower than ``beat``
    loses to the plan it would have to beat anyway.

    Raises ValueError when the method cannot run some tile (caught by the caller)."""
    if "conv_t" in c:
        # _beat_prune costed the vertex with all K_t out-chans: the slice when serial is 1
        conv = c.conv_t.copy()
        more = np.flatnonzero(c.serial > 1)
        if more.size:
            conv[more] = _vertex_cycles(p, machine, cand, c.take(more), c.K_s[more])
    else:
        conv = _vertex_cycles(p, machine, cand, c, c.K_s)
    in_eff = _input_receive(p, machine, c)
    w_eff = np.where((c.M > 1) | (c.serial > 1), c.w_b, 0)
    ex_in = exchange_cycles(in_eff + w_eff, machine, with_overhead=True)
    sync = _syncs(c, bias, c.serial) * machine.sync_cycles
    lower = ex_in + c.serial * conv + sync
    bound = _finishing_bound(p, machine, c, lower) if PRUNE else lower

    def full(rows: np.ndarray) -> dict[str, np.ndarray]:
        r = c.take(rows)
        out = {"conv": conv[rows], "ex_in": ex_in[rows], "sync": sync[rows],
               "ex_w": exchange_cycles(w_eff[rows], machine, with_overhead=True)}
        out["red_x"], out["red_c"] = _reduction_cycles(p, machine, r)
        out["cast_c"] = np.where(r.cast_needed,
                                 cast_cycles_array(machine, r.out_s, p.partials, p.dtype), 0)
        n_bias = np.where(r.reduce_needed, r.chunk, r.out_s)
        out["bias_c"] = (elementwise_cycles_array(machine, n_bias, p.dtype) if bias
                         else np.zeros_like(out["conv"]))
        out["total"] = (lower[rows] + (r.serial - 1) * out["ex_w"]
                        + r.serial * (out["red_x"] + out["red_c"] + out["cast_c"]
                                      + out["bias_c"]))
        return out

    rows = np.arange(len(lower))
    if PRUNE:
        if beat is not None:
            rows = np.flatnonzero(bound <= beat * (1 + NEAR_TIE))
            if not rows.size:
                # nothing here beats ``beat``: report the least bound's row (it loses anyway)
                rows = np.array([int(np.argmin(lower))])
        if rows.size > BNB_SEED:
            seed = rows[np.argpartition(bound[rows], BNB_SEED - 1)[:BNB_SEED]]
            cut = full(seed)["total"].min() * (1 + NEAR_TIE)
            rows = rows[bound[rows] <= cut]     # keeps the seed's fastest row at least
    return rows, full(rows)


def _finishing_bound(p: ConvParams, machine: MachineSpec, c: Table,
                     lower: np.ndarray) -> np.ndarray:
    """``lower`` plus what every slice's finishing costs at least once: the first
    reduction stage's exchange (exactly :func:`_reduction_cycles`' stage-1 term) or the
    cast of the slice's partials. Still a lower bound of the total, and a much tighter one
    where the reduction decides (the expandDims convs of a dense layer), so the branch
    and bound of :func:`_costs` costs fewer rows in full."""
    size = ceil_div(c.out_s, c.f1)
    red1 = exchange_cycles((c.f1 - 1) * size * DTYPES[p.partials].itemsize, machine,
                           with_overhead=True)
    out = lower + np.where(c.R > 1, red1, 0)
    if c.cast_needed.any():
        out = out + np.where(c.cast_needed,
                             cast_cycles_array(machine, c.out_s, p.partials, p.dtype), 0)
    return out


def _vertex_cycles(p: ConvParams, machine: MachineSpec, cand: VertexMethod, c: Table,
                   out_chans: np.ndarray) -> np.ndarray:
    """The busiest tile's conv vertex cycles with ``out_chans`` output channels per group.

    The busiest tile is taken to be the one with the largest block. The worker split
    makes a vertex's cycles not monotone in its rows (SLIC: 5 x 28 outputs over 6 workers
    cost more than 6 x 28), so for kernel-split rows the smaller row block is costed too
    and the larger of the two kept: it decided between kernel splits and no split on the
    default layers (the plans without a kernel split keep the largest-block figure)."""
    vb, vh, vw = vertex_field(p, c.B_t, c.OR, c.OC)
    cyc = conv_vertex_cycles_array(machine, cand, conv_groups=c.G_t, in_chans=c.C_t,
                                   out_chans=out_chans, batch=vb, out_h=vh, out_w=vw,
                                   kernel_h=c.KH_t, kernel_w=p.kernel_w, stride=p.stride)
    uneven = np.flatnonzero((c.kr > 1) & (p.out_h % c.hs != 0))
    if uneven.size:
        r = c.take(uneven)
        vb, vh, vw = vertex_field(p, r.B_t, np.maximum(p.out_h // r.hs, 1), r.OC)
        k = out_chans[uneven] if np.ndim(out_chans) else out_chans
        small = conv_vertex_cycles_array(machine, cand, conv_groups=r.G_t, in_chans=r.C_t,
                                         out_chans=k, batch=vb, out_h=vh, out_w=vw,
                                         kernel_h=r.KH_t, kernel_w=p.kernel_w, stride=p.stride)
        cyc[uneven] = np.maximum(cyc[uneven], small)
    return cyc


def _input_receive(p: ConvParams, machine: MachineSpec, c: Table) -> np.ndarray:
    """Input bytes the busiest receiver's exchange moves (at its effective rate).

    The tile owns 1/Os of its block's core (or nothing when only the first few of the Os
    tiles own shares, layout.MAX_INPUT_OWNERS); the rest of its window arrives. As in
    PopLibs (ExchangeEstimator.hpp), inputs arrive at the shared-bus 2x rate when the
    out-channel split is even (counted here as half the bytes); weights never do."""
    isz = DTYPES[p.dtype].itemsize
    CR = np.minimum(ceil_div(p.in_h, c.hs), c.WR)
    CC = np.minimum(ceil_div(p.in_w, c.ws), c.WC)
    core_b = c.B_t * CR * c.G_t * c.C_t * CC * isz
    in_recv = np.maximum(c.win_b - np.where(c.os_ <= MAX_INPUT_OWNERS, core_b // c.os_, 0),
                         c.later_b)
    bus = machine.tiles_per_exchange_bus
    return np.where((bus > 1) & (c.os_ % bus == 0), in_recv // 2, in_recv)


def _syncs(c: Table, bias: bool, serial) -> np.ndarray:
    """Supersteps: exchange-in, one per slice (conv; plus the previous slice's reduce/cast
    and bias), one per intermediate reduction stage of each slice, and a final one for the
    last slice's reduce/cast/bias."""
    n_stages = (c.R > 1).astype(np.int64) + (c.f2 > 1) + (c.f3 > 1)
    finishing = c.reduce_needed | c.cast_needed | bias
    return 1 + serial * np.maximum(n_stages, 1) + finishing.astype(np.int64)


def _beat_prune(p: ConvParams, machine: MachineSpec, cand: VertexMethod, c: Table,
                bias: bool, beat: int) -> Table | None:
    """Keep the split vectors that could beat ``beat`` (by up to NEAR_TIE) with any number
    of serial slices, before their memory is sized; None if none can. Adds the vertex
    cycles with the tile's K_t out-chans (``conv_t``).

    With ``s`` slices of ``K_s`` out-chans (s * K_s >= K_t) a row costs at least: its
    vertex with K_t out-chans (the vertex estimates are affine in the out-chan groups with
    non-negative terms, so s slices cost at least one of K_t), the exchange of its inputs
    and, when weights move at all, K_t's weights (the exchange costs are subadditive), and
    one superstep per stage of one slice. Checked first with lower bounds in place of the
    vertex, which are cheaper: the useful MACs at the method's peak rate and, where the
    estimators give one, the vertex's own work bound (:func:`~.estimators.
    vertex_cycles_lower_bound`; both bound the vertex with K_t out-chans from below)."""
    cut = beat * (1 + NEAR_TIE)
    kk = c.KH_t * p.kernel_w
    w_b = c.G_t * c.K_t * c.C_t * kk * DTYPES[p.dtype].itemsize
    w_eff = np.where((c.M > 1), w_b, 0)
    fixed = _beat_fixed(p, machine, c, bias)
    if fixed is None:
        fixed = (exchange_cycles(_input_receive(p, machine, c) + w_eff, machine,
                                 with_overhead=True)
                 + _syncs(c, bias, 1) * machine.sync_cycles)
    macs = c.G_t * c.C_t * c.K_t * c.B_t * c.OR * c.OC * kk
    bound = macs / cand.macs_per_cycle_bound(machine)
    # the method's own work bound (channel padding included) is far tighter for a vertex
    # whose grouping the tile's channels do not fill, e.g. a 16-channel AMP on depthwise
    work = vertex_cycles_lower_bound(machine, cand, conv_groups=c.G_t, in_chans=c.C_t,
                                     out_chans=c.K_t, positions=c.B_t * c.OR * c.OC,
                                     kernel_h=c.KH_t, kernel_w=p.kernel_w)
    if work is not None:
        bound = np.maximum(bound, work)
    keep = np.flatnonzero(fixed + bound <= cut)
    if not keep.size:
        return None
    c, fixed = c.take(keep), fixed[keep]
    try:
        conv = _vertex_cycles(p, machine, cand, c, c.K_t)
    except ValueError:
        return c     # _costs raises it again for the rows that fit
    keep = np.flatnonzero(fixed + conv <= cut)
    if not keep.size:
        return None
    c = c.take(keep)
    c["conv_t"] = conv[keep]
    return c


#: the columns of the compiled ``_beat_fixed``, in its order (the last two uint8)
_BEAT_COLUMNS = ("KH_t", "G_t", "K_t", "C_t", "M", "hs", "ws", "WR", "WC", "B_t", "win_b", "os_",
                 "later_b", "R", "f2", "f3")


def _beat_fixed(p: ConvParams, machine: MachineSpec, c: Table, bias: bool) -> np.ndarray | None:
    """:func:`_beat_prune`'s exchange-in and supersteps in the compiled loop, or None (no
    kernels, or a row outside its exact range: the NumPy code then computes them)."""
    kernel = plan_kernels()
    if kernel is None:
        return None
    scale, rate = exchange_rate(machine)
    cols = loop_columns(c, _BEAT_COLUMNS, ("reduce_needed", "cast_needed"))
    return kernel.beat_fixed(cols, (p.kernel_w, DTYPES[p.dtype].itemsize, p.in_h, p.in_w,
                                    MAX_INPUT_OWNERS, machine.tiles_per_exchange_bus, scale,
                                    rate, machine.exchange_overhead_cycles,
                                    machine.sync_cycles, bool(bias)))


def _reduction_cycles(p: ConvParams, machine: MachineSpec, c: Table
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per split vector, one slice's reduction: exchange cycles (with a fixed overhead per
    stage) and reduce-vertex cycles summed over the stages. Stage s's busiest tile
    receives ``f_s - 1`` pieces of its range and sums ``f_s`` partials per output
    (intermediate stages in the partials type)."""
    psz = DTYPES[p.partials].itemsize
    on = c.R > 1
    size = ceil_div(c.out_s, c.f1)
    red_x = np.where(on, exchange_cycles((c.f1 - 1) * size * psz, machine, with_overhead=True), 0)
    red_c = np.where(on, reduce_cycles_array(machine, size, c.f1, p.partials, p.dtype), 0)
    deep = np.flatnonzero(c.f2 > 1)
    if deep.size:
        # every stage of the multi-stage rows at once (stage 1 again: it now writes partials)
        n, f3 = deep.size, c.f3[deep]
        s1 = size[deep]
        s2 = ceil_div(s1, c.f2[deep])
        s3 = ceil_div(s2, f3)
        sz = np.concatenate([s1, s2, s3])
        f = np.concatenate([c.f1[deep], c.f2[deep], f3])
        last = np.concatenate([np.zeros(n, bool), f3 == 1, f3 > 1])
        cyc = np.zeros_like(sz)
        for sel, out_dt in ((last, p.dtype), (~last, p.partials)):
            if sel.any():
                cyc[sel] = reduce_cycles_array(machine, sz[sel], f[sel], p.partials, out_dt)
        x = exchange_cycles((f - 1) * sz * psz, machine, with_overhead=True)
        # a stage of depth 1 (absent third stage) costs nothing: cyc = cast 0 is masked
        cyc = np.where(f > 1, cyc, 0)
        red_c[deep] = cyc[:n] + cyc[n:2 * n] + cyc[2 * n:]
        red_x[deep] = x[:n] + x[n:2 * n] + x[2 * n:]
    return red_x, red_c


def _pick_near_tie(c: Table, total: np.ndarray) -> int:
    """Among plans within NEAR_TIE of the fastest, prefer no serial slices, then no column
    split, then fewer cycles and bytes: the cycle model has no per-message exchange cost,
    but column halos are one message per row and channel, so a near tie should not pay
    for them."""
    near = total <= total.min() * (1 + NEAR_TIE)
    order = np.lexsort((c.mem, total, c.ws > 1, c.kr > 1, c.serial > 1))
    return int(order[near[order]][0])
