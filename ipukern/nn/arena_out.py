"""A conv's output read by its consumer straight from its run's arena (execute mode).

A network conv runs in an arena leased from :data:`~ipukern.nn.host.arenas.ARENAS`
(:mod:`ipukern.nn.convops`, :func:`leased`); its output is then copied out into a packed
:class:`~ipukern.nn.layout.Resident`, because the next run leasing that arena overwrites
it. That copy is the host's bookkeeping, not the simulated program's (the output stays on
its tiles either way): when the next conv's input rearrangement (the real, costed
exchange) can read the bytes from the arena before anything overwrites it, the copy is
not needed.

:class:`ArenaOutput` is such an output. Its consumer's rearrangement reads it from the
arena (:func:`rearrange_into`); anything else that reads its :attr:`~ArenaOutput.data` gets
the packed copy made then. Before a run writes a leased arena it copies out every output
still pending in it (:func:`flush`), so a later reader, in this thread or another, always
finds the bytes; a run never leases the arena holding an output it reads. Same bytes,
cycles and memory as the copy-out path; only the host's number of copies changes.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from ..core import CopyTable
from .host.arenas import ARENAS, Slot
from .layout import Layout, Rearrangement, Resident

__all__ = ["ArenaOutput", "flush", "leased", "rearrange_into"]

#: guards the creation of a program's run lock
_LOCKS_GUARD = threading.Lock()


class _Cell:
    """The arena bytes of one run of one conv program, or their packed copy once made."""

    __slots__ = ("slot", "prog", "out", "nt", "read", "packed", "__weakref__")

    def __init__(self, slot: Slot, prog: Any, out: Layout, nt: int, read):
        self.slot, self.prog, self.out, self.nt, self.read = slot, prog, out, nt, read
        self.packed: np.ndarray | None = None

    def materialize(self) -> np.ndarray:
        """The packed bytes (copied out of the arena on first use)."""
        if self.packed is None:
            with self.slot.arena.lock:
                if self.packed is None:
                    self.packed = self.read(self.prog, self.out, self.nt,
                                            self.slot.arena.data).data
                    self.slot.pending.discard(self)
        return self.packed


class ArenaOutput(Resident):
    """A conv's output (``layout``: the conv's output layout or a relabelling of it with the
    same mapping) whose bytes are still in the arena its program ran on."""

    def __init__(self, cell: _Cell, layout: Layout):
        self.layout = layout
        self.slot_elems = int(layout.elems_per_tile(cell.nt).max()) if layout.n_elems else 0
        self._cell = cell

    @classmethod
    def keep(cls, slot: Slot, prog: Any, out: Layout, nt: int, read) -> ArenaOutput:
        """Leave ``prog``'s output in ``slot``'s arena (call with the arena locked, after the
        run); ``read(prog, out, nt, arena_data)`` makes the packed copy when needed."""
        cell = _Cell(slot, prog, out, nt, read)
        slot.pending.add(cell)
        return cls(cell, out)

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._cell.materialize()

    @data.setter
    def data(self, value: np.ndarray) -> None:
        raise AttributeError("an arena output's bytes are read-only")

    def relabel(self, layout: Layout) -> Resident:
        return ArenaOutput(self._cell, layout)

    @property
    def prog(self) -> Any:
        return self._cell.prog

    @property
    def slot(self) -> Slot:
        """The pooled arena holding the bytes (until :attr:`in_arena` turns False)."""
        return self._cell.slot

    @property
    def in_arena(self) -> bool:
        return self._cell.packed is None


def flush(slot: Slot) -> None:
    """Copy out every output still pending in ``slot``'s arena (before a run writes it;
    call with its arena locked)."""
    if slot.pending:
        for cell in list(slot.pending):
            cell.materialize()


def _run_lock(prog: Any) -> threading.RLock:
    """One run of ``prog`` at a time: a run binds the program's device to its leased arena
    and sets its bias codelets' fused activation."""
    lock = prog.__dict__.get("_run_lock")
    if lock is None:
        with _LOCKS_GUARD:
            lock = prog.__dict__.setdefault("_run_lock", threading.RLock())
    return lock


@contextmanager
def leased(prog: Any, srcs: Sequence[Any]) -> Iterator[Slot]:
    """Run ``prog`` on a pooled arena: its run lock held, an arena leased that holds none of
    ``srcs`` (the run reads them), that arena's and the sources' arenas locked in one
    global order (two threads locking the same two cannot each hold one and wait for the
    other), its pending outputs copied out, grown to the device's need and bound to the
    program's device for the run."""
    dev = prog.device
    held = [s.slot for s in srcs if isinstance(s, ArenaOutput)]
    with _run_lock(prog), ARENAS.lease(dev.machine.n_tiles, held) as slot, ExitStack() as stack:
        locks = {id(x.arena.lock): x.arena.lock for x in [slot, *held]}
        for k in sorted(locks):
            stack.enter_context(locks[k])
        flush(slot)
        ARENAS.ensure(slot, max(64, dev.memory.high_water))
        dev.bind_arena(slot.arena)
        try:
            yield slot
        finally:
            dev.bind_arena(None)      # the device holds no pool arena between runs


def rearrange_into(rearr: Rearrangement, src: Resident, dst_data: np.ndarray) -> None:
    """``rearr.run(src, dst_data)``, reading an :class:`ArenaOutput` still in its arena
    straight from there (its arena locked by the caller) with a copy table built once per
    (rearrangement, program) from the arena's offsets of the conv's output."""
    if not (isinstance(src, ArenaOutput) and src.in_arena) or rearr.src.perm is not None:
        rearr.run(src, dst_data)
        return
    prog = src.prog
    cache = rearr.__dict__.setdefault("_arena_tables", {})
    hit = cache.get(id(prog))
    if hit is None or hit[0] is not prog:
        y = prog.y
        if y.mapping.n_elems != rearr.src.n_elems:
            raise ValueError(f"{rearr.name}: the arena output has {y.mapping.n_elems} elements, "
                             f"the rearrangement {rearr.src.n_elems}")
        lay = Layout(rearr.src.shape, rearr.src.dtype, y.mapping, offsets=y.offset)
        if rearr.identity:
            m = y.mapping
            tab = CopyTable(m.tile, y.offset, m.tile, rearr.dst.byte_offsets, m.count * y.itemsize)
        else:
            from .layout import copy_table
            tab = CopyTable(*copy_table(lay, rearr.dst))
        hit = cache[id(prog)] = (prog, tab)
    hit[1].run(dst_data, src.slot.arena.data)
