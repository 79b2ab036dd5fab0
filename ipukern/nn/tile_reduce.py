"""Per-channel reductions across tiles: batch-norm statistics and parameter gradients.

A tensor resident in some :class:`~ipukern.nn.layout.Layout` is summed per *channel*
(element ``i`` belongs to channel ``(i // inner) % channels``, so NCHW batch norm has
``inner = H*W``, a bias over the last axis ``inner = 1``) in the three stages PopLibs'
multi-stage reduction uses (popops ``reduce``, reference/poplibs-planner.md §4.3):

1. every tile sums the elements it holds into one partial per (tile, channel) pair and
   quantity (popops Reduce vertex, partials float32);
2. an exchange sends each partial to the channel's *owner* (channels spread linearly over
   the tiles, like ``mapTensorLinearly``), which sums the partials it received;
3. optionally the owners' per-channel results (e.g. batch norm's scale and shift) are
   broadcast back to every tile holding that channel (one exchange; a value going to
   several tiles is sent once, as the exchange broadcasts).

The copy tables are built once per layout (vectorised, no loop over tiles); both exchanges
are executed for real on the tiles' rows and costed with the same exchange model as every
rearrangement (:func:`ipukern.core.cost.exchange_loads`). The per-channel arithmetic the
owners do (mean, variance, rsqrt, ...) is the caller's, on arrays of ``channels`` values,
and is costed here as ``post_ops`` element-wise passes (+ one rsqrt) over each owner's
channels.
"""
from __future__ import annotations

import numpy as np

from .. import _memo
from ..core import cost
from ..core import SuperstepRecord
from ..core import split_bounds
from ..machine import MachineSpec
from . import cycles
from ..core import copy_runs
from .layout import Layout

__all__ = ["ChannelReduce", "PlaneReduce", "channel_reduce", "plane_reduce"]

#: reduction plans and layouts' (tile, channel) pairs, by layout object and options
#: (entries hold their layout: a key's ``id`` stays its layout's)
_CACHE = _memo.register(_memo.LruCache("nn.tile_reduce", maxsize=4096), per_batch=True)


def compute_record(machine: MachineSpec, name: str, tile_cycles: np.ndarray, why: str,
                   category: str = "compute") -> SuperstepRecord:
    """A compute superstep record from per-tile cycles (slowest tile sets the pace)."""
    tc = np.asarray(tile_cycles, dtype=np.int64)
    t = int(np.argmax(tc)) if tc.size else -1
    c = int(tc[t]) if tc.size else 0
    return SuperstepRecord(index=0, name=name, category=category, compute_cycles=c,
                           sync_cycles=machine.sync_cycles, exchange_cycles=0,
                           compute_tile=t if c else -1, tiles_computing=int((tc > 0).sum()),
                           compute_why=why)


def channel_reduce(machine: MachineSpec, layout: Layout, channels: int, inner: int, *, quantities: int,
                   broadcast: int = 0, pre_ops: int = 0, post_ops: int = 0, rsqrt: bool = False,
                   name: str = "reduce") -> ChannelReduce:
    """A cached :class:`ChannelReduce` (plans of equal layout object and options share one)."""
    return _cached(ChannelReduce, machine, layout, channels, inner,
                   dict(quantities=quantities, broadcast=broadcast, pre_ops=pre_ops, post_ops=post_ops,
                        rsqrt=rsqrt, name=name))


def plane_reduce(machine: MachineSpec, layout: Layout, planes: int, inner: int, *, broadcast: int = 0,
                 name: str = "reduce") -> PlaneReduce:
    """A cached :class:`PlaneReduce`: the sum of each of ``planes`` contiguous planes of
    ``inner`` elements (a global pool's (n, c) planes)."""
    return _cached(PlaneReduce, machine, layout, planes, inner,
                   dict(quantities=1, broadcast=broadcast, name=name))


def _cached(cls: type, machine: MachineSpec, layout: Layout, channels: int, inner: int, opts: dict):
    key = (cls.__name__, id(layout), machine, channels, inner) + tuple(sorted(opts.items()))
    # NOTE: ``name`` is a kind of reduction ("batch-norm statistics"), not a layer name, so
    # layers of equal layout share one object (and the estimate of a deep net stays fast)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not layout:
        hit = _CACHE.put(key, (layout, cls(machine, layout, channels, inner, **opts)))
    return hit[1]


