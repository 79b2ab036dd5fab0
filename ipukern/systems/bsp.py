"""Cross-IPU BSP: supersteps whose exchanges may cross chips.

A :class:`SystemSuperstep` is, on every IPU at once: compute (the IPU's own
:class:`~ipukern.Superstep` compute set) -> sync -> on-chip exchange -> off-chip exchange.
The off-chip part is a :class:`LinkExchange`: a table of byte copies between tiles of
different IPUs, carried over the system's links.

Cost (fixed at build time, so estimate and execute report the same cycles):

- compute: the slowest tile of the slowest IPU;
- sync: the chip's on-chip sync, or the cross-chip sync of :meth:`System.sync_cycles` when
  any byte crosses a chip in the superstep;
- exchange: the slowest IPU's on-chip exchange, then the link phase. Every copy follows the
  minimum-hop route; the bytes of all copies crossing a directed link share its
  bandwidth, so the phase lasts ``max over (src, dst) pairs of (max over the route's links
  of bytes on the link / link rate + hops x latency)``, or longer if a tile's own
  exchange port (the chip's bytes per cycle per tile) is the bottleneck, plus the chip's
  exchange overhead.

Execution moves real bytes: in one process between the IPUs' arenas, or between MPI ranks
(see :mod:`ipukern.systems.mpi`) where cross-rank copies become point-to-point messages and
the cross-chip sync a barrier. Copies are applied in a fixed order and no two write the
same byte, so the result is the same bits wherever the IPUs live.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import Device, get_num_threads
from ..core import Profile, SuperstepRecord
from ..core import CopyTable
from ..core import Exchange, ExchangeError, Superstep
from ..core import TileMapping, TileTensor
from .spec import System, SystemConfigError, get_system

__all__ = ["LinkExchange", "SystemDevice", "SystemProgram", "SystemSuperstep", "SystemTensor"]


class LinkExchange:
    """Byte copies between tiles of different IPUs, executed in one off-chip exchange phase.

    Parameters
    ----------
    device : SystemDevice
    src_ipu, src_tile, src_offset, dst_ipu, dst_tile, dst_offset, nbytes : array-like of int
        One row per copy; offsets are byte offsets within the tile.

    Raises
    ------
    ExchangeError
        For an IPU out of range, a copy within one IPU (use the IPU's own exchange), any
        tile/offset error :class:`~ipukern.Exchange` reports, or overlapping writes.
    """

    def __init__(self, device: SystemDevice, src_ipu: Any, src_tile: Any, src_offset: Any,
                 dst_ipu: Any, dst_tile: Any, dst_offset: Any, nbytes: Any, *,
                 name: str = "link exchange"):
        system = device.system
        self.system, self.name = system, name
        si = np.asarray(src_ipu, dtype=np.int64).ravel()
        di = np.asarray(dst_ipu, dtype=np.int64).ravel()
        n_ipus = device.n_ipus
        for label, ipus in (("source", si), ("destination", di)):
            bad = (ipus < 0) | (ipus >= n_ipus)
            if bad.any():
                raise ExchangeError(f"{name}: copy {int(np.argmax(bad))} has {label} IPU "
                                    f"{int(ipus[bad][0])}, outside 0..{n_ipus - 1}")
        same = si == di
        if same.any():
            raise ExchangeError(f"{name}: copy {int(np.argmax(same))} stays on IPU "
                                f"{int(si[same][0])}; on-chip copies belong in that IPU's exchange")
        chip = system.chip
        t = chip.n_tiles
        row = max(d.row_limit for d in device.devices)
        # validate (and cost the tile ports) as one exchange over a virtual chip whose tiles
        # are all IPUs' tiles: IPU i's tile k is virtual tile i * n_tiles + k
        virtual = chip.replace(n_tiles=n_ipus * t, name=f"{chip.name}x{n_ipus}")
        st = np.asarray(src_tile, dtype=np.int64).ravel()
        dt = np.asarray(dst_tile, dtype=np.int64).ravel()
        for label, tiles in (("source", st), ("destination", dt)):
            bad = (tiles < 0) | (tiles >= t)
            if bad.any():
                raise ExchangeError(f"{name}: copy {int(np.argmax(bad))} has {label} tile "
                                    f"{int(tiles[bad][0])}, outside 0..{t - 1}")
        if not (si.size == st.size == di.size == dt.size):
            raise ExchangeError(f"{name}: copy table columns differ in length")
        flat = Exchange(virtual, si * t + st, src_offset, di * t + dt, dst_offset, nbytes,
                        name=name, row_bytes=row)
        # group copies by (src IPU, dst IPU): one contiguous segment per pair, fixed order
        s_ipu, d_ipu = flat.src_tile // t, flat.dst_tile // t
        order = np.lexsort((flat.dst_offset, flat.dst_tile, d_ipu, s_ipu))
        self.src_ipu, self.dst_ipu = s_ipu[order].astype(np.int32), d_ipu[order].astype(np.int32)
        self.src_tile = (flat.src_tile[order] % t).astype(np.int32)
        self.dst_tile = (flat.dst_tile[order] % t).astype(np.int32)
        self.src_offset, self.dst_offset = flat.src_offset[order], flat.dst_offset[order]
        self.nbytes = flat.nbytes[order]
        pair = self.src_ipu.astype(np.int64) * n_ipus + self.dst_ipu
        cut = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]]) if pair.size else np.zeros(0, np.int64)
        self.segments = [(int(self.src_ipu[a]), int(self.dst_ipu[a]), int(a), int(b))
                         for a, b in zip(cut, np.r_[cut[1:], pair.size])]
        self._cost(flat)
        #: one host copy table per segment (between two IPUs' arenas), in the fixed order
        self.tables = [CopyTable(self.src_tile[a:b], self.src_offset[a:b], self.dst_tile[a:b],
                                 self.dst_offset[a:b], self.nbytes[a:b], host_order="given")
                       for _, _, a, b in self.segments]

    def _cost(self, flat: Exchange) -> None:
        system, chip = self.system, self.system.chip
        if self.nbytes.size == 0:
            self.cycles, self.why, self.busiest_link = 0, "", None
            return
        load: dict[tuple[int, int], int] = {}
        routes = []
        for s, d, a, b in self.segments:
            nb = int(self.nbytes[a:b].sum())
            path = system.route(s, d)
            routes.append((s, d, nb, path))
            for u, v in itertools.pairwise(path):
                load[(u, v)] = load.get((u, v), 0) + nb
        worst, worst_link = 0.0, None
        for _s, _d, _nb, path in routes:
            t_bw, link = 0.0, None
            lat = 0.0
            for u, v in itertools.pairwise(path):
                ln = system.link(u, v)
                t = load[(u, v)] / ln.bytes_per_second
                if t > t_bw:
                    t_bw, link = t, (u, v, ln)
                lat += ln.latency_s
            if t_bw + lat > worst:
                worst, worst_link = t_bw + lat, link
        link_cycles = math.ceil(worst * chip.clock_hz)
        port_cycles = int(flat.tile_cycles.max()) if flat.tile_cycles.size else 0
        self.link_cycles, self.port_cycles = link_cycles, port_cycles
        self.cycles = max(link_cycles, port_cycles) + chip.exchange_overhead_cycles
        u, v, ln = worst_link
        self.busiest_link = (u, v)
        if link_cycles >= port_cycles:
            self.why = (f"{self.name}: {ln.kind} {u}->{v} carries {load[(u, v)]} B at "
                        f"{ln.bytes_per_second / 1e9:.1f} GB/s = {link_cycles} + "
                        f"{chip.exchange_overhead_cycles} overhead cycles")
        else:
            self.why = (f"{self.name}: a tile's exchange port is the bottleneck: {port_cycles} + "
                        f"{chip.exchange_overhead_cycles} overhead cycles")

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())

@dataclass
class SystemSuperstep:
    """One superstep on every IPU: ``per_ipu[i]`` is IPU i's compute and on-chip exchange
    (None: idle), ``links`` the off-chip exchange."""

    name: str
    per_ipu: dict[int, Superstep] = field(default_factory=dict)
    links: LinkExchange | None = None
    category: str = "compute"

    def record(self, index: int, system: System, n_ipus: int) -> SuperstepRecord:
        chip = system.chip
        comp = [(s.compute.cycles, i, s.compute) for i, s in self.per_ipu.items() if s.compute is not None]
        xch = [(s.exchange.cycles, i, s.exchange) for i, s in self.per_ipu.items() if s.exchange is not None]
        c_cyc, c_ipu, c = max(comp, key=lambda r: (r[0], -r[1])) if comp else (0, -1, None)
        x_cyc, x_ipu, x = max(xch, key=lambda r: (r[0], -r[1])) if xch else (0, -1, None)
        ln = self.links
        crosses = ln is not None and ln.nbytes.size > 0
        sync = system.sync_cycles(n_ipus) if crosses else chip.sync_cycles
        why_x = [f"IPU {x_ipu}: {x.why}"] if x is not None and x.why else []
        if crosses:
            why_x.append(ln.why)
        return SuperstepRecord(
            index=index, name=self.name, category=self.category,
            compute_cycles=c_cyc, sync_cycles=sync,
            exchange_cycles=x_cyc + (ln.cycles if crosses else 0),
            compute_tile=c.busiest_tile if c is not None else -1,
            exchange_tile=x.busiest_tile if x is not None else -1,
            bytes_exchanged=sum(s.exchange.total_bytes for s in self.per_ipu.values() if s.exchange)
            + (ln.total_bytes if crosses else 0),
            n_copies=sum(s.exchange.n_copies for s in self.per_ipu.values() if s.exchange)
            + (int(ln.nbytes.size) if crosses else 0),
            tiles_computing=sum(s.compute.tiles_computing for s in self.per_ipu.values() if s.compute),
            compute_why=f"IPU {c_ipu}: {c.why}" if c is not None and c.why else "",
            exchange_why="; ".join(why_x),
            user_estimate=any(s.compute.user_estimate for s in self.per_ipu.values() if s.compute),
        )


class SystemProgram:
    """Supersteps over the IPUs of a :class:`SystemDevice`."""

    def __init__(self, device: SystemDevice, steps: Sequence[SystemSuperstep], *, label: str = ""):
        self.device = device
        self.system = device.system
        self.steps = list(steps)
        self.label = label
        for st in self.steps:
            if not isinstance(st, SystemSuperstep):
                raise TypeError(f"a SystemProgram holds SystemSupersteps, got {type(st).__name__}")
            for i in st.per_ipu:
                if not 0 <= i < device.n_ipus:
                    raise ValueError(f"superstep {st.name!r} names IPU {i}, outside 0..{device.n_ipus - 1}")
        self._records: list[SuperstepRecord] | None = None

    @property
    def records(self) -> list[SuperstepRecord]:
        if self._records is None:
            self._records = [s.record(i, self.system, self.device.n_ipus) for i, s in enumerate(self.steps)]
        return self._records


@dataclass
class SystemTensor:
    """The same tensor (shape, dtype, tile mapping) on several IPUs: ``parts[ipu]``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    mapping: TileMapping
    parts: dict[int, TileTensor]

    @property
    def ipus(self) -> list[int]:
        return sorted(self.parts)

    def on(self, ipu: int) -> TileTensor:
        if ipu not in self.parts:
            raise KeyError(f"tensor {self.name!r} has no part on IPU {ipu} (it lives on {self.ipus})")
        return self.parts[ipu]


class SystemDevice:
    """The first ``n_ipus`` IPUs of a :class:`System`, each a :class:`~ipukern.Device`.

    Parameters
    ----------
    system : System or str
    n_ipus : int, optional
        IPUs used (default: all of the system).
    comm : mpi4py communicator, optional
        Run across MPI ranks: rank ``r`` of ``size`` holds the IPUs ``i`` with
        ``i * size // n_ipus == r`` (contiguous blocks). Every rank builds the same
        programs; only the owner of an IPU holds its bytes.
    allow_overflow : bool
        Passed to every IPU's :class:`~ipukern.Device`.
    """

    def __init__(self, system: System | str, n_ipus: int | None = None, *, comm: Any = None,
                 allow_overflow: bool = False):
        self.system = get_system(system)
        n = self.system.n_ipus if n_ipus is None else n_ipus
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= self.system.n_ipus:
            raise SystemConfigError(f"{self.system.name} has {self.system.n_ipus} IPUs; cannot use {n!r}")
        self.n_ipus = n
        self.devices = [Device(self.system.chip, allow_overflow=allow_overflow) for _ in range(n)]
        #: ipu -> (offsets, bytes per tile) of the shared receive area (see ``scratch``)
        self._scratch: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.comm = comm
        if comm is not None:
            size, rank = comm.Get_size(), comm.Get_rank()
            if size > n:
                raise SystemConfigError(f"{size} MPI ranks but only {n} IPUs: give every rank an IPU")
            self.owner = np.arange(n) * size // n
            self.rank = rank
        else:
            self.owner = np.zeros(n, dtype=np.int64)
            self.rank = 0

    @property
    def local_ipus(self) -> list[int]:
        """IPUs whose bytes this process holds."""
        return [i for i in range(self.n_ipus) if self.owner[i] == self.rank]

    def is_local(self, ipu: int) -> bool:
        return bool(self.owner[ipu] == self.rank)

    # ------------------------------------------------------------------ tensors
    def add_tensor(self, name: str, shape: Sequence[int], dtype: Any, mapping: TileMapping, *,
                   ipus: Sequence[int] | None = None, category: str = "user") -> SystemTensor:
        """The same tensor on each of ``ipus`` (default all), same tile mapping everywhere."""
        ipus = list(range(self.n_ipus)) if ipus is None else [int(i) for i in ipus]
        for i in ipus:
            if not 0 <= i < self.n_ipus:
                raise SystemConfigError(f"tensor {name!r}: IPU {i} is outside 0..{self.n_ipus - 1}")
        if len(set(ipus)) != len(ipus) or not ipus:
            raise SystemConfigError(f"tensor {name!r}: IPUs must be distinct and non-empty, got {ipus}")
        parts = {i: self.devices[i].add_tensor(name, shape, dtype, mapping, category) for i in ipus}
        t0 = parts[ipus[0]]
        return SystemTensor(name, tuple(t0.shape), t0.dtype, t0.mapping, parts)

    def write(self, tensor: SystemTensor, ipu: int, values: Any) -> None:
        """Place ``values`` in IPU ``ipu``'s part (a no-op on ranks not holding that IPU)."""
        if self.is_local(ipu):
            self.devices[ipu].write(tensor.on(ipu), values)

    def read(self, tensor: SystemTensor, ipu: int) -> np.ndarray:
        """IPU ``ipu``'s part; under MPI it is broadcast from its owner, so every rank must
        call ``read`` for the same IPU (a collective; ``devices[ipu].read`` on the owner is
        the local alternative)."""
        part = tensor.on(ipu)
        if self.comm is None or self.comm.Get_size() == 1:
            return self.devices[ipu].read(part)
        owner = int(self.owner[ipu])
        out = self.devices[ipu].read(part) if self.rank == owner else np.empty(part.shape, part.dtype)
        self.comm.Bcast(out.reshape(-1).view(np.uint8), root=owner)
        return out

    def scratch(self, ipu: int, nbytes_per_tile: np.ndarray) -> np.ndarray:
        """Offsets of a receive area on IPU ``ipu`` with at least ``nbytes_per_tile[t]`` bytes
        on tile t, live only within one program's supersteps (a collective's incoming chunks).
        Every program built on this device shares it, as Poplar overlaps variables that are
        not always live, so building a collective again costs no tile memory; a larger need
        allocates a larger area (the bump allocator cannot grow one in place)."""
        need = np.asarray(nbytes_per_tile, dtype=np.int64)
        have = self._scratch.get(ipu)
        if have is None or (need > have[1]).any():
            size = need if have is None else np.maximum(need, have[1])
            have = (self.devices[ipu].alloc("collective receive area", size, "exchange"), size)
            self._scratch[ipu] = have
        return have[0]

    # ------------------------------------------------------------------ programs
    def link_exchange(self, src_ipu: Any, src_tile: Any, src_offset: Any, dst_ipu: Any,
                      dst_tile: Any, dst_offset: Any, nbytes: Any, *,
                      name: str = "link exchange") -> LinkExchange:
        return LinkExchange(self, src_ipu, src_tile, src_offset, dst_ipu, dst_tile, dst_offset,
                            nbytes, name=name)

    def program(self, steps: Sequence[SystemSuperstep], *, label: str = "") -> SystemProgram:
        return SystemProgram(self, steps, label=label)

    def run(self, program: SystemProgram, mode: str = "execute") -> Profile:
        """Run a program on every IPU; returns one :class:`~ipukern.Profile` (cycles of the
        whole system, identical in both modes and in every process)."""
        if mode not in ("execute", "estimate"):
            raise ValueError(f"mode must be 'execute' or 'estimate', got {mode!r}")
        if program.device is not self:
            raise ValueError("this program was built for another SystemDevice")
        if mode == "execute":
            n_threads = get_num_threads()
            local = self.local_ipus
            for step in program.steps:
                for i in local:
                    s = step.per_ipu.get(i)
                    if s is not None and s.compute is not None:
                        s.compute.run(self.devices[i].arena.data, n_threads)
                crosses = step.links is not None and step.links.nbytes.size > 0
                if crosses and self.comm is not None:
                    self.comm.Barrier()  # the cross-chip sync
                for i in local:
                    s = step.per_ipu.get(i)
                    if s is not None and s.exchange is not None:
                        s.exchange.run(self.devices[i].arena.data, n_threads)
                if crosses:
                    self._run_links(step.links, n_threads)
        return Profile(self.system.chip, list(program.records), label=program.label,
                       info={"system": self.system.name, "n_ipus": self.n_ipus})

    def _run_links(self, lx: LinkExchange, n_threads: int) -> None:
        if self.comm is None:
            for (s, d, _, _), tab in zip(lx.segments, lx.tables):
                tab.run(self.devices[d].arena.data, self.devices[s].arena.data, n_threads,
                        check=True)
            return
        from .mpi import run_link_exchange
        run_link_exchange(self, lx, n_threads)
