"""BSP programs: supersteps of (compute set, sync, exchange).

- :class:`Exchange` is a table of byte copies ``(src_tile, src_offset, dst_tile, dst_offset,
  nbytes)`` held as NumPy arrays. It is validated once when built (ranges, overlapping
  writes) and costed once (busiest tile's bytes over the exchange rate), then executed by
  one Cython call per run.
- :class:`VertexBatch` is many vertices of one codelet, one call over all of them. Its
  operands are byte offsets *within the vertex's own tile*, so a vertex cannot reach
  another tile's memory: data crosses tiles only in exchanges (the BSP rule).
- :class:`ComputeSet` groups batches that run in the same compute phase.
- :class:`Superstep` = compute, then sync, then exchange; :class:`Program` is a list of them
  plus the memory it was planned with.

Costs are fixed at build time, so ``estimate`` and ``execute`` report identical cycles.
This module is the model; how the host runs a program fast lives in :mod:`ipukern.core.host`
(which imports this module, never the other way round).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, Sequence

import numpy as np

from .. import _settings
from . import cost
from ..machine import MachineSpec
from .memory import TileMemory
from .profile import SuperstepRecord, tile_activity
from .copies import (CopyTable, as_int_array, check_exchange_bounds, check_exchange_table,
                     destination_order, outside)
from .threads import check_num_threads

__all__ = ["check_arena", "ExchangeError", "Exchange", "Codelet", "VertexBatch",
           "ComputeSet", "Superstep", "Program", "ArgViews"]

# large copies are split into pieces of this size on the host so threads share the work
# evenly; the simulated copy table is unchanged
_HOST_PIECE_BYTES = 1 << 18
#: exchanges writing at least this many bytes use non-temporal stores for their long runs
#: (host speed only: larger than this host's 32 MiB L3, the data cannot stay cached anyway)
_STREAM_BYTES = 32 << 20


class ExchangeError(ValueError):
    """An exchange table the fabric could not execute (bad range, overlapping writes)."""


def check_arena(data: Any, rows_needed: int, row_needed: int, what: str,
                error: type = ValueError) -> None:
    """Raise ``error`` unless ``data`` is an arena a step can run on: a writeable, C-contiguous
    2-D uint8 array (row t = tile t) with a row for every tile the step uses (``rows_needed``)
    and rows at least ``row_needed`` bytes long.

    Steps are validated against a tile's size when built, but the host arena only holds the
    bytes a device has allocated (its high-water mark), so this runs before every execution.
    """
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        got = (f"{data.dtype}{list(data.shape)} array" if isinstance(data, np.ndarray)
               else type(data).__name__)
        raise error(f"{what}: data must be a device arena, a 2-D uint8 array "
                    f"(n_tiles, row_bytes); got a {got}")
    if not data.flags.c_contiguous or not data.flags.writeable:
        raise error(f"{what}: the arena must be C-contiguous and writeable")
    if data.shape[0] < rows_needed:
        raise error(f"{what}: uses tile {rows_needed - 1} but the arena has only {data.shape[0]} rows")
    if data.shape[1] < row_needed:
        raise error(f"{what}: touches tile bytes up to {row_needed} but the arena rows hold "
                    f"{data.shape[1]} B (the host holds only memory allocated on the device); "
                    "allocate the buffers on the device before running")


def _trusted_column(label: str, values: Any) -> np.ndarray:
    """A column of a trusted (``validate=False``) table: the builders' signed-int arrays as
    they are; anything else (a caller's list, 2**63, floats) is checked as user input, so the
    flag never turns a bad value into an OverflowError or a silent truncation."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "i":
        return np.ascontiguousarray(values, np.int64).reshape(-1)
    return as_int_array(label, values, np.int64, ExchangeError)


class Exchange:
    """A table of tile-to-tile byte copies executed in one exchange phase.

    Parameters
    ----------
    machine : MachineSpec
    src_tile, src_offset, dst_tile, dst_offset, nbytes : array-like of int
        One row per copy. Offsets are byte offsets within a tile's memory.
    name : str
        Shown in profiles.
    row_bytes : int, optional
        Highest valid offset + 1 (default: the machine's tile size).
    shared_bus : bool or array-like of bool, optional
        Which copies may arrive at the shared-bus 2x rate when both tiles of a bus receive
        them (default: all). One bool, or one per copy. PopLibs' conv planner grants the 2x
        rate to inputs only, and only when the out-channel split is even.
    validate : bool, optional
        False skips the overlap checks below (not the sizes, tiles and bounds, which are
        always checked, so no table can make the host write outside its arena): only for
        tables ipukern's own program builders derive from a plan (a cold network estimate
        builds hundreds of them). The public
        Graph/Device API always validates; ``IPUKERN_CHECK_BUILT_PROGRAMS=1`` makes every
        exchange validate (read at each build).

    Raises
    ------
    ExchangeError
        For negative sizes, tiles out of range, copies past the end of a tile, two copies
        writing overlapping bytes, or a destination that overlaps a source of the same
        exchange (the result would depend on copy order). Nothing is written.
    """

    #: set by a program builder when the destination bytes are receive buffers (no tensor's
    #: bytes, never read by the host) that only vertices read: where the program-wide checks
    #: show no other step touches them, the host may then hand the bytes to the next
    #: superstep's vertices without writing them into the arena (a conv's partials:
    #: :mod:`ipukern.core.host.fused_reduce`; its windows and weights: :mod:`ipukern.core.host.shadow`)
    receive_only = False

    def __init__(self, machine: MachineSpec, src_tile: Any, src_offset: Any, dst_tile: Any,
                 dst_offset: Any, nbytes: Any, *, name: str = "exchange",
                 row_bytes: int | None = None, shared_bus: Any = True, validate: bool = True):
        self.machine = machine
        self.name = name
        row = machine.tile_bytes if row_bytes is None else int(row_bytes)
        if validate or _settings.check_built_programs():
            st, so, dt, do, nb = (as_int_array(label, v, np.int64, ExchangeError) for label, v in (
                ("src_tile", src_tile), ("src_offset", src_offset), ("dst_tile", dst_tile),
                ("dst_offset", dst_offset), ("nbytes", nbytes)))
            if not (st.size == so.size == dt.size == do.size == nb.size):
                raise ExchangeError(f"{name}: copy table columns differ in length "
                                    f"({st.size}, {so.size}, {dt.size}, {do.size}, {nb.size})")
            # destination order of the copies of positive size (locality of writes on the
            # host), found by the validation
            order = check_exchange_table(st, so, dt, do, nb, machine.n_tiles, row, name,
                                         ExchangeError)
        else:
            st, so, dt, do, nb = (_trusted_column(label, v) for label, v in (
                ("src_tile", src_tile), ("src_offset", src_offset), ("dst_tile", dst_tile),
                ("dst_offset", dst_offset), ("nbytes", nbytes)))
            if not (st.size == so.size == dt.size == do.size == nb.size):
                raise ExchangeError(f"{name}: copy table columns differ in length "
                                    f"({st.size}, {so.size}, {dt.size}, {do.size}, {nb.size})")
            # the bounds the host kernels rely on are never skipped (O(n), no sort): only
            # the overlap checks are the trusted builders' to skip
            check_exchange_bounds(st, so, dt, do, nb, machine.n_tiles, row, name, ExchangeError)
            order = destination_order(dt, do, nb, row)
        n = nb.size
        try:
            bus = np.broadcast_to(np.asarray(shared_bus, dtype=bool), (n,))
        except ValueError:
            raise ExchangeError(f"{name}: shared_bus must be one bool or one per copy ({n}), "
                                f"got shape {np.shape(shared_bus)}") from None
        keep = nb > 0
        if not keep.all():
            st, so, dt, do, nb, bus = st[keep], so[keep], dt[keep], do[keep], nb[keep], bus[keep]
        if order is None:           # in order: copies of the columns (the caller's stay its own)
            self.src_tile, self.dst_tile = st.astype(np.int32), dt.astype(np.int32)
            self.src_offset, self.dst_offset, self.nbytes = so.copy(), do.copy(), nb.copy()
            self.shared_bus = np.array(bus)
        else:
            self.src_tile = st[order].astype(np.int32)
            self.src_offset = so[order]
            self.dst_tile = dt[order].astype(np.int32)
            self.dst_offset = do[order]
            self.nbytes = nb[order]
            self.shared_bus = bus[order]
        self.row_bytes = row
        # the arena row a run needs (checked against the real arena at every run)
        self.row_needed = int(max((so + nb).max(), (do + nb).max())) if nb.size else 0
        self.rows_needed = int(max(st.max(), dt.max())) + 1 if nb.size else 0
        self._cost()
        # the host's copy table: the validated copies in destination order, big ones in
        # pieces so threads share the work evenly (the simulated table is unchanged)
        self.table = CopyTable(self.src_tile, self.src_offset, self.dst_tile, self.dst_offset,
                               self.nbytes, host_order="given", piece_bytes=_HOST_PIECE_BYTES)

    # ------------------------------------------------------------------ cost
    def _cost(self) -> None:
        m = self.machine
        recv, paired, send = cost.exchange_loads(self.src_tile, self.src_offset, self.dst_tile,
                                                 self.nbytes, m.n_tiles, m.tiles_per_exchange_bus,
                                                 self.shared_bus)
        per_tile = cost.tile_exchange_cycles(recv, paired, send, m)
        self.recv_bytes, self.paired_bytes, self.send_bytes = recv, paired, send
        self.tile_cycles = per_tile
        if self.nbytes.size == 0:
            self.cycles, self.busiest_tile = 0, -1
            self.transfer_cycles = self.overhead_cycles = 0
            self.why = ""
            return
        t = int(np.argmax(per_tile))
        self.busiest_tile = t
        # the transfer is PopLibs' term; the fixed overhead is ipukern's addition (a
        # profile category of its own)
        self.transfer_cycles = int(per_tile[t])
        self.overhead_cycles = m.exchange_overhead_cycles
        self.cycles = self.transfer_cycles + self.overhead_cycles
        r, p, s = int(recv[t]), int(paired[t]), int(send[t])
        paired_txt = f" ({p} B paired on a shared bus at 2x)" if p else ""
        direction = f"receives {r} B{paired_txt}" if 2 * r - p >= 2 * s else f"sends {s} B"
        self.why = (f"{self.name}: tile {t} {direction} at {m.exchange_bytes_per_cycle:.2f} B/cycle "
                    f"= {int(per_tile[t])} + {m.exchange_overhead_cycles} overhead cycles")

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())

    @property
    def n_copies(self) -> int:
        return int(self.nbytes.size)

    # ------------------------------------------------------------------ execution
    def _pieces(self) -> tuple[np.ndarray, ...]:
        """The copies as the host runs them (:attr:`CopyTable.kernel_columns`)."""
        return self.table.kernel_columns

    def thread_bounds(self, n_threads: int) -> np.ndarray:
        """Copy index ranges giving each thread an equal share of bytes (cached)."""
        return self.table.thread_bounds(n_threads)

    def run(self, data: np.ndarray, n_threads: int) -> None:
        """Execute the copies on the arena bytes ``data`` (n_tiles, row_bytes).

        Raises
        ------
        ExchangeError
            If ``data`` is not such an arena or its rows are shorter than the copies reach.
        ValueError, TypeError
            If ``n_threads`` is not an int in 1..MAX_THREADS.
        """
        check_arena(data, self.rows_needed, self.row_needed, self.name, ExchangeError)
        n_threads = check_num_threads(n_threads)
        if self.nbytes.size == 0:
            return
        # check=False: the table was validated when built and its extent against data above;
        # a table writing more than a last-level cache holds streams its long runs
        self.table.run(data, data, n_threads, check=False,
                       stream=self.total_bytes >= _STREAM_BYTES)


