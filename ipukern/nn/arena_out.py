"""A conv's output read by its consumer straight from the conv program's arena (execute mode).

A network conv runs in its own program's arena (:mod:`ipukern.nn.convops`); its output is
then copied out into a packed :class:`~ipukern.nn.layout.Resident`, because layers of the
same shape share the program and the next of them overwrites the arena. That copy is the
host's bookkeeping, not the simulated program's (the output stays on its tiles either
way): when the next conv's input rearrangement (the real, costed exchange) can read the
bytes from the arena before anything overwrites it, the copy is not needed.

:class:`ArenaOutput` is such an output. Its consumer's rearrangement reads it from the
arena (:func:`rearrange_into`); anything else that reads its :attr:`~ArenaOutput.data` gets
the packed copy made then. Before a conv program runs again it copies out every output
still pending in its arena (:func:`flush`), so a later reader, in this thread or another,
always finds the bytes. Same bytes, cycles and memory as the copy-out path; only the host's
number of copies changes.
"""
from __future__ import annotations

import weakref
from contextlib import ExitStack
from typing import Any

import numpy as np

from ..core import CopyTable
from .layout import Layout, Rearrangement, Resident

__all__ = ["ArenaOutput", "flush", "lock_arenas", "rearrange_into"]


class _Cell:
    """The arena bytes of one run of one conv program, or their packed copy once made."""

    __slots__ = ("prog", "out", "nt", "read", "packed", "__weakref__")

    def __init__(self, prog: Any, out: Layout, nt: int, read):
        self.prog, self.out, self.nt, self.read = prog, out, nt, read
        self.packed: np.ndarray | None = None

    def materialize(self) -> np.ndarray:
        """The packed bytes (copied out of the arena on first use)."""
        if self.packed is None:
            with self.prog.device.arena.lock:
                if self.packed is None:
                    self.packed = self.read(self.prog, self.out, self.nt).data
                    _pending(self.prog).discard(self)
        return self.packed


def _pending(prog: Any) -> weakref.WeakSet:
    """Outputs of ``prog`` still only in its arena (guarded by the arena's lock)."""
    pend = prog.__dict__.get("_pending_outputs")
    if pend is None:
        pend = prog.__dict__["_pending_outputs"] = weakref.WeakSet()
    return pend


class ArenaOutput(Resident):
    """A conv's output (``layout``: the conv's output layout or a relabelling of it with the
    same mapping) whose bytes are still in the conv program's arena."""

    def __init__(self, cell: _Cell, layout: Layout):
        self.layout = layout
        self.slot_elems = int(layout.elems_per_tile(cell.nt).max()) if layout.n_elems else 0
        self._cell = cell

    @classmethod
    def keep(cls, prog: Any, out: Layout, nt: int, read) -> ArenaOutput:
        """Leave ``prog``'s output in its arena (call with the arena locked, after the run);
        ``read(prog, out, nt)`` makes the packed copy when needed."""
        cell = _Cell(prog, out, nt, read)
        _pending(prog).add(cell)
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
    def in_arena(self) -> bool:
        return self._cell.packed is None


def flush(prog: Any) -> None:
    """Copy out every output still pending in ``prog``'s arena (before ``prog`` runs again;
    call with its arena locked)."""
    pend = prog.__dict__.get("_pending_outputs")
    if pend:
        for cell in list(pend):
            cell.materialize()


def lock_arenas(stack: ExitStack, progs: list[Any]) -> None:
    """Lock the arenas of ``progs`` in one global order (id), so two threads locking the
    same two arenas cannot each hold one and wait for the other."""
    locks = {id(p.device.arena.lock): p.device.arena.lock for p in progs}
    for k in sorted(locks):
        stack.enter_context(locks[k])


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
    hit[1].run(dst_data, prog.device.arena.data)
