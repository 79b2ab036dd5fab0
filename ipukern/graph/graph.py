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
from ..core import Device
from ..machine import GC200, MachineSpec
from ..core import TileMemoryError
from ..core import Profile
from ..core.collectives import all_reduce
from ..core.program import ArgViews, ComputeSet, Exchange, Program, Superstep, VertexBatch
from ..core import TileMapping, TileTensor
from .grid import GridGeometry, choose_grid, grid_mapping, split_bounds
from .tensor import GraphTensor
from .tilefn import TileFunction, TileFunctionError

__all__ = ["Graph", "GraphTensor", "grid_mapping", "choose_grid", "split_bounds"]


def _int64_array(label: str, v: Any) -> np.ndarray:
    """``v`` as a 1-D int64 array; ValueError for non-integers or values beyond int64."""
    arr = np.atleast_1d(np.asarray(v))
    ok = arr.dtype.kind == "i" or (arr.dtype.kind == "u" and (arr.size == 0 or arr.max() < 2**63))
    if arr.dtype == object:
        ok = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and -2**63 <= x < 2**63
                 for x in arr.reshape(-1))
    if not ok and arr.size:
        raise ValueError(f"{label} must be integers within int64, got {v!r}")
    return arr.astype(np.int64)


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
        """Elements spread evenly over ``tiles`` (default: all) in contiguous runs of a whole
        number of ``grain`` elements. A tile function sees its tile's run as a 1-D array."""
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
        geo = GridGeometry((h, w), (gy, gx), tile_ids, int(halo))
        if halo > 0 and (halo > geo.bh.min() or halo > geo.bw.min()):
            raise ValueError(f"halo {halo} is wider than the smallest block "
                             f"({int(geo.bh.min())}x{int(geo.bw.min())}) of a {gy}x{gx} grid over "
                             f"{h}x{w}: a halo must come from the direct neighbours only")
        mapping = grid_mapping((h, w), (gy, gx), tile_ids) if halo == 0 else geo.padded_mapping()
        # a halo tensor's storage is 1-D: one interval per tile, its whole padded buffer
        st = self._add(name, (h, w) if halo == 0 else (mapping.n_elems,), dtype, mapping, category)
        local = np.zeros((self.n_tiles, 2), dtype=np.int64)
        local[tile_ids, 0], local[tile_ids, 1] = geo.block_shapes(padded=halo > 0)
        t = GraphTensor(self, name, (h, w), dtype, st, local, "grid", grid=geo)
        if halo:
            t.runs = geo.interior_runs(t.tile_offset, t.itemsize)
            t.pad_value = float(pad_value)
        return self._register(t)

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
        self.device.check_tensor(t)
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
        padded = np.pad(arr.astype(want, copy=False), t.halo, mode="constant",
                        constant_values=t.pad_value)
        self.device.write_runs(np.ascontiguousarray(padded),
                               *t.grid.padded_row_runs(t.tile_offset, t.itemsize))
        t.boundary_set = True

    def _write_boundary(self, t: GraphTensor) -> None:
        """Store ``pad_value`` in the ring cells of ``t`` that lie outside the array."""
        tiles, offs, n = t.grid.boundary_runs(t.tile_offset, t.itemsize)
        host = np.full(int(n.max()) if n.size else 1, t.pad_value, dtype=DTYPES[t.dtype])
        self.device.write_runs(host, 0, tiles, offs, n * t.itemsize)
        t.boundary_set = True

    def read(self, t: GraphTensor) -> np.ndarray:
        """Fetch a tensor's home elements (not halo copies) into a new host array."""
        t = self._as_tensor(t, "tensor")
        if t.halo == 0:
            return self.device.read(t.storage)
        out = np.empty(t.shape, dtype=DTYPES[t.dtype])
        start, count, tile, off = t.runs
        self.device.read_runs(out, start * t.itemsize, tile, off, count * t.itemsize)
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
        fn.check_args(args)           # arity, tensor-like arguments, dtypes
        tensors = []
        for i, a in enumerate(args):
            if not isinstance(a, (GraphTensor, TileTensor)):
                raise TileFunctionError(
                    f"argument {i} ({fn.arg_name(i)}) of tile function {fn.name!r} is a "
                    f"{type(a).__name__}; pass tensors of this graph (g.linear_tensor, ...)")
            tensors.append(self._as_tensor(a, f"argument {i} of {fn.name!r}"))
        run_tiles = tensors[0].tiles if tiles is None else self._tiles_arg(tiles).astype(np.int32)
        for k, t in enumerate(tensors):
            missing = run_tiles[t.tile_offset[run_tiles] < 0]
            if missing.size:
                where = "every tile holding " + repr(tensors[0].name) if tiles is None else "the given tiles"
                raise TileFunctionError(
                    f"tile function {fn.name!r}: tensor {t.name!r} (argument {k}, "
                    f"{fn.arg_name(k)}) is not mapped on tile {int(missing[0])}"
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
        (cost: the busiest receiver, see :mod:`ipukern.core.cost`).
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
        st, dt, ss, ds = np.broadcast_arrays(*(_int64_array(label, v) for label, v in (
            ("src_tiles", src_tiles), ("dst_tiles", dst_tiles), ("src_start", src_start),
            ("dst_start", dst_start))))
        self._check_mapped(src, st, "source")
        self._check_mapped(dst, dt, "destination")
        s_size = np.prod(src.tile_shape[st], axis=1)
        d_size = np.prod(dst.tile_shape[dt], axis=1)
        n = s_size - ss if n_elems is None else np.broadcast_to(_int64_array("n_elems", n_elems), st.shape)
        for label, start, size, tiles, t in (("source", ss, s_size, st, src),
                                             ("destination", ds, d_size, dt, dst)):
            # overflow-free form of start + n > size (start, n >= 0 checked first)
            bad = (start < 0) | (n < 0) | (start > size - n)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"send: {label} elements [{int(start[i])}, {int(start[i]) + int(n[i])}) "
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
        copies = t.grid.halo_copies(t.tile_offset, t.itemsize, corners=corners)
        return self._exchange(*copies, name or f"halo {t.name}")

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
        tile's block (in place): reduce-scatter, then sum + all-gather.

        Every tile holding ``x`` must hold the same number of elements (e.g. a
        :meth:`tile_tensor` of shape (P, n)). See :func:`ipukern.core.collectives.all_reduce`
        for the algorithm and its cost.
        """
        x = self._as_tensor(x, "tensor")
        return all_reduce(self.device, x.storage, name=name or f"all_reduce {x.name}")

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
