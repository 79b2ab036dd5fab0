"""Receiving a fused step's windows and weights into a host thread's shadow row.

A conv program's first exchange writes every tile's input window and weights (ResNet-50,
batch 8: 7.3 GB per forward) and the conv vertices after it read them once. Even fused
(:mod:`ipukern.core.host.fused`: a tile's copies, then its vertices, while the bytes are in the
cache) every received byte is written into the arena, a distinct place per tile, so the
host writes them all back to DRAM (about 0.27 s per ResNet-50 forward on the 2-core test
host, a floor no copy loop gets under). When nothing but those vertices ever reads the
received bytes, the host instead receives them into a *shadow row*: one per host thread,
as long as a tile's row and reused from tile to tile, so it stays in the thread's cache.
The tile's own bytes inside the window (its share of the input, zero padding) are copied
in around them, and the vertices read window and weights there.

The simulated program is unchanged: the same copies move the same bytes (the cost model
never looked at where the host puts them), every vertex reads the same values and computes
the same bits, and cycles, bytes and memory are those of the program. Only the arena's
receive bytes differ: they keep their old contents. :func:`shadow_plan` allows that only
where nothing can tell:

- the exchange is :attr:`~ipukern.core.program.Exchange.receive_only` (its builder says its
  destinations are receive buffers: no tensor's bytes, never read by the host);
- a shadowed interval (a union of vertices' windows and weights on one tile) holds only
  whole copies, and no output or bias of the compute set overlaps it;
- no other step of the program (vertex regions, exchange sources; the program runs again
  from its first step) touches the bytes of a shadowed copy.

Everything else is received into the arena as before. The same conditions as the partials
fusion (:mod:`ipukern.core.host.fused_reduce`), which leaves its receive buffers unwritten.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["ShadowPlan", "batch_regions", "other_regions", "overlapping", "repeat_plan", "shadow_plan"]

Regions = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def overlapping(tile: np.ndarray, off: np.ndarray, nb: np.ndarray, r_tile: np.ndarray,
                r_off: np.ndarray, r_nb: np.ndarray) -> np.ndarray:
    """For each interval ``[off, off + nb)`` on ``tile``: whether it overlaps one of the
    regions ``r_*`` on the same tile (empty intervals overlap nothing)."""
    tile, off, nb = (np.asarray(a, np.int64).ravel() for a in (tile, off, nb))
    r_tile, r_off, r_nb = (np.asarray(a, np.int64).ravel() for a in (r_tile, r_off, r_nb))
    out = np.zeros(nb.size, bool)
    w = r_nb > 0
    if not w.any() or not (nb > 0).any():
        return out
    wt, wo, wn = r_tile[w], r_off[w], r_nb[w]
    row = int(max((off + nb).max(), (wo + wn).max())) + 1   # one line of addresses for all tiles
    ws = wt * row + wo
    o = np.argsort(ws, kind="stable")
    ws = ws[o]
    we = np.maximum.accumulate(ws + wn[o])
    rs = tile * row + off
    j = np.searchsorted(ws, rs + nb, side="left") - 1   # last region starting before the end
    return (nb > 0) & (j >= 0) & (we[np.maximum(j, 0)] > rs)


def batch_regions(b: Any) -> Regions:
    """Every (tile, offset, nbytes) region a vertex batch declares."""
    t = b.tiles.astype(np.int64)
    return [(t, np.asarray(off, np.int64).ravel(), np.asarray(nb, np.int64).ravel())
            for off, nb in b.regions]


def other_regions(steps: Sequence[Any], i: int) -> Regions:
    """What the program ``steps`` touches outside step ``i``'s exchange and step ``i + 1``'s
    compute set: every other compute set's vertex regions and every other exchange's
    sources (later in this run, or earlier in the next)."""
    regions: Regions = []
    for k, st in enumerate(steps):
        if st.compute is not None and k != i + 1:
            regions += [r for b in st.compute.batches if b.tiles.size for r in batch_regions(b)]
        if st.exchange is not None and k != i and st.exchange.n_copies:
            e = st.exchange
            regions.append((e.src_tile.astype(np.int64), e.src_offset, e.nbytes))
    return regions


def _cat(regions: Regions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not regions:
        z = np.zeros(0, np.int64)
        return z, z, z
    return tuple(np.concatenate([np.asarray(r[k], np.int64).ravel() for r in regions])
                 for k in range(3))


@dataclass
class ShadowPlan:
    """Which copies of a fused step land in the shadow row, what else is copied there, and
    which vertex operands are read from it (see :func:`shadow_plan`).

    Attributes
    ----------
    shadowed : bool array (n_copies,)
        The exchange pieces received into the shadow row.
    table : tuple of arrays
        ``(src_row int32, src_off, dst_off, nbytes, tile)`` of every copy into the shadow
        row, sorted by tile: the shadowed pieces and the tile's own bytes around them.
    vflags : uint8 array (n_vertices,)
        Bit 0: the vertex's window is read from the shadow row; bit 1: its weights.
    """

    shadowed: np.ndarray
    table: tuple[np.ndarray, ...]
    vflags: np.ndarray


def _merge(t: np.ndarray, o: np.ndarray, n: np.ndarray, row: int):
    """Union of intervals (keys ``t * row + o``): sorted (start, end) keys; touching
    intervals are merged."""
    keep = n > 0
    s = t[keep] * row + o[keep]
    e = s + n[keep]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    if s.size == 0:
        return s, e
    run_end = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_end[:-1]]
    return s[new], run_end[np.r_[new[1:], True]]   # a union ends where its running end is


def shadow_plan(copies: Sequence[np.ndarray], tiles: np.ndarray, win: np.ndarray,
                win_nb: np.ndarray, w: np.ndarray, w_nb: np.ndarray,
                own: Regions, others: Regions) -> ShadowPlan | None:
    """The shadow receive of a fused step, or None where no interval qualifies.

    ``copies``: the exchange's pieces ``(src_tile, src_off, dst_tile, dst_off, nbytes)``;
    ``tiles``, ``win``, ``w`` (and their sizes): the compute set's fusable vertices; ``own``:
    the compute set's outputs and biases (no shadowed interval may overlap them);
    ``others``: :func:`other_regions` (no shadowed piece may overlap them; the tile's own
    bytes copied around the pieces stay in the arena, so other steps may use those). The
    caller has checked ``receive_only``.
    """
    st, so, dt, do, nb = (np.asarray(c, np.int64) for c in copies)
    vt = np.asarray(tiles, np.int64)
    ct, co, cn = np.r_[vt, vt], np.r_[win, w].astype(np.int64), np.r_[win_nb, w_nb].astype(np.int64)
    if cn.size == 0 or nb.size == 0:
        return None
    row = int(max((co + cn).max(), (do + nb).max(), (so + nb).max())) + 1
    ms, me = _merge(ct, co, cn, row)
    # each piece: the interval it starts in, and whether it ends in it too
    cs = dt * row + do
    ce = cs + nb
    j = np.searchsorted(ms, cs, side="right") - 1
    jj = np.maximum(j, 0)
    starts_in = (j >= 0) & (cs < me[jj])
    inside = starts_in & (ce <= me[jj]) & (nb > 0)
    # the last interval starting before the piece ends: a piece reaching into an interval
    # it does not lie inside spoils it (and the interval it starts in)
    k = np.searchsorted(ms, ce, side="left") - 1
    reaches = (k >= 0) & (me[np.maximum(k, 0)] > cs) & (nb > 0)
    bad = np.zeros(ms.size, bool)
    partial = reaches & ~inside
    if partial.any():
        # a piece not inside one interval spoils every interval it covers
        mark = np.zeros(ms.size + 1, np.int64)
        np.add.at(mark, np.where(starts_in, j, j + 1)[partial], 1)
        np.add.at(mark, k[partial] + 1, -1)
        bad |= np.cumsum(mark)[:-1] > 0
    # an interval the compute set writes (outputs) or reads besides windows and weights
    # (biases) stays in the arena, and so does one holding a piece another step touches
    bad |= overlapping(ms // row, ms % row, me - ms, *_cat(own))
    live = inside & overlapping(dt, do, nb, *_cat(others))
    bad[jj[live]] = True
    has = np.zeros(ms.size, bool)
    has[jj[inside]] = True
    on = has & ~bad
    if not on.any():
        return None
    shadowed = inside & on[jj]
    # the rest of each shadowed interval comes from the tile itself: the gaps between its
    # pieces (both lists sorted and interleaved: start <= end of each gap)
    ps, pe = cs[shadowed], ce[shadowed]
    gs = np.sort(np.r_[ms[on], pe])
    ge = np.sort(np.r_[ps, me[on]])
    g = ge > gs
    gs, ge = gs[g], ge[g]
    f_tile = gs // row
    f_off = gs % row
    src_row = np.r_[st[shadowed], f_tile]
    src_off = np.r_[so[shadowed], f_off]
    dst_off = np.r_[do[shadowed], f_off]
    nbytes = np.r_[nb[shadowed], ge - gs]
    tile = np.r_[dt[shadowed], f_tile]
    order = np.lexsort((dst_off, tile))
    table = (np.ascontiguousarray(src_row[order], np.int32), np.ascontiguousarray(src_off[order]),
             np.ascontiguousarray(dst_off[order]), np.ascontiguousarray(nbytes[order]),
             np.ascontiguousarray(tile[order]))
    vflags = np.zeros(vt.size, np.uint8)
    for bit, off, n in ((1, win, win_nb), (2, w, w_nb)):
        key = vt * row + np.asarray(off, np.int64)
        m = np.searchsorted(ms, key, side="right") - 1
        ok = (np.asarray(n) > 0) & (m >= 0) & on[np.maximum(m, 0)]
        vflags[ok] |= bit
    return ShadowPlan(shadowed, table, vflags)


def _group_ids(*cols: np.ndarray) -> np.ndarray:
    """Dense ids of the rows of ``cols`` (equal rows, equal ids), without packing the
    columns into one integer that could overflow."""
    n = cols[0].size
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort(cols[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for c in cols:
        cs = c[order]
        new[1:] |= cs[1:] != cs[:-1]
    gid = np.empty(n, np.int64)
    gid[order] = np.cumsum(new) - 1
    return gid


def repeat_plan(table: tuple[np.ndarray, ...], items: np.ndarray, stride: int):
    """The shadow copies of each item that the item ``stride`` before it has already made.

    Thread k runs items k, k + n, k + 2n, ... (``exchange_conv``'s static round-robin) into
    its own shadow row, so when item w runs right after item w - n on the same thread, the
    row still holds every byte w - n copied into it (its vertices write only the tiles'
    rows; the sources are not written by the compute set). A copy of item w whose bytes lie
    inside one copy, or a run of adjacent copies from the same source row at the same
    source-to-destination shift, of item w - n need not be made again: the tiles of an
    out-channel group read the same window, so consecutive items on a thread mostly
    receive the same bytes. The kernel checks at run time that the thread's previous item
    was w - n and otherwise makes every copy.

    Returns the table with each item's copies reordered as (needed, repeated) and, per
    item, where its repeated copies start (``mid``, length ``items.size``).
    """
    src_row, src_off, dst_off, nbytes, tile = table
    item = np.searchsorted(items, tile)
    src_row64 = src_row.astype(np.int64)
    delta = src_off - dst_off
    row = int((dst_off + nbytes).max()) + 1 if nbytes.size else 1
    # runs of adjacent copies of one item with the same source row and shift
    o = np.lexsort((dst_off, delta, src_row64, item))
    it, sr, dl, ds, de = item[o], src_row64[o], delta[o], dst_off[o], dst_off[o] + nbytes[o]
    same = np.r_[False, (it[1:] == it[:-1]) & (sr[1:] == sr[:-1]) & (dl[1:] == dl[:-1])
                 & (ds[1:] == de[:-1])]
    r_start = ds[~same]
    r_end = de[np.r_[~same[1:], True]]     # a run's last copy ends it (its copies abut)
    r_it, r_sr, r_dl = it[~same], sr[~same], dl[~same]
    # look up each copy in the runs of the item `stride` before it
    q = item >= stride
    gid = _group_ids(np.r_[r_it, item[q] - stride], np.r_[r_sr, src_row64[q]],
                     np.r_[r_dl, delta[q]])
    g_run, g_q = gid[:r_start.size], gid[r_start.size:]
    run_key = g_run * row + r_start        # runs are sorted by (item, row, shift, start)
    ok = np.argsort(run_key, kind="stable")
    run_key, r_end_s = run_key[ok], r_end[ok]
    qk = g_q * row + dst_off[q]
    j = np.searchsorted(run_key, qk, side="right") - 1
    jj = np.maximum(j, 0)
    hit = (j >= 0) & (run_key[jj] // row == g_q) & (r_end_s[jj] >= dst_off[q] + nbytes[q])
    repeated = np.zeros(item.size, bool)
    repeated[np.flatnonzero(q)[hit]] = True
    order = np.lexsort((repeated, item))   # stable: needed copies first, in table order
    out = tuple(np.ascontiguousarray(c[order]) for c in table)
    first_rep = np.searchsorted(item[order] * 2 + repeated[order], np.arange(items.size) * 2 + 1)
    return out, first_rep.astype(np.int64)
