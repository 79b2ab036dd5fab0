"""The simulated device: tile memory, tensors, and the engine that runs BSP programs.

Two run modes share one program and therefore one set of cycle numbers:

- ``"execute"`` moves the real bytes (exchanges) and runs the real vertices (compute sets);
- ``"estimate"`` touches no data at all, which is how large sweeps and shapes beyond host
  memory stay cheap.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Sequence

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from .memory import Arena, TileMemory, TileMemoryError
from .profile import Profile
from .copies import CopyTable, copy_runs
from .program import ComputeSet, Exchange, Program, Superstep, VertexBatch
from .tensor import TileMapping, TileTensor
from .host import run as host_run
from .threads import get_num_threads, set_num_threads

__all__ = ["Device", "run_program", "set_num_threads", "get_num_threads"]

#: an overflowing device's arena (one row per tile, as long as the fullest tile) may take
#: at most this many times the machine's SRAM of host memory
MAX_OVERFLOW_ARENA_FACTOR = 2
_DEVICE_IDS = itertools.count()


class Device:
    """One simulated IPU: its tile memory (budgets, allocations), tensors and arena.

    Parameters
    ----------
    machine : MachineSpec or str
        Preset name or spec; default GC200.
    allow_overflow : bool
        Record allocations beyond a tile's budget instead of raising, so an out-of-memory
        program can still be estimated/executed and its memory report inspected.
    """

    def __init__(self, machine: MachineSpec | str = GC200, *, allow_overflow: bool = False):
        self.machine = get_machine(machine)
        self.memory = TileMemory(self.machine, allow_overflow=allow_overflow)
        self.tensors: dict[str, TileTensor] = {}
        self.id = next(_DEVICE_IDS)
        self._arena: Arena | None = None
        # guards the arena's creation: threads sharing a cached program must get one arena
        self._arena_lock = threading.Lock()

    # ------------------------------------------------------------------ memory
    def alloc(self, name: str, nbytes_per_tile: Any, category: str = "user") -> np.ndarray:
        """Raw per-tile buffers: returns byte offsets (see :meth:`TileMemory.alloc`)."""
        return self.memory.alloc(name, nbytes_per_tile, category)

    def add_tensor(self, name: str, shape: Sequence[int], dtype: Any, mapping: TileMapping,
                   category: str = "user") -> TileTensor:
        """Allocate a tensor on the tiles given by ``mapping``.

        Raises :class:`~ipukern.TileMemoryError` if a tile's budget would be exceeded.
        """
        if name in self.tensors:
            raise ValueError(f"a tensor named {name!r} already exists on this device")
        dtype = canonical_dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        if mapping.n_elems != n:
            raise ValueError(f"tensor {name!r} has {n} elements but its mapping covers {mapping.n_elems}")
        if mapping.tile.size and (mapping.tile.max() >= self.machine.n_tiles or mapping.tile.min() < 0):
            raise ValueError(f"tensor {name!r}: mapping uses tiles outside 0..{self.machine.n_tiles - 1}")
        itemsize = DTYPES[dtype].itemsize
        per_tile = mapping.elems_per_tile(self.machine.n_tiles) * itemsize
        base = self.memory.alloc(name, per_tile, category)
        # within a tile, intervals are stored consecutively in element order
        order = _tile_order(mapping.tile, mapping.start, n)
        nbytes = mapping.count[order] * itemsize
        tiles = mapping.tile[order]
        csum = np.cumsum(nbytes) - nbytes
        first_of_tile = np.r_[True, tiles[1:] != tiles[:-1]]
        tile_start = np.maximum.accumulate(np.where(first_of_tile, np.arange(tiles.size), 0))
        local = csum - csum[tile_start]
        offset = np.empty_like(local)
        offset[order] = base[tiles] + local
        t = TileTensor(name, shape, dtype, mapping, offset, self.id)
        self.tensors[name] = t
        return t

    def add_tensor_view(self, name: str, shape: Sequence[int], dtype: Any, tile: np.ndarray,
                        start: np.ndarray, count: np.ndarray, offset: np.ndarray) -> TileTensor:
        """Register a tensor that lives inside buffers already allocated on this device
        (e.g. a conv input whose elements sit in the tiles' input windows).

        ``tile/start/count/offset`` give, per interval of the flattened tensor, the tile,
        the first element, the number of elements and the byte offset in the tile. The
        intervals must cover the tensor exactly once and stay inside allocated memory.
        """
        if name in self.tensors:
            raise ValueError(f"a tensor named {name!r} already exists on this device")
        dtype = canonical_dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        tile, start, count, offset = (np.asarray(a, dtype=np.int64)
                                      for a in (tile, start, count, offset))
        keep = count > 0
        if not keep.all():
            tile, start, count, offset = tile[keep], start[keep], count[keep], offset[keep]
        if start.size > 1 and (start[1:] < start[:-1]).any():
            # sort once here (stable, as TileMapping would), so the mapping finds them sorted
            order = np.argsort(start, kind="stable")
            tile, start, count, offset = tile[order], start[order], count[order], offset[order]
        mapping = TileMapping(n, tile, start, count)
        itemsize = DTYPES[dtype].itemsize
        end = offset + mapping.count * itemsize
        if mapping.tile.size and ((offset < 0).any() or (end > self.memory.used[mapping.tile]).any()):
            raise ValueError(f"tensor {name!r}: an interval lies outside the tile's allocated memory")
        return self._register_view(name, shape, dtype, mapping, offset)

    def _register_view(self, name: str, shape: Sequence[int], dtype: Any, mapping: TileMapping,
                       offset: np.ndarray) -> TileTensor:
        """Register a view whose mapping and offsets are already valid (internal builders
        whose tests prove them equal to :meth:`add_tensor_view`'s checked input)."""
        if name in self.tensors:
            raise ValueError(f"a tensor named {name!r} already exists on this device")
        t = TileTensor(name, shape, canonical_dtype(dtype), mapping, offset, self.id)
        self.tensors[name] = t
        return t

    # ------------------------------------------------------------------ data
    @property
    def arena(self) -> Arena:
        """The device's bytes, created on first use and grown as allocations grow.

        Raises
        ------
        TileMemoryError
            For an overflowing device (``allow_overflow=True``) whose arena would exceed
            :data:`MAX_OVERFLOW_ARENA_FACTOR` times the machine's SRAM: every row is as long
            as the fullest tile, so one 16 MB tile on a GC200 would reserve 1472 x 16 MB.
            Estimate mode and the memory report need no arena.
        """
        need = max(64, self.memory.high_water)
        limit = MAX_OVERFLOW_ARENA_FACTOR * self.machine.total_bytes
        if need > self.machine.tile_bytes and need * self.machine.n_tiles > limit:
            t = int(np.argmax(self.memory.used))
            raise TileMemoryError(
                f"executing needs a {need * self.machine.n_tiles / 2**30:.1f} GiB host arena "
                f"({self.machine.n_tiles} tiles x {need} B, the fullest tile {t}), more than "
                f"{MAX_OVERFLOW_ARENA_FACTOR}x the machine's {self.machine.total_bytes / 2**20:.0f} MiB "
                "of SRAM; estimate mode and the memory report work without it",
                tile=t, requested=need, used=need, budget=self.memory.budget)
        with self._arena_lock:
            if self._arena is None:
                self._arena = Arena(self.machine.n_tiles, need)
            else:
                self._arena.ensure(need)
            return self._arena

    def bind_arena(self, arena: Arena | None) -> None:
        """Run on ``arena`` (grown to this device's need on use) instead of an arena of the
        device's own: for a device whose bytes need not outlive a run, so that several
        share the host pages of one (a network's conv programs, each run writing its
        inputs and weights first: :mod:`ipukern.nn.host.arenas`). The caller keeps other
        users of the arena out while this device runs on it. None lets the arena go (the
        device's next run makes one of its own unless another is bound first)."""
        if arena is not None and not isinstance(arena, Arena):
            raise TypeError(f"expected an Arena, got {type(arena).__name__}")
        if arena is not None and arena.n_tiles != self.machine.n_tiles:
            raise ValueError(f"an arena of {arena.n_tiles} rows cannot hold the "
                             f"{self.machine.n_tiles} tiles of {self.machine.name}")
        with self._arena_lock:
            self._arena = arena

    @property
    def arena_bytes(self) -> int:
        """Host bytes of the arena (0 before the first execute)."""
        arena = self._arena
        return 0 if arena is None else int(arena.data.nbytes)

    def check_tensor(self, tensor: TileTensor) -> None:
        """Raise ``ValueError`` unless ``tensor`` was allocated on this device."""
        if not isinstance(tensor, TileTensor):
            raise TypeError(f"expected a TileTensor, got {type(tensor).__name__}")
        if tensor._device_id != self.id:
            raise ValueError(f"tensor {tensor.name!r} belongs to another device")

    def write_runs(self, host: np.ndarray, host_offset: Any, tile: Any, offset: Any,
                   nbytes: Any) -> None:
        """Copy byte runs from host memory into tile memory.

        Run i copies ``nbytes[i]`` bytes from ``host[host_offset[i]:]`` to byte
        ``offset[i]`` of tile ``tile[i]``. ``host`` is a C-contiguous array viewed as bytes.
        Every range is checked (no run may leave the host array or the tile's allocated
        memory); nothing is written if one is bad.
        """
        hb = _host_bytes(host, writeable=False)
        args = self._check_runs(hb.shape[1], host_offset, tile, offset, nbytes)
        copy_runs(self.arena.data, hb, np.zeros(args[0].size, np.int32), args[0], args[1],
                  args[2], args[3])

    def read_runs(self, host: np.ndarray, host_offset: Any, tile: Any, offset: Any,
                  nbytes: Any) -> None:
        """Copy byte runs from tile memory into ``host`` (the reverse of :meth:`write_runs`)."""
        hb = _host_bytes(host, writeable=True)
        args = self._check_runs(hb.shape[1], host_offset, tile, offset, nbytes)
        copy_runs(hb, self.arena.data, args[1], args[2], np.zeros(args[0].size, np.int32),
                  args[0], args[3])

    def _check_runs(self, host_bytes: int, host_offset: Any, tile: Any, offset: Any,
                    nbytes: Any) -> tuple[np.ndarray, ...]:
        ho, t, off, nb = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v)) for v in
                                               (host_offset, tile, offset, nbytes)))
        for label, v in (("host offset", ho), ("tile", t), ("offset", off), ("nbytes", nb)):
            if v.size and not np.issubdtype(v.dtype, np.integer):
                raise TypeError(f"{label}s must be integers, got {v.dtype}")
        ho, off, nb = (v.astype(np.int64).reshape(-1) for v in (ho, off, nb))
        t = t.astype(np.int64).reshape(-1)
        row = self.memory.used
        bad_tile = (t < 0) | (t >= self.machine.n_tiles)
        if bad_tile.any():
            raise ValueError(f"tile {int(t[np.argmax(bad_tile)])} outside 0..{self.machine.n_tiles - 1}")
        # overflow-free: off + nb > limit is written off > limit - nb with both sides >= 0
        bad = (nb < 0) | (ho < 0) | (off < 0) | (ho > host_bytes - nb) | (off > row[t] - nb)
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"run {i}: {int(nb[i])} B from host byte {int(ho[i])} to tile "
                             f"{int(t[i])} byte {int(off[i])} leaves the host array ({host_bytes} B) "
                             f"or the tile's allocated memory ({int(row[t[i]])} B)")
        return ho, t.astype(np.int32), off, nb

    def write(self, tensor: TileTensor, values: Any) -> None:
        """Place a host array onto the tiles (bit-exact; dtype must match unless it casts safely)."""
        self.check_tensor(tensor)
        arr = np.asarray(values)
        if arr.shape != tensor.shape:
            raise ValueError(f"tensor {tensor.name!r} has shape {tensor.shape}, got {arr.shape}")
        want = DTYPES[tensor.dtype]
        if arr.dtype != want:
            if not np.can_cast(arr.dtype, want, casting="same_kind"):
                raise TypeError(f"tensor {tensor.name!r} is {tensor.dtype}; cannot place {arr.dtype} data")
            arr = arr.astype(want)
        host = np.ascontiguousarray(arr).reshape(1, -1).view(np.uint8)
        _host_tables(tensor)[0].run(self.arena.data, host, get_num_threads(), check=True)

    def write_scaled(self, tensor: TileTensor, values: Any, scale: Any) -> None:
        """Place float32 ``values`` scaled per index of their first axis onto a float32
        tensor: element [k, ...] becomes ``(float)((double)values[k, ...] * scale[k])``, the
        bits of ``(values.astype(float64) * scale[:, None, ...]).astype(float32)``, without
        a host copy of the scaled values (a folded batch norm's conv weights)."""
        from .._kernels import _vertices
        self.check_tensor(tensor)
        arr = np.asarray(values)
        s = np.ascontiguousarray(scale, dtype=np.float64)
        if tensor.dtype != "float32" or arr.dtype != np.float32:
            raise TypeError(f"write_scaled places float32 values on a float32 tensor; got "
                            f"{arr.dtype} values for {tensor.name!r} ({tensor.dtype})")
        if arr.shape != tensor.shape or s.shape != tensor.shape[:1]:
            raise ValueError(f"tensor {tensor.name!r} has shape {tensor.shape}; got values "
                             f"{arr.shape} and scale {s.shape}")
        if arr.size == 0:
            return
        m = tensor.mapping
        _vertices.write_scaled(self.arena.data, np.ascontiguousarray(arr).reshape(-1), s, m.start,
                               m.tile, tensor.offset, m.count, get_num_threads())

    def read(self, tensor: TileTensor) -> np.ndarray:
        """Fetch a tensor from the tiles into a new host array."""
        self.check_tensor(tensor)
        out = np.empty(tensor.shape, dtype=DTYPES[tensor.dtype])
        host = out.reshape(1, -1).view(np.uint8)
        _host_tables(tensor)[1].run(host, self.arena.data, get_num_threads(), check=True)
        return out

    # ------------------------------------------------------------------ programs
    @property
    def row_limit(self) -> int:
        """Highest valid in-tile offset + 1: the tile size, or more for an overflowing device."""
        return max(self.machine.tile_bytes, self.memory.high_water)

    def exchange(self, src_tile: Any, src_offset: Any, dst_tile: Any, dst_offset: Any,
                 nbytes: Any, *, name: str = "exchange", shared_bus: Any = True,
                 validate: bool = True) -> Exchange:
        """An :class:`~ipukern.core.program.Exchange` validated against this device's memory
        (``shared_bus``: which copies may use the shared-bus 2x rate; ``validate=False``
        only for tables ipukern's own builders derive from a plan; see Exchange)."""
        return Exchange(self.machine, src_tile, src_offset, dst_tile, dst_offset, nbytes,
                        name=name, row_bytes=self.row_limit, shared_bus=shared_bus,
                        validate=validate)

    def compute_set(self, batches: Sequence[VertexBatch], *, name: str = "compute") -> ComputeSet:
        """A :class:`~ipukern.core.program.ComputeSet` validated against this device's memory."""
        return ComputeSet(self.machine, batches, name=name, row_bytes=self.row_limit)

    def program(self, steps: Sequence[Superstep], *, label: str = "") -> Program:
        """Wrap supersteps built for this device into a :class:`Program`."""
        return Program(self.machine, steps, self.memory, label=label)

    def run(self, program: Program, mode: str = "execute", **profile_kw: Any) -> Profile:
        """Run a program on this device (see :func:`run_program`)."""
        return run_program(program, mode=mode, device=self, **profile_kw)


