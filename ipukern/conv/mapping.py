"""A conv's input and output tile mappings generated straight in element order.

When the plan splits the columns, every tile holds short runs (one per (image, row,
channel)): up to 1.6 M intervals per ResNet-50 layer, and building them run by run per
tile and then sorting them by element dominated a cold network estimate. The split is a
product of per-axis partitions (images, channels, rows, column blocks), so the tile, the
byte offset and the element start of every run are sums and products of per-axis terms:
these functions broadcast them over the (image, channel-or-row, ..., column block) grid,
which *is* element order, so nothing is sorted, and the few per-axis terms cost nothing.

They cover the column-split cases; the general builders
(:func:`ipukern.conv.layout.owned_input_intervals`, ``build._output_tensor``) handle the
rest and are the reference the tests compare these with, interval for interval.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layout import TileGeometry, _owner_bounds, input_owners

__all__ = ["ColumnSplitMapping", "MappingSummary", "channel_tile_pairs", "column_split_input",
           "column_split_output", "input_summary", "output_summary", "periodic_starts", "record_summary",
           "runs_per_tile"]


@dataclass(frozen=True, eq=False)
class MappingSummary:
    """What a column-split builder knows about a view without listing its intervals:
    elements per plan tile, its interval starts (every ``r * period + x`` for x in
    ``phases``), its intervals per plan tile (``runs_per_tile``; each lies inside one
    aligned period) and, for an NCHW output, its sorted distinct ``channel * n_tiles +
    tile`` pairs (``channel_tiles``, else None)."""

    per_tile: np.ndarray
    period: int
    phases: np.ndarray
    runs_per_tile: np.ndarray
    channel_tiles: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class ColumnSplitMapping:
    """A column-split tensor view: its intervals (tile, element start, count, byte offset)
    in element order, and their summary."""

    tile: np.ndarray
    start: np.ndarray
    count: np.ndarray
    offset: np.ndarray
    summary: MappingSummary


def _along(geo: TileGeometry, axis: int, *arrays: np.ndarray) -> list[np.ndarray]:
    """Per block along split axis ``axis`` (0 group .. 5 out-chan), the value of each
    per-tile array at the block's tile whose other block indices are 0."""
    shape = geo.split.shape
    stride = int(np.prod(shape[axis + 1:], dtype=np.int64))
    t = np.arange(shape[axis], dtype=np.int64) * stride
    return [a[t] for a in arrays]


