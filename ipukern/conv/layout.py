"""Where a planned convolution's data lives on the tiles, and the copy tables that move it.

Given a :class:`~ipukern.conv.ConvParams` and its parallel split (batch, conv groups,
input channels, output rows, output columns, output channels), this module computes for
every tile its sub-convolution and lays out its buffers:

- **input window** ``[B_t][WR][G_t*C_t][WC]`` (input dtype): the rows/columns of the input
  the tile's outputs need, batch outermost then rows, channels inside a row. Rows outermost
  makes "rows r0..r1 of every channel" one contiguous range, so halo and replication
  copies are few and large.
- **weights** ``[G_t][K_t][C_t][kh][kw]``;
- **output/partials** ``[B_t][G_t][K_t][OR][OC]`` (NCHW-compatible).

Initial and final mappings (what "exchange from the initial mapping" means here):

- Input rows are partitioned into *core* blocks, one per (group, in-chan, batch, row, col)
  block of tiles: a block's core starts where its window starts and ends where the next
  block's begins, so every input element has exactly one home. The core is split between
  the first ``min(out_chan_split, MAX_INPUT_OWNERS)`` tiles that share the window (PopLibs
  assumes 1/N of a shared operand is already on each of the N tiles). The rest of each window arrives in
  the first exchange: the other tiles' shares of the core, and halo rows/columns from the
  following blocks.
- Weights live on one tile of each group of tiles that share them and are broadcast.
- Outputs stay where they are computed; with an input-channel split the partials are
  reduce-scattered and each reducing tile holds a slice of the output.

All tables are built with NumPy, vectorised over tiles, so building a program for 1472
tiles takes milliseconds and never touches tensor data.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import CopyTable
from ..core import expand, split_bounds
from .params import ConvParams

__all__ = ["Split", "split_ranges", "TileGeometry", "geometry", "window_copies",
           "owned_input_intervals", "owned_input_segments", "OwnedSegments", "merge_intervals",
           "StridedCopies"]


#: a block's input core is spread over at most this many of the out-chan tiles that share
#: it (PopLibs assumes all N of them; beyond a few owners the per-tile saving is < 25% of
#: a window while the copies get tiny and numerous)
MAX_INPUT_OWNERS = 4


@dataclass(frozen=True)
class Split:
    """Parallel split of the conv over tiles; tile index order (outermost first):
    group, reduction (in-chan block x kernel-row block, the kernel block innermost), batch,
    rows, cols, out-chan (out-chan innermost, so the tiles that share an input window are
    neighbours and pairs of them share an exchange bus).

    ``kernel_rows`` is PopLibs' kernel split along the kernel's rows (``kernelSplit[0]``):
    each tile convolves a block of kernel rows, and the partial sums of the
    ``in_chans x kernel_rows`` tiles of an output block are reduced like an in-channel
    split (the reduction depth is their product)."""

    groups: int = 1
    in_chans: int = 1
    batch: int = 1
    rows: int = 1
    cols: int = 1
    out_chans: int = 1
    #: kernel-row blocks (PopLibs' kernelSplit along the kernel height)
    kernel_rows: int = 1
    #: grains: conv groups per group-block, in-chans and out-chans per channel block
    group_grain: int = 1
    in_grain: int = 1
    out_grain: int = 1

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        """Tiles per axis in tile index order; axis 1 is the reduction axis."""
        return (self.groups, self.reduction, self.batch, self.rows, self.cols, self.out_chans)

    @property
    def reduction(self) -> int:
        """Partial sums per output: in-chan split x kernel-row split."""
        return self.in_chans * self.kernel_rows

    @property
    def n_tiles(self) -> int:
        return int(np.prod(self.shape))


def split_ranges(n: int, parts: int, grain: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Split ``n`` items into ``parts`` contiguous ranges of whole grains, sizes differing
    by at most one grain. Returns (start, stop) arrays of length ``parts``."""
    n_grains = -(-n // grain)
    if parts < 1 or parts > max(1, n_grains):
        raise ValueError(f"cannot split {n} items (grain {grain}) into {parts} parts")
    b = split_bounds(n, parts, grain)
    return b[:-1], b[1:]


@dataclass
class TileGeometry:
    """Per-tile sub-convolution (arrays of length n_tiles, in tile order)."""

    split: Split
    params: ConvParams
    # block indices (ii: along the reduction axis, in-chan block * kernel_rows + kernel block)
    gi: np.ndarray
    ii: np.ndarray
    bi: np.ndarray
    hi: np.ndarray
    wi: np.ndarray
    oi: np.ndarray
    # ranges: groups, in-chans (within group), images, output rows/cols, out-chans (within group)
    g0: np.ndarray
    g1: np.ndarray
    c0: np.ndarray
    c1: np.ndarray
    n0: np.ndarray
    n1: np.ndarray
    y0: np.ndarray
    y1: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    k0: np.ndarray
    k1: np.ndarray
    # input window rows/cols (global input coordinates) and the core part the block owns
    wr0: np.ndarray
    wr1: np.ndarray
    wc0: np.ndarray
    wc1: np.ndarray
    cr0: np.ndarray
    cr1: np.ndarray
    cc0: np.ndarray
    cc1: np.ndarray
    # kernel rows [kr0, kr1) the tile convolves (its kernel-row block)
    kr0: np.ndarray
    kr1: np.ndarray
    #: the most tiles sharing a window that own a share of its core (see input_owners)
    max_owners: int = MAX_INPUT_OWNERS

    @property
    def n_tiles(self) -> int:
        return self.gi.size

    # sizes per tile
    @property
    def G(self) -> np.ndarray:
        return self.g1 - self.g0

    @property
    def C(self) -> np.ndarray:
        return self.c1 - self.c0

    @property
    def B(self) -> np.ndarray:
        return self.n1 - self.n0

    @property
    def K(self) -> np.ndarray:
        return self.k1 - self.k0

    @property
    def OR(self) -> np.ndarray:
        return self.y1 - self.y0

    @property
    def OC(self) -> np.ndarray:
        return self.x1 - self.x0

    @property
    def KH(self) -> np.ndarray:
        """Kernel rows on the tile."""
        return self.kr1 - self.kr0

    @property
    def WR(self) -> np.ndarray:
        return self.wr1 - self.wr0

    @property
    def WC(self) -> np.ndarray:
        return self.wc1 - self.wc0

    @property
    def planes(self) -> np.ndarray:
        """Channels in a window row: G_t * C_t."""
        return self.G * self.C

    @property
    def row_org(self) -> np.ndarray:
        """Window row of output row 0's first tap of the tile's kernel block (negative: top
        padding)."""
        p = self.params
        return self.y0 * p.stride[0] - p.padding[0] + self.kr0 * p.dilation[0] - self.wr0

    @property
    def col_org(self) -> np.ndarray:
        p = self.params
        return self.x0 * p.stride[1] - p.padding[1] - self.wc0

    def window_elems(self) -> np.ndarray:
        return self.B * self.WR * self.planes * self.WC

    def weight_elems(self) -> np.ndarray:
        p = self.params
        return self.G * self.K * self.C * self.KH * p.kernel_w

    def output_elems(self) -> np.ndarray:
        return self.B * self.G * self.K * self.OR * self.OC


def _window_axis(n_out: int, parts: int, size: int, k: int, stride: int, pad: int, dil: int):
    """Per block along one spatial axis: output range, window range, core range."""
    o0, o1 = split_ranges(n_out, parts)
    need0, need1 = _needed(o0, o1, 0, k, size, stride, pad, dil)
    core0 = need0.copy()
    core0[0] = 0
    core1 = np.empty_like(core0)
    core1[:-1] = core0[1:]
    core1[-1] = size
    # a window must hold its block's core even where the kernel skips rows (stride > span)
    w0 = core0
    w1 = np.maximum(need1, core1)
    return o0, o1, w0, w1, core0, core1


def _needed(o0, o1, k0, k1, size: int, stride: int, pad: int, dil: int):
    """Input rows [need0, need1) that outputs [o0, o1) read with kernel taps [k0, k1),
    clipped to the input (empty, need1 == need0, when every tap lands in padding)."""
    need0 = np.clip(o0 * stride - pad + k0 * dil, 0, size)
    need1 = np.clip((o1 - 1) * stride - pad + (k1 - 1) * dil + 1, 0, size)
    return need0, np.maximum(need1, need0)


def geometry(params: ConvParams, split: Split, max_owners: int = MAX_INPUT_OWNERS) -> TileGeometry:
    """Every tile's sub-convolution, window and core ranges for this split; each core is
    owned by up to ``max_owners`` of the tiles sharing its window (:func:`input_owners`).

    With a kernel split, every kernel block's tiles hold the whole kernel's window (each
    reads its own rows of it: :attr:`TileGeometry.row_org`); the tiles of kernel block 0
    own the cores, the others own nothing."""
    p = params
    gi, ii, bi, hi, wi, oi = np.unravel_index(np.arange(split.n_tiles, dtype=np.int64), split.shape)
    ci, ki = np.divmod(ii, split.kernel_rows)
    gs0, gs1 = split_ranges(p.groups, split.groups, split.group_grain)
    cs0, cs1 = split_ranges(p.in_per_group, split.in_chans, split.in_grain)
    kr0, kr1 = split_ranges(p.kernel_h, split.kernel_rows)
    ns0, ns1 = split_ranges(p.batch, split.batch)
    ks0, ks1 = split_ranges(p.out_per_group, split.out_chans, split.out_grain)
    ys0, ys1, wr0, wr1, cr0, cr1 = _window_axis(p.out_h, split.rows, p.in_h, p.kernel_h,
                                                p.stride[0], p.padding[0], p.dilation[0])
    xs0, xs1, wc0, wc1, cc0, cc1 = _window_axis(p.out_w, split.cols, p.in_w, p.kernel_w,
                                                p.stride[1], p.padding[1], p.dilation[1])
    wr0, wr1, cr0, cr1 = wr0[hi], wr1[hi], cr0[hi], cr1[hi]
    if split.kernel_rows > 1:
        # every kernel block of an in-chan block holds the same window (the whole kernel's),
        # block 0's tiles own the cores: a later block receives exactly what the others
        # receive, so each piece is sent once (a broadcast), not once per block
        later = ki > 0
        cr0, cr1 = np.where(later, wr0, cr0), np.where(later, wr0, cr1)
    return TileGeometry(
        split=split, params=p, gi=gi, ii=ii, bi=bi, hi=hi, wi=wi, oi=oi,
        g0=gs0[gi], g1=gs1[gi], c0=cs0[ci], c1=cs1[ci], n0=ns0[bi], n1=ns1[bi],
        y0=ys0[hi], y1=ys1[hi], x0=xs0[wi], x1=xs1[wi], k0=ks0[oi], k1=ks1[oi],
        wr0=wr0, wr1=wr1, wc0=wc0[wi], wc1=wc1[wi],
        cr0=cr0, cr1=cr1, cc0=cc0[wi], cc1=cc1[wi], kr0=kr0[ki], kr1=kr1[ki],
        max_owners=max_owners)


def input_owners(geo: TileGeometry) -> int:
    """How many of the tiles sharing an input window own a share of its core: all of them
    up to ``geo.max_owners`` (``MAX_INPUT_OWNERS`` unless the program asked for more)."""
    return min(geo.split.out_chans, geo.max_owners)


def _owner_bounds(n_runs: np.ndarray, n_owners: int) -> np.ndarray:
    """Run-index boundaries of each owner's share: (len(n_runs), n_owners + 1)."""
    return (n_runs[:, None] * np.arange(n_owners + 1)[None, :]) // n_owners


def window_copies(geo: TileGeometry, win_off: np.ndarray, itemsize: int) -> CopyTable:
    """Copies that fill every tile's input window from the owners of each core.

    For each tile and each block of the same (group, in-chan, batch) whose core intersects
    the tile's window (its own block and the blocks below/right of it), the intersection
    is copied from the out-chan tiles that own it, skipping what the tile owns itself.
    """
    s = geo.split
    T = geo.n_tiles
    Os = s.out_chans
    P = geo.planes
    B = geo.B
    # tiles of the first out-chan index represent each block (geometry is shared); the
    # cores are those of kernel block 0 of the same in-chan block
    ki = geo.ii % s.kernel_rows
    block_first = np.arange(T) - geo.oi - ki * (s.batch * s.rows * s.cols * Os)
    pieces = []
    # with a kernel split, a core's rows go whole to the later kernel blocks of its own
    # row block and in part (halos) to earlier row blocks: cutting every copy at the
    # windows' ends makes them the same pieces, sent once
    cuts = (np.unique(geo.wr1[::s.cols * Os][:s.rows]) if s.kernel_rows > 1 and s.rows > 1
            else None)
    for dh in range(s.rows):
        ok_h = geo.hi + dh < s.rows
        # cores start further down as dh grows: stop once no window reaches this one
        ok_h &= geo.cr0[np.where(ok_h, block_first + dh * s.cols * Os, 0)] < geo.wr1
        if not ok_h.any():
            break
        for dw in range(s.cols):
            ok = ok_h & (geo.wi + dw < s.cols)
            nb = block_first + (dh * s.cols + dw) * Os
            ok &= geo.cc0[np.where(ok, nb, 0)] < geo.wc1
            if not ok.any():
                break
            t = np.flatnonzero(ok)
            n = nb[t]
            ra = np.maximum(geo.wr0[t], geo.cr0[n])
            rb = np.minimum(geo.wr1[t], geo.cr1[n])
            ca = np.maximum(geo.wc0[t], geo.cc0[n])
            cb = np.minimum(geo.wc1[t], geo.cc1[n])
            hit = (ra < rb) & (ca < cb)
            if not hit.any():
                continue
            t, n, ra, rb, ca, cb = t[hit], n[hit], ra[hit], rb[hit], ca[hit], cb[hit]
            if cuts is not None:
                t, n, ra, rb, ca, cb = _cut_rows(cuts, t, n, ra, rb, ca, cb)
            pieces.append(_block_pieces(geo, t, n, ra, rb, ca, cb, win_off, itemsize,
                                        input_owners(geo), P, B))
    return CopyTable.concat(pieces)


def _cut_rows(cuts: np.ndarray, t, n, ra, rb, ca, cb):
    """Cut each copy of rows [ra, rb) at the sorted row boundaries ``cuts`` inside it."""
    lo = np.searchsorted(cuts, ra, side="right")
    hi = np.searchsorted(cuts, rb, side="left")
    i, k = expand(hi - lo + 1)
    inner = lo[i] + k                                  # the cut ending piece k (if any)
    a = np.where(k == 0, ra[i], cuts[np.minimum(inner - 1, cuts.size - 1)])
    b = np.where(inner < hi[i], cuts[np.minimum(inner, cuts.size - 1)], rb[i])
    return t[i], n[i], a, b, ca[i], cb[i]


def _block_pieces(geo, t, n, ra, rb, ca, cb, win_off, itemsize, Os, P, B) -> CopyTable:
    """Copies of the intersection [ra,rb) x [ca,cb) of source block n's core into tile t's
    window, for every image of the block, split by owner."""
    Pt = P[t]
    Bt = B[t]
    CR = geo.cr1[n] - geo.cr0[n]                 # core rows of the source block
    full = (cb - ca == geo.WC[t]) & (cb - ca == geo.WC[n])
    # expand over images
    rep_b = Bt
    own, b = expand(rep_b)
    ti, ni = t[own], n[own]
    ra_i, rb_i, ca_i, cb_i = (np.repeat(v, rep_b) for v in (ra, rb, ca, cb))
    P_i, CR_i, full_i = np.repeat(Pt, rep_b), np.repeat(CR, rep_b), np.repeat(full, rep_b)
    out = []
    # full-width rows: rows ra..rb of all planes are one contiguous run range
    f = full_i
    if f.any():
        out.append(_run_range_pieces(geo, ti[f], ni[f], b[f], ra_i[f], rb_i[f], P_i[f], CR_i[f],
                                     win_off, itemsize, Os, geo.WC[ti[f]]))
    # partial-width rows: one copy per (row, plane) run of the intersection
    g = ~full_i
    if g.any():
        out.append(_partial_pieces(geo, ti[g], ni[g], b[g], ra_i[g], rb_i[g], ca_i[g], cb_i[g],
                                   P_i[g], CR_i[g], win_off, itemsize, Os))
    return CopyTable.concat(out)


def _run_range_pieces(geo, t, n, b, ra, rb, P, CR, win_off, itemsize, Os, WC) -> CopyTable:
    # run index in the source core: u = (b*CR + (r - cr0))*P + p; owners own contiguous
    # run ranges, so [u_a, u_b) splits into at most Os pieces
    N = geo.B[n] * CR * P                            # runs of the source core
    u_a = (b * CR + (ra - geo.cr0[n])) * P
    u_b = (b * CR + (rb - geo.cr0[n])) * P
    # owner o holds runs [N*o//Os, N*(o+1)//Os) (_owner_bounds); only the owners of runs
    # u_a .. u_b-1 can intersect: the largest o with N*o//Os <= u is ((u+1)*Os-1)//N
    live = (u_a < u_b) & (N > 0)
    Nz = np.maximum(N, 1)
    o_first = np.minimum(((u_a + 1) * Os - 1) // Nz, Os - 1)
    o_last = np.minimum((u_b * Os - 1) // Nz, Os - 1)
    r, k = expand(np.where(live, o_last - o_first + 1, 0))
    o = o_first[r] + k                               # ascending per row, as np.nonzero gave
    lo = np.maximum(u_a[r], (N[r] * o) // Os)
    hi = np.minimum(u_b[r], (N[r] * (o + 1)) // Os)
    src_tile = n[r] + o                              # out-chan tiles are consecutive
    keep = (lo < hi) & (src_tile != t[r])
    r, lo, hi, src_tile = r[keep], lo[keep], hi[keep], src_tile[keep]
    tt, nn = t[r], n[r]
    # run u -> (image, row, plane); both windows use [B][WR][P][WC]
    def off(tile_blk, u, wr0, WR):
        bb = u // (CR[r] * P[r])
        rem = u - bb * CR[r] * P[r]
        row = rem // P[r] + geo.cr0[nn]
        pl = rem - (row - geo.cr0[nn]) * P[r]
        return ((bb * WR + (row - wr0)) * P[r] + pl) * WC[r] * itemsize
    src_off = win_off[src_tile] + off(nn, lo, geo.wr0[nn], geo.WR[nn])
    dst_off = win_off[tt] + off(tt, lo, geo.wr0[tt], geo.WR[tt])
    return CopyTable(src_tile, src_off, tt, dst_off, (hi - lo) * WC[r] * itemsize)


def _partial_pieces(geo, t, n, b, ra, rb, ca, cb, P, CR, win_off, itemsize, Os) -> CopyTable:
    # one run per (row, plane); expand
    n_rows = rb - ra
    cnt = n_rows * P
    _, idx = expand(cnt)
    t_, n_, b_, ra_, ca_, cb_, P_, CR_ = (np.repeat(v, cnt) for v in (t, n, b, ra, ca, cb, P, CR))
    row = ra_ + idx // P_
    pl = idx % P_
    u = (b_ * CR_ + (row - geo.cr0[n_])) * P_ + pl
    U = geo.B[n_] * CR_ * P_
    owner_rank = ((u + 1) * Os - 1) // U           # largest o with U*o//Os <= u
    # guard the integer formula: move down while the boundary exceeds u
    owner_rank = np.minimum(owner_rank, Os - 1)
    while True:
        too_high = (U * owner_rank) // Os > u
        if not too_high.any():
            break
        owner_rank = owner_rank - too_high
    src_tile = n_ + owner_rank
    keep = src_tile != t_
    src_tile, t_, n_, b_, row, pl, ca_, cb_ = (v[keep] for v in (src_tile, t_, n_, b_, row, pl, ca_, cb_))
    def off(blk, wr0, WR, wc0, WC):
        return (((b_ * WR + (row - wr0)) * geo.planes[blk] + pl) * WC + (ca_ - wc0)) * itemsize
    src_off = win_off[src_tile] + off(n_, geo.wr0[n_], geo.WR[n_], geo.wc0[n_], geo.WC[n_])
    dst_off = win_off[t_] + off(t_, geo.wr0[t_], geo.WR[t_], geo.wc0[t_], geo.WC[t_])
    return CopyTable(src_tile, src_off, t_, dst_off, (cb_ - ca_) * itemsize)


@dataclass
class StridedCopies:
    """Host-to-tile copies of ``n_runs`` runs of ``run_bytes`` each: run i goes from byte
    ``src_off + i*src_stride`` of the host buffer to ``dst_off + i*dst_stride`` of ``tile``."""

    tile: np.ndarray
    dst_off: np.ndarray
    dst_stride: np.ndarray
    src_off: np.ndarray
    src_stride: np.ndarray
    run_bytes: np.ndarray
    n_runs: np.ndarray


def merge_intervals(tile: np.ndarray, start: np.ndarray, count: np.ndarray, off: np.ndarray,
                    itemsize: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge intervals that continue each other both in the tensor and in tile memory."""
    if start.size > 1 and (start[1:] < start[:-1]).any():
        o = np.argsort(start, kind="stable")                   # identity when sorted: skipped
        tile, start, count, off = tile[o], start[o], count[o], off[o]
    if start.size < 2:
        return tile, start, count, off
    joins = ((tile[1:] == tile[:-1]) & (start[1:] == start[:-1] + count[:-1])
             & (off[1:] == off[:-1] + count[:-1] * itemsize))
    head = np.r_[True, ~joins]
    run = np.cumsum(head) - 1
    total = np.bincount(run, weights=count).astype(np.int64)
    return tile[head], start[head], total, off[head]


def owned_input_intervals(geo: TileGeometry, win_off: np.ndarray, itemsize: int
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, StridedCopies]:
    """The input tensor's initial mapping: (tile, element start, count, byte offset) of every
    core run, each on the out-chan tile that owns it, inside the tile's window; and the same
    placement as strided copies from an NCHW host array (no host-side transpose).

    Element starts index the input in **NHCW** order ((image, row, channel, column)), the
    order in which a window row holds its channels: the op transposes the user's NCHW
    array once on the host, and a tile's share is then a few long runs instead of one run
    per (image, channel, row).
    """
    seg = owned_input_segments(geo, win_off, itemsize)
    p = geo.params
    start = ((seg.image * p.in_h + seg.row) * p.in_channels + seg.channel) * p.in_w + seg.col
    count = seg.n_planes * seg.width
    # the same segments as strided copies from an NCHW host array: n_planes channel rows of
    # `width` elements, H*W apart in the source and WC apart in the window
    nchw = ((seg.image * p.in_channels + seg.channel) * p.in_h + seg.row) * p.in_w + seg.col
    scatter = StridedCopies(tile=seg.tile.astype(np.int32), dst_off=seg.off,
                            dst_stride=seg.plane_bytes, src_off=nchw * itemsize,
                            src_stride=np.full(seg.tile.size, p.in_h * p.in_w * itemsize, np.int64),
                            run_bytes=seg.width * itemsize, n_runs=seg.n_planes)
    return merge_intervals(seg.tile, start, count, seg.off, itemsize) + (scatter,)


@dataclass
class OwnedSegments:
    """The input's core segments on their owner tiles: each is ``n_planes`` consecutive
    channels of one (image, row) and one conv group, columns ``[col, col + width)``, at
    byte ``off`` of the owner's window, planes ``plane_bytes`` apart."""

    tile: np.ndarray
    image: np.ndarray
    row: np.ndarray
    channel: np.ndarray
    n_planes: np.ndarray
    col: np.ndarray
    width: np.ndarray
    off: np.ndarray
    plane_bytes: np.ndarray


def owned_input_segments(geo: TileGeometry, win_off: np.ndarray, itemsize: int,
                         blocks: np.ndarray | None = None, planes: bool = False) -> OwnedSegments:
    """Every core segment of the input on the tile that owns it (see
    :func:`owned_input_intervals`, which merges them into the tensor's mapping); only those
    of ``blocks`` (first tiles of window-sharing groups) when given. Segments of partial
    rows hold one channel each (a tensor interval), or with ``planes`` all the channels of
    their group (a 2-D block of the window)."""
    p = geo.params
    if blocks is None:
        blocks = np.flatnonzero(geo.oi == 0)
    Os = input_owners(geo)
    P = geo.planes[blocks]
    CR = geo.cr1[blocks] - geo.cr0[blocks]
    CC = geo.cc1[blocks] - geo.cc0[blocks]
    n_rows = np.where(CC > 0, geo.B[blocks] * CR, 0)          # (image, row) pairs per core
    U = n_rows * P                                             # runs (image, row, plane)
    bounds = _owner_bounds(U, Os)                              # (blocks, Os + 1)
    # pieces: an owner's run range cut at (image, row) boundaries
    r_first = bounds[:, :-1] // np.maximum(P, 1)[:, None]
    r_last = -(-bounds[:, 1:] // np.maximum(P, 1)[:, None])
    n_piece = np.maximum(r_last - r_first, 0) * (bounds[:, 1:] > bounds[:, :-1])
    flat = n_piece.ravel()
    src, k = expand(flat)
    bi_, oi_ = np.divmod(src, Os)
    blk = blocks[bi_]
    Pp = P[bi_]
    rr = r_first.ravel()[src] + k                              # (image, row) index in core
    pa = np.maximum(bounds[bi_, oi_], rr * Pp) - rr * Pp
    pb = np.minimum(bounds[bi_, oi_ + 1], (rr + 1) * Pp) - rr * Pp
    tile = blk + oi_
    CRb = CR[bi_]
    bb = rr // CRb
    row = geo.cr0[blk] + rr - bb * CRb
    image = geo.n0[blk] + bb
    C_t = geo.C[blk]
    WRb, WCb = geo.WR[blk], geo.WC[blk]
    col0 = geo.cc0[blk]
    width = geo.cc1[blk] - col0
    full = (width == p.in_w) | planes
    # split each piece's planes at group boundaries (a group's channels are contiguous)
    # and, when the columns are partial, into single planes
    g_a, g_b = pa // C_t, (pb - 1) // C_t
    n_seg = np.where(full, g_b - g_a + 1, pb - pa)
    pi, q = expand(n_seg)
    fullp = full[pi]
    seg_a = np.where(fullp, np.maximum(pa[pi], (g_a[pi] + q) * C_t[pi]), pa[pi] + q)
    seg_b = np.where(fullp, np.minimum(pb[pi], (g_a[pi] + q + 1) * C_t[pi]), pa[pi] + q + 1)
    Cp, blkp = C_t[pi], blk[pi]
    g_l = seg_a // Cp
    ch = (geo.g0[blkp] + g_l) * p.in_per_group + geo.c0[blkp] + seg_a - g_l * Cp
    off = win_off[tile[pi]] + (((bb[pi] * WRb[pi] + (row[pi] - geo.wr0[blkp])) * Pp[pi] + seg_a)
                               * WCb[pi] + (col0[pi] - geo.wc0[blkp])) * itemsize
    return OwnedSegments(tile=tile[pi], image=image[pi], row=row[pi], channel=ch,
                         n_planes=seg_b - seg_a, col=col0[pi], width=width[pi], off=off,
                         plane_bytes=WCb[pi] * itemsize)
