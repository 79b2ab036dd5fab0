"""Write your own BSP program: tensors on tiles, tile functions, exchanges, run, profile.

A :class:`Graph` wraps one :class:`~ipukern.Device` and adds what a user program needs::

    g = ipukern.Graph("GC200")
    a = g.grid_tensor("a", (4096, 4096), grid=(46, 32), halo=1)   # block + halo ring per tile
    b = g.grid_tensor("b", (4096, 4096), grid=(46, 32), halo=1)
    g.write(a, image)
    step = ipukern.Superstep("blur", compute=g.compute(blur, a, b), exchange=g.halo_exchange(b))
    prof = g.run(g.program([step]))
    out = g.read(b)

Tensors and tile-local views
----------------------------
Every :class:`GraphTensor` knows, for each tile, where its block starts in the tile's
memory and the block's *local shape*: the shape of the array a tile function receives.

- :meth:`Graph.linear_tensor`: elements spread evenly in contiguous runs
  (:meth:`TileMapping.linear`); local view 1-D ``(n_t,)``.
- :meth:`Graph.grid_tensor`: an (H, W) array split into a (gy, gx) grid of blocks, one per
  tile (:func:`grid_mapping`: one interval per block row). A tile stores its block's rows
  one after another, so the block is contiguous in tile memory and the local view is
  ``(bh, bw)``. With ``halo=h`` each tile instead holds a ``(bh + 2h, bw + 2h)`` buffer:
  its block surrounded by a ring of copies of its neighbours' cells, refreshed by
  :meth:`Graph.halo_exchange`. Ring cells outside the image hold ``pad_value`` (written by
  :meth:`Graph.write`; nothing overwrites them).
- :meth:`Graph.tile_tensor`: one ``tile_shape`` slab per tile (shape
  ``(n_tiles, *tile_shape)``); local view ``tile_shape``. The natural home for data every
  tile needs its own copy of (broadcast weights, all-reduce vectors, scratch).
- :meth:`Graph.tensor` / :meth:`Graph.wrap`: any :class:`TileMapping` / existing
  :class:`TileTensor`; local view 1-D.

Exchanges
---------
All helpers produce :class:`~ipukern.Exchange` copy tables from tensor geometry, validated
by the foundation (no overlapping writes, no destination that the same exchange reads):
:meth:`copy` (element i of one tensor to element i of another, any two mappings),
:meth:`gather`, :meth:`broadcast`, :meth:`halo_exchange`, :meth:`send` (explicit block to
block copies) and :meth:`join` (several tables in one exchange phase).
:meth:`all_reduce` returns two supersteps: reduce-scatter, then sum + all-gather.

Pieces of a copy whose source and destination are on the same tile stay in the exchange
table and are costed like received bytes (a real program would use an on-tile copy vertex).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..core.engine import Device
from ..machine import GC200, MachineSpec
from ..core.memory import TileMemoryError
from ..core.profile import Profile
from ..core.program import ComputeSet, Exchange, Program, Superstep, VertexBatch
from ..core.tensor import TileMapping, TileTensor
from .tilefn import ArgViews, TileFunction, TileFunctionError
from ..core.vertices import sum_rows

__all__ = ["Graph", "GraphTensor", "grid_mapping", "choose_grid", "split_bounds"]


def split_bounds(n: int, parts: int) -> np.ndarray:
    """Boundaries of ``parts`` near-equal contiguous pieces of ``range(n)``: int64 (parts + 1,)."""
    return (np.arange(parts + 1, dtype=np.int64) * n) // parts


def choose_grid(shape: Sequence[int], n_tiles: int) -> tuple[int, int]:
    """A (gy, gx) tile grid for an (H, W) array: as many tiles as possible (at most
    ``n_tiles``), then the smallest block perimeter (least halo traffic)."""
    h, w = (int(s) for s in shape)
    best = None
    for gy in range(1, min(h, n_tiles) + 1):
        gx = min(w, n_tiles // gy)
        score = (-(gy * gx), -(-h // gy) + -(-w // gx), gy)
        if best is None or score < best[0]:
            best = (score, (gy, gx))
    return best[1]


def grid_mapping(shape: Sequence[int], grid: Sequence[int],
                 tiles: Sequence[int] | np.ndarray | None = None) -> TileMapping:
    """Map an (H, W) array onto a (gy, gx) grid of tiles, one block per tile.

    Block (i, j) holds rows ``split_bounds(H, gy)[i:i+2]`` and columns
    ``split_bounds(W, gx)[j:j+2]`` and lives on ``tiles[i * gx + j]`` (default: tile
    ``i * gx + j``). It is one interval per block row, so a block is not contiguous in the
    global array; on its tile it is (rows stored one after another, row-major).
    """
    h, w = (int(s) for s in shape)
    gy, gx = (int(g) for g in grid)
    if gy < 1 or gx < 1 or gy > h or gx > w:
        raise ValueError(f"grid {gy}x{gx} does not fit a {h}x{w} array (need 1 <= gy <= H, 1 <= gx <= W)")
    tile_ids = (np.arange(gy * gx, dtype=np.int64) if tiles is None
                else np.asarray(tiles, dtype=np.int64).reshape(-1))
    if tile_ids.size != gy * gx:
        raise ValueError(f"grid {gy}x{gx} needs {gy * gx} tiles, got {tile_ids.size}")
    if np.unique(tile_ids).size != tile_ids.size:
        raise ValueError("grid tiles must be distinct")
    rb, cb = split_bounds(h, gy), split_bounds(w, gx)
    row_block = np.repeat(np.arange(gy), np.diff(rb))                  # (H,)
    rows = np.repeat(np.arange(h, dtype=np.int64), gx)                 # (H * gx,)
    j = np.tile(np.arange(gx), h)
    start = rows * w + cb[j]
    count = (cb[j + 1] - cb[j])
    tile = tile_ids[row_block[rows] * gx + j]
    return TileMapping(h * w, tile, start, count)


class _Grid:
    """Geometry of a grid tensor: block bounds, tiles, halo."""

    def __init__(self, shape: tuple[int, int], grid: tuple[int, int], tiles: np.ndarray, halo: int):
        self.shape = shape
        self.gy, self.gx = grid
        self.rows = split_bounds(shape[0], self.gy)
        self.cols = split_bounds(shape[1], self.gx)
        self.tiles = tiles.reshape(self.gy, self.gx)
        self.halo = halo

    @property
    def bh(self) -> np.ndarray:
        return np.diff(self.rows)

    @property
    def bw(self) -> np.ndarray:
        return np.diff(self.cols)


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
                 grid: _Grid | None = None):
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


class Graph:
    """A user BSP program under construction on one simulated device.

    Parameters
    ----------
    machine : MachineSpec or str
        Preset name (``"GC200"``, ``"GC2"``, ``"BOW"``) or spec; default GC200.
    allow_overflow : bool
        Record allocations beyond a tile's budget instead of raising (see :class:`Device`).
    """

    def __init__(self, machine: MachineSpec | str = GC200, *, allow_overflow: bool = False):
        self.device = Device(machine, allow_overflow=allow_overflow)
        self.tensors: dict[str, GraphTensor] = {}

    @property
    def machine(self) -> MachineSpec:
        return self.device.machine

    @property
    def n_tiles(self) -> int:
        return self.machine.n_tiles

    # ------------------------------------------------------------------ tensors
    def _tiles_arg(self, tiles: Any) -> np.ndarray:
        t = (np.arange(self.n_tiles, dtype=np.int64) if tiles is None
             else np.asarray(tiles, dtype=np.int64).reshape(-1))
        if t.size == 0:
            raise ValueError("need at least one tile")
        if t.min() < 0 or t.max() >= self.n_tiles:
            raise ValueError(f"tiles must lie in 0..{self.n_tiles - 1}, got {int(t.min())}..{int(t.max())}")
        if np.unique(t).size != t.size:
            raise ValueError("tiles must be distinct")
        return t

    def _add(self, name: str, shape: Sequence[int], dtype: str, mapping: TileMapping,
             category: str) -> TileTensor:
        if name in self.tensors:
            raise ValueError(f"a tensor named {name!r} already exists in this graph")
        try:
            return self.device.add_tensor(name, shape, dtype, mapping, category)
        except TileMemoryError as err:
            raise TileMemoryError(
                f"tensor {name!r} does not fit: {err}. Spread it over more tiles or use smaller "
                "blocks", tile=err.tile, requested=err.requested, used=err.used, budget=err.budget,
                n_tiles_over=err.n_tiles_over) from err

    def _register(self, t: GraphTensor) -> GraphTensor:
        self.tensors[t.name] = t
        return t

    def linear_tensor(self, name: str, shape: Sequence[int] | int, dtype: Any = "float32", *,
                      tiles: Sequence[int] | None = None, grain: int = 1,
                      category: str = "user") -> GraphTensor:
        """Elements spread evenly over ``tiles`` (default: all) in contiguous runs of whole
        ``grain``s. A tile function sees its tile's run as a 1-D array."""
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        dtype = canonical_dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        t = self._tiles_arg(tiles)
        st = self._add(name, shape, dtype, TileMapping.linear(n, t.size, grain=grain, tiles=t), category)
        _, elems = st.tile_block(self.n_tiles)
        return self._register(GraphTensor(self, name, shape, dtype, st, elems[:, None], "linear"))

    def grid_tensor(self, name: str, shape: Sequence[int], dtype: Any = "float32", *,
                    grid: Sequence[int] | None = None, halo: int = 0, pad_value: float = 0.0,
                    tiles: Sequence[int] | None = None, category: str = "user") -> GraphTensor:
        """An (H, W) array split into a (gy, gx) grid of blocks, block (i, j) on
        ``tiles[i * gx + j]``.

        Parameters
        ----------
        shape : (H, W)
        grid : (gy, gx), optional
            Default :func:`choose_grid` over ``tiles`` (all tiles by default).
        halo : int
            Width of the ring of neighbour cells each tile keeps around its block; the
            local view is then ``(bh + 2*halo, bw + 2*halo)`` instead of ``(bh, bw)``.
        pad_value : float
            Value of the ring cells that lie outside the array (the boundary condition).
            :meth:`write` stores it; :meth:`run` stores it before the first execution in
            tensors never written. Tile functions should not write those cells.
        tiles : sequence of int, optional
            The grid's tiles in row-major block order (default ``0 .. gy*gx - 1``).
        """
        if len(shape) != 2:
            raise ValueError(f"grid_tensor needs a 2-D shape (H, W), got {tuple(shape)}")
        h, w = (int(s) for s in shape)
        dtype = canonical_dtype(dtype)
        if grid is None:
            pool = self._tiles_arg(tiles)
            grid = choose_grid((h, w), pool.size)
            tiles = pool[:grid[0] * grid[1]]
        gy, gx = (int(g) for g in grid)
        if gy * gx > self.n_tiles:
            raise ValueError(f"grid {gy}x{gx} needs {gy * gx} tiles; {self.machine.name} has {self.n_tiles}")
        tile_ids = self._tiles_arg(tiles if tiles is not None else np.arange(gy * gx))
        if tile_ids.size != gy * gx:
            raise ValueError(f"grid {gy}x{gx} needs {gy * gx} tiles, got {tile_ids.size}")
        if isinstance(halo, bool) or not isinstance(halo, (int, np.integer)) or halo < 0:
            raise ValueError(f"halo must be an int >= 0, got {halo!r}")
        mapping = grid_mapping((h, w), (gy, gx), tile_ids)
        geo = _Grid((h, w), (gy, gx), tile_ids, int(halo))
        if halo > 0 and (halo > geo.bh.min() or halo > geo.bw.min()):
            raise ValueError(f"halo {halo} is wider than the smallest block "
                             f"({int(geo.bh.min())}x{int(geo.bw.min())}) of a {gy}x{gx} grid over "
                             f"{h}x{w}: a halo must come from the direct neighbours only")
        bh = np.repeat(geo.bh, gx)            # per block, row-major
        bw = np.tile(geo.bw, gy)
        if halo == 0:
            st = self._add(name, (h, w), dtype, mapping, category)
            local = np.zeros((self.n_tiles, 2), dtype=np.int64)
            local[tile_ids, 0], local[tile_ids, 1] = bh, bw
            return self._register(GraphTensor(self, name, (h, w), dtype, st, local, "grid", grid=geo))
        ph, pw = bh + 2 * halo, bw + 2 * halo
        cells = ph * pw
        # storage: one padded buffer per tile, as a 1-D tensor whose intervals are the buffers
        order = np.argsort(tile_ids, kind="stable")
        starts = np.zeros(tile_ids.size, dtype=np.int64)
        starts[order] = np.cumsum(cells[order]) - cells[order]
        st = self._add(name, (int(cells.sum()),), dtype,
                       TileMapping(int(cells.sum()), tile_ids, starts, cells), category)
        local = np.zeros((self.n_tiles, 2), dtype=np.int64)
        local[tile_ids, 0], local[tile_ids, 1] = ph, pw
        t = GraphTensor(self, name, (h, w), dtype, st, local, "grid", runs=None, grid=geo)
        t.runs = self._interior_runs(t)
        t.pad_value = float(pad_value)
        return self._register(t)

    def _interior_runs(self, t: GraphTensor) -> tuple[np.ndarray, ...]:
        """Home runs of a halo tensor: one per block row, pointing inside the padded buffers."""
        geo, h, isz = t.grid, t.grid.halo, t.itemsize
        w = geo.shape[1]
        bi = np.repeat(np.arange(geo.gy), geo.bh)            # block row of each image row
        rows = np.repeat(np.arange(geo.shape[0], dtype=np.int64), geo.gx)
        j = np.tile(np.arange(geo.gx), geo.shape[0])
        i = bi[rows]
        tile = geo.tiles[i, j].astype(np.int32)
        pw = geo.bw[j] + 2 * h
        y = rows - geo.rows[i] + h
        offset = t.tile_offset[tile] + (y * pw + h) * isz
        return rows * w + geo.cols[j], geo.bw[j].astype(np.int64), tile, offset

    def tile_tensor(self, name: str, tile_shape: Sequence[int] | int, dtype: Any = "float32", *,
                    tiles: Sequence[int] | None = None, category: str = "user") -> GraphTensor:
        """One ``tile_shape`` slab per tile: shape ``(len(tiles), *tile_shape)``, slab k on
        ``tiles[k]``. A tile function sees its slab with shape ``tile_shape``."""
        tile_shape = (int(tile_shape),) if np.isscalar(tile_shape) else tuple(int(s) for s in tile_shape)
        dtype = canonical_dtype(dtype)
        t = self._tiles_arg(tiles)
        per = int(np.prod(tile_shape, dtype=np.int64))
        if per == 0:
            raise ValueError(f"tile_tensor {name!r}: empty tile shape {tile_shape}")
        mapping = TileMapping(t.size * per, t, np.arange(t.size, dtype=np.int64) * per, np.full(t.size, per))
        st = self._add(name, (t.size, *tile_shape), dtype, mapping, category)
        local = np.zeros((self.n_tiles, len(tile_shape)), dtype=np.int64)
        local[t] = tile_shape
        return self._register(GraphTensor(self, name, (t.size, *tile_shape), dtype, st, local, "tile"))

    def tensor(self, name: str, shape: Sequence[int], dtype: Any, mapping: TileMapping, *,
               category: str = "user") -> GraphTensor:
        """A tensor with any :class:`TileMapping`; a tile function sees its tile's elements
        (in element order) as a 1-D array."""
        st = self._add(name, shape, canonical_dtype(dtype), mapping, category)
        return self.wrap(st)

    def wrap(self, t: TileTensor) -> GraphTensor:
        """Use a :class:`TileTensor` of this graph's device (e.g. from a collective) in the
        graph API; its local view is 1-D."""
        self.device._check_tensor(t)
        if t.name in self.tensors:
            return self.tensors[t.name]
        _, elems = t.tile_block(self.n_tiles)
        return self._register(GraphTensor(self, t.name, t.shape, t.dtype, t, elems[:, None], "mapped"))

    def _as_tensor(self, x: Any, role: str) -> GraphTensor:
        if isinstance(x, GraphTensor):
            if x._graph_id != id(self):
                raise ValueError(f"{role} {x.name!r} belongs to another graph")
            return x
        if isinstance(x, TileTensor):
            return self.wrap(x)
        raise TypeError(f"{role} must be a tensor of this graph, got {type(x).__name__}")

    # ------------------------------------------------------------------ host I/O
    def write(self, t: GraphTensor, values: Any) -> None:
        """Place a host array of shape ``t.shape`` onto the tiles.

        For a halo tensor every tile's whole buffer is written: its block, the ring cells
        copied from the neighbouring blocks, and the tensor's ``pad_value`` where the ring
        lies outside the array (a fixed boundary that exchanges never overwrite).
        """
        t = self._as_tensor(t, "tensor")
        if t.halo == 0:
            self.device.write(t.storage, values)
            return
        arr = np.asarray(values)
        if arr.shape != t.shape:
            raise ValueError(f"tensor {t.name!r} has shape {t.shape}, got {arr.shape}")
        want = DTYPES[t.dtype]
        if arr.dtype != want and not np.can_cast(arr.dtype, want, casting="same_kind"):
            raise TypeError(f"tensor {t.name!r} is {t.dtype}; cannot place {arr.dtype} data")
        geo, h = t.grid, t.halo
        padded = np.pad(arr.astype(want, copy=False), h, mode="constant", constant_values=t.pad_value)
        pw_global = t.shape[1] + 2 * h
        # one run per padded row of each block: rows r0 - h .. r1 + h of the padded image
        bi = np.repeat(np.arange(geo.gy), geo.bh + 2 * h)
        y = np.concatenate([np.arange(b + 2 * h) for b in geo.bh])
        prow = geo.rows[bi] + y                                 # row in the padded image
        rows_n = prow.size
        j = np.tile(np.arange(geo.gx), rows_n)
        prow, y, bi = np.repeat(prow, geo.gx), np.repeat(y, geo.gx), np.repeat(bi, geo.gx)
        tile = geo.tiles[bi, j]
        pw = geo.bw[j] + 2 * h
        host_off = (prow * pw_global + geo.cols[j]) * t.itemsize
        dev_off = t.tile_offset[tile] + y * pw * t.itemsize
        host = np.ascontiguousarray(padded).reshape(1, -1).view(np.uint8)
        self.device._copy(self.device.arena.data, host, np.zeros(tile.size, np.int32), host_off,
                          tile, dev_off, pw * t.itemsize)
        t.boundary_set = True

    def _write_boundary(self, t: GraphTensor) -> None:
        """Store ``pad_value`` in the ring cells of ``t`` that lie outside the array."""
        geo, h, isz = t.grid, t.halo, t.itemsize
        runs_tile, runs_off, runs_n = [], [], []
        for i in range(geo.gy):
            for j in range(geo.gx):
                if 0 < i < geo.gy - 1 and 0 < j < geo.gx - 1:
                    continue                                         # ring fully inside the array
                tile = int(geo.tiles[i, j])
                ph, pw = int(geo.bh[i]) + 2 * h, int(geo.bw[j]) + 2 * h
                base = int(t.tile_offset[tile])
                rows = [y for y in range(ph) if (i == 0 and y < h) or (i == geo.gy - 1 and y >= ph - h)]
                for y in rows:                                       # whole padded rows
                    runs_tile.append(tile), runs_off.append(base + y * pw * isz), runs_n.append(pw)
                for y in sorted(set(range(ph)) - set(rows)):          # left / right ring cells
                    if j == 0:
                        runs_tile.append(tile), runs_off.append(base + y * pw * isz), runs_n.append(h)
                    if j == geo.gx - 1:
                        runs_tile.append(tile), runs_off.append(base + (y * pw + pw - h) * isz)
                        runs_n.append(h)
        n = np.asarray(runs_n, dtype=np.int64)
        host = np.full((1, int(n.max()) if n.size else 1), t.pad_value, dtype=DTYPES[t.dtype]).view(np.uint8)
        self.device._copy(self.device.arena.data, host, np.zeros(n.size, np.int32),
                          np.zeros(n.size, np.int64), np.asarray(runs_tile),
                          np.asarray(runs_off, dtype=np.int64), n * isz)
        t.boundary_set = True

    def read(self, t: GraphTensor) -> np.ndarray:
        """Fetch a tensor's home elements (not halo copies) into a new host array."""
        t = self._as_tensor(t, "tensor")
        if t.halo == 0:
            return self.device.read(t.storage)
        out = np.empty(t.shape, dtype=DTYPES[t.dtype])
        start, count, tile, off = t.runs
        host = out.reshape(1, -1).view(np.uint8)
        self.device._copy(host, self.device.arena.data, tile, off, np.zeros(tile.size, np.int32),
                          start * t.itemsize, count * t.itemsize)
        return out

    # ------------------------------------------------------------------ compute
    def vertices(self, fn: TileFunction, *args: GraphTensor, tiles: Sequence[int] | None = None,
                 name: str | None = None) -> VertexBatch:
        """A vertex batch running ``fn`` once on every tile of the compute set.

        Parameters
        ----------
        fn : TileFunction
        *args : GraphTensor
            One tensor per function argument; on each tile the function receives that
            tile's block of each (shaped as the tensor's local view).
        tiles : sequence of int, optional
            Where to run (default: every tile holding the first argument).

        Raises
        ------
        TileFunctionError
            An argument that is not a tensor, a tensor with no block on a tile where the
            function runs, two arguments of equal shape mapped differently (a tile would
            need the other tile's elements), float16 tensors, or a Numba compile error
            (:class:`TileFunctionCompileError`).
        """
        if not isinstance(fn, TileFunction):
            raise TypeError(f"expected a TileFunction (use @ipukern.tile_function), got {fn!r}")
        fn._check_arity(len(args))
        tensors = []
        for i, a in enumerate(args):
            if not isinstance(a, (GraphTensor, TileTensor)):
                fn._spec_of(a, i)  # raises a TileFunctionError naming the argument
                raise TileFunctionError(
                    f"argument {i} ({fn._arg_name(i)}) of tile function {fn.name!r} is a "
                    f"{type(a).__name__}; pass tensors of this graph (g.linear_tensor, ...)")
            tensors.append(self._as_tensor(a, f"argument {i} of {fn.name!r}"))
        run_tiles = tensors[0].tiles if tiles is None else self._tiles_arg(tiles).astype(np.int32)
        for k, t in enumerate(tensors):
            missing = run_tiles[t.tile_offset[run_tiles] < 0]
            if missing.size:
                where = "every tile holding " + repr(tensors[0].name) if tiles is None else "the given tiles"
                raise TileFunctionError(
                    f"tile function {fn.name!r}: tensor {t.name!r} (argument {k}, "
                    f"{fn._arg_name(k)}) is not mapped on tile {int(missing[0])}"
                    + (f" (and {missing.size - 1} more)" if missing.size > 1 else "")
                    + f", where the function runs ({where}). A tile function can only read its "
                    "own tile's memory: exchange the data onto those tiles first "
                    "(g.copy / g.broadcast / g.send) or pass tiles=")
            for prev in tensors[:k]:
                if prev is t or prev.shape != t.shape:
                    continue
                e = prev.same_mapping(t)
                if e >= 0:
                    ta = prev.runs[2][np.searchsorted(prev.runs[0], e, side="right") - 1]
                    tb = t.runs[2][np.searchsorted(t.runs[0], e, side="right") - 1]
                    raise TileFunctionError(
                        f"tile function {fn.name!r}: tensors {prev.name!r} and {t.name!r} have the "
                        f"same shape {t.shape} but are mapped differently (element {e} is on tile "
                        f"{int(ta)} in {prev.name!r} and on tile {int(tb)} in {t.name!r}), so "
                        f"tile {int(ta)} would need another tile's data. Map them alike or copy "
                        "one onto the other's mapping first (g.copy)")
        views = [ArgViews(t.name, t.dtype, t.tile_offset[run_tiles], t.tile_shape[run_tiles])
                 for t in tensors]
        return fn.vertex_batch(self.machine, run_tiles, views, name=name)

    def compute(self, fn: TileFunction | Sequence[VertexBatch], *args: GraphTensor,
                tiles: Sequence[int] | None = None, name: str | None = None) -> ComputeSet:
        """A compute set running ``fn(*args)`` on every tile (see :meth:`vertices`), or a
        compute set of ready-made vertex batches (``g.compute([batch, ...])``).

        The function is compiled here (or loaded from Numba's cache), so running the
        program never pays JIT time inside a superstep.
        """
        if isinstance(fn, TileFunction):
            batches = [self.vertices(fn, *args, tiles=tiles, name=name)]
            name = name or fn.name
        else:
            if args:
                raise TypeError("compute(batches) takes no tensor arguments")
            batches = list(fn)
            name = name or "compute"
        return self.device.compute_set(batches, name=name)

    # ------------------------------------------------------------------ exchanges
    def _exchange(self, st, so, dt, do, nb, name: str) -> Exchange:
        return self.device.exchange(st, so, dt, do, nb, name=name)

    def copy(self, src: GraphTensor, dst: GraphTensor, *, name: str | None = None) -> Exchange:
        """Exchange moving element i of ``src`` to element i of ``dst`` for every i
        (same number of elements and dtype; any two mappings). Re-maps a tensor, gathers it
        onto one tile, scatters it from one."""
        src, dst = self._as_tensor(src, "source"), self._as_tensor(dst, "destination")
        if src.n_elems != dst.n_elems or src.dtype != dst.dtype:
            raise ValueError(f"copy {src.name!r} -> {dst.name!r}: {src.dtype}{list(src.shape)} vs "
                             f"{dst.dtype}{list(dst.shape)}; need the same element count and dtype")
        if src.storage is dst.storage:
            raise ValueError(f"copy {src.name!r} onto itself")
        s0, sc, stile, soff = src.runs
        d0, dc, dtile, doff = dst.runs
        cuts = np.union1d(s0, d0)
        ends = np.r_[cuts[1:], src.n_elems]
        si = np.searchsorted(s0, cuts, side="right") - 1
        di = np.searchsorted(d0, cuts, side="right") - 1
        isz = src.itemsize
        return self._exchange(stile[si], soff[si] + (cuts - s0[si]) * isz,
                              dtile[di], doff[di] + (cuts - d0[di]) * isz, (ends - cuts) * isz,
                              name or f"copy {src.name}->{dst.name}")

    def gather(self, src: GraphTensor, dst: GraphTensor, *, name: str | None = None) -> Exchange:
        """Exchange collecting every element of ``src`` into ``dst``, which must live on a
        single tile (element i of src -> element i of dst)."""
        dst = self._as_tensor(dst, "destination")
        if dst.tiles.size != 1:
            raise ValueError(f"gather destination {dst.name!r} must live on one tile, it spans "
                             f"{dst.tiles.size}; use g.copy for a general re-mapping")
        return self.copy(src, dst, name=name or f"gather {self._as_tensor(src, 'source').name}"
                                               f"->tile {int(dst.tiles[0])}")

    def broadcast(self, src: GraphTensor, dst: GraphTensor, *, from_tile: int | None = None,
                  to_tiles: Sequence[int] | None = None, name: str | None = None) -> Exchange:
        """Exchange copying ``src``'s block on ``from_tile`` into ``dst``'s block on each of
        ``to_tiles`` (default: every tile holding ``dst``).

        ``from_tile`` defaults to the one tile holding ``src``; each destination block must
        have as many elements as the source block. The fabric sends the block once
        (cost: the busiest receiver, see :mod:`ipukern.cost`).
        """
        src, dst = self._as_tensor(src, "source"), self._as_tensor(dst, "destination")
        if src.dtype != dst.dtype:
            raise ValueError(f"broadcast {src.name!r} ({src.dtype}) -> {dst.name!r} ({dst.dtype}): "
                             "dtypes differ")
        if from_tile is None:
            if src.tiles.size != 1:
                raise ValueError(f"broadcast source {src.name!r} spans {src.tiles.size} tiles; "
                                 "say which tile's block to send with from_tile=")
            from_tile = int(src.tiles[0])
        self._check_mapped(src, [from_tile], "source")
        targets = dst.tiles if to_tiles is None else self._tiles_arg(to_tiles)
        self._check_mapped(dst, targets, "destination")
        n_src = int(np.prod(src.tile_shape[from_tile]))
        n_dst = np.prod(dst.tile_shape[targets], axis=1)
        bad = np.flatnonzero(n_dst != n_src)
        if bad.size:
            t = int(targets[bad[0]])
            raise ValueError(f"broadcast {src.name!r} -> {dst.name!r}: the source block on tile "
                             f"{from_tile} has {n_src} elements but the destination block on tile "
                             f"{t} has {int(n_dst[bad[0]])}")
        k = targets.size
        nb = np.full(k, n_src * src.itemsize)
        return self._exchange(np.full(k, from_tile), np.full(k, src.tile_offset[from_tile]),
                              targets, dst.tile_offset[targets], nb,
                              name or f"broadcast {src.name}@{from_tile}->{dst.name}")

    def _check_mapped(self, t: GraphTensor, tiles: Any, role: str) -> None:
        tiles = np.asarray(tiles, dtype=np.int64)
        if tiles.size and (tiles.min() < 0 or tiles.max() >= self.n_tiles):
            raise ValueError(f"{role} tile outside 0..{self.n_tiles - 1}")
        missing = tiles[t.tile_offset[tiles] < 0]
        if missing.size:
            raise ValueError(f"exchange {role} {t.name!r} is not mapped on tile {int(missing[0])}"
                             + (f" (and {missing.size - 1} more)" if missing.size > 1 else "")
                             + f"; it lives on {t.tiles.size} tiles"
                             + (f" ({int(t.tiles[0])}..{int(t.tiles[-1])})" if t.tiles.size else ""))

    def send(self, src: GraphTensor, dst: GraphTensor, src_tiles: Any, dst_tiles: Any, *,
             src_start: Any = 0, dst_start: Any = 0, n_elems: Any = None,
             name: str | None = None) -> Exchange:
        """Custom exchange: copy ``n_elems[i]`` elements starting at element ``src_start[i]``
        of ``src``'s block on ``src_tiles[i]`` to element ``dst_start[i]`` of ``dst``'s block
        on ``dst_tiles[i]`` (positions within the tile-local blocks, flattened row-major).

        All arguments broadcast against each other; ``n_elems`` defaults to the whole source
        block. Every tile named must hold a block of its tensor, every range must lie inside
        that block.
        """
        src, dst = self._as_tensor(src, "source"), self._as_tensor(dst, "destination")
        if src.dtype != dst.dtype:
            raise ValueError(f"send {src.name!r} ({src.dtype}) -> {dst.name!r} ({dst.dtype}): dtypes differ")
        st, dt, ss, ds = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, dtype=np.int64))
                                               for v in (src_tiles, dst_tiles, src_start, dst_start)))
        self._check_mapped(src, st, "source")
        self._check_mapped(dst, dt, "destination")
        s_size = np.prod(src.tile_shape[st], axis=1)
        d_size = np.prod(dst.tile_shape[dt], axis=1)
        n = s_size - ss if n_elems is None else np.broadcast_to(np.asarray(n_elems, dtype=np.int64), st.shape)
        for label, start, size, tiles, t in (("source", ss, s_size, st, src),
                                             ("destination", ds, d_size, dt, dst)):
            bad = (start < 0) | (n < 0) | (start + n > size)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"send: {label} elements [{int(start[i])}, {int(start[i] + n[i])}) "
                                 f"fall outside {t.name!r}'s block of {int(size[i])} elements on "
                                 f"tile {int(tiles[i])}")
        isz = src.itemsize
        return self._exchange(st, src.tile_offset[st] + ss * isz, dt, dst.tile_offset[dt] + ds * isz,
                              n * isz, name or f"send {src.name}->{dst.name}")

    def halo_exchange(self, t: GraphTensor, *, corners: bool = True, name: str | None = None) -> Exchange:
        """Exchange refreshing every tile's halo ring from its neighbours' block cells.

        For each of the 8 neighbours (4 with ``corners=False``, enough for 5-point
        stencils), the strip of the neighbour's block next to the shared edge is copied into
        the matching part of the ring: one copy per row of the strip (a row strip is one
        copy of ``bw`` elements, a column strip ``bh`` copies of ``halo`` elements). Ring
        cells outside the array are left alone. Sources are block cells and destinations
        ring cells, so the exchange never writes what it reads.
        """
        t = self._as_tensor(t, "tensor")
        if t.grid is None or t.halo == 0:
            raise ValueError(f"halo_exchange needs a grid tensor with halo >= 1; {t.name!r} is a "
                             f"{t.kind} tensor" + (" with halo 0" if t.grid is not None else "")
                             + " (create it with g.grid_tensor(..., halo=1))")
        geo, h, isz = t.grid, t.halo, t.itemsize
        cols: list[list[np.ndarray]] = [[], [], [], [], []]
        dirs = [(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1)
                if (di, dj) != (0, 0) and (corners or di == 0 or dj == 0)]
        bi, bj = np.meshgrid(np.arange(geo.gy), np.arange(geo.gx), indexing="ij")
        bi, bj = bi.ravel(), bj.ravel()
        for di, dj in dirs:
            ni, nj = bi + di, bj + dj
            ok = (ni >= 0) & (ni < geo.gy) & (nj >= 0) & (nj < geo.gx)
            i, j, ni, nj = bi[ok], bj[ok], ni[ok], nj[ok]
            bh, bw = geo.bh[i], geo.bw[j]
            # destination rows / first column of the strip in the padded buffer
            y0 = np.where(di < 0, 0, np.where(di == 0, h, h + bh))
            ny = np.where(di == 0, bh, h)
            x0 = np.where(dj < 0, 0, np.where(dj == 0, h, h + bw))
            width = np.where(dj == 0, bw, h)
            # same global cell in the neighbour's buffer: shift by the block origin difference
            dy = geo.rows[i] - geo.rows[ni]
            dx = geo.cols[j] - geo.cols[nj]
            rep = np.repeat(np.arange(i.size), ny)
            k = np.arange(rep.size) - np.repeat(np.cumsum(ny) - ny, ny)
            y = y0[rep] + k
            x = x0[rep]
            dtile, stile = geo.tiles[i, j][rep], geo.tiles[ni, nj][rep]
            pw_d = geo.bw[j][rep] + 2 * h
            pw_s = geo.bw[nj][rep] + 2 * h
            cols[0].append(stile)
            cols[1].append(t.tile_offset[stile] + ((y + dy[rep]) * pw_s + x + dx[rep]) * isz)
            cols[2].append(dtile)
            cols[3].append(t.tile_offset[dtile] + (y * pw_d + x) * isz)
            cols[4].append(width[rep] * isz)
        cat = [np.concatenate(c) if c else np.zeros(0, np.int64) for c in cols]
        return self._exchange(*cat, name or f"halo {t.name}")

    def join(self, *exchanges: Exchange, name: str | None = None) -> Exchange:
        """One exchange phase doing all the copies of ``exchanges`` (re-validated together:
        their writes must not overlap and none may write what another reads)."""
        if not exchanges:
            raise ValueError("join needs at least one exchange")
        cat = [np.concatenate([getattr(x, f) for x in exchanges])
               for f in ("src_tile", "src_offset", "dst_tile", "dst_offset", "nbytes")]
        return self._exchange(*cat, name or " + ".join(x.name for x in exchanges))

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, x: GraphTensor, *, name: str | None = None) -> list[Superstep]:
        """Supersteps summing the blocks of ``x`` over its tiles, leaving the sum in every
        tile's block (in place).

        Every tile holding ``x`` must hold the same number of elements n (e.g. a
        :meth:`tile_tensor` of shape (P, n)). With P tiles, element range [0, n) is cut into
        P near-equal chunks, chunk j owned by the j-th tile:

        1. *reduce-scatter* (exchange): every tile sends its copy of chunk j to tile j,
           which receives P - 1 chunks into a buffer (allocated here, category "exchange");
        2. *sum + all-gather*: tile j adds its own chunk and the received ones in tile order
           (built-in ``sum_rows``, fp32 accumulation, fixed order: deterministic), then sends
           the summed chunk to every other tile's block.

        Each tile receives about n elements in each exchange: cycles ~ ``2 * n * itemsize /
        exchange_bytes_per_cycle`` + two syncs + a depth-P reduction of n/P elements.
        """
        x = self._as_tensor(x, "tensor")
        name = name or f"all_reduce {x.name}"
        tiles = x.tiles
        p = tiles.size
        sizes = np.prod(x.tile_shape[tiles], axis=1)
        if p == 0 or (sizes != sizes[0]).any():
            raise ValueError(f"all_reduce: every tile holding {x.name!r} must hold the same number of "
                             f"elements; they hold {int(sizes.min())}..{int(sizes.max())} "
                             "(use g.tile_tensor(name, n, tiles=...))")
        n, isz = int(sizes[0]), x.itemsize
        off = x.tile_offset[tiles]
        bounds = split_bounds(n, p)
        chunk = np.diff(bounds)                                  # chunk j: elements owned by rank j
        recv_bytes = np.zeros(self.n_tiles, dtype=np.int64)
        recv_bytes[tiles] = (p - 1) * chunk * isz
        recv = self.device.alloc(f"{name}.recv", recv_bytes, category="exchange")
        # 1. reduce-scatter: sender rank i -> receiver rank j, into j's slot i (i < j) or i-1
        ii, jj = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
        ii, jj = ii.ravel(), jj.ravel()
        keep = (ii != jj) & (chunk[jj] > 0)
        ii, jj = ii[keep], jj[keep]
        slot = np.where(ii < jj, ii, ii - 1)
        rs = self._exchange(tiles[ii], off[ii] + bounds[jj] * isz, tiles[jj],
                            recv[tiles[jj]] + slot * chunk[jj] * isz, chunk[jj] * isz,
                            "reduce-scatter")
        # 2. each owner adds its own chunk (first: the output aliases it) and the P-1 received
        owners = np.flatnonzero(chunk > 0)
        own_off = off[owners] + bounds[owners] * isz
        srcs = [own_off] + [recv[tiles[owners]] + s * chunk[owners] * isz for s in range(p - 1)]
        batch = sum_rows(self.machine, tiles[owners], own_off, srcs, chunk[owners], x.dtype, x.dtype,
                         why=f"add own chunk + {p - 1} received chunks of {int(chunk.max())} "
                             f"{x.dtype} (fixed order)")
        cs = self.device.compute_set([batch], name=f"{name}: sum")
        # 3. all-gather: owner j's summed chunk to every other tile's block
        jj, ii = np.meshgrid(owners, np.arange(p), indexing="ij")
        jj, ii = jj.ravel(), ii.ravel()
        keep = ii != jj
        jj, ii = jj[keep], ii[keep]
        ag = self._exchange(tiles[jj], off[jj] + bounds[jj] * isz, tiles[ii], off[ii] + bounds[jj] * isz,
                            chunk[jj] * isz, "all-gather")
        return [Superstep(f"{name}: reduce-scatter", exchange=rs, category="exchange"),
                Superstep(f"{name}: sum + all-gather", compute=cs, exchange=ag, category="reduction")]

    # ------------------------------------------------------------------ programs
    def program(self, steps: Sequence[Superstep], *, label: str = "") -> Program:
        """A :class:`Program` of these supersteps on this graph's device."""
        return self.device.program(steps, label=label)

    def run(self, program: Program, mode: str = "execute", **profile_kw: Any) -> Profile:
        """Run (``"execute"``) or cost (``"estimate"``) a program; returns its :class:`Profile`.

        Before the first execution, the outside-the-array ring cells of halo tensors that
        were never written are set to their ``pad_value``.
        """
        if mode == "execute":
            for t in self.tensors.values():
                if t.halo and not t.boundary_set:
                    self._write_boundary(t)
        return self.device.run(program, mode=mode, **profile_kw)