def _block(ends: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Block of each value for blocks [.., ends[i]) partitioning the axis (empty blocks
    are skipped: their end equals the next one's start)."""
    return np.searchsorted(ends, v, side="right")


def input_summary(geo: TileGeometry) -> MappingSummary | None:
    """The summary of :func:`column_split_input`'s view without its intervals, or None for
    a plan it does not cover."""
    p, s = geo.params, geo.split
    W = p.in_w
    cc0, cc1 = _along(geo, 4, geo.cc0, geo.cc1)
    width = cc1 - cc0
    if s.cols < 2 or s.kernel_rows > 1 or (width == W).any():
        return None     # (a kernel split's later blocks own no core: the general builder)
    # each block's core runs are split between its owners by run ranges
    n_own = input_owners(geo)
    blocks = np.flatnonzero(geo.oi == 0)
    runs = np.diff(_owner_bounds(geo.B[blocks] * (geo.cr1 - geo.cr0)[blocks] * geo.planes[blocks],
                                 n_own), axis=1)
    per_tile = np.zeros(geo.n_tiles, np.int64)
    per_tile[blocks[:, None] + np.arange(n_own)] = runs * (geo.cc1 - geo.cc0)[blocks, None]
    return MappingSummary(per_tile, W, cc0[width > 0], _runs(per_tile, geo.cc1 - geo.cc0))


def _runs(per_tile: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Intervals per tile of a column-split view: every interval of a tile is one row
    piece of its column block's ``width`` elements."""
    return np.where(width > 0, per_tile // np.maximum(width, 1), 0)


def column_split_input(geo: TileGeometry, win_off: np.ndarray, itemsize: int
                       ) -> ColumnSplitMapping | None:
    """The input's initial mapping (NHCW order, as
    :func:`~ipukern.conv.layout.owned_input_intervals` gives it), or None when some block's
    core holds full rows (those runs merge; the general builder handles them). A run
    starts at each column block of every row: period W, phases the blocks' first columns."""
    summary = input_summary(geo)
    if summary is None:
        return None
    p, s = geo.params, geo.split
    N, C, H, W = p.input_shape
    cc0, cc1, wc0, wc1 = _along(geo, 4, geo.cc0, geo.cc1, geo.wc0, geo.wc1)
    width = cc1 - cc0
    gs0, gs1 = _along(geo, 0, geo.g0, geo.g1)
    cs0, cs1 = _along(geo, 1, geo.c0, geo.c1)
    ns0, ns1 = _along(geo, 2, geo.n0, geo.n1)
    cr0, cr1, wr0, wr1 = _along(geo, 3, geo.cr0, geo.cr1, geo.wr0, geo.wr1)
    Rs, Bs, Rows, Cols, Os = s.shape[1:]
    # per channel (axis 2 of the grid): its group/in-chan block and plane in the window row
    c = np.arange(C, dtype=np.int64)
    g, cg = np.divmod(c, p.in_per_group)
    gi, ii = _block(gs1, g), _block(cs1, cg)
    Ct = cs1[ii] - cs0[ii]
    P = (gs1[gi] - gs0[gi]) * Ct
    plane = (g - gs0[gi]) * Ct + cg - cs0[ii]
    t_c = (gi * Rs + ii) * (Bs * Rows * Cols * Os)
    # per image (axis 0) and per row (axis 1)
    n = np.arange(N, dtype=np.int64)
    bi = _block(ns1, n)
    b, Bt = n - ns0[bi], ns1[bi] - ns0[bi]
    h = np.arange(H, dtype=np.int64)
    hi = _block(cr1, h)
    CR, r_core, r_win, WR = cr1[hi] - cr0[hi], h - cr0[hi], h - wr0[hi], wr1[hi] - wr0[hi]
    # per column block with a core (axis 3)
    wi = np.flatnonzero(width > 0)
    width, col0, WC = width[wi], cc0[wi], wc1[wi] - wc0[wi]
    # grid axes: image (N, 1, 1), row (1, H, 1), channel (1, 1, C); column block last
    b3, Bt3 = b[:, None, None], Bt[:, None, None]
    CR3, rc3, rw3, WR3 = (a[None, :, None] for a in (CR, r_core, r_win, WR))
    P3, pl3 = P[None, None, :], plane[None, None, :]
    # run u of the block's core ((image, row, plane) order) and its owner among the
    # out-chan tiles sharing the window: the largest o with U * o // n_own <= u
    u = (b3 * CR3 + rc3) * P3 + pl3
    U = Bt3 * CR3 * P3
    n_own = input_owners(geo)
    owner = ((u + 1) * n_own + U - 1) // U - 1
    blk = ((bi * (Rows * Cols * Os))[:, None, None] + (hi * (Cols * Os))[None, :, None]
           + t_c[None, None, :] + owner)
    tile = blk[..., None] + wi * Os
    row = (n[:, None, None] * H + h[None, :, None]) * C + c[None, None, :]
    start = row[..., None] * W + col0
    pos = (b3 * WR3 + rw3) * P3 + pl3                      # (image, row, plane) in the window
    off = win_off[tile] + (pos[..., None] * WC + (col0 - wc0[wi])) * itemsize
    count = np.broadcast_to(width, tile.shape)
    return ColumnSplitMapping(tile.ravel(), start.ravel(), count.ravel(), off.ravel(), summary)


def output_summary(geo: TileGeometry, n_tiles: int) -> MappingSummary | None:
    """The summary of :func:`column_split_output`'s view without its intervals, or None
    for a plan it does not cover."""
    p, s = geo.params, geo.split
    if s.cols < 2 or s.reduction != 1:
        return None
    gi, oi = _out_channel_blocks(geo)
    Bs, Rows, Cols, Os = s.shape[2:]
    # every (image, row, column) block of a channel's (group, out-chan) block holds it
    ch = np.arange(p.out_channels, dtype=np.int64)
    pairs = ((ch * n_tiles + gi * (Bs * Rows * Cols * Os) + oi)[:, None, None, None]
             + (np.arange(Bs) * (Rows * Cols * Os))[:, None, None] + (np.arange(Rows) * (Cols * Os))[:, None]
             + np.arange(Cols) * Os)
    xs0, = _along(geo, 4, geo.x0)
    per_tile = geo.output_elems()
    return MappingSummary(per_tile, p.out_w, xs0, _runs(per_tile, geo.x1 - geo.x0), pairs.ravel())


def _out_channel_blocks(geo: TileGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Each output channel's group block and out-chan block."""
    gs1, = _along(geo, 0, geo.g1)
    ks1, = _along(geo, 5, geo.k1)
    gg, kg = np.divmod(np.arange(geo.params.out_channels, dtype=np.int64), geo.params.out_per_group)
    return _block(gs1, gg), _block(ks1, kg)


def column_split_output(geo: TileGeometry, out_off: np.ndarray, ks: np.ndarray, itemsize: int,
                        n_tiles: int) -> ColumnSplitMapping | None:
    """The output mapping (NCHW) without an input-channel split, as
    ``build._output_tensor`` gives it, or None for a plan it does not cover.

    ``ks`` (tiles, serial + 1): each tile's serial slice bounds of its out-chans; slice j
    of a tile is its ``[B][G][K_j][OR][OC]`` block, the slices one after another.
    """
    summary = output_summary(geo, n_tiles)
    if summary is None:
        return None
    p, s = geo.params, geo.split
    N, Co, OH, OW = p.output_shape
    gs0, gs1 = _along(geo, 0, geo.g0, geo.g1)
    ns0, ns1 = _along(geo, 2, geo.n0, geo.n1)
    ys0, ys1 = _along(geo, 3, geo.y0, geo.y1)
    xs0, xs1 = _along(geo, 4, geo.x0, geo.x1)
    ks0, ks_o = _along(geo, 5, geo.k0, ks)
    Bs, Rows, Cols, Os = s.shape[2:]
    # per out channel (grid axis 1): group and out-chan blocks, serial slice, place in it
    ch = np.arange(Co, dtype=np.int64)
    gi, oi = _out_channel_blocks(geo)
    gg, kg = np.divmod(ch, p.out_per_group)
    Gt, g = gs1[gi] - gs0[gi], gg - gs0[gi]
    kb = kg - ks0[oi]
    bounds = ks_o[oi]                                       # (Co, serial + 1)
    j = (bounds[:, 1:] <= kb[:, None]).sum(axis=1)
    r = np.arange(Co)
    ksj, Kj = bounds[r, j], bounds[r, j + 1] - bounds[r, j]
    k = kb - ksj
    # per image (axis 0) and output row (axis 2)
    n = np.arange(N, dtype=np.int64)
    bi = _block(ns1, n)
    b, Bt = n - ns0[bi], ns1[bi] - ns0[bi]
    yr = np.arange(OH, dtype=np.int64)
    hi = _block(ys1, yr)
    y, ORt = yr - ys0[hi], ys1[hi] - ys0[hi]
    b3, Bt3 = b[:, None, None], Bt[:, None, None]
    G3, g3, K3, k3, ks3 = (a[None, :, None] for a in (Gt, g, Kj, k, ksj))
    y3, OR3 = y[None, None, :], ORt[None, None, :]
    # slice j starts after the earlier slices' B*G*K*OR*OC outputs; the run is row y of
    # channel k of (image b, group g) in it, OC elements (the column block) per row
    run = Bt3 * G3 * OR3 * ks3 + ((b3 * G3 + g3) * K3 + k3) * OR3 + y3
    blk = ((bi * (Rows * Cols * Os))[:, None, None] + (gi * (Bs * Rows * Cols * Os) + oi)[None, :, None]
           + (hi * (Cols * Os))[None, None, :])
    OC = xs1 - xs0
    tile = blk[..., None] + np.arange(Cols, dtype=np.int64) * Os
    row = (n[:, None, None] * Co + ch[None, :, None]) * OH + yr[None, None, :]
    start = row[..., None] * OW + xs0
    off = out_off[tile] + run[..., None] * OC * itemsize
    count = np.broadcast_to(OC, tile.shape)
    return ColumnSplitMapping(tile.ravel(), start.ravel(), count.ravel(), off.ravel(), summary)


def periodic_starts(mapping) -> tuple[int, np.ndarray] | None:
    """``(period, phases)`` when the mapping's interval starts are exactly the positions
    ``r * period + x`` (every r, every x in the sorted ``phases``), as the column-split
    builders record it; None if unknown. Counting the copies of a rearrangement between
    two such mappings is then arithmetic on the phases, not on millions of starts."""
    return mapping.__dict__.get("_periodic_starts")


def channel_tile_pairs(mapping, channels: int, inner: int, n_tiles: int) -> np.ndarray | None:
    """Sorted distinct ``channel * n_tiles + tile`` over the mapping's elements, channel
    ``(i // inner) % channels``, when a column-split output builder recorded them for this
    channel split (an NCHW output's own channels); None otherwise."""
    got = mapping.__dict__.get("_channel_tiles")
    return got[1] if got is not None and got[0] == (channels, inner, n_tiles) else None


def runs_per_tile(mapping, n_tiles: int) -> tuple[int, np.ndarray] | None:
    """``(period, intervals per tile)`` when a column-split builder recorded them for
    ``n_tiles`` tiles (every interval then lies inside one aligned ``period`` of elements);
    None if unknown. Lets a per-interval count be taken without listing the intervals."""
    got = mapping.__dict__.get("_runs_per_tile")
    return got[1:] if got is not None and got[0] == n_tiles else None


def record_summary(mapping, summary: MappingSummary, shape, n_tiles: int) -> None:
    """Attach what ``summary`` knows to ``mapping`` (per-tile counts and intervals for
    ``n_tiles`` tiles, periodic starts, and an NCHW ``shape``'s channel-tile pairs), where
    :func:`periodic_starts`, :func:`runs_per_tile`, :func:`channel_tile_pairs` and
    ``elems_per_tile`` find it."""
    per_tile = np.zeros(n_tiles, np.int64)
    per_tile[:summary.per_tile.size] = summary.per_tile
    mapping.__dict__["_per_tile"] = {n_tiles: per_tile}
    runs = np.zeros(n_tiles, np.int64)
    runs[:summary.runs_per_tile.size] = summary.runs_per_tile
    mapping.__dict__["_runs_per_tile"] = (n_tiles, summary.period, runs)
    mapping.__dict__["_periodic_starts"] = (summary.period, summary.phases)
    if summary.channel_tiles is not None:
        mapping.__dict__["_channel_tiles"] = ((shape[1], shape[2] * shape[3], n_tiles),
                                              summary.channel_tiles)
