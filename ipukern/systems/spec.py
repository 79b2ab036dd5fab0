"""Multi-IPU systems as data: IPUs, the links between them, hosts and Streaming Memory.

A :class:`System` is frozen data like :class:`~ipukern.MachineSpec`: every constant has its
public source in a comment (tags as in ``shared/reference/ipu-systems.md``: S vendor
statement, L secondary source, D derived here, GAP not found -> a documented parameter).

Topology (what :meth:`System.pod` builds)
-----------------------------------------
IPUs form a *ladder* (GCL user guide: "the mesh is like a ladder where pairs of IPUs form
each rung; in a torus the ends of the ladder loop round"). Rung ``r`` holds IPUs ``2r`` and
``2r + 1``; rails join ``i`` and ``i + 2``. The link counts per IPU are those of PopLibs'
IPUModel (``lib/poplibs_test/Util.cpp``, ``addGlobalExchangeConstraints``): 4 + 2 links
across the rung (the "6 sets of PCIe Gen4 x8 between the two IPUs of a pair" of the M2000
block diagram, L), 2 up the rail, 2 down: 10 per IPU (S: GC200, 10 IPU-Links). Each link
carries 128 Gibit/s x 0.85 per direction (PopLibs IPUModel, the chip spec's
``link_bytes_per_second``). POD64 is a torus (S: POD64 datasheet, "2D-torus IPU-Link
topology"): the last rung's rails loop back to the first. Systems beyond 64 IPUs are POD64
IPU-Link domains joined by GW-Links, 2 x 100 Gbps per IPU-Machine ("east" and "west", S),
machine ``m`` of pod ``p`` to machine ``m`` of pod ``p + 1`` (a ring of pods).

Simplifications (documented, see README "Systems"): the IPU-Gateway is folded into the IPUs
it serves (east GW-Link on the machine's first IPU, west on its second); a bundle of links
between two IPUs is one pipe of the bundle's summed bandwidth; routes are minimum-hop,
ties broken toward the lower IPU id, which on a ladder crosses the rung first, as PopLibs'
IPUModel does.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._checks import check_depth, show
from ..machine import BOW, GC200, MachineSpec, get_machine

__all__ = [
    "BOW_2000",
    "BOW_POD16",
    "BOW_POD64",
    "IPU_M2000",
    "IPU_POD16",
    "IPU_POD64",
    "SYSTEM_PRESETS",
    "Link",
    "System",
    "SystemConfigError",
    "get_system",
]

#: IPUs per IPU-Machine (M2000 / Bow-2000) [S: M2000 datasheet, 4 x GC200 in 1U].
IPUS_PER_MACHINE = 4
#: IPUs in one IPU-Link domain: a POD64 (S: POD128 = 2 POD64 joined by GW-Links).
IPU_LINK_DOMAIN = 64
#: the largest pod System.pod builds: 256 POD64 domains, 64x Graphcore's largest system
#: (POD256, S: Graphcore POD256 datasheet); a bound on the link tables, not a hardware figure.
MAX_IPUS = 64 * 256
#: routes a System keeps (src, dst -> path); a cache bound, not a hardware figure
_MAX_ROUTES = 1 << 16
#: links across a rung (4 "intra-card" + 2 "cross-routing") and per rail direction, from
#: PopLibs' IPUModel [S16 poplibs_test/Util.cpp]; 6 + 2 + 2 = 10 IPU-Links per IPU [S6].
RUNG_LINKS, RAIL_LINKS = 6, 2
#: one GW-Link: 100 Gbps (S: Bow-2000 datasheet, "Switched GW-Links" doc).
GW_LINK_BYTES_PER_SECOND = 100e9 / 8
#: per-hop latency of an IPU-Link or GW-Link. GAP: no public figure. We take PopLibs'
#: IPUModel per-hop sync latency (15 ns) as the only per-hop figure Graphcore published
#: in code; a documented parameter (``System.replace(link_latency_s=...)``).
LINK_LATENCY_S = 15e-9
#: cross-chip sync: 15 ns per hop, hops = 1 + (N / 2) / 2, counted twice (there and back)
#: [S16 poplibs_test/Util.cpp setGlobalSyncLatency].
SYNC_LATENCY_PER_HOP_S = 15e-9
#: host link per host: a 2-port 100 GbE RoCE NIC (Cfg: MLPerf v1.0/v1.1 system descriptions).
HOST_BYTES_PER_SECOND = 2 * 100e9 / 8
#: one IPU <-> host synchronisation (the StreamCopyBegin/End handshake of a host exchange).
#: The only public figure: Graphcore's command-line tools document, ``gc-hostsynclatencytest``
#: (SDK 1.2.3), whose example output reports 4095 host syncs, each followed by 32 x 5 delay
#: cycles, in 1485 us in total: 1485 / 4095 = 0.363 us per sync (delay included, so an upper
#: bound). A documentation example, not a benchmark (ipu-hardware.md [S30]).
HOST_SYNC_S = 1485e-6 / 4095
#: Streaming Memory per IPU-M2000: "up to 448GB Streaming Memory" (S: Graphcore's IPU-M2000
#: launch specification, 15 July 2020: "up to 450GB Exchange-Memory", 3.6 GB In-Processor-Memory
#: plus up to 448 GB Streaming Memory; reported in the Cambrian-AI launch paper, reference [S18],
#: and ipu-systems.md; the launch's IPU-POD64 "7 TB" is 16 x 448 GB). Graphcore's later IPU-POD64
#: datasheet (docs.graphcore.ai/projects/ipu-pod64-datasheet: "up to 4.2 TBytes of system
#: memory" = 16 x (256 + 3.6) GB) implies 256 GB; each machine is its own product's figure.
STREAMING_BYTES_PER_MACHINE = 448 * 10**9
#: Streaming Memory per Bow-2000: "Up to 256GB Streaming Memory" (S: Bow-2000 datasheet,
#: docs.graphcore.ai/projects/bow-2000-datasheet, Overview).
BOW_STREAMING_BYTES_PER_MACHINE = 256 * 10**9
#: Streaming Memory bandwidth per IPU-Machine. GAP: no public figure; one DDR4-3200
#: channel (3200 MT/s x 8 B = 25.6 GB/s, D) is our documented assumption.
STREAMING_BYTES_PER_SECOND = 25.6e9


class SystemConfigError(ValueError):
    """An invalid system description or a request the system cannot hold."""


@dataclass(frozen=True)
class Link:
    """A full-duplex bundle of links between IPUs ``a`` and ``b`` (``a < b``).

    ``bytes_per_second`` is the bundle's rate per direction; ``kind`` is ``"ipu-link"`` or
    ``"gw-link"``.
    """

    a: int
    b: int
    kind: str
    n_lanes: int
    bytes_per_second: float
    latency_s: float

    def __post_init__(self) -> None:
        if self.kind not in ("ipu-link", "gw-link"):
            raise SystemConfigError(f"link kind must be 'ipu-link' or 'gw-link', got {self.kind!r}")
        if not (isinstance(self.a, int) and isinstance(self.b, int) and 0 <= self.a < self.b):
            raise SystemConfigError(f"link ends must be ints with 0 <= a < b, got ({self.a!r}, {self.b!r})")
        if not isinstance(self.n_lanes, int) or self.n_lanes < 1:
            raise SystemConfigError(f"link {self.a}-{self.b}: n_lanes must be a positive int")
        if not isinstance(self.bytes_per_second, (int, float)) or isinstance(self.bytes_per_second, bool):
            raise SystemConfigError(f"link {self.a}-{self.b}: bytes_per_second must be a number, "
                                    f"got {self.bytes_per_second!r}")
        if not isinstance(self.latency_s, (int, float)) or isinstance(self.latency_s, bool):
            raise SystemConfigError(f"link {self.a}-{self.b}: latency_s must be a number, "
                                    f"got {self.latency_s!r}")
        if not (self.bytes_per_second > 0 and math.isfinite(self.bytes_per_second)):
            raise SystemConfigError(f"link {self.a}-{self.b}: bandwidth must be positive")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise SystemConfigError(f"link {self.a}-{self.b}: latency must be >= 0")


def _chip(chip: Any) -> MachineSpec:
    """``chip`` (a MachineSpec or preset name) resolved; the error names the field."""
    try:
        return get_machine(chip)
    except (TypeError, ValueError) as e:
        raise SystemConfigError(f"System.chip: {e}") from None


def _positive(owner: str, name: str, v: Any, *, integer: bool = False, zero: bool = False) -> None:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float)) and math.isfinite(v)
    if not ok or isinstance(v, bool) or (v < 0 if zero else v <= 0):
        kind = "int" if integer else "number"
        raise SystemConfigError(f"{owner}.{name} must be a {'non-negative' if zero else 'positive'} "
                           f"{kind}, got {show(v)}")


@dataclass(frozen=True)
class System:
    """N IPUs of one chip type, the links between them, hosts and Streaming Memory.

    Parameters
    ----------
    name : str
    chip : MachineSpec
        The spec of every IPU.
    n_ipus : int
    links : tuple of Link
        The topology; IPUs are numbered ``0 .. n_ipus - 1`` and machine ``m`` holds IPUs
        ``4m .. 4m + 3``.
    n_hosts : int
        Host servers; ``host_bytes_per_second`` is each host's link rate.
    streaming_bytes_per_machine, streaming_bytes_per_second : float
        Streaming Memory capacity and bandwidth of each IPU-Machine.
    sync_latency_per_hop_s : float
        Cross-chip sync cost per hop (see :meth:`sync_cycles`).
    host_sync_s : float
        One IPU <-> host synchronisation (a host exchange's handshake), paid per host
        exchange on a training step's critical path.
    """

    name: str
    chip: MachineSpec
    n_ipus: int
    links: tuple[Link, ...]
    n_hosts: int = 1
    host_bytes_per_second: float = HOST_BYTES_PER_SECOND
    streaming_bytes_per_machine: float = STREAMING_BYTES_PER_MACHINE
    streaming_bytes_per_second: float = STREAMING_BYTES_PER_SECOND
    sync_latency_per_hop_s: float = SYNC_LATENCY_PER_HOP_S
    host_sync_s: float = HOST_SYNC_S
    #: IPUs per IPU-Link domain (a POD64); larger systems join domains by GW-Links and
    #: collectives become hierarchical.
    domain_ipus: int = IPU_LINK_DOMAIN
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):      # before any message repr()s a value
            if f.name != "links":               # Link objects; checked one by one below
                check_depth(getattr(self, f.name), f"System.{f.name}")
        if not isinstance(self.name, str):
            raise SystemConfigError(f"System.name must be a str, got {type(self.name).__name__}")
        if not isinstance(self.chip, MachineSpec):
            object.__setattr__(self, "chip", _chip(self.chip))
        _positive("System", "n_ipus", self.n_ipus, integer=True)
        _positive("System", "n_hosts", self.n_hosts, integer=True)
        for f in ("host_bytes_per_second", "streaming_bytes_per_machine", "streaming_bytes_per_second"):
            _positive("System", f, getattr(self, f))
        _positive("System", "sync_latency_per_hop_s", self.sync_latency_per_hop_s, zero=True)
        _positive("System", "host_sync_s", self.host_sync_s, zero=True)
        _positive("System", "domain_ipus", self.domain_ipus, integer=True)
        if isinstance(self.links, (str, bytes, Link)) or not hasattr(self.links, "__iter__"):
            raise SystemConfigError(f"System.links must be a sequence of Link, got {self.links!r}")
        links = tuple(self.links)
        seen = set()
        for ln in links:
            if not isinstance(ln, Link):
                raise SystemConfigError(f"System.links must hold Link objects, got {type(ln).__name__}")
            if ln.b >= self.n_ipus:
                raise SystemConfigError(f"link {ln.a}-{ln.b} names IPU {ln.b}, outside 0..{self.n_ipus - 1}")
            if (ln.a, ln.b) in seen:
                raise SystemConfigError(f"two links join IPUs {ln.a} and {ln.b}; give one bundle")
            seen.add((ln.a, ln.b))
        object.__setattr__(self, "links", links)
        object.__setattr__(self, "_routes", {})

    # ------------------------------------------------------------------ building
    @classmethod
    def pod(cls, n: int, chip: MachineSpec | str = GC200, *, torus: bool | None = None,
            name: str | None = None, domain_ipus: int = IPU_LINK_DOMAIN, **kw: Any) -> System:
        """A ladder of ``n`` IPUs (see module docstring); > 64 IPUs: POD64s joined by GW-Links.

        Parameters
        ----------
        n : int
            1, 2, a multiple of 4 up to 64, or a multiple of 64.
        chip : MachineSpec or str
        domain_ipus : int
            IPUs per IPU-Link domain (default 64, a POD64); smaller values build small
            multi-domain systems for tests and what-if studies.
        torus : bool, optional
            Loop the ladder's ends (default: True for 16 or more rungs, as the POD64's
            "2D-torus"; False below, e.g. a POD16 Direct Attach). Needs at least 3 rungs.
        **kw
            Other :class:`System` fields (``n_hosts``, ``streaming_bytes_per_second``, ...).
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SystemConfigError(f"a pod needs a positive int number of IPUs, got {show(n)}")
        if n > MAX_IPUS:
            raise SystemConfigError(f"a pod of {n} IPUs is beyond the {MAX_IPUS} IPUs modelled "
                                    "(the largest Graphcore system, a POD256, has 256)")
        if n > 2 and n % IPUS_PER_MACHINE:
            raise SystemConfigError(f"a pod of {n} IPUs is not whole IPU-Machines (4 IPUs each); use 1, 2 "
                               "or a multiple of 4")
        if (not isinstance(domain_ipus, int) or isinstance(domain_ipus, bool) or domain_ipus < 4
                or domain_ipus % IPUS_PER_MACHINE):
            raise SystemConfigError(f"domain_ipus must be a positive multiple of 4, got {show(domain_ipus)}")
        if n > domain_ipus and n % domain_ipus:
            raise SystemConfigError(f"beyond {domain_ipus} IPUs a system is whole IPU-Link domains joined "
                                    f"by GW-Links; {n} is not a multiple of {domain_ipus}")
        chip = _chip(chip)
        domain = min(n, domain_ipus)
        if torus is None:
            torus = domain // 2 >= 16
        if torus and domain // 2 < 3:
            raise SystemConfigError(f"a torus needs at least 3 rungs (6 IPUs); {domain} IPUs have "
                                    f"{domain // 2}")
        lane = chip.link_bytes_per_second
        links: list[Link] = []
        for base in range(0, n, domain):
            links += _ladder(base, domain, torus, lane)
        n_pods = n // domain
        if n_pods > 1:
            links += _gw_ring(n_pods, domain)
        if chip.name == BOW.name:                   # a Bow-2000's own datasheet figure
            kw.setdefault("streaming_bytes_per_machine", BOW_STREAMING_BYTES_PER_MACHINE)
        stream = kw.get("streaming_bytes_per_machine", STREAMING_BYTES_PER_MACHINE)
        stream_src = {STREAMING_BYTES_PER_MACHINE: "IPU-M2000 launch specification",
                      BOW_STREAMING_BYTES_PER_MACHINE: "Bow-2000 datasheet"}.get(stream, "given")
        sources = (("links", "PopLibs IPUModel: rung 4+2, rails 2+2 links, 128 Gibit/s x 0.85 each"),
                   ("gw-links", "2 x 100 Gbps per IPU-Machine (Bow-2000 datasheet)"),
                   ("sync", "PopLibs setGlobalSyncLatency: 15 ns/hop, hops = 1 + N/4, x2"),
                   ("link latency", "GAP: 15 ns per hop assumed (PopLibs' per-hop sync figure)"),
                   ("host sync", "0.36 us per host exchange (gc-hostsynclatencytest documentation "
                                 "example, SDK 1.2.3; not a benchmark)"),
                   ("streaming memory", f"{stream / 1e9:.0f} GB per machine ({stream_src}); "
                                        "bandwidth GAP: 25.6 GB/s"))
        return cls(name=name or f"POD{n}-{chip.name}", chip=chip, n_ipus=n, links=tuple(links),
                   domain_ipus=domain_ipus, sources=sources, **kw)

    def replace(self, **changes: Any) -> System:
        """Copy with changes; ``link_latency_s`` / ``link_bandwidth_scale`` rewrite every link."""
        links = changes.pop("links", self.links)
        if "link_latency_s" in changes:
            lat = changes.pop("link_latency_s")
            check_depth(lat, "link_latency_s")
            links = tuple(dataclasses.replace(ln, latency_s=lat) for ln in links)
        if "link_bandwidth_scale" in changes:
            s = changes.pop("link_bandwidth_scale")
            _positive("System", "link_bandwidth_scale", s)
            links = tuple(dataclasses.replace(ln, bytes_per_second=ln.bytes_per_second * s) for ln in links)
        changes.setdefault("name", self.name + "*")
        return dataclasses.replace(self, links=links, **changes)

    # ------------------------------------------------------------------ derived
    @property
    def n_machines(self) -> int:
        return max(1, -(-self.n_ipus // IPUS_PER_MACHINE))

    @property
    def streaming_bytes(self) -> float:
        """Total Streaming Memory capacity."""
        return self.streaming_bytes_per_machine * self.n_machines

    def peak_flops(self, in_dtype: str = "float16", partials_dtype: str | None = None) -> float:
        """Peak FLOP/s of all IPUs together."""
        return self.n_ipus * self.chip.peak_flops(in_dtype, partials_dtype)

    def sync_cycles(self, n_ipus: int | None = None) -> int:
        """Cross-chip sync over ``n_ipus`` IPUs (default all), in tile cycles:
        ``ceil(15 ns x clock x (1 + (N/2)/2) x 2)`` as PopLibs' IPUModel; 1 IPU -> on-chip sync."""
        n = self.n_ipus if n_ipus is None else int(n_ipus)
        if n <= 1:
            return self.chip.sync_cycles
        hops = 1 + (n // 2) // 2
        return math.ceil(self.sync_latency_per_hop_s * self.chip.clock_hz * hops * 2)

    def link(self, a: int, b: int) -> Link:
        """The link bundle joining IPUs ``a`` and ``b`` (KeyError if none)."""
        index = self.__dict__.get("_link_index")
        if index is None:           # a dict, not a scan: routes of a 16,384-IPU pod ask ~10^5 times
            index = {}
            for ln in self.links:
                index.setdefault((ln.a, ln.b), ln)
            object.__setattr__(self, "_link_index", index)
        ln = index.get((min(a, b), max(a, b)))
        if ln is None:
            raise KeyError(f"{self.name}: no link between IPU {a} and IPU {b}")
        return ln

    def neighbours(self, ipu: int) -> list[int]:
        """IPUs one link away, in increasing order."""
        return sorted({ln.b if ln.a == ipu else ln.a for ln in self.links if ipu in (ln.a, ln.b)})

    def route(self, src: int, dst: int) -> list[int]:
        """IPUs on the minimum-hop path ``src -> dst`` (inclusive); ties go to lower ids."""
        self._check_ipu(src)
        self._check_ipu(dst)
        if dst != src and dst in self._neighbour_sets()[src]:
            return [src, dst]       # the only 1-hop path; no search (ring neighbours mostly)
        key = (src, dst)
        path = self._routes.get(key)
        if path is None:
            if len(self._routes) >= _MAX_ROUTES:      # bounded: a big pod has n^2 pairs
                self._routes.clear()
            path = self._routes[key] = self._bfs(src, dst)
        return list(path)

    def _bfs(self, src: int, dst: int) -> tuple[int, ...]:
        """Breadth-first from ``src`` until ``dst`` is found (parents are final once set, so
        the path is the full search's): O(IPUs within the distance), not O(n) per source."""
        adj = self._adjacency()
        parent = {src: src}
        frontier = [src]
        while frontier and dst not in parent:
            nxt = []
            for u in frontier:
                for v in adj[u]:
                    if v not in parent:
                        parent[v] = u
                        nxt.append(v)
            frontier = nxt
        if dst not in parent:
            raise SystemConfigError(f"{self.name}: IPU {dst} is not reachable from IPU {src}")
        path = [dst]
        while path[-1] != src:
            path.append(parent[path[-1]])
        return tuple(path[::-1])

    def _neighbour_sets(self) -> list[set[int]]:
        sets = self.__dict__.get("_adj_sets")
        if sets is None:
            sets = [set(a) for a in self._adjacency()]
            object.__setattr__(self, "_adj_sets", sets)
        return sets

    def _adjacency(self) -> list[list[int]]:
        adj = self.__dict__.get("_adj")
        if adj is None:
            adj = [[] for _ in range(self.n_ipus)]
            for ln in self.links:
                adj[ln.a].append(ln.b)
                adj[ln.b].append(ln.a)
            adj = [sorted(a) for a in adj]
            object.__setattr__(self, "_adj", adj)
        return adj

    def _check_ipu(self, ipu: Any) -> None:
        if not isinstance(ipu, (int, np.integer)) or not 0 <= int(ipu) < self.n_ipus:
            raise SystemConfigError(f"{self.name}: IPU {ipu!r} is outside 0..{self.n_ipus - 1}")

    def ring(self, ipus: Any = None) -> list[int]:
        """An order of ``ipus`` (default all) in which consecutive IPUs, and the last and the
        first, are neighbours where the topology allows: up the even rail, down the odd one."""
        ipus = list(range(self.n_ipus)) if ipus is None else sorted(int(i) for i in ipus)
        for i in ipus:
            self._check_ipu(i)
        if len(set(ipus)) != len(ipus):
            raise SystemConfigError(f"{self.name}: a ring lists an IPU twice: {ipus}")
        return [i for i in ipus if i % 2 == 0] + [i for i in ipus if i % 2 == 1][::-1]

    def describe(self) -> str:
        """Multi-line summary (``ipukern info --system``)."""
        kinds: dict[tuple[str, int], int] = {}
        for ln in self.links:
            kinds[(ln.kind, ln.n_lanes)] = kinds.get((ln.kind, ln.n_lanes), 0) + 1
        lines = [(f"{self.name}: {self.n_ipus} x {self.chip.name} in {self.n_machines} machine(s), "
                 f"{self.n_hosts} host(s)"),
                 f"  peak FP16.16         {self.peak_flops('float16') / 1e15:.2f} PFLOP/s",
                 f"  tile memory          {self.n_ipus * self.chip.total_bytes / 2**30:.1f} GiB",
                 (f"  streaming memory     {self.streaming_bytes / 1e9:.0f} GB at "
                 f"{self.streaming_bytes_per_second / 1e9:.1f} GB/s per machine"),
                 f"  host links           {self.n_hosts} x {self.host_bytes_per_second / 1e9:.1f} GB/s",
                 f"  cross-chip sync      {self.sync_cycles()} cycles"]
        for (kind, lanes), count in sorted(kinds.items()):
            bw = lanes * (self.chip.link_bytes_per_second if kind == "ipu-link" else GW_LINK_BYTES_PER_SECOND)
            lines.append(f"  {kind:<8} x{lanes:<2}       {count} bundles, {bw / 1e9:.1f} GB/s per direction")
        for key, src in self.sources:
            lines.append(f"  source: {key}: {src}")
        return "\n".join(lines)


def _ladder(base: int, n: int, torus: bool, lane: float) -> list[Link]:
    out = [Link(base + i, base + i + 1, "ipu-link", RUNG_LINKS, RUNG_LINKS * lane, LINK_LATENCY_S)
           for i in range(0, n - 1, 2)]
    for i in range(n - 2):
        out.append(Link(base + i, base + i + 2, "ipu-link", RAIL_LINKS, RAIL_LINKS * lane, LINK_LATENCY_S))
    if torus:
        for side in (0, 1):
            out.append(Link(base + side, base + n - 2 + side, "ipu-link", RAIL_LINKS, RAIL_LINKS * lane,
                            LINK_LATENCY_S))
    return out


def _gw_ring(n_pods: int, domain: int) -> list[Link]:
    """East GW-Link of machine m in pod p (on its first IPU) to the west one (second IPU) of
    machine m in pod p + 1, around the ring of pods."""
    out = []
    for p in range(n_pods):
        q = (p + 1) % n_pods
        for m in range(domain // IPUS_PER_MACHINE):
            east = p * domain + IPUS_PER_MACHINE * m
            west = q * domain + IPUS_PER_MACHINE * m + 1
            a, b = min(east, west), max(east, west)
            out.append(Link(a, b, "gw-link", 1, GW_LINK_BYTES_PER_SECOND, LINK_LATENCY_S))
    return out


IPU_M2000 = System.pod(4, GC200, name="IPU-M2000")
IPU_POD16 = System.pod(16, GC200, name="IPU-POD16")      # 4 M2000, one host (Direct Attach)
#: POD64: 16 M2000, 1-4 hosts (S). 4 as the MLPerf POD64 runs had them (Cfg: the v1.0 and v1.1
#: ResNet-50 ``run_and_time.sh`` pass four hosts to ``poprun --host`` for 64 replicas and one
#: for 16; ``systems/ipu-pod64-TF1.json``: 8 host processors = 4 dual-socket EPYC 7742 hosts).
IPU_POD64 = System.pod(64, GC200, name="IPU-POD64", n_hosts=4)
BOW_2000 = System.pod(4, BOW, name="Bow-2000")
BOW_POD16 = System.pod(16, BOW, name="Bow-POD16")
BOW_POD64 = System.pod(64, BOW, name="Bow-POD64", n_hosts=4)

SYSTEM_PRESETS: dict[str, System] = {
    "M2000": IPU_M2000, "IPU_M2000": IPU_M2000, "POD16": IPU_POD16, "IPU_POD16": IPU_POD16,
    "POD64": IPU_POD64, "IPU_POD64": IPU_POD64, "BOW_2000": BOW_2000, "BOW_POD16": BOW_POD16,
    "BOW_POD64": BOW_POD64,
}


def get_system(system: System | str | None) -> System:
    """Resolve a preset name (case-insensitive, ``-`` or ``_``) or pass a System through."""
    if system is None:
        return IPU_POD16
    if isinstance(system, System):
        return system
    if isinstance(system, str):
        key = system.upper().replace("-", "_")
        if key in SYSTEM_PRESETS:
            return SYSTEM_PRESETS[key]
        raise SystemConfigError(f"unknown system {system!r}; presets are {sorted(SYSTEM_PRESETS)}")
    raise TypeError(f"system must be a System or a preset name, got {type(system).__name__}")
