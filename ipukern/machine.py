"""Machine specifications: every hardware constant the simulator uses, with its source.

A :class:`MachineSpec` is frozen data. The cost model, the planner and the engine read
constants only from here, so a what-if study is one line::

    slow = ipukern.GC200.with_datasheet_exchange()   # the 8 TB/s IPU-Exchange figure [S6]

Source tags used in the comments below (full list in ``../shared/reference/ipu-hardware.md``
and in README "Sources"):

- [S1] J. Hanlon, "New chips for machine intelligence" (2019): GC2 1216 tiles, 45 TB/s.
- [S4] Z. Jia et al., "Dissecting the Graphcore IPU Architecture via Microbenchmarking",
  arXiv:1912.03413: 16 B/cycle loads, 8 B/cycle stores, 1.6 GHz GC2, FP16.32 124.5 TFLOPS.
- [S6] Graphcore GC200 product page: 1472 tiles, 624 KiB/tile, 47.5 TB/s memory bandwidth,
  IPU-Exchange 8 TB/s, 10 IPU-Links 320 GB/s, 250 TFLOPS FP16.16.
- [S7] IPU-M2000 datasheet: 4 x GC200 at 1.325 GHz, 1 PFLOPS FP16.16, 0.25 PFLOPS FP32.
- [S8] Bow-2000 datasheet: 1.85 GHz, 1.394 PFLOPS FP16.16, 0.349 PFLOPS FP32.
- [S11] Graphcore Vertex Programming Guide 4.2: 6 worker contexts + supervisor per tile.
- [S14] Graphcore JAX-on-IPU backend test: asserts 638,976 bytes per tile, 6 workers.
- [S16] graphcore/poplibs (mk2-main): PerformanceEstimation.hpp (AMP conv units, vertex
  cycle formulas), ExchangeEstimator.cpp (4 B/cycle/tile, 2 tiles per shared exchange
  bus), CTC-loss planner (90 cycles per sync, 100 cycles per exchange), poplibs_test/Util.cpp
  (128 Gibit/s x 0.85 per IPU-Link).

**Machine files** (TOML) describe a :class:`~ipukern.machine.MachineSpec` variant::

    # variant.toml: a GC200 with the datasheet exchange and a faster sync
    base = "GC200"                  # start from a preset (optional; default: every field given)
    name = "GC200-fastsync"
    exchange_bandwidth = 8e12       # derived keywords of MachineSpec.replace are accepted
    sync_cycles = 45

    [amp_conv_units]                # optional: "input->partials" = conv units
    "float16->float32" = 8

    [sources]                       # where each changed constant comes from
    sync_cycles = "what-if: half of PopLibs' 90 cycles"

A changed field without an entry in ``[sources]`` is recorded as coming from the file, so
``ipukern info`` and ``describe()`` never show an unsourced constant as if it were the
preset's. :func:`machine_to_toml` writes every field back (a complete file needs no base).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 reads TOML with the tomli backport (a dependency there)
    import tomli as tomllib

from ._checks import check_depth, show
from ._format import fmt_bytes
from ._files import read_input_text
from .dtypes import DTYPES, canonical_dtype

__all__ = ["MachineSpec", "GC2", "GC200", "BOW", "PRESETS", "get_machine",
           "DATASHEET_EXCHANGE", "with_exchange_bandwidth", "machine_from_toml", "machine_to_toml"]

#: Graphcore's published IPU-Exchange bandwidth of the GC200, 8 TB/s aggregate [S6]. It is
#: an aggregate figure: applied to a machine it becomes 8e12 / (n_tiles x clock) B/cycle per
#: tile (4.10 on the GC200). PopLibs' ExchangeEstimator rounds the same rate to 4 B/cycle
#: [S16]; the datasheet figure is the one ipukern uses, in every spelling:
#: ``spec.with_datasheet_exchange()``, ``with_exchange_bandwidth(spec, DATASHEET_EXCHANGE)``
#: and ``spec.replace(exchange_bandwidth=8e12)`` give the same rate.
DATASHEET_EXCHANGE = 8e12


def _frozen_map(d: Mapping[tuple[str, str], int]) -> tuple[tuple[str, str, int], ...]:
    return tuple(sorted((a, b, v) for (a, b), v in d.items()))


#: exchange rates above this (1 MiB per cycle per tile; the GC200 does ~24) would overflow
#: the integer cycle arithmetic
_MAX_EXCHANGE_BYTES_PER_CYCLE = 2**20
#: and below this (one byte per ~million cycles per tile) the rate's fixed-point scale
#: (``core.cost.exchange_rate``) overflows; no fabric of interest is that slow
_MIN_EXCHANGE_BYTES_PER_CYCLE = 2**-20
_INT_FIELDS = ("n_tiles", "tile_bytes", "n_workers", "vector_width_bits", "load_bytes_per_cycle",
               "store_bytes_per_cycle", "coeff_load_bytes_per_cycle", "tiles_per_exchange_bus",
               "memcpy_bytes_per_cycle", "sync_cycles", "exchange_overhead_cycles",
               "reserved_bytes_per_tile", "n_links")
_NON_NEGATIVE = ("sync_cycles", "exchange_overhead_cycles", "reserved_bytes_per_tile", "n_links")
#: upper bounds (every other int field: 2**32) that keep per-tile arrays, per-worker loops and
#: cycle arithmetic reasonable (a real IPU has 1472 tiles and 6 workers; multi-IPU systems
#: stay far below 2**24 tiles)
_INT_LIMITS = {"n_tiles": 2**24, "tile_bytes": 2**32, "n_workers": 64, "vector_width_bits": 4096,
               "tiles_per_exchange_bus": 64}


def _check_int(fname: str, v: Any, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        want = "a positive int" if low == 1 else "an int >= 0"
        raise ValueError(f"MachineSpec.{fname} must be {want}, got {show(v)}")
    return int(v)


def _check_float(fname: str, v: Any, *, positive: bool) -> None:
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
          and (v > 0 if positive else v >= 0))
    if not ok:
        want = "a finite number > 0" if positive else "a finite number >= 0"
        raise ValueError(f"MachineSpec.{fname} must be {want}, got {show(v)}")


def _derived_number(fname: str, v: Any) -> float:
    """A derived keyword of :meth:`MachineSpec.replace` (float() would accept "8e12" and
    True, and name no field on None)."""
    _check_float(fname, v, positive=True)
    return float(v)


@dataclass(frozen=True)
class MachineSpec:
    """One simulated IPU: its tiles, memories, clock, arithmetic units and fabric.

    All cycle counts are tile clock cycles. Per-tile rates are "per tile per cycle".
    Use :meth:`replace` to derive a variant; the derived-quantity keywords
    ``exchange_bandwidth`` (aggregate B/s) and ``clock_ghz`` are accepted there too.
    """

    name: str
    #: "Mk1" or "Mk2": selects which vertex variants exist (e.g. 16-unit AMP, 4-chain SLIC).
    generation: str
    n_tiles: int
    #: SRAM per tile in bytes (code, data and stacks share it; there is no separate
    #: instruction memory [S11]).
    tile_bytes: int
    clock_hz: float
    #: hardware worker contexts per tile (barrel-scheduled) [S11][S14].
    n_workers: int = 6
    #: AMP "conv units" (output channels per AMP pass) by (input dtype, partials dtype)
    #: [S16 PerformanceEstimation.hpp / ConvVertexType.cpp]. MACs/cycle follow from
    #: units x amp_in_chans / amp_cycles_per_position, see :meth:`amp_macs_per_cycle`.
    amp_conv_units: tuple[tuple[str, str, int], ...] = ()
    #: vector (non-AMP) data path in bits: 2 x fp32 or 4 x fp16 per cycle [S16 getDataPathWidth].
    vector_width_bits: int = 64
    #: local memory load / store bytes per cycle per tile (ld128 / st64) [S4].
    load_bytes_per_cycle: int = 16
    store_bytes_per_cycle: int = 8
    #: AMP weight (coefficient) load rate; PopLibs plans with half of it by default
    #: (use128BitConvUnitLoad = false) [S16].
    coeff_load_bytes_per_cycle: int = 16
    #: bytes per cycle a tile can receive (and send) on the exchange fabric.
    exchange_bytes_per_cycle: float = 4.0
    #: tiles sharing one exchange bus ("super-tile"): a pair receiving identical data
    #: receives it at twice the rate [S16 ExchangeEstimator.cpp asserts 2].
    tiles_per_exchange_bus: int = 2
    #: on-chip BSP sync latency in cycles. Poplar's getMaxIPUSyncDelay() is closed source;
    #: PopLibs' CTC-loss planner charges 90 cycles per sync [S16]. A documented assumption.
    sync_cycles: int = 90
    #: fixed cost of starting an exchange phase (exchange code, pipeline fill) [S16 CTC
    #: planner: 100 cycles per exchange]. Charged once per non-empty exchange.
    exchange_overhead_cycles: int = 100
    #: bytes per tile kept back for code, vertex state, stacks and control code. No public
    #: figure exists (PopLibs plans temporaries to 0.6 of the tile [S16]); see README.
    reserved_bytes_per_tile: int = 48 * 1024
    #: on-tile copy rate used for rearrangement copies (IPUModel memcpyBytesPerCycle;
    #: PopLibs suggests 64-bit = 8 B/cycle) [S16].
    memcpy_bytes_per_cycle: int = 8
    #: IPU-Links: count and effective bytes/s per direction (128 Gibit/s x 0.85) [S6][S16].
    n_links: int = 10
    link_bytes_per_second: float = 128 * 2**30 / 8 * 0.85
    #: host link (PCIe Gen4 x16) bytes/s [S6].
    host_bytes_per_second: float = 64e9
    #: free-form provenance strings shown by ``ipukern info``.
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):      # before any message repr()s a value
            check_depth(getattr(self, f.name), f"MachineSpec.{f.name}")
        if not isinstance(self.name, str):
            raise ValueError(f"MachineSpec.name must be a str, got {self.name!r}")
        if self.generation not in ("Mk1", "Mk2"):
            raise ValueError(f"generation must be 'Mk1' or 'Mk2', got {self.generation!r}")
        for fname in _INT_FIELDS:
            low = 0 if fname in _NON_NEGATIVE else 1
            object.__setattr__(self, fname, _check_int(fname, getattr(self, fname), low))
        for fname in _INT_FIELDS:
            hi = _INT_LIMITS.get(fname, 2**32)
            if getattr(self, fname) > hi:
                raise ValueError(f"MachineSpec.{fname} must be at most {hi}, got {getattr(self, fname)!r}")
        if self.vector_width_bits % 32:
            raise ValueError("MachineSpec.vector_width_bits must be a multiple of 32 (whole fp32 "
                             f"lanes), got {self.vector_width_bits}")
        _check_float("clock_hz", self.clock_hz, positive=True)
        _check_float("exchange_bytes_per_cycle", self.exchange_bytes_per_cycle, positive=True)
        if self.exchange_bytes_per_cycle > _MAX_EXCHANGE_BYTES_PER_CYCLE:
            raise ValueError(f"MachineSpec.exchange_bytes_per_cycle must be at most "
                             f"{_MAX_EXCHANGE_BYTES_PER_CYCLE} B/cycle/tile, got "
                             f"{self.exchange_bytes_per_cycle!r}")
        if self.exchange_bytes_per_cycle < _MIN_EXCHANGE_BYTES_PER_CYCLE:
            raise ValueError(f"MachineSpec.exchange_bytes_per_cycle must be at least "
                             f"{_MIN_EXCHANGE_BYTES_PER_CYCLE} B/cycle/tile, got "
                             f"{self.exchange_bytes_per_cycle!r}")
        _check_float("link_bytes_per_second", self.link_bytes_per_second, positive=False)
        _check_float("host_bytes_per_second", self.host_bytes_per_second, positive=True)
        if self.reserved_bytes_per_tile >= self.tile_bytes:
            raise ValueError(f"reserved_bytes_per_tile ({self.reserved_bytes_per_tile}) must be "
                             f"below tile_bytes ({self.tile_bytes})")
        if isinstance(self.amp_conv_units, Mapping):  # accept a dict, store a hashable tuple
            object.__setattr__(self, "amp_conv_units", _frozen_map(self.amp_conv_units))
        if not isinstance(self.amp_conv_units, (tuple, list)):
            raise ValueError("MachineSpec.amp_conv_units must be a dict of (input dtype, partials dtype) "
                             f"-> units or a tuple of (input, partials, units), got {self.amp_conv_units!r}")
        object.__setattr__(self, "amp_conv_units", tuple(self.amp_conv_units))
        for entry in self.amp_conv_units:
            if (not isinstance(entry, (tuple, list)) or len(entry) != 3
                    or entry[0] not in DTYPES or entry[1] not in DTYPES
                    or isinstance(entry[2], bool) or not isinstance(entry[2], int) or entry[2] < 1):
                raise ValueError("MachineSpec.amp_conv_units entries must be (input dtype, partials "
                                 f"dtype, units >= 1) with float16/float32 names, got {entry!r}")

    # ------------------------------------------------------------------ derivation
    def replace(self, **changes: Any) -> "MachineSpec":
        """Copy with changes. Besides the fields, accepts

        - ``exchange_bandwidth``: aggregate on-chip exchange bandwidth in bytes/s, converted
          to ``exchange_bytes_per_cycle`` at this spec's (or the new) clock;
        - ``clock_ghz``: the clock in GHz.
        """
        if "clock_ghz" in changes:
            changes["clock_hz"] = _derived_number("clock_ghz", changes.pop("clock_ghz")) * 1e9
        if "exchange_bandwidth" in changes:
            bw = _derived_number("exchange_bandwidth", changes.pop("exchange_bandwidth"))
            n_tiles = changes.get("n_tiles", self.n_tiles)
            clock = changes.get("clock_hz", self.clock_hz)
            changes["exchange_bytes_per_cycle"] = bw / (n_tiles * clock)
        if "name" not in changes:
            changes["name"] = self.name + "*"
        return dataclasses.replace(self, **changes)

    def with_datasheet_exchange(self) -> "MachineSpec":
        """This machine with the published IPU-Exchange bandwidth, :data:`DATASHEET_EXCHANGE`
        (8 TB/s aggregate on the GC200, 4.10 B/cycle/tile), instead of the default
        47.5 TB/s local-SRAM figure; named e.g. ``"GC200-xch8TB"``. Same as
        ``with_exchange_bandwidth(self, DATASHEET_EXCHANGE)``."""
        return with_exchange_bandwidth(self, DATASHEET_EXCHANGE)

    @classmethod
    def from_toml(cls, path: Any) -> "MachineSpec":
        """A spec from a machine file (TOML; format in :mod:`ipukern.machine`)."""
        return machine_from_toml(path)

    def to_toml(self, path: Any = None) -> str:
        """This spec as a complete machine file (written to ``path`` when given)."""
        return machine_to_toml(self, path)

    # ------------------------------------------------------------------ AMP rates
    def amp_units(self, in_dtype: str, partials_dtype: str) -> int:
        """AMP conv units (outputs per pass) for these dtypes; 0 if the AMP has no such mode."""
        a, b = canonical_dtype(in_dtype), canonical_dtype(partials_dtype)
        for x, y, u in self.amp_conv_units:
            if x == a and y == b:
                return u
        return 0

    @staticmethod
    def amp_in_chans(in_dtype: str) -> int:
        """Input channels one AMP pass consumes per output position: 16 half / 8 float
        (weights per conv unit = pipeline depth 4 x 64-bit load) [S16]."""
        return 16 if canonical_dtype(in_dtype) == "float16" else 8

    @staticmethod
    def amp_cycles_per_position(in_dtype: str) -> int:
        """Tile cycles per output position per AMP pass: 4 half / 8 float [S16 core loop]."""
        return 4 if canonical_dtype(in_dtype) == "float16" else 8

    def amp_macs_per_cycle(self, in_dtype: str, partials_dtype: str) -> int:
        """Peak AMP MACs per cycle per tile (Mk2: fp16->fp16 64, fp16->fp32 32, fp32 16)."""
        units = self.amp_units(in_dtype, partials_dtype)
        return units * self.amp_in_chans(in_dtype) // self.amp_cycles_per_position(in_dtype)

    def vector_elems(self, dtype: str) -> int:
        """Elements per vector-unit cycle (64-bit path: 4 fp16 or 2 fp32)."""
        return self.vector_width_bits // (8 * DTYPES[canonical_dtype(dtype)].itemsize)

    # ------------------------------------------------------------------ derived figures
    def peak_flops(self, in_dtype: str = "float16", partials_dtype: str | None = None) -> float:
        """Peak FLOP/s of the AMP units for this dtype pair (1 MAC = 2 FLOP)."""
        if partials_dtype is None:
            partials_dtype = in_dtype
        return 2.0 * self.amp_macs_per_cycle(in_dtype, partials_dtype) * self.n_tiles * self.clock_hz

    @property
    def tile_budget_bytes(self) -> int:
        """Bytes per tile available to data once code/stacks are reserved."""
        return self.tile_bytes - self.reserved_bytes_per_tile

    @property
    def total_bytes(self) -> int:
        """Total on-chip SRAM in bytes."""
        return self.n_tiles * self.tile_bytes

    @property
    def exchange_bandwidth(self) -> float:
        """Aggregate on-chip exchange bandwidth in bytes/s."""
        return self.exchange_bytes_per_cycle * self.n_tiles * self.clock_hz

    @property
    def local_memory_bandwidth(self) -> float:
        """Aggregate local SRAM bandwidth (load + store) in bytes/s: the "47.5 TB/s" figure."""
        return (self.load_bytes_per_cycle + self.store_bytes_per_cycle) * self.n_tiles * self.clock_hz

    def seconds(self, cycles: int) -> float:
        """Cycles to seconds at this clock."""
        return cycles / self.clock_hz

    def describe(self) -> str:
        """Multi-line human-readable summary (used by ``ipukern info``)."""
        lines = [
            f"{self.name} ({self.generation})",
            f"  tiles                {self.n_tiles}",
            f"  bytes per tile       {fmt_bytes(self.tile_bytes)} ({self.tile_bytes / 1024:.0f} KiB), "
            f"{fmt_bytes(self.reserved_bytes_per_tile)} reserved",
            f"  total SRAM           {self.total_bytes / 2**20:.1f} MiB",
            f"  clock                {self.clock_hz / 1e9:.3f} GHz",
            f"  workers per tile     {self.n_workers}",
        ]
        for a, b, u in self.amp_conv_units:
            lines.append(f"  AMP {a}->{b:<8}  {self.amp_macs_per_cycle(a, b)} MAC/cycle/tile "
                         f"({u} units), peak {self.peak_flops(a, b) / 1e12:.1f} TFLOP/s")
        lines += [
            f"  vector path          {self.vector_width_bits} bit",
            f"  load / store         {self.load_bytes_per_cycle} / {self.store_bytes_per_cycle} B/cycle/tile "
            f"({self.local_memory_bandwidth / 1e12:.1f} TB/s aggregate)",
            f"  exchange             {self.exchange_bytes_per_cycle:.2f} B/cycle/tile "
            f"({self.exchange_bandwidth / 1e12:.1f} TB/s aggregate), "
            f"{self.tiles_per_exchange_bus} tiles per bus",
            f"  sync / exch overhead {self.sync_cycles} / {self.exchange_overhead_cycles} cycles",
            f"  IPU-Links            {self.n_links} x {self.link_bytes_per_second / 1e9:.1f} GB/s",
        ]
        for key, src in self.sources:
            lines.append(f"  source: {key}: {src}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- presets
# The project's default models on-chip exchange at 47.5 TB/s aggregate on the GC200. That
# figure is Graphcore's In-Processor-Memory bandwidth [S6] (1472 x 24 B/cycle x 1.345 GHz);
# the published IPU-Exchange rate is 8 TB/s (DATASHEET_EXCHANGE, 4.10 B/cycle/tile). We
# keep the 47.5 TB/s default and make the datasheet figure one call away:
# ``GC200.with_datasheet_exchange()``.
_DEFAULT_EXCHANGE_BPC = 47.5e12 / (1472 * 1.325e9)  # = 24.35 B/cycle/tile

GC2 = MachineSpec(
    name="GC2",
    generation="Mk1",
    n_tiles=1216,                       # [S1][S4]
    tile_bytes=256 * 1024,              # [S1] 304 MiB total
    clock_hz=1.6e9,                     # [S4][S10] nominal (C2 cards may run at 1.3 GHz)
    # Mk1: 8 conv units for every pair -> 32 / 32 / 8 MAC/cycle [S4][S16]
    amp_conv_units={("float16", "float16"): 8, ("float16", "float32"): 8,
                    ("float32", "float32"): 8},
    # the default's figure per tile-cycle, applied to Mk1's 45 TB/s headline [S1]
    exchange_bytes_per_cycle=45e12 / (1216 * 1.6e9),
    reserved_bytes_per_tile=32 * 1024,
    sources=(("tiles/memory", "Hanlon 2019; Jia et al. arXiv:1912.03413"),
             ("AMP", "PopLibs PerformanceEstimation.hpp: 8 conv units on ipu1")),
)

GC200 = MachineSpec(
    name="GC200",
    generation="Mk2",
    n_tiles=1472,                       # [S6][S14]
    tile_bytes=638_976,                 # 624 KiB [S6][S14]
    clock_hz=1.325e9,                   # M2000 datasheet [S7]
    # Mk2: half->half 16 units (64 MAC/c, 250 TFLOPS FP16.16 [S6]); half->float capped at
    # 8 units by the fp32 store width (32 MAC/c) [S16]; float->float 16 units (16 MAC/c,
    # 62.5 TFLOPS FP32 [S7])
    amp_conv_units={("float16", "float16"): 16, ("float16", "float32"): 8,
                    ("float32", "float32"): 16},
    exchange_bytes_per_cycle=_DEFAULT_EXCHANGE_BPC,
    sources=(("tiles/memory", "Graphcore GC200 product page; JAX-on-IPU test asserts 638976 B/tile"),
             ("clock", "IPU-M2000 datasheet: 1.325 GHz"),
             ("exchange", "default: 47.5 TB/s aggregate, the local-SRAM figure "
                          "(datasheet IPU-Exchange: 8 TB/s)"),
             ("AMP", "PopLibs PerformanceEstimation.hpp / ConvVertexType.cpp")),
)

BOW = GC200.replace(
    name="BOW",
    clock_hz=1.85e9,                    # Bow-2000 datasheet [S8]
    sources=(("tiles/memory", "as GC200 (same Mk2 tile)"),
             ("clock", "Bow-2000 datasheet: 1.85 GHz, 1.394 PFLOPS FP16.16 per 4 IPUs"),
             ("exchange", "the GC200 default's per-tile-cycle rate at 1.85 GHz")),
)

PRESETS: dict[str, MachineSpec] = {"GC2": GC2, "GC200": GC200, "BOW": BOW}


def get_machine(machine: "MachineSpec | str | None") -> MachineSpec:
    """Resolve a preset name (case-insensitive) or pass a spec through; None -> GC200."""
    if machine is None:
        return GC200
    if isinstance(machine, MachineSpec):
        return machine
    if isinstance(machine, str):
        key = machine.upper()
        if key in PRESETS:
            return PRESETS[key]
        raise ValueError(f"unknown machine {machine!r}; presets are {sorted(PRESETS)}")
    raise TypeError(f"machine must be a MachineSpec or a preset name, got {type(machine).__name__}")


def with_exchange_bandwidth(machine: MachineSpec | str, bandwidth: float) -> MachineSpec:
    """``machine`` with an aggregate exchange bandwidth in B/s, named for it.

    The machine is returned unchanged (same name) when it already has that bandwidth, so
    the default GC200 stays ``"GC200"``; otherwise the name gets a suffix such as
    ``"GC200-xch8TB"`` (8 TB/s is :data:`DATASHEET_EXCHANGE`, the IPU-Exchange figure).

    Raises
    ------
    ValueError
        If ``bandwidth`` is not a positive finite number.
    """
    spec = get_machine(machine)
    bandwidth = float(bandwidth)
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"exchange bandwidth must be a positive number of B/s, got {bandwidth!r}")
    if math.isclose(spec.exchange_bandwidth, bandwidth, rel_tol=1e-6):
        return spec
    return spec.replace(exchange_bandwidth=bandwidth,
                        name=f"{spec.name}-xch{bandwidth / 1e12:g}TB")


# =========================================================================== machine files
_DERIVED = ("exchange_bandwidth", "clock_ghz")
_SPECIAL = ("base", "amp_conv_units", "sources")


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(MachineSpec)}


#: the largest machine file read (bytes; a complete one is about 3 KiB)
MAX_MACHINE_FILE_BYTES = 1024 * 1024


def machine_from_toml(path: str | Path) -> MachineSpec:
    """Read a machine file (see the module docstring).

    Raises
    ------
    ValueError
        Not TOML, an unknown key (the message lists the valid ones), a value of the wrong
        type, or a spec that fails :class:`MachineSpec`'s own checks; the message names
        the file.
        Also a path that is not a regular file (a device, a FIFO) or a file over
        :data:`MAX_MACHINE_FILE_BYTES`, refused before anything is read.
    OSError
        The file cannot be read.
    """
    path = Path(path)
    try:
        doc = tomllib.loads(read_input_text(path, "machine file", MAX_MACHINE_FILE_BYTES))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"machine file {path}: not valid TOML ({e})") from None
    except RecursionError:      # tomllib parses nested arrays and tables recursively
        raise ValueError(f"machine file {path}: arrays or tables nested too deeply") from None
    check_depth(doc, f"machine file {path}")
    fields = _fields()
    settable = [n for n in fields if n not in ("amp_conv_units", "sources")]
    unknown = sorted(set(doc) - set(settable) - set(_DERIVED) - set(_SPECIAL))
    if unknown:
        raise ValueError(f"machine file {path}: unknown key(s) {', '.join(unknown)}; valid keys "
                         f"are {', '.join(list(_SPECIAL) + list(_DERIVED) + settable)}")
    changes: dict[str, Any] = {k: v for k, v in doc.items() if k not in _SPECIAL}
    for k, v in changes.items():
        if isinstance(v, (dict, list)) or isinstance(v, bool):
            raise ValueError(f"machine file {path}: {k} must be a number or string, got {v!r}")
    if "amp_conv_units" in doc:
        amp = doc["amp_conv_units"]
        if not isinstance(amp, dict):
            raise ValueError(f"machine file {path}: [amp_conv_units] must be a table of "
                             '"input->partials" = units')
        units = []
        for key, u in amp.items():
            a, sep, b = key.partition("->")
            if not sep or not isinstance(u, int) or isinstance(u, bool) or u < 0:
                raise ValueError(f"machine file {path}: amp_conv_units entry {key!r} = {u!r}: "
                                 'expected "float16->float32" = <non-negative int>')
            units.append((a.strip(), b.strip(), u))
        changes["amp_conv_units"] = tuple(units)
    sources = doc.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise ValueError(f"machine file {path}: [sources] must map keys to strings")
    try:
        if "base" in doc:
            base = get_machine(str(doc["base"]))
            spec = base.replace(**{"name": base.name + "-" + path.stem, **changes})
            src = dict(base.sources)
        else:
            missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                       and f.default_factory is dataclasses.MISSING and n not in changes]
            if missing:
                raise ValueError(f"no base preset and no value for {', '.join(missing)} "
                                 '(add base = "GC200", or every field)')
            spec = MachineSpec(**_resolve_derived(changes))
            src = {"file": f"machine file {path.name}"}
    except (TypeError, ValueError) as e:
        raise ValueError(f"machine file {path}: {e}") from None
    if "base" in doc:                 # each changed constant names its source or the file
        for k in changes:
            if k != "name":
                src[k] = f"machine file {path.name}"
    src.update(sources)
    return dataclasses.replace(spec, sources=tuple(src.items()))


def _resolve_derived(changes: dict[str, Any]) -> dict[str, Any]:
    """Turn exchange_bandwidth / clock_ghz into fields for a spec built from scratch."""
    out = dict(changes)
    if "clock_ghz" in out:
        out["clock_hz"] = float(out.pop("clock_ghz")) * 1e9
    if "exchange_bandwidth" in out:
        out["exchange_bytes_per_cycle"] = (float(out.pop("exchange_bandwidth"))
                                           / (out["n_tiles"] * out["clock_hz"]))
    return out


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write {v} to TOML")
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def machine_to_toml(spec: MachineSpec, path: str | Path | None = None) -> str:
    """Every field of ``spec`` as a machine file (no base needed); written to ``path``
    when given. :func:`machine_from_toml` reads it back to an equal spec."""
    lines = [f"# ipukern machine file: {spec.name}"]
    for f in dataclasses.fields(MachineSpec):
        if f.name in ("amp_conv_units", "sources"):
            continue
        lines.append(f"{f.name} = {_toml_value(getattr(spec, f.name))}")
    lines += ["", "[amp_conv_units]"]
    lines += [f'"{a}->{b}" = {u}' for a, b, u in spec.amp_conv_units]
    lines += ["", "[sources]"]
    lines += [f"{_toml_value(k)} = {_toml_value(v)}" for k, v in spec.sources]
    text = "\n".join(lines) + "\n"
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text
