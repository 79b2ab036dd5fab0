"""GraphTensor: a tensor of a user graph, with each tile's block offset and local shape."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core import TileTensor
from ..dtypes import DTYPES
from .grid import GridGeometry

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["GraphTensor"]


class GraphTensor:
    """A tensor of a :class:`Graph`: where each tile's block lives and its local shape.

    Attributes
    ----------
    name : str
    shape : tuple of int
        Logical (global) shape, as read and written from the host.
    dtype : str
    storage : TileTensor
        The allocation holding the tiles' blocks (for halo tensors, blocks include the ring).
    tile_offset : int64 ndarray (n_tiles,)
        Byte offset of each tile's block in its memory; -1 where the tensor has no block.
    tile_shape : int64 ndarray (n_tiles, local_ndim)
        Shape of each tile's block as a tile function sees it (zeros where absent).
    kind : str
        ``"linear"``, ``"grid"``, ``"tile"`` or ``"mapped"``.
    """

    def __init__(self, graph: "Graph", name: str, shape: tuple[int, ...], dtype: str,
                 storage: TileTensor, tile_shape: np.ndarray, kind: str,
                 runs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
                 grid: GridGeometry | None = None):
        n_tiles = graph.machine.n_tiles
        self._graph_id = id(graph)
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.storage = storage
        self.kind = kind
        self.grid = grid
        #: halo tensors: ring value outside the array, and whether it is in tile memory yet
        self.pad_value = 0.0
        self.boundary_set = False
        self.tile_offset, elems = storage.tile_block(n_tiles)
        self.tile_shape = np.ascontiguousarray(tile_shape, dtype=np.int64)
        if not np.array_equal(np.prod(self.tile_shape, axis=1), elems):
            raise RuntimeError(f"internal error: {name!r}: local shapes disagree with the allocation")
        if runs is None:
            m = storage.mapping
            runs = (m.start, m.count, m.tile, storage.offset)
        #: home copy of every element: (global start, count, tile, byte offset), sorted by start
        self.runs = runs

    # ------------------------------------------------------------------ facts
    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def n_elems(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def local_ndim(self) -> int:
        return int(self.tile_shape.shape[1])

    @property
    def tiles(self) -> np.ndarray:
        """Tiles holding a block of this tensor (ascending), int32."""
        return np.flatnonzero(self.tile_offset >= 0).astype(np.int32)

    def local_shape(self, tile: int) -> tuple[int, ...]:
        """Shape of the block a tile function sees on ``tile`` (``()`` if none)."""
        if self.tile_offset[tile] < 0:
            return ()
        return tuple(int(s) for s in self.tile_shape[tile])

    @property
    def halo(self) -> int:
        return self.grid.halo if self.grid is not None else 0

    def same_mapping(self, other: "GraphTensor") -> int:
        """-1 if element i of both tensors is on the same tile for every i, else the first
        element index where they differ."""
        if self.shape != other.shape:
            return 0
        a, b = self.runs, other.runs
        if a[0].size == b[0].size and np.array_equal(a[0], b[0]) and np.array_equal(a[2], b[2]):
            return -1
        cuts = np.union1d(a[0], b[0])
        ta = a[2][np.searchsorted(a[0], cuts, side="right") - 1]
        tb = b[2][np.searchsorted(b[0], cuts, side="right") - 1]
        diff = np.flatnonzero(ta != tb)
        return int(cuts[diff[0]]) if diff.size else -1

    def __repr__(self) -> str:
        extra = f", grid={self.grid.gy}x{self.grid.gx}, halo={self.halo}" if self.grid else ""
        return (f"GraphTensor({self.name!r}, shape={self.shape}, dtype={self.dtype}, kind={self.kind}, "
                f"tiles={self.tiles.size}{extra})")
