"""Profile: what a program cost on the simulated machine, superstep by superstep, and why.

Both run modes produce the same profile: the cycle numbers are a property of the program,
computed when it is built; ``execute`` additionally moves the bytes.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .._format import MISSING, Rest, fmt_bytes, fmt_num, format_table
from .._version import schema
from ..machine import MachineSpec
from .memory import MemoryReport
from .views import TILE_GROUP, to_trace

__all__ = ["SuperstepRecord", "Profile", "ADDITION_CATEGORIES", "TILE_GROUP", "tile_activity"]

#: cost categories ipukern adds to PopLibs' planner model, which charges neither a BSP sync
#: nor a fixed cost per exchange (reference/poplibs-planner.md §4.1-4.2)
ADDITION_CATEGORIES = ("sync", "exchange overhead")


@dataclass(frozen=True)
class SuperstepRecord:
    """Cost of one BSP superstep: compute (slowest tile) + sync + exchange (busiest tile)."""

    index: int
    name: str
    #: cost category, PopLibs-style: "exchange", "compute", "reduction", "cast", ...
    category: str
    compute_cycles: int
    sync_cycles: int
    #: exchange cycles, including ``exchange_overhead_cycles``
    exchange_cycles: int
    #: tile that set the compute time (-1: no compute)
    compute_tile: int = -1
    #: tile that set the exchange time (-1: no exchange)
    exchange_tile: int = -1
    bytes_exchanged: int = 0
    n_copies: int = 0
    tiles_computing: int = 0
    #: human-readable reasons: which vertex/method, what the busiest tile did
    compute_why: str = ""
    exchange_why: str = ""
    #: True when the compute estimate came from a user-supplied formula
    user_estimate: bool = False
    #: the fixed per-exchange cost inside ``exchange_cycles`` (ipukern's addition to PopLibs)
    exchange_overhead_cycles: int = 0
    #: tiles that send or receive bytes in this superstep's exchange
    tiles_exchanging: int = 0
    #: mean compute cycles over the tiles that compute (0.0: no compute)
    compute_mean_cycles: float = 0.0
    #: per tile group (``TILE_GROUP`` consecutive tiles, the last group may be smaller): the
    #: group's slowest compute, how many of its tiles compute, its busiest exchange (cycles)
    group_compute_cycles: tuple[int, ...] = field(default=(), repr=False)
    group_tiles_computing: tuple[int, ...] = field(default=(), repr=False)
    group_exchange_cycles: tuple[int, ...] = field(default=(), repr=False)

    @property
    def total_cycles(self) -> int:
        return self.compute_cycles + self.sync_cycles + self.exchange_cycles

    @property
    def compute_imbalance(self) -> float:
        """Slowest over mean compute among the tiles that compute (1.0 = balanced; 0.0 =
        no compute). PopVision's "tile balance" is its inverse."""
        if self.compute_mean_cycles <= 0:
            return 0.0
        return self.compute_cycles / self.compute_mean_cycles


def tile_activity(compute_tile_cycles: np.ndarray | None, exchange_tile_cycles: np.ndarray | None,
                  exchange_tiles_active: np.ndarray | None, exchange_overhead_cycles: int,
                  n_tiles: int) -> dict[str, Any]:
    """Per-tile activity of one superstep, condensed into :class:`SuperstepRecord` fields.

    Parameters
    ----------
    compute_tile_cycles : ndarray of shape (n_tiles,), optional
        Compute cycles of every tile (None: no compute set).
    exchange_tile_cycles : ndarray of shape (n_tiles,), optional
        Exchange cycles of every tile, without the fixed phase overhead (None: no exchange).
    exchange_tiles_active : ndarray of bool, shape (n_tiles,), optional
        Tiles that send or receive in the exchange.
    exchange_overhead_cycles : int
        Fixed cost of an exchange phase, added to every group that takes part.
    n_tiles : int
    """
    starts = np.arange(0, n_tiles, TILE_GROUP)
    out: dict[str, Any] = {}
    if compute_tile_cycles is not None:
        c = np.asarray(compute_tile_cycles, dtype=np.int64)
        busy = c > 0
        out["compute_mean_cycles"] = float(c[busy].mean()) if busy.any() else 0.0
        out["group_compute_cycles"] = tuple(int(v) for v in np.maximum.reduceat(c, starts))
        out["group_tiles_computing"] = tuple(int(v) for v in np.add.reduceat(busy, starts))
    if exchange_tile_cycles is not None and exchange_tiles_active is not None:
        x = np.asarray(exchange_tile_cycles, dtype=np.int64)
        active = np.asarray(exchange_tiles_active, dtype=bool)
        out["tiles_exchanging"] = int(active.sum())
        g_active = np.logical_or.reduceat(active, starts)
        g_cycles = np.maximum.reduceat(x, starts) + exchange_overhead_cycles
        out["group_exchange_cycles"] = tuple(int(v) for v in np.where(g_active, g_cycles, 0))
    return out


