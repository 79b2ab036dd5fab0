"""Tensors spread over tiles: a tile mapping says which tile holds which elements.

A :class:`TileMapping` is a list of intervals ``[start, start + count)`` of the flattened
(C-order) tensor, each on one tile, covering every element exactly once. On a tile, the
tensor's intervals are stored one after another in element order, so a tile's share is
one contiguous block of its memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..dtypes import DTYPES, canonical_dtype

__all__ = ["LazyTileMapping", "TileMapping", "TileTensor", "split_bounds", "split_candidates", "expand"]


def split_bounds(n: int, parts: int, grain: int = 1) -> np.ndarray:
    """Boundaries of ``n`` items split into ``parts`` contiguous ranges of whole grains
    whose sizes differ by at most one grain (PopLibs' ``mapTensorLinearly`` split).

    Returns an int64 array of ``parts + 1`` non-decreasing boundaries from 0 to ``n``;
    range ``i`` is ``[b[i], b[i + 1])``. The last range holds the partial grain, if any.
    """
    n_grains = -(-n // grain)
    bounds = (np.arange(parts + 1, dtype=np.int64) * n_grains) // parts * grain
    return np.minimum(bounds, n)


def split_candidates(n_grains: int, limit: int) -> np.ndarray:
    """Split counts worth trying for ``n_grains``: for every distinct per-part size
    ceil(n/s), the smallest s giving it (larger s would only idle tiles), up to ``limit``.

    There are O(sqrt(n)) such counts and the loop jumps between them, so this is fast for
    any n (a matmul's 2**31 inner dimension included). Returns sorted int64 values.
    """
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


def expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand rows by ``counts``: ``(owner, pos)`` with row ``i`` repeated ``counts[i]``
    times and ``pos`` counting 0 .. counts[i] - 1 within each repetition."""
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(counts.size), counts)
    pos = np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, pos


@dataclass(frozen=True, eq=False)
class TileMapping:
    """Element intervals of a flattened tensor and the tile holding each.

    Attributes
    ----------
    n_elems : int
    tile, start, count : ndarray (n_intervals,)
        Sorted by ``start``; contiguous and non-overlapping; ``count > 0``.
    """

    n_elems: int
    tile: np.ndarray
    start: np.ndarray
    count: np.ndarray

    def __post_init__(self) -> None:
        tile = np.ascontiguousarray(self.tile, dtype=np.int32)
        start = np.ascontiguousarray(self.start, dtype=np.int64)
        count = np.ascontiguousarray(self.count, dtype=np.int64)
        if not (tile.ndim == start.ndim == count.ndim == 1 and tile.size == start.size == count.size):
            raise ValueError("mapping columns must be 1-D arrays of equal length")
        keep = count > 0
        if (count < 0).any():
            raise ValueError("mapping interval with negative element count")
        if not keep.all():
            tile, start, count = tile[keep], start[keep], count[keep]
        # most builders already emit intervals by start: a stable sort would be the identity
        if start.size > 1 and (start[1:] < start[:-1]).any():
            order = np.argsort(start, kind="stable")
            tile, start, count = tile[order], start[order], count[order]
        if self.n_elems == 0:
            if start.size:
                raise ValueError("mapping of an empty tensor must have no intervals")
        else:
            ends = start + count
            if start.size == 0 or start[0] != 0 or ends[-1] != self.n_elems or (start[1:] != ends[:-1]).any():
                raise ValueError(f"mapping must cover elements [0, {self.n_elems}) exactly once "
                                 "with contiguous, non-overlapping intervals")
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "count", count)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def _unchecked(cls, n_elems: int, tile: np.ndarray, start: np.ndarray,
                   count: np.ndarray) -> "TileMapping":
        """Internal: columns a builder proves sorted, positive and covering [0, n_elems)
        exactly (its tests compare it with a checked builder); skips the O(n) checks that
        dominate registering a million-interval conv mapping."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "n_elems", int(n_elems))
        object.__setattr__(obj, "tile", np.ascontiguousarray(tile, dtype=np.int32))
        object.__setattr__(obj, "start", np.ascontiguousarray(start, dtype=np.int64))
        object.__setattr__(obj, "count", np.ascontiguousarray(count, dtype=np.int64))
        return obj

    @classmethod
    def linear(cls, n_elems: int, n_tiles: int, *, grain: int = 1,
               tiles: Sequence[int] | np.ndarray | None = None) -> "TileMapping":
        """Spread elements evenly over ``n_tiles`` tiles (or the given tile list) in
        contiguous blocks of whole grains, like PopLibs' ``mapTensorLinearly``."""
        if grain < 1:
            raise ValueError(f"grain must be >= 1, got {grain}")
        tile_ids = np.arange(n_tiles, dtype=np.int32) if tiles is None else np.asarray(tiles, dtype=np.int32)
        k = tile_ids.size
        if k == 0:
            raise ValueError("linear mapping needs at least one tile")
        bounds = split_bounds(n_elems, k, grain)
        return cls(n_elems, tile_ids, bounds[:-1], np.diff(bounds))

    @classmethod
    def single(cls, n_elems: int, tile: int) -> "TileMapping":
        """All elements on one tile."""
        return cls(n_elems, np.array([tile]), np.array([0]), np.array([n_elems]))

    @classmethod
    def from_element_tiles(cls, element_tile: np.ndarray) -> "TileMapping":
        """Mapping from a per-element tile array (runs of equal tiles become intervals)."""
        et = np.asarray(element_tile, dtype=np.int64).ravel()
        if et.size == 0:
            return cls(0, np.zeros(0), np.zeros(0), np.zeros(0))
        change = np.flatnonzero(np.diff(et)) + 1
        starts = np.concatenate([[0], change])
        counts = np.diff(np.concatenate([starts, [et.size]]))
        return cls(et.size, et[starts], starts, counts)

    def elems_per_tile(self, n_tiles: int) -> np.ndarray:
        """Number of elements each tile holds."""
        # the mapping is immutable: count once per tile count (a copy, callers may write it)
        cache = self.__dict__.setdefault("_per_tile", {})
        got = cache.get(n_tiles)
        if got is None:
            got = cache[n_tiles] = np.bincount(self.tile, weights=self.count,
                                               minlength=n_tiles).astype(np.int64)
        return got.copy()

    @property
    def tiles_used(self) -> np.ndarray:
        return np.unique(self.tile)


