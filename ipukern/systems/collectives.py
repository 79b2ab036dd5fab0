"""Cross-IPU collectives over a :class:`SystemTensor`: all-reduce, reduce-scatter,
all-gather and broadcast, built from link exchanges and on-tile adds.

Algorithms (those GCL names for these topologies):

- **ring** inside one IPU-Link domain: the IPUs in :meth:`System.ring` order (up one rail of
  the ladder, down the other), so every step uses one link per IPU. The tensor (flattened)
  is cut into N chunks; a reduce-scatter is N - 1 steps where IPU k sends a chunk to IPU
  k + 1, which adds it to its own copy; an all-gather is N - 1 steps forwarding reduced
  chunks. All-reduce = reduce-scatter + all-gather: 2 (N - 1) steps of 1/N of the tensor.
- **hierarchical** when the IPUs span several POD64 domains (GW-Links): reduce-scatter in
  each domain's ring, all-reduce of each domain-chunk across domains (a ring of the IPUs
  holding the same chunk, routed over the GW-Links), all-gather in each domain.
- **broadcast**: a pipelined ring from the root, the tensor in N pieces: N - 1 + N - 1 steps.

Every element is summed in a fixed order (the ring order, starting after the chunk's first
owner), so the result is the same bits wherever and however often it runs; tests compare it
with NumPy folding in that order and with a float64 sum.

:func:`collective_seconds` is the closed-form cost of the same algorithms for estimates.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _memo
from ..core.cost import reduce_cycles
from ..core import Superstep
from ..dtypes import DTYPES, canonical_dtype
from ..core.vertices import sum_rows
from .bsp import SystemDevice, SystemSuperstep, SystemTensor
from .spec import System, SystemConfigError

__all__ = [
    "CollectiveCost",
    "all_gather",
    "all_reduce",
    "broadcast",
    "collective_seconds",
    "concurrent",
    "concurrent_seconds",
    "reduce_scatter",
]


# --------------------------------------------------------------------------- pieces
class _Layout:
    """Where each element range of a tensor lives: pieces (tile, element start, count) and
    per-IPU byte offsets, plus a receive buffer per IPU for reductions."""

    def __init__(self, dev: SystemDevice, t: SystemTensor, name: str, need_recv: bool):
        m = t.mapping
        self.t, self.item = t, t.on(t.ipus[0]).itemsize
        order = np.argsort(m.start, kind="stable")
        self.tile, self.start, self.count = m.tile[order], m.start[order], m.count[order]
        self.off = {i: t.on(i).offset[order] for i in t.ipus}
        self.n = int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1
        self.recv: dict[int, np.ndarray] = {}
        self.dev, self.name, self.need_recv = dev, name, need_recv
        self._recv_need = np.zeros(dev.system.chip.n_tiles, dtype=np.int64)

    def pieces(self, frac: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, ...]:
        """Pieces of a chunk: every interval (one tile's run of elements) is cut into
        fractions, ``frac = ((c1, n1), (c2, n2), ...)`` taking part c1 of n1, then part c2 of
        n2 of that, so every tile holds its share of every chunk and all tiles work in every
        step. Returns (interval index, tile, first element, count)."""
        a, b = self.start, self.start + self.count
        for c, n in frac:
            size = b - a
            a, b = a + size * c // n, a + size * (c + 1) // n
        keep = np.flatnonzero(b > a)
        return keep, self.tile[keep], a[keep], (b - a)[keep]

    def elements(self, frac: tuple[tuple[int, int], ...]) -> np.ndarray:
        """Flat element indices of a chunk (sorted)."""
        _, _, first, cnt = self.pieces(frac)
        if not cnt.size:
            return np.zeros(0, np.int64)
        return np.concatenate([np.arange(f, f + k) for f, k in zip(first, cnt)])

    def note_recv(self, tiles: np.ndarray, nbytes: np.ndarray, used: np.ndarray) -> np.ndarray:
        """Offsets within the tile's receive buffer for these pieces, packed per tile after
        the ``used`` bytes already received in the same step (updated)."""
        order = np.lexsort((np.arange(tiles.size), tiles))
        ts, nb = tiles[order], nbytes[order]
        csum = np.cumsum(nb) - nb
        first = np.r_[True, ts[1:] != ts[:-1]] if ts.size else np.zeros(0, bool)
        start = np.maximum.accumulate(np.where(first, np.arange(ts.size), 0)) if ts.size else ts
        local = np.empty_like(nb)
        local[order] = csum - (csum[start] if ts.size else 0)
        local += used[tiles]
        used += np.bincount(ts, weights=nb, minlength=used.size).astype(np.int64)
        np.maximum(self._recv_need, used, out=self._recv_need)
        return local

    def alloc_recv(self) -> None:
        # the device's shared receive area: a collective built again (each training step,
        # each replica group) reuses it instead of allocating tile memory every time
        for i in self.t.ipus:
            self.recv[i] = self.dev.scratch(i, self._recv_need)


@dataclass
class _Step:
    """Link copies of one ring step and the adds that consume them (per receiving IPU)."""

    #: [(src_ipu, dst_ipu, tiles, src_off, dst_off or None (= recv buffer), nbytes, recv_local)]
    rows: list
    adds: list                 # [(ipu, tiles, own_off, recv_local, counts)]


def _ring_steps(lay: _Layout, rings: Sequence[tuple[list[int], tuple]], kind: str) -> list[_Step]:
    """Steps of concurrent rings; ``kind`` is "rs" (reduce-scatter) or "ag" (all-gather).

    Ring position k owns chunk (k + 1) % N after a reduce-scatter and sends it first in an
    all-gather.
    """
    n_steps = max(len(r) for r, _ in rings) - 1
    steps = [_Step([], []) for _ in range(n_steps)]
    used: dict[tuple[int, int], np.ndarray] = {}      # receive-buffer bytes per (step, IPU)
    for ring, prefix in rings:
        n = len(ring)
        for s in range(n - 1):
            for k in range(n):
                c = (k - s) % n if kind == "rs" else (k + 1 - s) % n
                src, dst = ring[k], ring[(k + 1) % n]
                idx, tiles, first, cnt = lay.pieces((*prefix, (c, n)))
                if not idx.size:
                    continue
                delta = (first - lay.start[idx]) * lay.item
                nb = cnt * lay.item
                src_off = lay.off[src][idx] + delta
                own_dst = lay.off[dst][idx] + delta
                if kind == "rs":
                    buf = used.setdefault((s, dst), np.zeros(lay.dev.system.chip.n_tiles, np.int64))
                    local = lay.note_recv(tiles, nb, buf)
                    steps[s].rows.append((src, dst, tiles, src_off, None, nb, local))
                    steps[s].adds.append((dst, tiles, own_dst, local, cnt))
                else:
                    steps[s].rows.append((src, dst, tiles, src_off, own_dst, nb, None))
    return steps


def _assemble(dev: SystemDevice, lay: _Layout, steps: list[_Step], name: str) -> list[SystemSuperstep]:
    """Superstep j: the adds of step j - 1, then the link copies of step j."""
    chip = dev.system.chip
    dtype = lay.t.dtype
    out: list[SystemSuperstep] = []
    for j in range(len(steps) + 1):
        per_ipu: dict[int, Superstep] = {}
        if j > 0:
            by_ipu: dict[int, list] = {}
            for ipu, tiles, own, local, cnt in steps[j - 1].adds:
                by_ipu.setdefault(ipu, []).append((tiles, own, lay.recv[ipu][tiles] + local, cnt))
            for ipu, parts in by_ipu.items():
                tiles, own, rcv, cnt = (np.concatenate(p) for p in zip(*parts))
                batch = sum_rows(chip, tiles, own, [own, rcv], cnt, dtype, dtype,
                                 why=f"add a received chunk ({dtype})")
                cs = dev.devices[ipu].compute_set([batch], name=f"{name} add {j}")
                per_ipu[ipu] = Superstep(f"{name} add {j}", compute=cs,
                                         category="reduction")
        links = None
        if j < len(steps) and steps[j].rows:
            cols = [[] for _ in range(7)]
            for src, dst, tiles, s_off, d_off, nb, local in steps[j].rows:
                if d_off is None:
                    d_off = lay.recv[dst][tiles] + local
                for col, v in zip(cols, (np.full(tiles.size, src), tiles, s_off, np.full(tiles.size, dst),
                                         tiles, d_off, nb)):
                    col.append(v)
            links = dev.link_exchange(*(np.concatenate(c) for c in cols), name=f"{name} step {j}")
        if per_ipu or links is not None:
            out.append(SystemSuperstep(f"{name} {j}", per_ipu, links,
                                       category="reduction" if per_ipu else "exchange"))
    return out


def _group(dev: SystemDevice, t: SystemTensor, ipus: Any) -> list[int]:
    if not isinstance(t, SystemTensor):
        raise TypeError(f"collectives take a SystemTensor, got {type(t).__name__}")
    if t.dtype not in ("float32", "float16"):
        raise TypeError(f"collectives reduce float32 or float16 tensors, got {t.dtype}")
    ipus = t.ipus if ipus is None else sorted({int(i) for i in ipus})
    missing = [i for i in ipus if i not in t.parts]
    if missing:
        raise SystemConfigError(f"tensor {t.name!r} has no part on IPU(s) {missing}")
    if len(ipus) < 1:
        raise SystemConfigError("a collective needs at least one IPU")
    return ipus


def _domains(system: System, ipus: list[int]) -> list[list[int]]:
    by: dict[int, list[int]] = {}
    for i in ipus:
        by.setdefault(i // system.domain_ipus, []).append(i)
    groups = [system.ring(g) for _, g in sorted(by.items())]
    if len({len(g) for g in groups}) > 1:
        raise SystemConfigError("a hierarchical collective needs the same number of IPUs in every POD64")
    return groups


def _directions(groups: list[list[int]], method: str) -> list[tuple[list[int], tuple]]:
    """(ring, chunk prefix) per direction: "ring" one ring over the whole tensor;
    "bidirectional" (GCL's bidirectional ring pair) half the tensor clockwise and half
    anticlockwise, so both directions of every ring link carry data."""
    if method == "ring":
        return [(g, ()) for g in groups]
    if method == "bidirectional":
        return [r for g in groups for r in ((g, ((0, 2),)), (g[:1] + g[:0:-1], ((1, 2),)))]
    raise ValueError(f"method must be 'ring' or 'bidirectional', got {method!r}")


def _finish(dev, lay, steps, name, label):
    if lay.need_recv:
        lay.alloc_recv()
    return dev.program(_assemble(dev, lay, steps, name), label=label)


def reduce_scatter(dev: SystemDevice, t: SystemTensor, *, ipus: Any = None, method: str = "bidirectional",
                   name: str = "reduce_scatter"):
    """Program after which ring position k of each domain holds the sum over ``ipus`` of
    the elements ``owned[ipu]`` in place (other elements hold partial sums). A chunk is a
    share of every tile's elements (see ``_Layout.pieces``).

    Returns ``(program, owned)``: ``owned[ipu]`` is a sorted int64 array of flat indices.
    """
    ipus = _group(dev, t, ipus)
    lay = _Layout(dev, t, name, need_recv=True)
    groups = _domains(dev.system, ipus)
    dirs = _directions(groups, method)
    steps = _ring_steps(lay, dirs, "rs")
    n = len(groups[0])
    owned: dict[int, list] = {}
    for ring, prefix in dirs:
        for k in range(n):
            owned.setdefault(ring[k], []).append(lay.elements((*prefix, ((k + 1) % n, n))))
    owned = {i: np.sort(np.concatenate(v)) for i, v in owned.items()}
    if len(groups) > 1:
        raise SystemConfigError("reduce_scatter across POD64 domains is not supported; use all_reduce")
    return _finish(dev, lay, steps, name, name), owned


def all_gather(dev: SystemDevice, t: SystemTensor, *, ipus: Any = None, method: str = "bidirectional",
               name: str = "all_gather"):
    """Program after which every IPU holds, in every element range, the values ring
    position k held in its owned range ``(k + 1) % N`` (the layout :func:`reduce_scatter`
    leaves)."""
    ipus = _group(dev, t, ipus)
    lay = _Layout(dev, t, name, need_recv=False)
    groups = _domains(dev.system, ipus)
    if len(groups) > 1:
        raise SystemConfigError("all_gather across POD64 domains is not supported; use all_reduce")
    return _finish(dev, lay, _ring_steps(lay, _directions(groups, method), "ag"), name, name)


def all_reduce(dev: SystemDevice, t: SystemTensor, *, ipus: Any = None, method: str = "bidirectional",
               name: str = "all_reduce", groups: Any = None):
    """Program summing ``t`` over ``ipus`` (default: every IPU holding it), result on all.
    ``method``: "bidirectional" (default, GCL's bidirectional ring pair) or "ring".

    ``groups`` (a list of disjoint IPU lists, each inside one IPU-Link domain) instead sums
    within each group, all groups at once: their ring steps share the link exchanges, so
    transfers of different groups crossing a link share its bandwidth."""
    if groups is not None:
        return _grouped_all_reduce(dev, t, groups, method, name)
    ipus = _group(dev, t, ipus)
    lay = _Layout(dev, t, name, need_recv=True)
    groups = _domains(dev.system, ipus)
    whole = _directions(groups, method)
    steps = _ring_steps(lay, whole, "rs")
    if len(groups) > 1:
        n = len(groups[0])
        per_dir = len(whole) // len(groups)
        rings = []
        for d in range(per_dir):
            inner = [whole[gi * per_dir + d] for gi in range(len(groups))]
            for k in range(n):
                rings.append(([r[k] for r, _ in inner], (*inner[0][1], ((k + 1) % n, n))))
        steps += _ring_steps(lay, rings, "rs") + _ring_steps(lay, rings, "ag")
    steps += _ring_steps(lay, whole, "ag")
    return _finish(dev, lay, steps, name, name)


def _grouped_all_reduce(dev: SystemDevice, t: SystemTensor, groups: Any, method: str, name: str):
    groups = [_group(dev, t, g) for g in groups]
    seen: set[int] = set()
    for g in groups:
        if seen & set(g):
            raise SystemConfigError(f"all_reduce groups overlap on IPU(s) {sorted(seen & set(g))}")
        seen |= set(g)
        if len({i // dev.system.domain_ipus for i in g}) > 1:
            raise SystemConfigError(f"all_reduce group {g} spans IPU-Link domains; reduce it on its own")
    lay = _Layout(dev, t, name, need_recv=True)
    rings = _directions([dev.system.ring(g) for g in groups if len(g) > 1], method)
    if not rings:
        return dev.program([], label=name)
    return _finish(dev, lay, _ring_steps(lay, rings, "rs") + _ring_steps(lay, rings, "ag"), name, name)


def broadcast(dev: SystemDevice, t: SystemTensor, root: int, *, ipus: Any = None,
              name: str = "broadcast"):
    """Program copying ``root``'s part of ``t`` to every other IPU of ``ipus``: a pipelined
    ring from the root, the tensor in N pieces."""
    ipus = _group(dev, t, ipus)
    if root not in ipus:
        raise SystemConfigError(f"broadcast root {root} is not among the IPUs {ipus}")
    lay = _Layout(dev, t, name, need_recv=False)
    ring = dev.system.ring(ipus)
    r = ring.index(root)
    ring = ring[r:] + ring[:r]
    n = len(ring)
    steps = [_Step([], []) for _ in range(max(0, 2 * n - 2))]
    for k in range(n - 1):
        for c in range(n):
            idx, tiles, first, cnt = lay.pieces(((c, n),))
            if not idx.size:
                continue
            delta = (first - lay.start[idx]) * lay.item
            src, dst = ring[k], ring[k + 1]
            steps[k + c].rows.append((src, dst, tiles, lay.off[src][idx] + delta,
                                      lay.off[dst][idx] + delta, cnt * lay.item, None))
    return _finish(dev, lay, steps, name, name)


def concurrent(dev: SystemDevice, programs: Sequence[Any], *, label: str = "concurrent"):
    """One program running ``programs`` (on disjoint IPUs) at the same time: superstep j
    holds every program's superstep j, and their link copies form one
    :class:`~ipukern.LinkExchange`, so transfers of different programs crossing the same
    link share its bandwidth (as concurrent GCL collectives do)."""
    programs = list(programs)
    owner: dict[int, int] = {}
    for k, p in enumerate(programs):
        if p.device is not dev:
            raise ValueError("concurrent programs must be built for this SystemDevice")
        for i in {i for st in p.steps for i in st.per_ipu}:
            if owner.setdefault(i, k) != k:
                raise SystemConfigError(f"programs {owner[i]} and {k} both compute on IPU {i}")
    cols = ("src_ipu", "src_tile", "src_offset", "dst_ipu", "dst_tile", "dst_offset", "nbytes")
    out = []
    for j in range(max((len(p.steps) for p in programs), default=0)):
        parts = [p.steps[j] for p in programs if j < len(p.steps)]
        per_ipu = {i: s for st in parts for i, s in st.per_ipu.items()}
        lxs = [st.links for st in parts if st.links is not None and st.links.nbytes.size]
        links = (dev.link_exchange(*(np.concatenate([getattr(lx, c) for lx in lxs]) for c in cols),
                                   name=f"{label} step {j}") if lxs else None)
        cat = "reduction" if any(st.category == "reduction" for st in parts) else parts[0].category
        out.append(SystemSuperstep(f"{label} {j}", per_ipu, links, category=cat))
    return dev.program(out, label=label)


# --------------------------------------------------------------------------- closed form
@dataclass(frozen=True)
class CollectiveCost:
    """Closed-form cost of a collective: seconds and what they are made of."""

    op: str
    n_ipus: int
    nbytes: int
    steps: int
    link_seconds: float
    sync_seconds: float
    add_seconds: float
    algorithm: str

    @property
    def seconds(self) -> float:
        return self.link_seconds + self.sync_seconds + self.add_seconds


def _ring_bandwidth(system: System, ring: list[int]) -> tuple[float, float]:
    """Slowest link rate and largest latency between ring neighbours (routed)."""
    bw, lat = math.inf, 0.0
    for a, b in zip(ring, ring[1:] + ring[:1]):
        if a == b:
            continue
        path = system.route(a, b)
        links = [system.link(u, v) for u, v in itertools.pairwise(path)]
        bw = min(bw, min(ln.bytes_per_second for ln in links))
        lat = max(lat, sum(ln.latency_s for ln in links))
    return bw, lat


#: ring routes by (system, rings, directions)
_ROUTES = _memo.register(_memo.LruCache("systems.ring_routes", maxsize=1024))


def _ring_routes(system: System, rings: tuple[tuple[int, ...], ...], n_dirs: int) -> tuple:
    """Per directed link used by the rings: its rate and how many of ring j's neighbour
    copies cross it (a (links, rings) matrix); per route its links and latency (cached:
    the estimate asks for the same rings again and again)."""
    key = (system, rings, n_dirs)
    hit = _ROUTES.get(key)
    if hit is None:
        hop_ix: dict[tuple[int, int], int] = {}
        counts: list[list[int]] = []
        routes, lats = [], []
        for j, ring in enumerate(rings):
            for r in ([list(ring)] if n_dirs == 1 else [list(ring), [ring[0], *ring[:0:-1]]]):
                for a, b in zip(r, r[1:] + r[:1]):
                    hops = list(itertools.pairwise(system.route(a, b)))
                    idx = []
                    for h in hops:
                        if h not in hop_ix:
                            hop_ix[h] = len(counts)
                            counts.append([0] * len(rings))
                        counts[hop_ix[h]][j] += 1
                        idx.append(hop_ix[h])
                    routes.append(idx)
                    lats.append(sum(system.link(u, v).latency_s for u, v in hops))
        bw = np.array([system.link(u, v).bytes_per_second for u, v in hop_ix], dtype=np.float64)
        flat = np.concatenate([np.asarray(r, np.int64) for r in routes])
        starts = np.cumsum([0] + [len(r) for r in routes[:-1]])
        hit = _ROUTES.put(key, (np.array(counts, np.float64).reshape(len(counts), len(rings)), bw, flat,
                                       starts, np.array(lats)))
    return hit


def _ring_phase(system: System, rings: list[tuple[list[int], float]], reduce: bool, share: float,
                dtype: str) -> tuple[int, float, float, float]:
    """(steps, link, sync, add seconds) of concurrent ring phases in lockstep: ring r with
    ``size`` bytes sends ``share`` of a ``size / len(r)`` chunk to its neighbour per step
    (and, with ``share`` 0.5, the other half the other way round). Every copy follows its
    route; the bytes of all rings crossing a directed link share its bandwidth, so a step
    lasts the slowest route's ``max(bytes on its links / link rate) + latency``, or a tile's
    exchange port if slower."""
    chip = system.chip
    item = DTYPES[dtype].itemsize
    port_bps = chip.exchange_bytes_per_cycle * chip.clock_hz
    n_dirs = round(1 / share)
    rings = [(tuple(r), size) for r, size in rings if len(r) > 1]
    if not rings:
        return 0, 0.0, 0.0, 0.0
    chunks = np.array([size / len(r) for r, size in rings])
    steps = max(len(r) for r, _ in rings) - 1
    port = float(chunks.max()) / chip.n_tiles / port_bps
    add = 0.0
    if reduce:   # one add vertex per tile and direction (the pair adds two half chunks)
        add = max(n_dirs * reduce_cycles(chip, math.ceil(c / item / chip.n_tiles / n_dirs), 2, dtype, dtype)
                  for c in chunks) / chip.clock_hz
    counts, bw, flat, starts, lats = _ring_routes(system, tuple(r for r, _ in rings), n_dirs)
    per_link = counts @ (share * chunks) / bw
    link = float((np.maximum.reduceat(per_link[flat], starts) + lats).max())
    n = len({i for r, _ in rings for i in r})
    sync_s = (system.sync_cycles(n) + chip.exchange_overhead_cycles) / chip.clock_hz
    return steps, steps * max(link, port), steps * sync_s, steps * add


def collective_seconds(system: System, op: str, nbytes: float, ipus: Any = None, *,
                       dtype: str = "float32", method: str = "bidirectional") -> CollectiveCost:
    """Closed-form time of ``op`` ("all_reduce", "reduce_scatter", "all_gather",
    "broadcast") on ``nbytes`` per IPU over ``ipus`` (default all), by the algorithms above.

    ``method="bidirectional"`` (default) sends half of each chunk each way round the ring,
    so a link direction carries chunk / 2 per step; ``"ring"`` one way.
    Per ring step: ``max(bytes on the busiest link of a route / its rate + the route's
    latency, chunk / n_tiles / tile exchange rate) + cross-chip sync + exchange overhead``
    (routes of ring neighbours that share a link share its bandwidth: a ring of two IPUs
    sends both half chunks over each link direction); reduce steps add each tile's share of
    the chunk (:func:`~ipukern.core.cost.reduce_cycles`, 2 partials), as the built program
    does, whose chunks are a share of every tile.
    """
    return concurrent_seconds(system, op, [(nbytes, ipus)], dtype=dtype, method=method)


def concurrent_seconds(system: System, op: str, jobs: Sequence[tuple[float, Any]], *,
                       dtype: str = "float32", method: str = "bidirectional") -> CollectiveCost:
    """Closed-form time of several collectives ``op`` run at once, ``jobs`` =
    ``[(nbytes, ipus), ...]`` on disjoint IPU sets (e.g. each pipeline stage's gradient
    all-reduce across the replicas): their ring steps run in lockstep and the bytes of all
    jobs crossing a directed link share its bandwidth (as :func:`concurrent` programs do).
    Returns the cost of the whole (``nbytes``: the largest job's)."""
    if op not in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        raise ValueError(f"unknown collective {op!r}")
    if method not in ("ring", "bidirectional"):
        raise ValueError(f"method must be 'ring' or 'bidirectional', got {method!r}")
    share = 0.5 if method == "bidirectional" else 1.0
    dtype = canonical_dtype(dtype)
    chip = system.chip
    norm, seen = [], set()
    for nbytes, ipus in jobs:
        if not (nbytes >= 0 and math.isfinite(nbytes)):
            raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")
        ipus = list(range(system.n_ipus)) if ipus is None else sorted({int(i) for i in ipus})
        if seen & set(ipus):
            raise SystemConfigError(f"concurrent collectives overlap on IPU(s) {sorted(seen & set(ipus))}")
        seen |= set(ipus)
        if len(ipus) > 1 and nbytes > 0:
            norm.append((float(nbytes), ipus))
    big = int(max((nb for nb, _ in jobs), default=0))
    n = max((len(i) for _, i in norm), default=len(seen))
    if not norm:
        return CollectiveCost(op, n, big, 0, 0.0, 0.0, 0.0, "none")
    if op == "broadcast":
        if len(norm) > 1:
            raise ValueError("concurrent broadcasts are not modelled; cost them one by one")
        nbytes, ipus = norm[0]
        n = len(ipus)
        bw, lat = _ring_bandwidth(system, system.ring(ipus))
        sync_s = (system.sync_cycles(n) + chip.exchange_overhead_cycles) / chip.clock_hz
        steps = 2 * n - 2
        return CollectiveCost(op, n, int(nbytes), steps, steps * (nbytes / n / bw + lat), steps * sync_s,
                              0.0, "pipelined ring")
    inner, cross = [], []
    hierarchical = False
    for nbytes, ipus in norm:
        doms: dict[int, list[int]] = {}
        for i in ipus:
            doms.setdefault(i // system.domain_ipus, []).append(i)
        rings = [system.ring(g) for _, g in sorted(doms.items())]
        inner += [(r, nbytes) for r in rings]
        if op == "all_reduce" and len(rings) > 1:
            hierarchical = True
            # across domains every IPU moves its 1/N of the tensor: the rings of the IPUs
            # at the same position of every domain, all at once
            cross += [([r[k] for r in rings], nbytes / len(rings[0])) for k in range(len(rings[0]))]
    phases = []
    if op in ("all_reduce", "reduce_scatter"):
        phases.append(_ring_phase(system, inner, True, share, dtype))
    algorithm = "bidirectional ring pair" if method == "bidirectional" else "ring"
    if hierarchical:
        # with the ring pair its two cross rings need not use opposite link directions, so
        # no halving is assumed
        phases += [_ring_phase(system, cross, True, 1.0, dtype),
                   _ring_phase(system, cross, False, 1.0, dtype)]
        algorithm = "hierarchical (ring per POD64, ring across GW-Links)"
    if op in ("all_reduce", "all_gather"):
        phases.append(_ring_phase(system, inner, False, share, dtype))
    steps, link_s, sync_total, add_s = (sum(p[i] for p in phases) for i in range(4))
    return CollectiveCost(op, n, big, int(steps), link_s, sync_total, add_s, algorithm)
