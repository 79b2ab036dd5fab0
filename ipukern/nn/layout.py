"""Tile-resident tensors of a network and the rearrangement exchanges between layouts.

A network keeps every activation in tile memory. Where it lives is a :class:`Layout`: the
tensor's logical shape (NCHW for images, (tokens, features) for sequences), an optional
axis permutation giving the order its elements are *stored* in (a conv wants NHCW), and a
:class:`~ipukern.TileMapping` over that stored order. Each op states the layout it wants
for each input; when the producer's layout differs, a :class:`Rearrangement` (a table of
tile-to-tile copies, like PopLibs' rearrangement copy when a tensor arrives in a layout the
planner did not ask for) moves the bytes and is costed like every exchange.

A :class:`Resident` is a tensor's bytes in execute mode: one row per tile, holding that
tile's elements in stored order (the tile's share of its SRAM), so a tensor never passes
through a host array between layers.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..core import cost
from ..core import SuperstepRecord
from ..core import CopyTable, copy_runs
from ..core import TileMapping
from ..dtypes import DTYPES
from ..machine import MachineSpec
from .host.buffers import take_buffer

__all__ = ["Layout", "Rearrangement", "Resident", "copy_table", "lazy_layout", "linear_layout",
           "rearrangement_loads", "rows_layout"]


@dataclass(eq=False)
class Layout:
    """Where a tensor's elements live.

    Attributes
    ----------
    shape : tuple of int
        Logical shape.
    dtype : str
    mapping : TileMapping
        Intervals of the *stored* flat order (the logical tensor transposed by ``perm``).
    perm : tuple of int, optional
        Stored order = ``logical.transpose(perm)``; None = logical order.
    offsets : ndarray, optional
        Byte offset of each mapping interval inside its tile; None = *packed* (a tile's
        intervals one after another from byte 0, the :class:`Resident` form).
    """

    shape: tuple[int, ...]
    dtype: str
    mapping: TileMapping
    perm: tuple[int, ...] | None = None
    offsets: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.shape = tuple(int(s) for s in self.shape)
        if self.perm is not None and tuple(self.perm) == tuple(range(len(self.shape))):
            self.perm = None
        n = int(np.prod(self.shape, dtype=np.int64))
        if self.mapping.n_elems != n:
            raise ValueError(f"layout of shape {self.shape} ({n} elements) has a mapping of "
                             f"{self.mapping.n_elems} elements")

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def n_elems(self) -> int:
        return self.mapping.n_elems

    def elems_per_tile(self, n_tiles: int) -> np.ndarray:
        cache = self.__dict__.setdefault("_per_tile", {})
        if n_tiles not in cache:
            cache[n_tiles] = self.mapping.elems_per_tile(n_tiles)
        return cache[n_tiles]

    def bytes_per_tile(self, n_tiles: int) -> np.ndarray:
        """Bytes each tile holds (int64, length n_tiles)."""
        return self.elems_per_tile(n_tiles) * self.itemsize

    @cached_property
    def packed_offsets(self) -> np.ndarray:
        """Byte offset of each interval when a tile's intervals are stored back to back."""
        m = self.mapping
        if m.tile.size and int(m.tile.min()) >= 0:
            from .._kernels import _runs       # a running sum per tile, in start order
            return _runs.packed_offsets(np.ascontiguousarray(m.tile, np.int32),
                                        np.ascontiguousarray(m.count, np.int64), self.itemsize,
                                        int(m.tile.max()) + 1)
        # the mapping is sorted by start: a stable sort by tile keeps element order per tile
        order = np.argsort(m.tile, kind="stable")
        nb = m.count[order] * self.itemsize
        tiles = m.tile[order]
        csum = np.cumsum(nb) - nb
        first = np.r_[True, tiles[1:] != tiles[:-1]] if tiles.size else np.zeros(0, bool)
        head = np.maximum.accumulate(np.where(first, np.arange(tiles.size), 0)) if tiles.size else tiles
        out = np.empty(tiles.size, dtype=np.int64)
        out[order] = csum - csum[head] if tiles.size else csum
        return out

    @property
    def byte_offsets(self) -> np.ndarray:
        return self.packed_offsets if self.offsets is None else self.offsets

    def same_as(self, other: Layout) -> bool:
        """Same elements on the same tiles in the same stored order (no copy needed)."""
        a, b = self.mapping, other.mapping
        if not (self.perm == other.perm and self.dtype == other.dtype
                and self.n_elems == other.n_elems
                and (self.perm is None or self.shape == other.shape)):
            return False
        if a is b:
            return True
        if _periodic_differ(a, b):                  # without listing the intervals
            return False
        return (np.array_equal(a.tile, b.tile) and np.array_equal(a.start, b.start)
                and np.array_equal(a.count, b.count))

    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`pieces` without the byte offsets ``(logical_start, count, tile)``: for a
        layout in logical order these are the mapping's columns (nothing computed)."""
        if self.perm is None and "_pieces" not in self.__dict__:
            m = self.mapping
            return m.start, m.count, m.tile
        return self.pieces()[:3]

    def pieces(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Runs contiguous in both the logical and the stored order, sorted by logical
        index: ``(logical_start, count, tile, byte_offset)``; they partition [0, n)."""
        cached = self.__dict__.get("_pieces")
        if cached is not None:
            return cached
        m = self.mapping
        off = self.byte_offsets
        if self.perm is None:
            res = (m.start, m.count, m.tile.astype(np.int64), off)
        else:
            res = _permuted_pieces(self.shape, self.perm, m, off, self.itemsize)
        self.__dict__["_pieces"] = res
        return res


class _LazyOffsetsLayout(Layout):
    """A :class:`Layout` whose byte offsets come from a function on first use (see
    :func:`lazy_layout`)."""

    @property  # type: ignore[override]
    def offsets(self) -> np.ndarray:
        off = self.__dict__.get("_offsets")
        if off is None:
            off = self.__dict__["_offsets"] = self.__dict__["_offsets_fn"]()
        return off

    @offsets.setter
    def offsets(self, value) -> None:
        self.__dict__["_offsets"] = value


def lazy_layout(shape: Sequence[int], dtype: str, mapping: TileMapping, perm, offsets_fn) -> Layout:
    """A layout with offsets (never packed) computed by ``offsets_fn()`` when first read:
    with a :class:`~ipukern.core.tensor.LazyTileMapping`, an estimate that needs only
    per-tile bytes and copy counts never builds the intervals (execution does)."""
    lay = _LazyOffsetsLayout(tuple(shape), dtype, mapping, perm)
    lay.__dict__["_offsets_fn"] = offsets_fn
    return lay


def _rows_of(shape, perm) -> tuple[int, int]:
    """``(k, row)``: the longest trailing block of k axes the permutation leaves in place,
    and its element count (a stored row that is contiguous in logical order too)."""
    nd = len(shape)
    k = 0
    while k < nd and perm[nd - 1 - k] == nd - 1 - k:
        k += 1
    return k, (int(np.prod(shape[nd - k:], dtype=np.int64)) if k else 1)


def _logical_rows(shape, perm, k: int, r: np.ndarray) -> np.ndarray:
    """Logical row index of each stored row index ``r`` (rows of the k trailing axes)."""
    nd = len(shape)
    lead = perm[:nd - k]
    if not lead:
        return np.zeros_like(r)
    idx = np.unravel_index(r, [shape[p] for p in lead])
    coords = [None] * (nd - k)
    for pos, axis in enumerate(lead):
        coords[axis] = idx[pos]
    return np.ravel_multi_index(coords, [shape[i] for i in range(nd - k)])


def _permuted_pieces(shape, perm, m: TileMapping, off: np.ndarray, isz: int):
    k, row = _rows_of(shape, perm)
    # cut stored intervals at row boundaries
    s, c = m.start, m.count
    first_row = s // row
    last_row = (s + c - 1) // row
    nrows = last_row - first_row + 1
    rep = np.repeat(np.arange(s.size), nrows)
    r = np.repeat(first_row, nrows) + (np.arange(rep.size) - np.repeat(np.cumsum(nrows) - nrows, nrows))
    a = np.maximum(s[rep], r * row)
    b = np.minimum(s[rep] + c[rep], (r + 1) * row)
    boff = off[rep] + (a - s[rep]) * isz
    lrow = _logical_rows(shape, perm, k, r)
    lstart = lrow * row + (a - r * row)
    order = np.argsort(lstart, kind="stable")
    return (lstart[order], (b - a)[order], m.tile[rep][order].astype(np.int64), boff[order])


def linear_layout(shape: Sequence[int], dtype: str, n_tiles: int, *, grain: int = 1,
                  perm: tuple[int, ...] | None = None) -> Layout:
    """Elements spread evenly over the first tiles in whole grains (mapTensorLinearly)."""
    n = int(np.prod(shape, dtype=np.int64))
    used = max(1, min(n_tiles, -(-n // grain)))
    return Layout(tuple(shape), dtype, TileMapping.linear(n, used, grain=grain), perm)


def rows_layout(shape: Sequence[int], dtype: str, n_tiles: int, row: int) -> Layout:
    """Whole rows of ``row`` elements per tile, rows spread evenly over the tiles."""
    return linear_layout(shape, dtype, n_tiles, grain=row)


# --------------------------------------------------------------------------- resident
class Resident:
    """A tensor's bytes in tile memory (execute mode): ``data[tile]`` holds the tile's
    elements in stored order, packed (see :attr:`Layout.packed_offsets`)."""

    def __init__(self, layout: Layout, n_tiles: int, data: np.ndarray | None = None):
        self.layout = layout
        self.slot_elems = int(layout.elems_per_tile(n_tiles).max()) if layout.n_elems else 0
        if data is None:      # zero padding; the elements are the producer's to write
            data = take_buffer(layout, n_tiles, max(1, self.slot_elems * layout.itemsize))
        self.data = data

    def relabel(self, layout: Layout) -> Resident:
        """The same bytes as a tensor of ``layout`` (same mapping: a view or an in-place op)."""
        return Resident(layout, self.data.shape[0], self.data)

    def view(self) -> np.ndarray:
        """Typed (n_tiles, slot_elems) view of the tiles' elements (rows zero-padded)."""
        dt = DTYPES[self.layout.dtype]
        return self.data[:, :self.slot_elems * dt.itemsize].view(dt)

    @classmethod
    def from_host(cls, layout: Layout, n_tiles: int, x: np.ndarray) -> Resident:
        """Place a host array (logical shape) onto the tiles (host I/O)."""
        if layout.perm is not None:
            x = x.transpose(layout.perm)
        r = cls(layout, n_tiles)
        host = np.ascontiguousarray(x, dtype=DTYPES[layout.dtype]).reshape(1, -1).view(np.uint8)
        m = layout.mapping
        isz = layout.itemsize
        copy_runs(r.data, host, np.zeros(m.tile.size, np.int64), m.start * isz, m.tile,
                  layout.packed_offsets, m.count * isz)
        return r

    def to_host(self) -> np.ndarray:
        """Fetch to a host array of the logical shape (host I/O)."""
        lay = self.layout
        shape = lay.shape if lay.perm is None else tuple(lay.shape[p] for p in lay.perm)
        out = np.empty(shape, dtype=DTYPES[lay.dtype])
        host = out.reshape(1, -1).view(np.uint8)
        m = lay.mapping
        isz = lay.itemsize
        copy_runs(host, self.data, m.tile, lay.packed_offsets, np.zeros(m.tile.size, np.int64),
                  m.start * isz, m.count * isz)
        if lay.perm is not None:
            out = np.ascontiguousarray(out.transpose(np.argsort(lay.perm)))
        return out


# --------------------------------------------------------------------------- rearrangement
def _sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distinct values of two sorted int64 arrays, sorted.

    NOTE: np.union1d (hash-based unique in NumPy 2.4) took seconds on the million-run
    layouts of a ResNet-50 layer; a stable sort merges the two sorted runs in linear time.
    """
    c = np.concatenate([a, b])
    c.sort(kind="stable")
    keep = np.empty(c.size, dtype=bool)
    keep[:1] = True
    np.not_equal(c[1:], c[:-1], out=keep[1:])
    return c[keep]


def copy_table(src: Layout, dst: Layout) -> tuple[np.ndarray, ...]:
    """The exact copy table moving ``src`` into ``dst``: one copy per run contiguous in
    both layouts, ``(src_tile, src_off, dst_tile, dst_off, nbytes)`` (int64), in logical
    order.

    Walked by the compiled kernel over both mappings' intervals (linear in the copies; a
    ResNet-50 batch-8 input rearrangement of 2.6 M copies took seconds as the sort of every
    piece start below, which remains for layouts of more axes than the kernel takes)."""
    from .._kernels import _runs
    if src.n_elems and max(len(src.shape), len(dst.shape)) <= _runs.MAX_LAYOUT_AXES:
        got = _runs.layout_copies(src.n_elems, src.itemsize, *_walk_args(src), *_walk_args(dst))
        if got is not None:
            return got
    return _copy_table_sorted(src, dst)


def _walk_args(lay: Layout) -> tuple:
    """A layout as :func:`ipukern._kernels._runs.layout_copies` takes it."""
    m = lay.mapping
    perm = tuple(range(len(lay.shape))) if lay.perm is None else tuple(int(p) for p in lay.perm)
    return (lay.shape, perm, np.ascontiguousarray(m.start, np.int64),
            np.ascontiguousarray(m.count, np.int64), np.ascontiguousarray(m.tile, np.int32),
            np.ascontiguousarray(lay.byte_offsets, np.int64))


def _copy_table_sorted(src: Layout, dst: Layout) -> tuple[np.ndarray, ...]:
    """:func:`copy_table` from both layouts' pieces: the union of their starts, sorted."""
    isz = src.itemsize
    s0, _, st, so = src.pieces()
    d0, _, dt, do = dst.pieces()
    bounds = _sorted_union(s0, d0)
    seg_len = np.diff(np.append(bounds, src.n_elems))
    i = np.searchsorted(s0, bounds, side="right") - 1
    j = np.searchsorted(d0, bounds, side="right") - 1
    return (st[i], so[i] + (bounds - s0[i]) * isz, dt[j], do[j] + (bounds - d0[j]) * isz,
            seg_len * isz)