class ArgViews(NamedTuple):
    """Where one argument of a per-tile function lives on each vertex's tile (the input of
    a user vertex, e.g. :meth:`ipukern.TileFunction.vertex_batch`).

    Attributes
    ----------
    name : str
        Shown in errors (usually the tensor's name).
    dtype : str
        Element dtype (``"float32"``).
    offset : int64 ndarray of shape (n_vertices,)
        Byte offset of the block within the vertex's tile.
    shape : int64 ndarray of shape (n_vertices, ndim)
        Shape of the block on each vertex's tile (row-major, contiguous).
    """

    name: str
    dtype: str
    offset: np.ndarray
    shape: np.ndarray


class Codelet(Protocol):
    """What a vertex type provides: a name and one call that runs a whole batch."""

    name: str

    def run(self, data: np.ndarray, batch: "VertexBatch", n_threads: int) -> None: ...


@dataclass
class VertexBatch:
    """Many vertices of one codelet, run by one compiled call.

    Attributes
    ----------
    codelet : Codelet
    tiles : int32 array (n_vertices,)
        The tile each vertex runs on.
    args : dict of str -> array (n_vertices, ...)
        Per-vertex operands (byte offsets within the vertex's tile, sizes, parameters).
    regions : list of (offset array, nbytes array)
        Every memory range the vertices touch, checked to lie inside the tile's memory.
    cycles : int64 array (n_vertices,)
        Cycle estimate of each vertex.
    why : str
        One line explaining the estimate (method, per-vertex work).
    user_estimate : bool
        True when ``cycles`` come from a user-supplied formula.
    """

    codelet: Any
    tiles: np.ndarray
    args: dict[str, Any]
    cycles: np.ndarray
    regions: Sequence[tuple[np.ndarray, np.ndarray]] = ()
    why: str = ""
    user_estimate: bool = False

    def __post_init__(self) -> None:
        self.tiles = as_int_array(f"{self.codelet.name}: tiles", self.tiles, np.int32)
        self.cycles = as_int_array(f"{self.codelet.name}: cycles", np.ravel(self.cycles), np.int64)
        self.row_needed = 0
        if self.cycles.shape != self.tiles.shape:
            raise ValueError(f"{self.codelet.name}: {self.tiles.size} vertices but "
                             f"{self.cycles.size} cycle estimates")
        if (self.cycles < 0).any():
            raise ValueError(f"{self.codelet.name}: negative cycle estimate")

    def check(self, machine: MachineSpec, row_bytes: int) -> None:
        """Every vertex on an existing tile, every region inside its tile's memory."""
        if self.tiles.size and ((self.tiles < 0) | (self.tiles >= machine.n_tiles)).any():
            bad = int(self.tiles[(self.tiles < 0) | (self.tiles >= machine.n_tiles)][0])
            raise ValueError(f"{self.codelet.name}: vertex on tile {bad}, outside 0..{machine.n_tiles - 1}")
        name, n = self.codelet.name, self.tiles.size
        ends = [0]
        for k, (off, nb) in enumerate(self.regions):
            off = as_int_array(f"{name}: region {k} offsets", np.ravel(off), np.int64)
            nb = as_int_array(f"{name}: region {k} sizes", np.ravel(nb), np.int64)
            if off.size != n or nb.size != n:
                raise ValueError(f"{name}: region {k} has {off.size} offsets and {nb.size} sizes "
                                 f"for {n} vertices")
            bad = (nb < 0) | outside(off, np.maximum(nb, 0), row_bytes)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{name}: vertex {i} on tile {int(self.tiles[i])} "
                                 f"touches bytes [{int(off[i])}, {int(off[i]) + int(nb[i])}) "
                                 f"outside the tile's {row_bytes} B")
            if n:
                ends.append(int((off + nb).max()))
        # the arena row a run needs (checked against the real arena at every run)
        self.row_needed = max(ends)