def _exchange_record(machine, name, table, why, loads=None) -> SuperstepRecord:
    """The exchange superstep of a copy table; ``loads`` = its (recv, paired, send) bytes
    per tile when the caller knows them (else :func:`cost.exchange_loads` of the table)."""
    st, so, dt, _, nb = table
    recv, paired, send = loads if loads is not None else cost.exchange_loads(
        st.astype(np.int64), so, dt.astype(np.int64), nb, machine.n_tiles,
        machine.tiles_per_exchange_bus)
    per_tile = cost.tile_exchange_cycles(recv, paired, send, machine)
    t = int(np.argmax(per_tile))
    return SuperstepRecord(index=0, name=name, category="exchange", compute_cycles=0,
                           sync_cycles=machine.sync_cycles,
                           exchange_cycles=int(per_tile[t]) + machine.exchange_overhead_cycles,
                           exchange_tile=t, bytes_exchanged=int(nb.sum()), n_copies=int(nb.size),
                           exchange_why=f"{why}: tile {t} moves {max(int(recv[t]), int(send[t]))} B",
                           exchange_overhead_cycles=machine.exchange_overhead_cycles)


def _broadcast_loads(machine: MachineSpec, st: dict, nbytes: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`cost.exchange_loads` of the broadcast table (every channel's ``nbytes`` from
    its owner's slot to each tile holding the channel), from the pairs without the sorts:
    a source region is a channel, a (receiver, region) row is a pair, and the pairs sorted
    by (channel, tile) are sorted by (channel, bus) too, so a channel's receivers on one
    bus are neighbours."""
    nt, bus = machine.n_tiles, machine.tiles_per_exchange_bus
    ch, tile = st["ch"], st["tile"]
    recv = st["per_tile"].astype(np.int64) * nbytes
    paired = np.zeros(nt, np.int64)
    if not ch.size:
        return recv, paired, np.zeros(nt, np.int64)
    first = np.r_[True, ch[1:] != ch[:-1]]                    # each channel sent once
    send = np.bincount(st["owner_of_ch"][ch[first]], minlength=nt).astype(np.int64) * nbytes
    if bus > 1:
        key = ch * (nt // bus + 1) + tile // bus
        start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        size = np.diff(np.append(start, key.size))
        shared = np.repeat(size > 1, size)
        paired = np.bincount(tile[shared], minlength=nt).astype(np.int64) * nbytes
    return recv, paired, send


def _pair_keys(layout: Layout, C: int, inner: int, nt: int) -> np.ndarray:
    """Sorted distinct ``channel * nt + tile`` of every element of the layout.

    Runs in logical order repeat their neighbour's (channel, tile) pair whenever they stay
    in one channel plane on one tile (one run per row of a plane, millions for a conv
    output split by columns): those repeats are dropped in one linear pass before the sort.
    """
    from ..conv import channel_tile_pairs
    if layout.perm is None:
        known = channel_tile_pairs(layout.mapping, C, inner, nt)
        if known is not None:
            return known
    l0, cnt, tile = layout.runs()
    seg0 = l0 // inner
    span = np.minimum((l0 + cnt - 1) // inner - seg0 + 1, C)
    if span.size and int(span.max()) == 1:
        keys = (seg0 % C) * nt + tile
    else:
        rep = np.repeat(np.arange(l0.size), span)
        k = np.arange(rep.size) - np.repeat(np.cumsum(span) - span, span)
        keys = ((seg0[rep] + k) % C).astype(np.int64) * nt + tile[rep]
    if keys.size > 1:
        keys = keys[np.r_[True, keys[1:] != keys[:-1]]]
    keys = np.sort(keys)
    if keys.size > 1:
        keys = keys[np.r_[True, keys[1:] != keys[:-1]]]
    return keys


def _pairs(machine: MachineSpec, layout: Layout, C: int, inner: int) -> dict:
    """The (tile, channel) pairs of a layout, their owners and buffer slots (cached)."""
    key = ("pairs", id(layout), machine, C, inner)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is layout:
        return hit[1]
    nt = machine.n_tiles
    keys = _pair_keys(layout, C, inner, nt)
    ch = keys // nt                              # pairs sorted by (channel, tile)
    ptile = keys % nt
    by_tile = np.argsort(ptile, kind="stable")   # rank of each pair in its tile's buffer
    first = np.searchsorted(ptile[by_tile], np.arange(nt))
    rank = np.empty(keys.size, np.int64)
    rank[by_tile] = np.arange(keys.size) - first[ptile[by_tile]]
    used = min(nt, C)                            # channel owners: spread linearly
    cb = split_bounds(C, used)
    owner_of_ch = np.repeat(np.arange(used), np.diff(cb))
    owner = owner_of_ch[ch]
    slot = np.arange(keys.size) - np.searchsorted(ch, cb[:-1])[owner]
    st = {"keys": keys, "ch": ch, "tile": ptile, "rank": rank, "owner": owner, "slot": slot,
          "ch_slot": np.arange(C) - cb[:-1][owner_of_ch], "owner_of_ch": owner_of_ch,
          "per_tile": np.bincount(ptile, minlength=nt), "used": used}
    _CACHE.put(key, (layout, st))
    return st


class ChannelReduce:
    """Sum ``quantities`` per-element values per channel across every tile (see module doc).

    The first stage is costed as the partial-sum reduce vertex (``first_stage``);
    :class:`PlaneReduce` costs it as popops' ContinuousReduce.

    Attributes
    ----------
    records : list of SuperstepRecord
        Partial reduce (compute), gather to owners (exchange), owner reduce and per-channel
        arithmetic (compute), and the broadcast back (exchange) when ``broadcast > 0``.
    """

    def __init__(self, machine: MachineSpec, layout: Layout, channels: int, inner: int, *,
                 quantities: int, broadcast: int = 0, pre_ops: int = 0, post_ops: int = 0,
                 rsqrt: bool = False, name: str = "reduce"):
        vertex = self.first_stage
        nt = machine.n_tiles
        C, inner, q = int(channels), max(1, int(inner)), int(quantities)
        self.machine, self.layout, self.channels, self.inner = machine, layout, C, inner
        self.q, self.bk, self.name = q, int(broadcast), name
        st = _pairs(machine, layout, C, inner)
        keys, self.pair_ch, self.pair_tile, self.pair_rank = st["keys"], st["ch"], st["tile"], st["rank"]
        self.owner, self.pair_slot, self.ch_slot = st["owner"], st["slot"], st["ch_slot"]
        self.owner_of_ch, per_tile_pairs, used = st["owner_of_ch"], st["per_tile"], st["used"]
        self._keys, P = keys, keys.size
        recv_pairs = np.bincount(self.owner, minlength=nt)
        ch_per_owner = np.bincount(self.owner_of_ch, minlength=nt)
        f4 = np.int64(4)
        self.gather = (self.pair_tile, self.pair_rank * q * f4, self.owner, self.pair_slot * q * f4,
                       np.full(P, q * 4, np.int64))
        self.slots = (int(per_tile_pairs.max()), int(recv_pairs.max()), int(ch_per_owner.max()))
        # ---- cost
        n = layout.elems_per_tile(nt)
        dt = layout.dtype
        depth = -(-n // np.maximum(per_tile_pairs, 1))
        if vertex == "continuous":
            # popops ContinuousReduce: each (tile, channel) pair is a contiguous run (a
            # global pool's plane pieces), shared over the workers (cycles.tile_reduce_cycles)
            c1 = q * cycles.tile_reduce_cycles(machine, per_tile_pairs, depth, dt)
        else:
            c1 = q * cost.reduce_cycles_array(machine, per_tile_pairs, depth, dt, "float32")
        c1 = c1 + pre_ops * cycles.binary_cycles(machine, n, dt, 2)
        d2 = -(-recv_pairs // np.maximum(ch_per_owner, 1))
        c2 = q * cost.reduce_cycles_array(machine, ch_per_owner, d2, "float32", "float32")
        c2 = c2 + post_ops * cycles.binary_cycles(machine, ch_per_owner, "float32", 2)
        if rsqrt:
            c2 = c2 + cycles.unary_cycles(machine, ch_per_owner, "rsqrt", "float32")
        self.records = [
            compute_record(machine, f"{name}: partials", c1,
                           f"popops {'ContinuousReduce' if vertex == 'continuous' else 'Reduce'}: "
                           f"{int(n.max())} elements into {int(per_tile_pairs.max())} "
                           f"channel partials x {q} per tile"),
            # every partial has its own source slot and one receiver: no broadcast, so no
            # bus pairing, and a tile sends what it holds (exchange_loads of the table)
            _exchange_record(machine, f"{name}: partials to owners", self.gather,
                             f"{P} (tile, channel) partials to {used} owner tiles",
                             (recv_pairs * q * 4, np.zeros(nt, np.int64), per_tile_pairs * q * 4)),
            compute_record(machine, f"{name}: owners", c2,
                           f"owner reduce of {int(recv_pairs.max())} partials into "
                           f"{int(ch_per_owner.max())} channels + {post_ops} per-channel passes")]
        if self.bk:
            b = self.bk
            self.bcast = (self.owner_of_ch[self.pair_ch], self.ch_slot[self.pair_ch] * b * f4, self.pair_tile,
                          self.pair_rank * b * f4, np.full(P, b * 4, np.int64))
            self.records.append(_exchange_record(machine, f"{name}: broadcast", self.bcast,
                                                 f"{C} channels x {b} values to their {P} tiles",
                                                 _broadcast_loads(machine, st, b * 4)))
        self.total_bytes = (per_tile_pairs * q + recv_pairs * q + ch_per_owner * max(q, self.bk)
                            + per_tile_pairs * self.bk) * 4
        self._elem = None

    #: first-stage vertex: "partials" (ipukern.core.cost.reduce_cycles) or "continuous"
    first_stage = "partials"

    @property
    def cycles(self) -> int:
        return sum(r.total_cycles for r in self.records)

    def _elements(self) -> tuple[np.ndarray, np.ndarray]:
        """(nt, slot) pair index of every element a tile holds (P in the padding)."""
        if self._elem is None:
            nt = self.machine.n_tiles
            lay = self.layout
            l0, cnt, tile, off = lay.pieces()
            slot = max(1, int(lay.elems_per_tile(nt).max()))
            rep = np.repeat(np.arange(l0.size), cnt)
            k = np.arange(rep.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            logical = l0[rep] + k
            pos = off[rep] // lay.itemsize + k
            key = ((logical // self.inner) % self.channels) * nt + tile[rep]
            table = np.full((nt, slot), self._keys.size, np.int64)
            table[tile[rep], pos] = np.searchsorted(self._keys, key)
            self._elem = table
        return self._elem

    def reduce(self, values: list[np.ndarray]) -> np.ndarray:
        """Execute stages 1-2 on (n_tiles, slot) per-tile arrays (one per quantity, in the
        layout's packed order). Returns the (channels, quantities) float32 sums as the
        owner tiles hold them."""
        nt, q = self.machine.n_tiles, self.q
        elem = self._elements()
        P = self._keys.size
        part = np.stack([np.bincount(elem.ravel(), weights=np.asarray(v, np.float32).ravel()[:elem.size],
                                     minlength=P + 1)[:P] for v in values], axis=1).astype(np.float32)
        src = np.zeros((nt, max(1, self.slots[0] * q)), np.float32)
        src[self.pair_tile[:, None], self.pair_rank[:, None] * q + np.arange(q)] = part
        dst = np.zeros((nt, max(1, self.slots[1] * q)), np.float32)
        copy_runs(dst.view(np.uint8), src.view(np.uint8), *self.gather)
        got = dst[self.owner[:, None], self.pair_slot[:, None] * q + np.arange(q)]
        out = np.zeros((self.channels, q), np.float64)
        for j in range(q):
            out[:, j] = np.bincount(self.pair_ch, weights=got[:, j], minlength=self.channels)
        return out.astype(np.float32)

    def broadcast(self, per_channel: np.ndarray) -> list[np.ndarray]:
        """Execute stage 3: the owners' (channels, broadcast) values sent to every tile
        holding the channel; returns one (n_tiles, slot) array per value, element-aligned
        with the layout's packed order (0 in the padding)."""
        nt, b = self.machine.n_tiles, self.bk
        vals = np.asarray(per_channel, np.float32).reshape(self.channels, b)
        own = np.zeros((nt, max(1, self.slots[2] * b)), np.float32)
        own[self.owner_of_ch[:, None], self.ch_slot[:, None] * b + np.arange(b)] = vals
        dst = np.zeros((nt, max(1, self.slots[0] * b) + b), np.float32)
        copy_runs(dst.view(np.uint8), own.view(np.uint8), *self.bcast)
        elem = self._elements()
        rank = np.append(self.pair_rank, self.slots[0])[elem]       # padding reads the spare slot
        rows = np.arange(nt)[:, None]
        return [dst[rows, rank * b + j] for j in range(b)]


class PlaneReduce(ChannelReduce):
    """A :class:`ChannelReduce` whose channels are contiguous planes (a global pool's (n, c)
    planes): each tile's piece of a plane is one contiguous run, so the first stage is
    popops' ContinuousReduce (:func:`ipukern.nn.cycles.tile_reduce_cycles`)."""

    first_stage = "continuous"
