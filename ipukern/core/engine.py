"""The simulated device: tile memory, tensors, and the engine that runs BSP programs.

Two run modes share one program and therefore one set of cycle numbers:

- ``"execute"`` moves the real bytes (exchanges) and runs the real vertices (compute sets);
- ``"estimate"`` touches no data at all, which is how large sweeps and shapes beyond host
  memory stay cheap.
"""
from __future__ import annotations

import itertools
import os
from typing import Any, Sequence

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from .memory import Arena, TileMemory
from .profile import Profile
from .program import ComputeSet, Exchange, Program, Superstep, VertexBatch, balanced_bounds
from .tensor import TileMapping, TileTensor

__all__ = ["Device", "run_program", "set_num_threads", "get_num_threads"]

_NUM_THREADS: int | None = None
_DEVICE_IDS = itertools.count()


def set_num_threads(n: int | None) -> None:
    """Host threads used by the kernels (None: ``IPUKERN_NUM_THREADS`` or all cores).
    Results do not depend on it; only host speed does."""
    global _NUM_THREADS
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"number of threads must be a positive int, got {n!r}")
    _NUM_THREADS = n


def get_num_threads() -> int:
    if _NUM_THREADS is not None:
        return _NUM_THREADS
    env = os.environ.get("IPUKERN_NUM_THREADS")
    if env:
        return max(1, int(env))
    from .._kernels import _exchange
    return _exchange.max_threads()


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
        order = np.lexsort((mapping.start, mapping.tile))
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
        keep = np.asarray(count) > 0
        tile, start, count, offset = (np.asarray(a, dtype=np.int64)[keep]
                                      for a in (tile, start, count, offset))
        mapping = TileMapping(n, tile, start, count)      # sorts by start (stable)
        offset = offset[np.argsort(start, kind="stable")]
        itemsize = DTYPES[dtype].itemsize
        end = offset + mapping.count * itemsize
        if mapping.tile.size and ((offset < 0).any() or (end > self.memory.used[mapping.tile]).any()):
            raise ValueError(f"tensor {name!r}: an interval lies outside the tile's allocated memory")
        t = TileTensor(name, shape, dtype, mapping, offset, self.id)
        self.tensors[name] = t
        return t

    # ------------------------------------------------------------------ data
    @property
    def arena(self) -> Arena:
        """The device's bytes, created on first use and grown as allocations grow."""
        need = max(64, self.memory.high_water)
        if self._arena is None:
            self._arena = Arena(self.machine.n_tiles, need)
        else:
            self._arena.ensure(need)
        return self._arena

    def _check_tensor(self, tensor: TileTensor) -> None:
        if tensor._device_id != self.id:
            raise ValueError(f"tensor {tensor.name!r} belongs to another device")

    def write(self, tensor: TileTensor, values: Any) -> None:
        """Place a host array onto the tiles (bit-exact; dtype must match unless it casts safely)."""
        self._check_tensor(tensor)
        arr = np.asarray(values)
        if arr.shape != tensor.shape:
            raise ValueError(f"tensor {tensor.name!r} has shape {tensor.shape}, got {arr.shape}")
        want = DTYPES[tensor.dtype]
        if arr.dtype != want:
            if not np.can_cast(arr.dtype, want, casting="same_kind"):
                raise TypeError(f"tensor {tensor.name!r} is {tensor.dtype}; cannot place {arr.dtype} data")
            arr = arr.astype(want)
        host = np.ascontiguousarray(arr).reshape(1, -1).view(np.uint8)
        m = tensor.mapping
        nbytes = m.count * tensor.itemsize
        self._copy(self.arena.data, host, np.zeros(m.tile.size, np.int32), m.start * tensor.itemsize,
                   m.tile, tensor.offset, nbytes)

    def read(self, tensor: TileTensor) -> np.ndarray:
        """Fetch a tensor from the tiles into a new host array."""
        self._check_tensor(tensor)
        out = np.empty(tensor.shape, dtype=DTYPES[tensor.dtype])
        host = out.reshape(1, -1).view(np.uint8)
        m = tensor.mapping
        nbytes = m.count * tensor.itemsize
        self._copy(host, self.arena.data, m.tile, tensor.offset, np.zeros(m.tile.size, np.int32),
                   m.start * tensor.itemsize, nbytes)
        return out

    @staticmethod
    def _copy(dst, src, src_row, src_off, dst_row, dst_off, nbytes) -> None:
        from .._kernels import _exchange
        if nbytes.size == 0:
            return
        _exchange.copy_runs(dst, src, np.ascontiguousarray(src_row, np.int32),
                            np.ascontiguousarray(src_off, np.int64),
                            np.ascontiguousarray(dst_row, np.int32),
                            np.ascontiguousarray(dst_off, np.int64),
                            np.ascontiguousarray(nbytes, np.int64),
                            balanced_bounds(nbytes, get_num_threads()))

    # ------------------------------------------------------------------ programs
    @property
    def row_limit(self) -> int:
        """Highest valid in-tile offset + 1: the tile size, or more for an overflowing device."""
        return max(self.machine.tile_bytes, self.memory.high_water)

    def exchange(self, src_tile: Any, src_offset: Any, dst_tile: Any, dst_offset: Any,
                 nbytes: Any, *, name: str = "exchange", shared_bus: Any = True) -> Exchange:
        """An :class:`~ipukern.program.Exchange` validated against this device's memory
        (``shared_bus``: which copies may use the shared-bus 2x rate, see Exchange)."""
        return Exchange(self.machine, src_tile, src_offset, dst_tile, dst_offset, nbytes,
                        name=name, row_bytes=self.row_limit, shared_bus=shared_bus)

    def compute_set(self, batches: Sequence[VertexBatch], *, name: str = "compute") -> ComputeSet:
        """A :class:`~ipukern.program.ComputeSet` validated against this device's memory."""
        return ComputeSet(self.machine, batches, name=name, row_bytes=self.row_limit)

    def program(self, steps: Sequence[Superstep], *, label: str = "") -> Program:
        """Wrap supersteps built for this device into a :class:`Program`."""
        return Program(self.machine, steps, self.memory, label=label)

    def run(self, program: Program, mode: str = "execute", **profile_kw: Any) -> Profile:
        """Run a program on this device (see :func:`run_program`)."""
        return run_program(program, mode=mode, device=self, **profile_kw)


def run_program(program: Program, mode: str = "execute", *, device: Device | None = None,
                flops: int = 0, peak_flops: float = 0.0, info: dict | None = None) -> Profile:
    """Run ``program`` superstep by superstep and return its :class:`Profile`.

    ``mode="execute"`` needs the ``device`` whose arena holds the program's data;
    ``mode="estimate"`` touches no data. Cycle numbers are identical in both modes.
    """
    if mode not in ("execute", "estimate"):
        raise ValueError(f"mode must be 'execute' or 'estimate', got {mode!r}")
    if mode == "execute":
        if device is None:
            raise ValueError("execute mode needs the device that holds the program's data")
        arena = device.arena
        n_threads = get_num_threads()
        with arena.lock:
            data = arena.data
            for step in program.steps:
                if step.compute is not None:
                    step.compute.run(data, n_threads)
                if step.exchange is not None:
                    step.exchange.run(data, n_threads)
    return Profile(program.machine, list(program.records), flops=flops, peak_flops=peak_flops,
                   label=program.label, memory_source=program.memory, info=dict(info or {}))