class LazyTileMapping(TileMapping):
    """A :class:`TileMapping` whose interval columns come from ``build()`` (returning the
    real mapping) on first use. Its element count and per-tile element counts are given
    up front, so a cost estimate that only asks for those never builds the intervals."""

    def __init__(self, n_elems: int, per_tile: np.ndarray, build: Any):
        object.__setattr__(self, "n_elems", int(n_elems))
        self.__dict__["_per_tile"] = {int(per_tile.size): np.asarray(per_tile, np.int64)}
        self.__dict__["_build"] = build

    def _columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cols = self.__dict__.get("_cols")
        if cols is None:
            m = self.__dict__["_build"]()
            cols = self.__dict__["_cols"] = (m.tile, m.start, m.count)
        return cols

    tile = property(lambda self: self._columns()[0])        # type: ignore[assignment]
    start = property(lambda self: self._columns()[1])       # type: ignore[assignment]
    count = property(lambda self: self._columns()[2])       # type: ignore[assignment]


class TileTensor:
    """A tensor living in tile memories.

    Created by :meth:`ipukern.Device.add_tensor`. ``offset[i]`` is the byte offset, within
    tile ``mapping.tile[i]``, of interval i's first element.
    """

    def __init__(self, name: str, shape: Sequence[int], dtype: str, mapping: TileMapping,
                 offset: np.ndarray, device_id: int):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = canonical_dtype(dtype)
        self.mapping = mapping
        self.offset = np.ascontiguousarray(offset, dtype=np.int64)
        self._device_id = device_id

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def n_elems(self) -> int:
        return self.mapping.n_elems

    @property
    def nbytes(self) -> int:
        return self.n_elems * self.itemsize

    def region(self, elem_start: int, n_elems: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where elements [elem_start, elem_start + n_elems) live: arrays of (tile, byte
        offset, byte count), one row per contiguous run on one tile."""
        m = self.mapping
        lo = int(np.searchsorted(m.start, elem_start, side="right")) - 1
        hi = int(np.searchsorted(m.start, elem_start + n_elems, side="left"))
        starts = m.start[lo:hi]
        ends = starts + m.count[lo:hi]
        a = np.maximum(starts, elem_start)
        b = np.minimum(ends, elem_start + n_elems)
        return (m.tile[lo:hi], self.offset[lo:hi] + (a - starts) * self.itemsize,
                (b - a) * self.itemsize)

    def tile_block(self, n_tiles: int) -> tuple[np.ndarray, np.ndarray]:
        """Per tile: (byte offset of the tile's block, elements in it); -1 offset if none."""
        first = np.full(n_tiles, -1, dtype=np.int64)
        # intervals of one tile are stored consecutively in element order, so the block
        # starts at the offset of the tile's first interval
        rev = slice(None, None, -1)
        first[self.mapping.tile[rev]] = self.offset[rev]
        return first, self.mapping.elems_per_tile(n_tiles)

    def __repr__(self) -> str:
        return (f"TileTensor({self.name!r}, shape={self.shape}, dtype={self.dtype}, "
                f"tiles={self.mapping.tiles_used.size})")