class ComputeSet:
    """Vertex batches of one compute phase; the phase lasts as long as the slowest tile.

    A tile runs its vertices one after another (each vertex estimate already accounts for
    the tile's 6 workers), so a tile's cycles are the sum over its vertices.
    """

    def __init__(self, machine: MachineSpec, batches: Sequence[VertexBatch], *,
                 name: str = "compute", row_bytes: int | None = None):
        self.machine = machine
        self.name = name
        self.batches = list(batches)
        row = machine.tile_bytes if row_bytes is None else int(row_bytes)
        per_tile = np.zeros(machine.n_tiles, dtype=np.int64)
        share = []
        for b in self.batches:
            b.check(machine, row)
            contrib = np.bincount(b.tiles, weights=b.cycles, minlength=machine.n_tiles).astype(np.int64)
            per_tile += contrib
            share.append(contrib)
        self.tile_cycles = per_tile
        if self.batches and per_tile.any():
            t = int(np.argmax(per_tile))
            self.cycles, self.busiest_tile = int(per_tile[t]), t
            main = max(range(len(share)), key=lambda i: share[i][t])
            b = self.batches[main]
            self.why = b.why or b.codelet.name
            self.user_estimate = any(bb.user_estimate and share[i][t] for i, bb in enumerate(self.batches))
        else:
            self.cycles, self.busiest_tile, self.why, self.user_estimate = 0, -1, "", False
        self.tiles_computing = int((per_tile > 0).sum())
        self.row_needed = max((b.row_needed for b in self.batches), default=0)
        self.rows_needed = max((int(b.tiles.max()) + 1 for b in self.batches if b.tiles.size), default=0)

    def run(self, data: np.ndarray, n_threads: int) -> None:
        """Run every batch on the arena bytes ``data`` (n_tiles, row_bytes).

        Raises
        ------
        ValueError
            If ``data`` is not such an arena or its rows are shorter than the vertices reach.
        """
        check_arena(data, self.rows_needed, self.row_needed, self.name)
        n_threads = check_num_threads(n_threads)
        for b in self.batches:
            if b.tiles.size:
                b.codelet.run(data, b, n_threads)