@dataclass
class Profile:
    """Cycle profile of one program on one machine.

    Attributes
    ----------
    supersteps : list of SuperstepRecord
    flops : int
        Useful floating-point operations of the op (conventional count, 1 MAC = 2).
    peak_flops : float
        The matching peak (e.g. AMP fp16->fp32) that ``utilisation`` is measured against.
    """

    machine: MachineSpec
    supersteps: list[SuperstepRecord]
    flops: int = 0
    peak_flops: float = 0.0
    label: str = ""
    #: extra facts about the plan (method, splits...) shown in summaries
    info: dict[str, Any] = field(default_factory=dict)
    #: the TileMemory the program was planned in; its report is built on first access
    memory_source: Any = field(default=None, repr=False)
    _memory: MemoryReport | None = field(default=None, init=False, repr=False)

    @property
    def memory(self) -> MemoryReport | None:
        """Per-tile memory report of the program (computed on first access)."""
        if self._memory is None and self.memory_source is not None:
            self._memory = self.memory_source.report()
        return self._memory

    # ------------------------------------------------------------------ totals
    @property
    def total_cycles(self) -> int:
        return sum(s.total_cycles for s in self.supersteps)

    @property
    def compute_cycles(self) -> int:
        return sum(s.compute_cycles for s in self.supersteps)

    @property
    def sync_cycles(self) -> int:
        return sum(s.sync_cycles for s in self.supersteps)

    @property
    def exchange_cycles(self) -> int:
        return sum(s.exchange_cycles for s in self.supersteps)

    @property
    def bytes_exchanged(self) -> int:
        return sum(s.bytes_exchanged for s in self.supersteps)

    @property
    def seconds(self) -> float:
        """Simulated time on the real chip at the spec's clock."""
        return self.total_cycles / self.machine.clock_hz

    @property
    def tflops(self) -> float:
        """Achieved TFLOP/s on the simulated chip (useful FLOPs / simulated seconds)."""
        s = self.seconds
        return self.flops / s / 1e12 if s > 0 else 0.0

    @property
    def utilisation(self) -> float:
        """Achieved / peak FLOP/s for the matching dtype pair (0..1)."""
        if self.peak_flops <= 0 or self.seconds <= 0:
            return 0.0
        return self.flops / self.seconds / self.peak_flops

    def by_category(self) -> dict[str, dict[str, int]]:
        """Cycles summed per category (compute / sync / exchange columns)."""
        out: dict[str, dict[str, int]] = {}
        for s in self.supersteps:
            row = out.setdefault(s.category, {"compute": 0, "sync": 0, "exchange": 0, "total": 0})
            row["compute"] += s.compute_cycles
            row["sync"] += s.sync_cycles
            row["exchange"] += s.exchange_cycles
            row["total"] += s.total_cycles
        return out

    def breakdown(self) -> dict[str, int]:
        """Cycles per cost category, PopLibs' way; the values sum to ``total_cycles``.

        Every exchange transfer (inputs, weights, partials) is "exchange", as in PopLibs'
        ``DetailedPlanCosts``; compute cycles go to their superstep's category ("compute",
        "reduction", "cast", ...). ipukern's additions are categories of their own:
        "sync" (one BSP sync per superstep) and "exchange overhead" (the fixed cost of each
        exchange phase), listed in :data:`ADDITION_CATEGORIES`.
        """
        out: dict[str, int] = {}
        for s in self.supersteps:
            if s.compute_cycles:
                out[s.category] = out.get(s.category, 0) + s.compute_cycles
            transfer = s.exchange_cycles - s.exchange_overhead_cycles
            if transfer:
                out["exchange"] = out.get("exchange", 0) + transfer
        for cat, v in (("sync", self.sync_cycles),
                       ("exchange overhead", sum(s.exchange_overhead_cycles for s in self.supersteps))):
            if v:
                out[cat] = out.get(cat, 0) + v
        return out

    @property
    def poplibs_equivalent_cycles(self) -> int:
        """Total minus ipukern's additions (sync, exchange overheads): the terms PopLibs'
        planner model also has."""
        b = self.breakdown()
        return self.total_cycles - sum(b.get(c, 0) for c in ADDITION_CATEGORIES)

    # ------------------------------------------------------------------ views
    def summary(self, *, max_rows: int = 40) -> str:
        """Readable text: totals, then one row per superstep with the reasons."""
        m = self.machine
        head = [
            f"profile {self.label + ' ' if self.label else ''}on {m.name} ({m.n_tiles} tiles @ "
            f"{m.clock_hz / 1e9:.3f} GHz)",
            f"  total {self.total_cycles:,} cycles = {self.seconds * 1e6:.2f} us "
            f"(compute {self.compute_cycles:,}, sync {self.sync_cycles:,}, "
            f"exchange {self.exchange_cycles:,}); {self.bytes_exchanged:,} B exchanged",
        ]
        if self.flops:
            head.append(f"  {self.flops / 1e9:.3f} GFLOP -> {self.tflops:.2f} TFLOP/s, "
                        f"utilisation {100 * self.utilisation:.1f}% of "
                        f"{self.peak_flops / 1e12:.1f} TFLOP/s peak")
        b = self.breakdown()
        terms = ", ".join(f"{k} {v:,}" for k, v in b.items() if k not in ADDITION_CATEGORIES)
        adds = ", ".join(f"{k} {b[k]:,}" for k in ADDITION_CATEGORIES if k in b)
        head.append(f"  PopLibs-equivalent terms {self.poplibs_equivalent_cycles:,} ({terms})"
                    + (f" + ipukern additions: {adds}" if adds else ""))
        for k, v in self.info.items():
            if v is not None and v != "":          # an unset fact (no expandDims) is not a line
                head.append(f"  {k}: {v}")
        head += self._activity_lines()
        cells = []
        for s in self.supersteps[:max_rows]:
            why = s.compute_why or ""
            if s.exchange_why:
                why = f"{why}; {s.exchange_why}" if why else s.exchange_why
            mark = " [user estimate]" if s.user_estimate else ""
            cells.append([s.index, s.category, fmt_num(s.compute_cycles), s.sync_cycles,
                          fmt_num(s.exchange_cycles), fmt_bytes(s.bytes_exchanged), s.tiles_computing,
                          fmt_num(s.compute_imbalance, 2) if s.compute_imbalance else MISSING,
                          Rest(f"{s.name}{mark}" + (f": {why}" if why else ""))])
        rows = format_table(["#", "category", "compute", "sync", "exchange", "bytes", "busy", "imbal",
                             "step / why"], cells, align="rlrrrrrrl", indent="  ").split("\n")
        if len(self.supersteps) > max_rows:
            rows.append(f"  ... {len(self.supersteps) - max_rows} more supersteps")
        tail = []
        if self.memory is not None:
            tail = [self.memory.summary()]
        return "\n".join(head + rows + tail)

    def _activity_lines(self) -> list[str]:
        """Tiles busy/idle and the compute imbalance, weighted by compute time."""
        steps = [s for s in self.supersteps if s.compute_cycles]
        if not steps:
            return []
        n = self.machine.n_tiles
        busy = [s.tiles_computing for s in steps]
        cyc = sum(s.compute_cycles for s in steps)
        # share of tile-cycles spent computing while a compute phase lasts (1.0: no idle tile)
        work = sum(s.compute_mean_cycles * s.tiles_computing for s in steps)
        return [f"  tile activity: {min(busy)}..{max(busy)} of {n} tiles compute per superstep "
                f"(busy/idle, column 'busy'); {100 * work / (cyc * n):.1f}% of tile-cycles in "
                "compute phases are busy; 'imbal' = slowest / mean computing tile"]

    def activity(self) -> list[dict[str, Any]]:
        """Per-superstep tile activity: tiles computing / idle / exchanging, mean and slowest
        compute cycles and the imbalance (slowest / mean over computing tiles)."""
        n = self.machine.n_tiles
        return [{"index": s.index, "name": s.name, "tiles_computing": s.tiles_computing,
                 "tiles_idle": n - s.tiles_computing, "tiles_exchanging": s.tiles_exchanging,
                 "compute_cycles": s.compute_cycles, "compute_mean_cycles": s.compute_mean_cycles,
                 "compute_imbalance": s.compute_imbalance} for s in self.supersteps]

    def __repr__(self) -> str:
        label = f" {self.label!r}" if self.label else ""
        rate = f", {self.tflops:.1f} TFLOP/s" if self.flops else ""
        return (f"<Profile{label} on {self.machine.name}: {self.total_cycles:,} cycles "
                f"({self.seconds * 1e6:.2f} us), {len(self.supersteps)} supersteps{rate}>")

    def _repr_html_(self) -> str:
        """Notebook view: totals and the superstep table."""
        from html import escape
        head = escape(repr(self)[1:-1])
        cols = ("#", "name", "category", "compute", "sync", "exchange", "bytes", "busy", "imbal",
                "why")
        rows = []
        for s in self.supersteps:
            why = "; ".join(w for w in (s.compute_why, s.exchange_why) if w)
            cells = (s.index, s.name + (" [user estimate]" if s.user_estimate else ""), s.category,
                     f"{s.compute_cycles:,}", s.sync_cycles, f"{s.exchange_cycles:,}",
                     f"{s.bytes_exchanged:,}", s.tiles_computing,
                     f"{s.compute_imbalance:.2f}" if s.compute_imbalance else "-", why)
            rows.append("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
        return (f"<div><b>{head}</b><table><thead><tr>"
                + "".join(f"<th>{c}</th>" for c in cols) + "</tr></thead><tbody>"
                + "".join(rows) + "</tbody></table></div>")

    def to_pandas(self) -> Any:
        """One row per superstep (the fields of :class:`SuperstepRecord` and the imbalance),
        indexed by superstep. Needs pandas (``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Profile.to_pandas needs pandas: pip install pandas") from e
        skip = ("group_compute_cycles", "group_tiles_computing", "group_exchange_cycles")
        rows = [{**{k: v for k, v in asdict(s).items() if k not in skip},
                 "total_cycles": s.total_cycles, "compute_imbalance": s.compute_imbalance}
                for s in self.supersteps]
        return pd.DataFrame(rows).set_index("index")

    def to_trace(self, path: Any = None) -> dict[str, Any]:
        """Chrome / Perfetto trace-event JSON of every superstep (opens in ui.perfetto.dev).

        See :func:`ipukern.core.views.to_trace`; writes ``path`` when given.
        """
        return to_trace(self, path)

    def __str__(self) -> str:
        return self.summary()

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dictionary (totals, per-superstep records, memory)."""
        return {
            **schema("profile"),
            "label": self.label,
            "machine": self.machine.name,
            "clock_hz": self.machine.clock_hz,
            "n_tiles": self.machine.n_tiles,
            "total_cycles": self.total_cycles,
            "compute_cycles": self.compute_cycles,
            "sync_cycles": self.sync_cycles,
            "exchange_cycles": self.exchange_cycles,
            "bytes_exchanged": self.bytes_exchanged,
            "seconds": self.seconds,
            "flops": self.flops,
            "tflops": self.tflops,
            "peak_flops": self.peak_flops,
            "utilisation": self.utilisation,
            "by_category": self.by_category(),
            "breakdown": self.breakdown(),
            "poplibs_equivalent_cycles": self.poplibs_equivalent_cycles,
            "info": {k: (v if isinstance(v, (int, float, str, bool, type(None), list, dict)) else str(v))
                     for k, v in self.info.items()},
            "supersteps": [dict(asdict(s), total_cycles=s.total_cycles) for s in self.supersteps],
            "memory": self.memory.to_dict() if self.memory is not None else None,
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)