def rearrangement_loads(src: Layout, dst: Layout, n_tiles: int, tiles_per_bus: int, *,
                        exact: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per-tile ``(recv, paired, send)`` bytes of the copy table from ``src`` to ``dst``
    (as :func:`ipukern.core.cost.exchange_loads` computes them) and its number of copies.

    The table is never built when the source's bytes are disjoint on every tile (always
    for packed layouts): every logical element is copied exactly once, so a tile receives
    the bytes ``dst`` puts on it and sends the bytes ``src`` has on it; no source region
    goes to two tiles, so no bus pairing applies; and the copies are the runs between the
    union of both layouts' piece boundaries (:func:`_piece_starts`). ``exact=True`` (or a
    source with overlapping bytes) costs the built table instead; the tests prove both
    agree.
    """
    if exact or not _disjoint_bytes(src):
        table = copy_table(src, dst)
        st, so, dt, _, nb = table
        recv, paired, send = cost.exchange_loads(st.astype(np.int64), so, dt.astype(np.int64), nb,
                                                 n_tiles, tiles_per_bus)
        return recv, paired, send, int(nb.size)
    return (dst.bytes_per_tile(n_tiles), np.zeros(n_tiles, dtype=np.int64),
            src.bytes_per_tile(n_tiles), _count_segments(src, dst))


def _disjoint_bytes(lay: Layout) -> bool:
    """Whether no two of the layout's intervals share a byte of one tile."""
    if lay.offsets is None:
        return True          # packed: each tile's intervals back to back
    m = lay.mapping
    order = np.lexsort((lay.offsets, m.tile))
    t, o = m.tile[order], lay.offsets[order]
    end = o + m.count[order] * lay.itemsize
    return not bool(((t[1:] == t[:-1]) & (o[1:] < end[:-1])).any())


