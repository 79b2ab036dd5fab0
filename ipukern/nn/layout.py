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

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..core import cost
from ..core.engine import get_num_threads
from ..core.profile import SuperstepRecord
from ..core.program import balanced_bounds
from ..core.tensor import TileMapping
from ..dtypes import DTYPES
from ..machine import MachineSpec

__all__ = ["Layout", "Rearrangement", "Resident", "linear_layout", "rows_layout"]


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
        return (self.perm == other.perm and self.dtype == other.dtype
                and self.n_elems == other.n_elems
                and (self.perm is None or self.shape == other.shape)
                and np.array_equal(a.tile, b.tile) and np.array_equal(a.start, b.start)
                and np.array_equal(a.count, b.count))

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


def _permuted_pieces(shape, perm, m: TileMapping, off: np.ndarray, isz: int):
    nd = len(shape)
    # rows: the longest trailing block of axes the permutation leaves in place
    k = 0
    while k < nd and perm[nd - 1 - k] == nd - 1 - k:
        k += 1
    row = int(np.prod(shape[nd - k:], dtype=np.int64)) if k else 1
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
    # stored row index -> logical row index
    lead = perm[:nd - k]
    stored_shape = [shape[p] for p in lead]
    idx = np.unravel_index(r, stored_shape) if stored_shape else ()
    logical_lead_shape = [shape[i] for i in range(nd - k)]
    coords = [None] * (nd - k)
    for pos, axis in enumerate(lead):
        coords[axis] = idx[pos]
    lrow = np.ravel_multi_index(coords, logical_lead_shape) if coords else np.zeros_like(r)
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
        if data is None:
            data = np.zeros((n_tiles, max(1, self.slot_elems * layout.itemsize)), dtype=np.uint8)
        self.data = data

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
        _copy(r.data, host, np.zeros(m.tile.size, np.int64), m.start * isz, m.tile,
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
        _copy(host, self.data, m.tile, lay.packed_offsets, np.zeros(m.tile.size, np.int64),
              m.start * isz, m.count * isz)
        if lay.perm is not None:
            out = np.ascontiguousarray(out.transpose(np.argsort(lay.perm)))
        return out


def _copy(dst, src, src_row, src_off, dst_row, dst_off, nbytes) -> None:
    from .._kernels import _exchange
    nbytes = np.ascontiguousarray(nbytes, np.int64)
    if nbytes.size == 0:
        return
    _exchange.copy_runs(dst, src, np.ascontiguousarray(src_row, np.int32),
                        np.ascontiguousarray(src_off, np.int64),
                        np.ascontiguousarray(dst_row, np.int32),
                        np.ascontiguousarray(dst_off, np.int64), nbytes,
                        balanced_bounds(nbytes, get_num_threads()))


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


class Rearrangement:
    """The exchange that moves a tensor from layout ``src`` to layout ``dst``.

    Both layouts describe the same logical elements (shapes may differ by a reshape; with
    a permutation the logical shapes must match). The copy table is the intersection of
    the two layouts' runs in logical order. Identical layouts need no copy (the consumer
    reads the producer's buffer, as Poplar aliases a tensor it does not rearrange) and
    cost nothing. The cost is that of one exchange superstep: the busiest tile's
    received or sent bytes at the exchange rate, plus the exchange overhead and a sync.
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
            self.table = None
            self.bytes = 0
            self.why = "same layout: no copy"
            self.busiest_tile = -1
            return
        isz = src.itemsize
        s0, _, st, so = src.pieces()
        d0, _, dt, do = dst.pieces()
        bounds = _sorted_union(s0, d0)
        seg_len = np.diff(np.append(bounds, src.n_elems))
        i = np.searchsorted(s0, bounds, side="right") - 1
        j = np.searchsorted(d0, bounds, side="right") - 1
        self.table = (st[i], so[i] + (bounds - s0[i]) * isz, dt[j], do[j] + (bounds - d0[j]) * isz,
                      seg_len * isz)
        recv, paired, send = cost.exchange_loads(st[i].astype(np.int64), self.table[1],
                                                 dt[j].astype(np.int64), self.table[4],
                                                 machine.n_tiles, machine.tiles_per_exchange_bus)
        per_tile = cost.tile_exchange_cycles(recv, paired, send, machine)
        t = int(np.argmax(per_tile))
        self.busiest_tile = t
        self.cycles = int(per_tile[t]) + machine.exchange_overhead_cycles
        self.bytes = int(self.table[4].sum())
        self.recv_bytes = recv
        self.why = (f"{name}: tile {t} moves {max(int(recv[t]), int(send[t]))} B at "
                    f"{machine.exchange_bytes_per_cycle:.2f} B/cycle + "
                    f"{machine.exchange_overhead_cycles} overhead")

    def record(self, index: int = 0) -> SuperstepRecord | None:
        """The exchange superstep (None for an identity)."""
        if self.identity:
            return None
        return SuperstepRecord(index=index, name=self.name, category="rearrange",
                               compute_cycles=0, sync_cycles=self.machine.sync_cycles,
                               exchange_cycles=self.cycles, exchange_tile=self.busiest_tile,
                               bytes_exchanged=self.bytes, n_copies=int(self.table[4].size),
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
        if self.identity:
            m = self.src.mapping
            nb = m.count * self.src.itemsize
            _copy(dst_data, src.data, m.tile, self.src.packed_offsets, m.tile,
                  self.dst.byte_offsets, nb)
        else:
            st, so, dt, do, nb = self.table
            _copy(dst_data, src.data, st, so, dt, do, nb)
        return out
