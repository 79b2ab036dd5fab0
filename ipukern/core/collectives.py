"""Cross-tile collectives built from exchanges and built-in vertices.

:func:`all_reduce` sums equal-sized per-tile blocks and leaves the sum in every block
(reduce-scatter, then sum + all-gather). :func:`reduce_sum` sums a tensor spread over
many tiles in a tree of supersteps: each tile first sums its own block, then groups of
``fan_in`` tiles send their partial to the group's first tile, which adds them, until one
tile holds the total. Additions happen in tile order, so the results are deterministic.
"""
from __future__ import annotations

import numpy as np

from .engine import Device
from .program import Superstep
from .tensor import TileMapping, TileTensor, split_bounds
from .vertices import sum_elems, sum_rows

__all__ = ["all_reduce", "reduce_sum"]


def all_reduce(device: Device, x: TileTensor, *, name: str | None = None) -> list[Superstep]:
    """Supersteps summing the per-tile blocks of ``x``, leaving the sum in every block
    (in place).

    Every tile holding ``x`` must hold the same number of elements n (its block, stored
    contiguously). With P tiles, element range [0, n) is cut into P near-equal chunks,
    chunk j owned by the j-th tile (ascending tile order):

    1. *reduce-scatter* (exchange): every tile sends its copy of chunk j to tile j,
       which receives P - 1 chunks into a buffer (allocated here, category "exchange");
    2. *sum + all-gather*: tile j adds its own chunk and the received ones in tile order
       (built-in ``sum_rows``, fp32 accumulation, fixed order: deterministic), then sends
       the summed chunk to every other tile's block.

    Each tile receives about n elements in each exchange: cycles ~ ``2 * n * itemsize /
    exchange_bytes_per_cycle`` + two syncs + a depth-P reduction of n/P elements.

    Returns
    -------
    list of Superstep
        ``[reduce-scatter, sum + all-gather]``.

    Raises
    ------
    ValueError
        If the tiles holding ``x`` hold different numbers of elements.
    """
    device.check_tensor(x)
    name = name or f"all_reduce {x.name}"
    m = device.machine
    offsets, elems = x.tile_block(m.n_tiles)
    tiles = np.flatnonzero(elems > 0)
    p = tiles.size
    sizes = elems[tiles]
    if p == 0 or (sizes != sizes[0]).any():
        raise ValueError(f"all_reduce: every tile holding {x.name!r} must hold the same number of "
                         f"elements; they hold {int(sizes.min()) if p else 0}.."
                         f"{int(sizes.max()) if p else 0} (e.g. one (P, n) slab per tile)")
    n, isz = int(sizes[0]), x.itemsize
    off = offsets[tiles]
    bounds = split_bounds(n, p)
    chunk = np.diff(bounds)                                  # chunk j: elements owned by rank j
    recv_bytes = np.zeros(m.n_tiles, dtype=np.int64)
    recv_bytes[tiles] = (p - 1) * chunk * isz
    recv = device.alloc(f"{name}.recv", recv_bytes, category="exchange")
    # 1. reduce-scatter: sender rank i -> receiver rank j, into j's slot i (i < j) or i-1
    ii, jj = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    ii, jj = ii.ravel(), jj.ravel()
    keep = (ii != jj) & (chunk[jj] > 0)
    ii, jj = ii[keep], jj[keep]
    slot = np.where(ii < jj, ii, ii - 1)
    rs = device.exchange(tiles[ii], off[ii] + bounds[jj] * isz, tiles[jj],
                         recv[tiles[jj]] + slot * chunk[jj] * isz, chunk[jj] * isz,
                         name="reduce-scatter")
    # 2. each owner adds its own chunk (first: the output aliases it) and the P-1 received
    owners = np.flatnonzero(chunk > 0)
    own_off = off[owners] + bounds[owners] * isz
    srcs = [own_off] + [recv[tiles[owners]] + s * chunk[owners] * isz for s in range(p - 1)]
    batch = sum_rows(m, tiles[owners], own_off, srcs, chunk[owners], x.dtype, x.dtype,
                     why=f"add own chunk + {p - 1} received chunks of {int(chunk.max())} "
                         f"{x.dtype} (fixed order)")
    cs = device.compute_set([batch], name=f"{name}: sum")
    # 3. all-gather: owner j's summed chunk to every other tile's block
    jj, ii = np.meshgrid(owners, np.arange(p), indexing="ij")
    jj, ii = jj.ravel(), ii.ravel()
    keep = ii != jj
    jj, ii = jj[keep], ii[keep]
    ag = device.exchange(tiles[jj], off[jj] + bounds[jj] * isz, tiles[ii], off[ii] + bounds[jj] * isz,
                         chunk[jj] * isz, name="all-gather")
    return [Superstep(f"{name}: reduce-scatter", exchange=rs, category="exchange"),
            Superstep(f"{name}: sum + all-gather", compute=cs, exchange=ag, category="reduction")]


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