def _piece_starts(lay: Layout) -> tuple[int, np.ndarray]:
    """The logical starts of :meth:`Layout.pieces` as ``(row, extra)``: every multiple of
    ``row`` in [0, n) (the stored rows :func:`_permuted_pieces` cuts at, which are logical
    rows too), and the logical positions ``extra`` (unsorted) of the interval starts inside
    a row. Without a permutation, row = n and ``extra`` the mapping's other starts."""
    m = lay.mapping
    if lay.perm is None:
        return lay.n_elems, m.start[1:]
    cached = lay.__dict__.get("_piece_starts")       # a layout feeding two consumers
    if cached is None:
        k, row = _rows_of(lay.shape, lay.perm)
        r, col = np.divmod(m.start, row)
        inside = col != 0
        r, col = r[inside], col[inside]
        cached = lay.__dict__["_piece_starts"] = (row, _logical_rows(lay.shape, lay.perm, k, r) * row + col)
    return cached


#: up to this many elements, common piece starts are counted on a bitmap (n bytes)
_BITMAP_ELEMS = 1 << 27


def _count_common(a: np.ndarray, b: np.ndarray, n: int) -> int:
    """How many values two arrays of distinct positions in [0, n) share."""
    if not a.size or not b.size:
        return 0
    if n <= _BITMAP_ELEMS:
        mark = np.zeros(n, dtype=bool)
        mark[b] = True
        return int(np.count_nonzero(mark[a]))
    a, b = np.sort(a), np.sort(b)
    i = np.minimum(np.searchsorted(b, a), b.size - 1)
    return int(np.count_nonzero(b[i] == a))


