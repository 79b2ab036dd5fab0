"""Per-tile memory: allocation with budgets, overflow reports, and the byte arena.

Two pieces, deliberately separate:

- :class:`TileMemory` is bookkeeping. Every simulated program (a conv plan, a user graph)
  owns one: a bump allocator per tile with a budget, recording who allocated what, in
  which category. It never touches data, so estimate mode and planning use it freely.
- :class:`Arena` is the data: one NumPy byte array of shape (n_tiles, row_bytes), owned by
  one :class:`~ipukern.core.engine.Device` and created on its first execute. Touching the pages
  once and reusing them across runs avoids paying ~4 us of page faults per 4 KiB per run.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .._checks import as_int
from .._format import fmt_bytes, fmt_num, format_table
from ..machine import MachineSpec

__all__ = ["TileMemoryError", "TileMemory", "MemoryReport", "Allocation", "Arena", "CATEGORIES"]

#: allocation categories reported per tile (a free-form category is also accepted)
CATEGORIES = ("inputs", "weights", "partials", "outputs", "exchange", "scratch", "user")
ALIGN = 8  # bytes: 64-bit loads/stores need 8-byte alignment on the tile

#: the lines of Graphcore PopVision's tile-memory report that ipukern can fill, the
#: allocation categories each gathers (a category not listed counts as a variable), and
#: where the bytes come from
POPVISION_LINES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("variables", ("inputs", "weights", "partials", "outputs", "user"),
     "the program's tensors, exact: allocated per tile by the planner or the Graph"),
    ("temporaries", ("scratch",), "scratch buffers the program allocates, exact"),
    ("exchange buffers", ("exchange",),
     "receive buffers the program allocates, exact (exchange code is not modelled)"),
    ("alignment padding", ("alignment",), "8-byte alignment of every buffer (64-bit loads)"),
    ("code, vertex state and stacks", ("reserved",),
     "MachineSpec.reserved_bytes_per_tile: no public figure per item, so one documented "
     "parameter, not split into vertex code, vertex state and stack"),
)


class TileMemoryError(MemoryError):
    """A tile's memory budget is exceeded. The message names the tile, the bytes
    requested, the bytes already used and the budget."""

    def __init__(self, message: str, *, tile: int = -1, requested: int = 0, used: int = 0,
                 budget: int = 0, n_tiles_over: int = 0):
        super().__init__(message)
        self.tile = tile
        self.requested = requested
        self.used = used
        self.budget = budget
        self.n_tiles_over = n_tiles_over


@dataclass(frozen=True)
class Allocation:
    """One named allocation over many tiles: offsets[t], nbytes[t] (0 bytes = absent)."""

    name: str
    category: str
    offsets: np.ndarray  # int64 (n_tiles,)
    nbytes: np.ndarray   # int64 (n_tiles,)

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())


def _align_up(x: np.ndarray, align: int) -> np.ndarray:
    return (x + (align - 1)) // align * align


class TileMemory:
    """Bump allocator for every tile of one machine, with a per-tile budget.

    Parameters
    ----------
    machine : MachineSpec
        Supplies ``n_tiles``, ``tile_bytes`` and ``reserved_bytes_per_tile``.
    allow_overflow : bool
        If False (default) an allocation that would exceed a tile's budget raises
        :class:`TileMemoryError` before anything is recorded. If True it is recorded
        anyway (like the vendor's IPU model, which runs out-of-memory programs so the
        user can see the memory report); :meth:`report` then lists the overflowing tiles.
        Such a program can still be estimated and executed (its arena rows grow past the
        tile size), so the numbers and the report are both available.
    """

    def __init__(self, machine: MachineSpec, *, allow_overflow: bool = False):
        self.machine = machine
        self.allow_overflow = allow_overflow
        self.budget = machine.tile_budget_bytes
        self.used = np.zeros(machine.n_tiles, dtype=np.int64)
        self.allocations: list[Allocation] = []

    @property
    def n_tiles(self) -> int:
        return self.machine.n_tiles

    def alloc(self, name: str, nbytes_per_tile, category: str = "user", *,
              align: int = ALIGN) -> np.ndarray:
        """Allocate ``nbytes_per_tile[t]`` bytes on every tile t (0 = nothing there).

        Returns the int64 byte offsets (relative to the tile's data region). Raises
        :class:`TileMemoryError` naming the first tile over budget (and how many others).
        """
        if np.ndim(nbytes_per_tile) == 0:
            # int() would turn 5.5 into 5 B and True into 1 B; 2**70 would overflow int64
            size = as_int(nbytes_per_tile, f"allocation {name!r}: size", minimum=0, maximum=2**62)
            nbytes_per_tile = np.full(self.n_tiles, size, dtype=np.int64)
        nbytes = np.asarray(nbytes_per_tile)
        if nbytes.shape != (self.n_tiles,):
            raise ValueError(f"allocation {name!r}: expected {self.n_tiles} per-tile sizes, "
                             f"got shape {nbytes.shape}")
        if not np.issubdtype(nbytes.dtype, np.integer):
            raise TypeError(f"allocation {name!r}: byte counts must be integers, got {nbytes.dtype}")
        nbytes = nbytes.astype(np.int64, copy=False)
        if (nbytes < 0).any():
            t = int(np.argmax(nbytes < 0))
            raise ValueError(f"allocation {name!r}: negative size {int(nbytes[t])} B on tile {t}")
        if align < 1 or align & (align - 1):
            raise ValueError(f"alignment must be a power of two, got {align}")
        offsets = np.where(nbytes > 0, _align_up(self.used, align), self.used)
        end = offsets + nbytes
        over = end > self.budget
        if over.any() and not self.allow_overflow:
            t = int(np.argmax(over))
            n_over = int(over.sum())
            others = f" (and {n_over - 1} other tiles)" if n_over > 1 else ""
            raise TileMemoryError(
                f"tile {t}: allocating {int(nbytes[t])} B for {name!r} ({category}) exceeds budget "
                f"({int(self.used[t])}/{self.budget} B used; tile has {self.machine.tile_bytes} B "
                f"of which {self.machine.reserved_bytes_per_tile} B are reserved){others}",
                tile=t, requested=int(nbytes[t]), used=int(self.used[t]), budget=self.budget,
                n_tiles_over=n_over)
        self.used = np.maximum(self.used, end)
        self.allocations.append(Allocation(name, category, offsets, nbytes))
        return offsets

    @property
    def high_water(self) -> int:
        """Largest number of data bytes used on any tile."""
        return int(self.used.max()) if self.used.size else 0

    def report(self) -> "MemoryReport":
        """Per-tile bytes by category, with max/mean/min and the overflowing tiles."""
        by_cat: dict[str, np.ndarray] = {}
        for a in self.allocations:
            if a.category not in by_cat:
                by_cat[a.category] = np.zeros(self.n_tiles, dtype=np.int64)
            by_cat[a.category] += a.nbytes
        reserved = np.full(self.n_tiles, self.machine.reserved_bytes_per_tile, dtype=np.int64)
        # used[] includes alignment padding; report it as its own category so rows add up
        payload = sum(by_cat.values()) if by_cat else np.zeros(self.n_tiles, dtype=np.int64)
        padding = self.used - payload
        if padding.any():
            by_cat["alignment"] = padding
        by_cat["reserved"] = reserved
        return MemoryReport(self.machine.name, self.machine.tile_bytes, by_cat)


@dataclass
class MemoryReport:
    """Per-tile memory use by category (bytes), including the reserved bytes."""

    machine: str
    tile_bytes: int
    by_category: dict[str, np.ndarray] = field(repr=False)

    @property
    def per_tile(self) -> np.ndarray:
        """Total bytes per tile (all categories, reserved included)."""
        return sum(self.by_category.values())

    @property
    def max_bytes(self) -> int:
        return int(self.per_tile.max())

    @property
    def mean_bytes(self) -> float:
        return float(self.per_tile.mean())

    @property
    def min_bytes(self) -> int:
        return int(self.per_tile.min())

    @property
    def busiest_tile(self) -> int:
        return int(np.argmax(self.per_tile))

    @property
    def overflow_tiles(self) -> np.ndarray:
        """Tiles whose total exceeds the tile's SRAM."""
        return np.flatnonzero(self.per_tile > self.tile_bytes)

    def summary(self) -> str:
        """Text table: one row per category, max / mean / min bytes per tile (grouped)."""
        tot = self.per_tile
        rows = [[cat, fmt_num(int(arr.max())), fmt_num(arr.mean()), fmt_num(int(arr.min()))]
                for cat, arr in self.by_category.items()]
        rows.append(["total", fmt_num(int(tot.max())), fmt_num(tot.mean()), fmt_num(int(tot.min())),
                     f"busiest tile {self.busiest_tile}"])
        lines = [f"memory per tile on {self.machine} ({fmt_bytes(self.tile_bytes)}/tile)",
                 format_table(["category", "max B", "mean B", "min B", ""], rows, align="lrrrl",
                              indent="  "),
                 "  as PopVision's lines (max B per tile; source):",
                 format_table(["line", "max B", "source"],
                              [[ln["line"], fmt_num(ln["max"]), ln["source"]] for ln in self.popvision()],
                              align="lrl", indent="    ")]
        over = self.overflow_tiles
        if over.size:
            lines.append(f"  OVER BUDGET on {over.size} tiles (first: tile {int(over[0])}, "
                         f"{fmt_bytes(tot[over[0]])} > {fmt_bytes(self.tile_bytes)})")
        return "\n".join(lines)

    def popvision(self) -> list[dict]:
        """The report regrouped into PopVision's lines (see ``POPVISION_LINES``): for each,
        the busiest tile's and the mean bytes, the categories it gathers and its source.
        Lines with no bytes are left out."""
        listed = {c for _, cats, _ in POPVISION_LINES for c in cats}
        out = []
        for name, cats, source in POPVISION_LINES:
            members = [c for c in self.by_category if c in cats
                       or (name == "variables" and c not in listed)]
            if not members:
                continue
            arr = sum(self.by_category[c] for c in members)
            if not arr.any():
                continue
            out.append({"line": name, "max": int(arr.max()), "mean": float(arr.mean()),
                        "categories": members, "source": source})
        return out

    def to_dict(self) -> dict:
        return {
            "machine": self.machine, "tile_bytes": self.tile_bytes,
            "max_bytes": self.max_bytes, "mean_bytes": self.mean_bytes, "min_bytes": self.min_bytes,
            "busiest_tile": self.busiest_tile,
            "overflow_tiles": [int(t) for t in self.overflow_tiles],
            "by_category": {k: {"max": int(v.max()), "mean": float(v.mean()), "min": int(v.min())}
                            for k, v in self.by_category.items()},
            "popvision": self.popvision(),
        }


class Arena:
    """The simulated memories' bytes: ``data[tile, offset]`` (uint8, C-contiguous).

    Rows are as long as the owning program's high-water mark (not the full tile), so an
    arena costs host memory only for what is used. ``np.empty`` maps pages lazily; they
    are touched once and reused by every later run.
    """

    def __init__(self, n_tiles: int, row_bytes: int):
        self.n_tiles = n_tiles
        self.row_bytes = 0
        self.data = np.empty((n_tiles, 0), dtype=np.uint8)
        self.lock = threading.RLock()
        self.ensure(row_bytes)

    def ensure(self, row_bytes: int, *, keep: bool = True) -> None:
        """Grow rows to at least ``row_bytes``, keeping the contents unless ``keep`` is
        False (an arena whose bytes no longer matter: copying them would touch every new
        page for nothing)."""
        if row_bytes > self.row_bytes:
            new_row = int(_align_up(np.int64(max(row_bytes, 64)), 64))
            if not keep:
                self.data = np.empty((self.n_tiles, 0), dtype=np.uint8)   # free it first
            data = np.empty((self.n_tiles, new_row), dtype=np.uint8)
            if self.row_bytes and keep:
                data[:, :self.row_bytes] = self.data
            self.data, self.row_bytes = data, new_row