@dataclass
class Superstep:
    """compute (every tile on its own memory) -> sync (all tiles) -> exchange."""

    name: str
    compute: ComputeSet | None = None
    exchange: Exchange | None = None
    category: str = "compute"

    def record(self, index: int, machine: MachineSpec) -> SuperstepRecord:
        c, x = self.compute, self.exchange
        return SuperstepRecord(
            index=index, name=self.name, category=self.category,
            compute_cycles=c.cycles if c else 0,
            sync_cycles=machine.sync_cycles,
            exchange_cycles=x.cycles if x else 0,
            exchange_overhead_cycles=x.overhead_cycles if x else 0,
            compute_tile=c.busiest_tile if c else -1,
            exchange_tile=x.busiest_tile if x else -1,
            bytes_exchanged=x.total_bytes if x else 0,
            n_copies=x.n_copies if x else 0,
            tiles_computing=c.tiles_computing if c else 0,
            compute_why=c.why if c else "",
            exchange_why=x.why if x else "",
            user_estimate=c.user_estimate if c else False,
            **tile_activity(c.tile_cycles if c else None, x.tile_cycles if x else None,
                            ((x.recv_bytes > 0) | (x.send_bytes > 0)) if x else None,
                            machine.exchange_overhead_cycles, machine.n_tiles),
        )


class Program:
    """A list of supersteps and the tile memory they were planned in.

    A program is data: its steps were validated and costed when built, so its
    :attr:`records` are known without running it. The engine runs it
    (:func:`ipukern.run_program`, :meth:`ipukern.Device.run`) through the host executor
    (:func:`ipukern.core.host.run.execute`).
    """

    def __init__(self, machine: MachineSpec, steps: Sequence[Superstep], memory: TileMemory, *,
                 label: str = ""):
        self.machine = machine
        self.steps = list(steps)
        self.memory = memory
        self.label = label
        self._records: list[SuperstepRecord] | None = None
        #: the host executor's per-program state (:mod:`ipukern.core.host.run`: the fused
        #: steps it chose); never read by the model, and no part of the program's meaning
        self.host_cache: dict[str, Any] = {}

    @property
    def records(self) -> list[SuperstepRecord]:
        """Per-superstep cost records (computed once; identical for every run)."""
        if self._records is None:
            self._records = [s.record(i, self.machine) for i, s in enumerate(self.steps)]
        return self._records

    @property
    def row_bytes(self) -> int:
        """Arena row size this program needs (> tile size only for overflowing programs)."""
        return max(self.machine.tile_bytes, self.memory.high_water)