def _host_tables(tensor: TileTensor) -> tuple[CopyTable, CopyTable]:
    """The copy tables from a tensor's host array (one row) to its tiles and back, kept on
    the tensor: a network's run writes 107 weight tensors, each table rebuilt per write
    before (up to 12,288 runs each). The tensor's mapping lies inside the arena and its
    intervals inside the host array; the kernel range-checks them anyway (cheap, and safe)."""
    m, off = tensor.mapping, tensor.offset
    hit = tensor.__dict__.get("_host_tables")
    if hit is None or hit[0] is not m or hit[1] is not off:
        zeros = np.zeros(m.tile.size, np.int32)
        host_off, nbytes = m.start * tensor.itemsize, m.count * tensor.itemsize
        hit = (m, off, CopyTable(zeros, host_off, m.tile, off, nbytes, host_order="given"),
               CopyTable(m.tile, off, zeros, host_off, nbytes, host_order="given"))
        tensor.__dict__["_host_tables"] = hit
    return hit[2], hit[3]


def _host_bytes(host: np.ndarray, *, writeable: bool) -> np.ndarray:
    """A C-contiguous host array as one row of bytes, (1, nbytes)."""
    if (not isinstance(host, np.ndarray) or not host.flags.c_contiguous
            or (writeable and not host.flags.writeable)):
        raise TypeError("host must be a " + ("writeable " if writeable else "")
                        + "C-contiguous NumPy array")
    return host.reshape(1, -1).view(np.uint8)


