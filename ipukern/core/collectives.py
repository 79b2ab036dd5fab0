"""Cross-tile collectives built from exchanges and built-in vertices.

:func:`reduce_sum` sums a tensor spread over many tiles in a tree of supersteps: each
tile first sums its own block, then groups of ``fan_in`` tiles send their partial to the
group's first tile, which adds them, until one tile holds the total. Additions happen in
tile order, so the result is deterministic.
"""
from __future__ import annotations

import numpy as np

from .engine import Device
from .program import Superstep
from .tensor import TileMapping, TileTensor
from .vertices import sum_elems, sum_rows

__all__ = ["reduce_sum"]


def reduce_sum(device: Device, x: TileTensor, *, fan_in: int = 16,
               name: str = "reduce_sum") -> tuple[list[Superstep], TileTensor]:
    """Supersteps that sum every element of ``x`` into one float32 value.

    Returns ``(steps, partials)``: after running the steps, element 0 of ``partials``
    (on the lowest tile holding ``x``) is the total. Stages: 1 local sum, then
    ceil(log_fan_in(tiles)) exchange + add supersteps.
    """
    if fan_in < 2:
        raise ValueError(f"fan_in must be >= 2, got {fan_in}")
    m = device.machine
    off, n = x.tile_block(m.n_tiles)
    active = np.flatnonzero(n > 0).astype(np.int32)
    partials = device.add_tensor(f"{name}.partials", (active.size,), "float32",
                                 TileMapping.from_element_tiles(active), category="partials")
    p_off = partials.offset  # one interval per active tile, in tile order
    recv_bytes = np.zeros(m.n_tiles, dtype=np.int64)
    recv_bytes[active] = (fan_in - 1) * 4
    recv = device.alloc(f"{name}.recv", recv_bytes, category="exchange")

    local = device.compute_set([sum_elems(m, active, p_off, off[active], n[active], x.dtype, "float32")],
                               name=f"{name}: local sums")
    steps: list[Superstep] = []
    pending = local
    members, member_off = active, p_off
    stage = 0
    while members.size > 1:
        stage += 1
        k = members.size
        group = np.arange(k) // fan_in
        slot = np.arange(k) % fan_in
        leaders = members[slot == 0]
        leader_off = member_off[slot == 0]
        send = slot > 0
        dst_tile = leaders[group[send]]
        xch = device.exchange(members[send], member_off[send], dst_tile,
                              recv[dst_tile] + (slot[send] - 1) * 4, np.full(int(send.sum()), 4),
                              name=f"{name} stage {stage}")
        steps.append(Superstep(f"{name} stage {stage - 1}" if stage > 1 else f"{name}: local sums",
                               compute=pending, exchange=xch,
                               category="compute" if stage == 1 else "reduction"))
        # each leader adds its own partial and the ones it received, in slot order
        counts = np.bincount(group, minlength=leaders.size)
        depth = int(counts.max())
        srcs = [leader_off] + [np.where(counts > s, recv[leaders] + (s - 1) * 4, leader_off)
                               for s in range(1, depth)]
        # the last group may be smaller: one vertex batch per distinct group size
        batches = []
        for size in np.unique(counts):
            sel = counts == size
            batches.append(sum_rows(m, leaders[sel], leader_off[sel],
                                    [s[sel] for s in srcs[:size]], np.ones(int(sel.sum()), np.int64),
                                    "float32", "float32",
                                    why=f"add {size} partials per group leader"))
        pending = device.compute_set(batches, name=f"{name} stage {stage}")
        members, member_off = leaders, leader_off
    steps.append(Superstep(f"{name} stage {stage}" if stage else f"{name}: local sums",
                           compute=pending, category="reduction" if stage else "compute"))
    return steps, partials
