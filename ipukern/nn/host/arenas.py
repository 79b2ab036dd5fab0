"""Host arenas shared by a network's conv programs (execute mode).

Each conv or matmul of a network runs in the device of its own cached program
(:mod:`ipukern.nn.convops`), and every run writes that program's input and weights before
it runs and reads its output after it (or leaves it for the next conv:
:mod:`ipukern.nn.arena_out`): nothing in the arena outlives a run. Giving each of those
devices an arena of its own (ResNet-50 at batch 8: 24 programs, 5.1 GB of arenas) made a
network's first run fault in every page of all of them, which on this host costs more than
planning and running together. The programs therefore lease their bytes from one
:class:`ArenaPool`: a run takes a free arena (not the one holding the output it reads),
grown to its device's high-water mark, and gives it back. One thread needs two or three
arenas (the busiest program's size each), so the pages touched are those of the largest
layers, once per process.

Host memory only: the programs, their cycles and their bytes do not change.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Collection, Iterator

from ...core import Arena

__all__ = ["ARENAS", "ArenaPool", "Slot"]

#: arenas of one tile count a pool keeps before it copies a kept output out to reuse its
#: arena instead of making another (a thread needs two: the running program's and the one
#: holding the output it reads; a third keeps a residual branch's kept output in place)
MAX_IDLE_ARENAS = 3


class Slot:
    """One pooled arena and the outputs still only in it (``pending``, guarded by the
    arena's lock; see :mod:`ipukern.nn.arena_out`)."""

    __slots__ = ("arena", "pending", "busy", "__weakref__")

    def __init__(self, arena: Arena):
        self.arena = arena
        self.pending: weakref.WeakSet = weakref.WeakSet()
        self.busy = False


class ArenaPool:
    """Arenas by tile count, leased for one program run at a time."""

    def __init__(self, max_idle: int = MAX_IDLE_ARENAS):
        self.max_idle = int(max_idle)
        #: tests: fill a leased arena with 0xFF (NaN for floats) before its run, so a
        #: program reading bytes its own run did not write changes the result
        self.poison = False
        self._slots: dict[int, list[Slot]] = {}
        self._rows: dict[int, int] = {}
        self._lock = threading.Lock()

    def reserve(self, n_tiles: int, row_bytes: int) -> None:
        """Make new or grown arenas of ``n_tiles`` rows at least ``row_bytes`` long (a
        network's largest program), so that growing one does not copy it."""
        with self._lock:
            self._rows[n_tiles] = max(self._rows.get(n_tiles, 0), int(row_bytes))

    @contextlib.contextmanager
    def lease(self, n_tiles: int, avoid: Collection[Slot] = ()) -> Iterator[Slot]:
        """A slot no other run holds, not in ``avoid`` (those the run reads from):
        one without pending outputs if there is one, else, when the pool already has
        :attr:`max_idle` arenas, the least recently used (the caller copies its pending
        outputs out, under its lock, before writing it), else a new one."""
        with self._lock:
            slots = self._slots.setdefault(n_tiles, [])
            free = [s for s in slots if not s.busy and all(s is not a for a in avoid)]
            slot = next((s for s in free if not s.pending), None)
            if slot is None and free and len(slots) >= self.max_idle:
                slot = free[0]
            if slot is None:
                slot = Slot(Arena(n_tiles, 64))
            else:
                slots.remove(slot)
            slots.append(slot)                       # most recently used last
            slot.busy = True
        try:
            yield slot
        finally:
            with self._lock:
                slot.busy = False
                if len(slots) > self.max_idle and not slot.pending and slot in slots:
                    slots.remove(slot)        # made for a concurrent run: not kept idle

    def ensure(self, slot: Slot, row_bytes: int) -> None:
        """Grow ``slot``'s rows to ``row_bytes`` (at least the reserved length); its
        contents are kept only while outputs are pending in it. Call with its lock held."""
        with self._lock:
            row = max(int(row_bytes), self._rows.get(slot.arena.n_tiles, 0))
        slot.arena.ensure(row, keep=bool(slot.pending))
        if self.poison and not slot.pending:
            slot.arena.data.fill(0xFF)

    def info(self) -> dict:
        """Arenas held and their host bytes; at most :attr:`max_idle` per tile count are
        kept once their runs end."""
        with self._lock:
            n = sum(len(slots) for slots in self._slots.values())
        return {"entries": n, "bytes": self.nbytes(), "max_entries": self.max_idle}

    def nbytes(self) -> int:
        """Host bytes of every pooled arena."""
        with self._lock:
            return sum(s.arena.data.nbytes for slots in self._slots.values() for s in slots)

    def clear(self) -> None:
        """Forget every idle arena (a leased one stays valid for its run)."""
        with self._lock:
            for n, slots in list(self._slots.items()):
                self._slots[n] = [s for s in slots if s.busy]
            self._rows.clear()


#: the process's pool, used by network executions
ARENAS = ArenaPool()