def run_program(program: Program, mode: str = "execute", *, device: Device | None = None,
                flops: int = 0, peak_flops: float = 0.0, info: dict | None = None) -> Profile:
    """Run ``program`` superstep by superstep and return its :class:`Profile`.

    ``mode="execute"`` needs the ``device`` whose arena holds the program's data;
    ``mode="estimate"`` touches no data. Cycle numbers are identical in both modes.
    """
    if not isinstance(program, Program):
        raise TypeError(f"expected a Program, got {type(program).__name__}")
    if mode not in ("execute", "estimate"):
        raise ValueError(f"mode must be 'execute' or 'estimate', got {mode!r}")
    if mode == "execute":
        if device is None:
            raise ValueError("execute mode needs the device that holds the program's data")
        if program.memory is not device.memory:
            # its tables address another device's allocations: the bytes would not be there
            raise ValueError(f"program {program.label!r} was built for another device; build it "
                             "with this device's exchange/compute_set/program, or run it on its own")
        arena = device.arena
        n_threads = get_num_threads()
        with arena.lock:
            host_run.execute(program, arena.data, n_threads)
    return Profile(program.machine, list(program.records), flops=flops, peak_flops=peak_flops,
                   label=program.label, memory_source=program.memory, info=dict(info or {}))


def _tile_order(tile: np.ndarray, start: np.ndarray, n_elems: int) -> np.ndarray:
    """``np.lexsort((start, tile))``: intervals by tile, then element start. Starts lie in
    [0, n_elems), so one stable sort of ``tile * n_elems + start`` gives the same order
    (about twice as fast) unless that key could overflow."""
    if tile.size and int(tile.max()) < (1 << 62) // max(int(n_elems), 1):
        return np.argsort(tile.astype(np.int64) * max(int(n_elems), 1) + start, kind="stable")
    return np.lexsort((start, tile))