#: largest phase list the periodic count expands to a common period
_PERIODIC_PHASES = 1 << 22


def _periodic_pieces(lay: Layout) -> tuple[int, np.ndarray] | None:
    """``(period, phases)`` of the layout's piece starts in logical order, when its mapping
    records periodic starts (:func:`ipukern.conv.mapping.periodic_starts`). A permuted
    layout keeps them when the period divides its stored rows (which it cuts at): a start
    ``r * row + j * period + x`` of stored row r lands at the same place in the logical
    row the permutation moves r to, and every logical row is some stored row."""
    from ..conv import periodic_starts
    per = periodic_starts(lay.mapping)
    if per is None or lay.perm is None:
        return per
    _, row = _rows_of(lay.shape, lay.perm)
    return per if row % per[0] == 0 else None


def _count_periodic(n: int, a: tuple[int, np.ndarray], b: tuple[int, np.ndarray]) -> int | None:
    """|union| of two periodic start sets over [0, n): both repeat with the lcm L of their
    periods, so it is n / L times the union of their phases over one L (None if L does
    not divide n or the phases would be too many)."""
    L = math.lcm(a[0], b[0])
    if n % L or (L // a[0]) * a[1].size + (L // b[0]) * b[1].size > _PERIODIC_PHASES:
        return None
    ph = [(np.arange(L // p, dtype=np.int64)[:, None] * p + x[None, :]).ravel() for p, x in (a, b)]
    return n // L * int(np.unique(np.concatenate(ph)).size)


def _count_half_periodic(n: int, a: Layout, per: tuple[int, np.ndarray]) -> int | None:
    """|union| of layout ``a``'s piece starts and a periodic start set (``per``) without
    listing the periodic one: its n / period * len(phases) starts, plus a's starts whose
    position within a period is not a phase (None if a has too many row starts)."""
    P, X = per
    row, extra = _piece_starts(a)
    if n % P or n // row > _PERIODIC_PHASES:
        return None
    phase = np.zeros(P, dtype=bool)
    phase[X] = True
    new = np.count_nonzero(~phase[np.arange(0, n, row, dtype=np.int64) % P])
    return n // P * int(X.size) + int(new) + int(np.count_nonzero(~phase[extra % P]))


def _periodic_differ(a: TileMapping, b: TileMapping) -> bool:
    """Whether what the mappings record proves their starts differ: two periodic sets
    whose union is larger than one of them, or a periodic set and a listed mapping with
    another number of intervals."""
    from ..conv import periodic_starts
    pa, pb = periodic_starts(a), periodic_starts(b)
    n = a.n_elems
    if (pa is None) != (pb is None):            # the listed one's count of starts decides
        P, X = pa if pa is not None else pb
        return (b if pa is not None else a).start.size != n // P * X.size
    if pa is None:
        return False
    union = _count_periodic(n, pa, pb)
    return union is not None and not (union == n // pa[0] * pa[1].size == n // pb[0] * pb[1].size)


def _count_segments(a: Layout, b: Layout) -> int:
    """Size of the union of both layouts' piece starts: the copies of the table."""
    n = a.n_elems
    if n == 0:
        return 0
    pa, pb = _periodic_pieces(a), _periodic_pieces(b)
    if pa is not None and pb is not None:
        got = _count_periodic(n, pa, pb)
        if got is not None:
            return got
    elif pa is not None or pb is not None:
        got = _count_half_periodic(n, b if pa is not None else a, pa if pa is not None else pb)
        if got is not None:
            return got
    r1, x1 = _piece_starts(a)
    r2, x2 = _piece_starts(b)
    # rows divide n, so each layout has n / row row starts; both share those of the lcm
    rows = n // r1 + n // r2 - n // math.lcm(r1, r2)
    x1 = x1[x1 % r2 != 0]
    x2 = x2[x2 % r1 != 0]
    return rows + int(x1.size) + int(x2.size) - _count_common(x1, x2, n)


class Rearrangement:
    """The exchange that moves a tensor from layout ``src`` to layout ``dst``.

    Both layouts describe the same logical elements (shapes may differ by a reshape; with
    a permutation the logical shapes must match). The copy table is the intersection of
    the two layouts' runs in logical order. Identical layouts need no copy (the consumer
    reads the producer's buffer, as Poplar aliases a tensor it does not rearrange) and
    cost nothing. The cost is that of one exchange superstep: the busiest tile's
    received or sent bytes at the exchange rate, plus the exchange overhead and a sync.

    The cost is computed without building the copy table (see :func:`rearrangement_loads`);
    the table is built on first use by :meth:`run`.
    """

    def __init__(self, machine: MachineSpec, src: Layout, dst: Layout, *, name: str = "rearrange"):
        if src.n_elems != dst.n_elems:
            raise ValueError(f"{name}: cannot rearrange {src.shape} ({src.n_elems} elements) "
                             f"into {dst.shape} ({dst.n_elems} elements)")
        if src.dtype != dst.dtype:
            raise ValueError(f"{name}: dtype {src.dtype} cannot be rearranged into {dst.dtype}")
        self.machine = machine
        self.name = name
        self.src, self.dst = src, dst
        self.identity = src.same_as(dst)
        if self.identity:
            self.cycles = 0
            self.bytes = 0
            self.n_copies = 0
            self.why = "same layout: no copy"
            self.busiest_tile = -1
            return
        recv, paired, send, self.n_copies = rearrangement_loads(
            src, dst, machine.n_tiles, machine.tiles_per_exchange_bus)
        per_tile = cost.tile_exchange_cycles(recv, paired, send, machine)
        t = int(np.argmax(per_tile))
        self.busiest_tile = t
        self.cycles = int(per_tile[t]) + machine.exchange_overhead_cycles
        self.bytes = int(src.n_elems) * src.itemsize
        self.recv_bytes = recv
        self.why = (f"{name}: tile {t} moves {max(int(recv[t]), int(send[t]))} B at "
                    f"{machine.exchange_bytes_per_cycle:.2f} B/cycle + "
                    f"{machine.exchange_overhead_cycles} overhead")

    @cached_property
    def table(self) -> tuple[np.ndarray, ...] | None:
        """The copies ``(src_tile, src_off, dst_tile, dst_off, nbytes)`` (None if identity)."""
        return None if self.identity else copy_table(self.src, self.dst)

    def record(self, index: int = 0) -> SuperstepRecord | None:
        """The exchange superstep (None for an identity)."""
        if self.identity:
            return None
        return SuperstepRecord(index=index, name=self.name, category="rearrange",
                               compute_cycles=0, sync_cycles=self.machine.sync_cycles,
                               exchange_cycles=self.cycles, exchange_tile=self.busiest_tile,
                               bytes_exchanged=self.bytes, n_copies=self.n_copies,
                               exchange_why=self.why)

    def run(self, src: Resident, dst_data: np.ndarray | None = None) -> Resident | None:
        """Execute: copy from ``src`` into ``dst_data`` (rows = tiles, at the dst layout's
        offsets) or into a new :class:`Resident` of the dst layout (returned)."""
        out = None
        if dst_data is None:
            if self.identity and self.dst.offsets is None:
                return Resident(self.dst, self.machine.n_tiles, src.data)
            out = Resident(self.dst, self.machine.n_tiles)
            dst_data = out.data
        tab = self.__dict__.get("_copies")
        if tab is None:
            if self.identity:
                m = self.src.mapping
                tab = CopyTable(m.tile, self.src.packed_offsets, m.tile, self.dst.byte_offsets,
                                m.count * self.src.itemsize)
            else:
                tab = CopyTable(*self.table)
            self.__dict__["_copies"] = tab
        tab.run(dst_data, src.data)
        return out
