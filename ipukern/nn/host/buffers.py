"""Host buffers of tile-resident tensors, reused from one network execution to the next.

Execute mode keeps every activation as a :class:`~ipukern.nn.layout.Resident`: an
(n_tiles, slot) byte array. A fresh ``np.zeros`` of tens of megabytes per tensor costs the
host a page fault and a zeroed page for every page it then writes: for a conv's output
that doubled the time of reading it out of the program's arena. While a network executes
(:meth:`ipukern.nn.program.NetworkProgram.execute`) its residents take their buffers from
a :class:`BufferPool` instead: a buffer nothing references any more (no resident, no
view) is handed out again with its *padding* (each tile's bytes past its own elements)
zeroed, exactly as a fresh buffer; the bytes of the elements are stale, and every producer
of a resident writes all of them (the tests run with :attr:`BufferPool.poison` to prove
it). Host memory only: the simulated program, its cycles and its bytes do not change.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from contextvars import ContextVar

import numpy as np

__all__ = ["BufferPool", "POOL", "active_pool", "pooled", "take_buffer"]

#: free buffers a pool keeps between executions (bytes); in-use buffers do not count
POOL_FREE_BYTES = 1 << 30


class BufferPool:
    """Byte buffers by shape, reused once nothing else references them.

    A buffer is free when the pool's list holds the only reference to it
    (``sys.getrefcount``):
    a resident, a view of it or a resident sharing it (in-place ops, reshapes) keeps it
    taken, so nothing is handed out twice and nothing needs to be given back.
    """

    def __init__(self, free_bytes: int = POOL_FREE_BYTES):
        self.free_bytes = int(free_bytes)
        #: tests: fill the element bytes of a reused buffer with 0xFF (NaN for floats), so
        #: a producer that leaves an element unwritten changes the result
        self.poison = False
        self._bufs: dict[tuple[int, int], list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self.reused = 0
        self.allocated = 0

    def take(self, layout, n_tiles: int, width: int) -> np.ndarray:
        """An (n_tiles, width) uint8 buffer for a resident of ``layout``: its padding
        zero, its element bytes undefined (every producer writes them)."""
        shape = (int(n_tiles), int(width))
        with self._lock:
            bufs = self._bufs.get(shape, [])
            found = next((bufs[i] for i in range(len(bufs)) if _free_at(bufs, i)), None)
            if found is None:
                found = np.zeros(shape, dtype=np.uint8)
                self._bufs.setdefault(shape, []).append(found)
                self.allocated += 1
                return found
            self.reused += 1
        if self.poison:
            found.fill(0xFF)
        _zero_padding(found, layout, n_tiles)
        return found

    def free_nbytes(self) -> int:
        """Bytes of the buffers nothing references."""
        with self._lock:
            return sum(bufs[i].nbytes for bufs in self._bufs.values() for i in range(len(bufs))
                       if _free_at(bufs, i))

    def trim(self, keep: int | None = None) -> None:
        """Drop free buffers, largest shapes first, until at most ``keep`` bytes of free
        buffers remain (default :attr:`free_bytes`)."""
        keep = self.free_bytes if keep is None else int(keep)
        with self._lock:
            free = sorted(((bufs[i].nbytes, shape, i) for shape, bufs in self._bufs.items()
                           for i in range(len(bufs)) if _free_at(bufs, i)), reverse=True)
            total = sum(f[0] for f in free)
            drop: dict[tuple[int, int], set[int]] = {}
            for nb, shape, i in free:
                if total <= keep:
                    break
                drop.setdefault(shape, set()).add(i)
                total -= nb
            for shape, idx in drop.items():
                kept = [b for i, b in enumerate(self._bufs[shape]) if i not in idx]
                if kept:
                    self._bufs[shape] = kept
                else:
                    del self._bufs[shape]

    def clear(self) -> None:
        """Forget every buffer (those in use stay valid: their holders own them)."""
        with self._lock:
            self._bufs.clear()


def _free_at(bufs: list[np.ndarray], i: int) -> bool:
    """Whether the list ``bufs`` holds the only reference to ``bufs[i]``."""
    return sys.getrefcount(bufs[i]) <= _FREE_REFS


#: what :func:`_free_at` counts for a buffer only its list holds (the list's reference and
#: getrefcount's argument; measured, as interpreters may differ)
def _calibrate() -> int:
    bufs = [np.zeros(1, np.uint8)]
    return sys.getrefcount(bufs[0])


_FREE_REFS = _calibrate()


def _zero_padding(buf: np.ndarray, layout, n_tiles: int) -> None:
    """Zero each tile's bytes past its elements (one compiled pass over a cached table of
    one run per padded tile)."""
    key = ("_pad_table", n_tiles, buf.shape[1])
    tab = layout.__dict__.get(key)
    if tab is None:
        from ...core import CopyTable
        used = layout.elems_per_tile(n_tiles) * layout.itemsize
        pad = buf.shape[1] - used
        t = np.flatnonzero(pad > 0)
        zeros = np.zeros((1, max(1, int(pad.max()) if pad.size else 1)), dtype=np.uint8)
        tab = (CopyTable(np.zeros(t.size, np.int32), np.zeros(t.size, np.int64), t, used[t],
                         pad[t]), zeros)
        layout.__dict__[key] = tab
    tab[0].run(buf, tab[1])


#: the process's pool, used by network executions
POOL = BufferPool()
_ACTIVE: ContextVar[BufferPool | None] = ContextVar("ipukern_buffer_pool", default=None)


def active_pool() -> BufferPool | None:
    """The pool residents take buffers from here (None: fresh zeroed buffers)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def pooled(pool: BufferPool | None = None) -> Iterator[BufferPool]:
    """Residents created in this context (this thread) take buffers from ``pool``
    (default :data:`POOL`); on leaving, free buffers beyond its cap are dropped."""
    pool = POOL if pool is None else pool
    token = _ACTIVE.set(pool)
    try:
        yield pool
    finally:
        _ACTIVE.reset(token)
        pool.trim()


def take_buffer(layout, n_tiles: int, width: int) -> np.ndarray:
    """A resident's buffer: from the active pool, or a fresh zeroed one."""
    pool = _ACTIVE.get()
    if pool is None:
        return np.zeros((n_tiles, width), dtype=np.uint8)
    return pool.take(layout, n_tiles, width)
