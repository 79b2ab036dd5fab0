"""Machine and system variants of a design-space sweep, from ranges of constants.

A range is a mapping ``{constant: [values...]}``; the variants are its grid (every
combination, in the mapping's order, the last constant varying fastest). A value is a
number, or a string ``"x<factor>"`` relative to the base (``"x2"``: twice the base's
value; rounded to a whole number for the integer constants). :func:`one_at_a_time` gives the
other common design: the base plus each constant
moved alone. An explicit list of variants (dicts of changes or MachineSpecs) is taken as is.

Every variant is built (and so checked by :class:`~ipukern.MachineSpec` and
:class:`~ipukern.System`) before any point runs; a bad one raises a ValueError naming the
variant and the constant.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..machine import MachineSpec, get_machine
from ..systems import System, get_system

__all__ = ["MACHINE_CONSTANTS", "SYSTEM_CONSTANTS", "Variant", "machine_variants", "system_variants",
           "one_at_a_time", "machine_columns", "system_columns", "with_base_values"]

#: MachineSpec constants a range may vary; ``exchange_bandwidth`` (aggregate B/s) and
#: ``clock_ghz`` are MachineSpec.replace's derived keywords, ``amp_scale`` multiplies the
#: AMP conv units of every dtype pair (the result must be a whole number of units)
MACHINE_CONSTANTS = ("n_tiles", "tile_bytes", "clock_hz", "clock_ghz", "exchange_bandwidth",
                     "exchange_bytes_per_cycle", "amp_scale", "n_workers", "load_bytes_per_cycle",
                     "store_bytes_per_cycle", "sync_cycles", "exchange_overhead_cycles",
                     "reserved_bytes_per_tile", "memcpy_bytes_per_cycle", "n_links",
                     "link_bytes_per_second", "host_bytes_per_second", "tiles_per_exchange_bus")
#: System constants a range may vary: ``n_ipus`` rebuilds the system as ``System.pod(n, chip)``;
#: ``link_bandwidth_scale`` / ``link_latency_s`` rewrite every link (System.replace)
SYSTEM_CONSTANTS = ("n_ipus", "link_bandwidth_scale", "link_latency_s", "streaming_bytes_per_second",
                    "sync_latency_per_hop_s")
#: the constants that are whole numbers (a factor must give one)
_INT_CONSTANTS = ("n_tiles", "tile_bytes", "n_workers", "load_bytes_per_cycle", "store_bytes_per_cycle",
                  "sync_cycles", "exchange_overhead_cycles", "reserved_bytes_per_tile",
                  "memcpy_bytes_per_cycle", "n_links", "tiles_per_exchange_bus", "n_ipus")


@dataclass(frozen=True)
class Variant:
    """One machine (or system) of a sweep: ``changes`` from the base, by constant."""

    label: str
    changes: tuple[tuple[str, Any], ...]
    machine: MachineSpec
    system: System | None = None


def _base_value(base: MachineSpec | System, name: str) -> float:
    if name == "clock_ghz":
        return base.clock_hz / 1e9
    if name == "amp_scale" or name == "link_bandwidth_scale":
        return 1.0
    if name == "link_latency_s":
        return base.links[0].latency_s if base.links else 0.0
    return getattr(base, name)


def _value(base: Any, name: str, v: Any, where: str) -> Any:
    """A range value as a number: ``"x2"`` is twice the base's value."""
    if isinstance(v, str) and v[:1] in ("x", "X"):
        try:
            factor = float(v[1:])
        except ValueError:
            raise ValueError(f"{where}: {name} value {v!r} is not a number or 'x<factor>'") from None
        v = _base_value(base, name) * factor
        if name in _INT_CONSTANTS and math.isfinite(v):
            v = round(v)                     # "x0.5" of 1471 tiles: the nearest whole number
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
        raise ValueError(f"{where}: {name} must be a finite number or 'x<factor>', got {v!r}")
    if name in _INT_CONSTANTS:
        if v != int(v):
            raise ValueError(f"{where}: {name} must be a whole number, got {v!r}")
        return int(v)
    return float(v)


def _axes(ranges: Mapping, allowed: Sequence[str], what: str) -> list[tuple[str, list]]:
    axes = []
    for name, values in ranges.items():
        if name not in allowed:
            raise ValueError(f"{what}: unknown constant {name!r}; constants are {', '.join(allowed)}")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            values = [values]
        if not values:
            raise ValueError(f"{what}: {name} has no values")
        axes.append((name, list(values)))
    return axes


def _grid(ranges: Mapping, allowed: Sequence[str], what: str) -> list[dict]:
    axes = _axes(ranges, allowed, what)
    names = [n for n, _ in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in axes))]


def one_at_a_time(ranges: Mapping[str, Sequence]) -> list[dict]:
    """The base (no changes) and each constant of ``ranges`` moved alone through its values.

    ``one_at_a_time({"tile_bytes": ["x2"], "exchange_bandwidth": [4e12, 16e12]})`` is
    ``[{}, {"tile_bytes": "x2"}, {"exchange_bandwidth": 4e12}, {"exchange_bandwidth": 16e12}]``:
    1 + the number of values points instead of their product.
    """
    if not isinstance(ranges, Mapping):
        raise TypeError(f"ranges must be a mapping of constant -> values, got {type(ranges).__name__}")
    out: list[dict] = [{}]
    for name, values in ranges.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            values = [values]
        out += [{name: v} for v in values]
    return out


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _label(base_name: str, changes: dict) -> str:
    if not changes:
        return base_name
    return base_name + "[" + ",".join(f"{k}={_fmt(v)}" for k, v in changes.items()) + "]"


def _machine(base: MachineSpec, changes: dict, where: str) -> MachineSpec:
    """``base`` with ``changes`` (numbers, already resolved)."""
    kw = dict(changes)
    if "amp_scale" in kw:
        scale = kw.pop("amp_scale")
        units = []
        for a, b, u in base.amp_conv_units:
            scaled = u * scale
            if scaled != int(scaled) or scaled < 1:
                raise ValueError(f"{where}: amp_scale {scale:g} gives {scaled:g} AMP units for "
                                 f"{a}->{b} (base {u}); the units must be a whole number >= 1")
            units.append((a, b, int(scaled)))
        kw["amp_conv_units"] = tuple(units)
    # checked here (in MachineSpec's words): exchange_bandwidth divides by them
    for name, want in (("n_tiles", "a positive int"), ("clock_hz", "a finite number > 0")):
        if name in kw and not kw[name] > 0:
            raise ValueError(f"{where}: MachineSpec.{name} must be {want}, got {kw[name]!r}")
    if "exchange_bandwidth" in kw and not (kw["exchange_bandwidth"] > 0):
        raise ValueError(f"{where}: exchange_bandwidth must be > 0 B/s, got {kw['exchange_bandwidth']!r}")
    if "clock_ghz" in kw and not (kw["clock_ghz"] > 0):
        raise ValueError(f"{where}: clock_ghz must be > 0, got {kw['clock_ghz']!r}")
    try:
        return base.replace(name=_label(base.name, changes), **kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


def _entries(machines: Any) -> list:
    if machines is None:
        return [{}]
    if isinstance(machines, (MachineSpec, str)):
        return [machines]
    if isinstance(machines, Mapping):
        return _grid(machines, MACHINE_CONSTANTS, "machines")
    if isinstance(machines, Sequence):
        return list(machines)
    raise TypeError("machines must be a mapping of constant -> values, a list of variants "
                    f"(dicts of changes or MachineSpecs) or a MachineSpec, got {type(machines).__name__}")


def machine_variants(machines: Any = None, base: MachineSpec | str | None = None) -> list[Variant]:
    """The machine variants of ``machines`` (see the module docstring) over ``base``
    (default GC200), each built and checked.

    Raises
    ------
    ValueError
        A variant MachineSpec refuses (zero tiles, negative SRAM, ...) or an unknown
        constant, naming the variant: ``machine variant 3 (tile_bytes=-1): MachineSpec...``.
    """
    base_spec = get_machine(base)
    out = []
    for i, entry in enumerate(_entries(machines)):
        if isinstance(entry, (MachineSpec, str)):
            spec = get_machine(entry)
            out.append(Variant(spec.name, (), spec))
            continue
        if not isinstance(entry, Mapping):
            raise TypeError(f"machine variant {i} must be a dict of changes or a MachineSpec, "
                            f"got {type(entry).__name__}")
        where = f"machine variant {i} ({', '.join(f'{k}={v!r}' for k, v in entry.items()) or 'base'})"
        _axes({k: [v] for k, v in entry.items()}, MACHINE_CONSTANTS, where)
        changes = {k: _value(base_spec, k, v, where) for k, v in entry.items()}
        out.append(Variant(_label(base_spec.name, changes), tuple(changes.items()),
                           _machine(base_spec, changes, where)))
    return out


def _system(base: System, chip: MachineSpec, changes: dict, where: str) -> System:
    kw = dict(changes)
    n = kw.pop("n_ipus", base.n_ipus)
    try:
        name = base.name
        if n != base.n_ipus or chip != base.chip:
            name = f"POD{n}-{chip.name}"
            rebuilt = System.pod(n, chip, domain_ipus=base.domain_ipus)
            keep = {f: getattr(base, f) for f in ("n_hosts", "host_bytes_per_second",
                                                 "streaming_bytes_per_machine",
                                                 "streaming_bytes_per_second", "sync_latency_per_hop_s")}
            base = dataclasses.replace(rebuilt, **keep)
        return base.replace(name=_label(name, changes), **kw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None


def system_variants(systems: Any, machines: list[Variant], base: System | str | None = None) -> list[Variant]:
    """Every system variant of ``systems`` (a mapping of :data:`SYSTEM_CONSTANTS` -> values,
    a list of dicts of changes, or None for ``base`` alone) for every machine variant, whose
    chip it uses; the machine varies slowest. ValueError names a bad variant."""
    base_sys = get_system(base)
    if systems is None:
        entries: list = [{}]
    elif isinstance(systems, Mapping):
        entries = _grid(systems, SYSTEM_CONSTANTS, "systems")
    elif isinstance(systems, Sequence) and not isinstance(systems, str):
        entries = list(systems)
    else:
        raise TypeError("systems must be a mapping of constant -> values or a list of dicts of changes, "
                        f"got {type(systems).__name__}")
    out = []
    for m in machines:
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping):
                raise TypeError(f"system variant {i} must be a dict of changes, got {type(entry).__name__}")
            where = (f"system variant {i} ({', '.join(f'{k}={v!r}' for k, v in entry.items()) or 'base'})"
                     f" of {m.label}")
            _axes({k: [v] for k, v in entry.items()}, SYSTEM_CONSTANTS, where)
            changes = {k: _value(base_sys, k, v, where) for k, v in entry.items()}
            system = _system(base_sys, m.machine, changes, where)
            out.append(Variant(system.name, m.changes + tuple(changes.items()), m.machine, system))
    return out


def with_base_values(variants: list[Variant], machine: MachineSpec | str | None = None,
                     system: System | str | None = None) -> list[Variant]:
    """``variants`` whose ``changes`` also give the base's value of every constant another
    variant changes, so each constant has a value at every point (a one-at-a-time design's
    base point is the low or high end of each constant's range)."""
    names = list(dict.fromkeys(k for v in variants for k, _ in v.changes))
    base_m, base_s = get_machine(machine), get_system(system)
    out = []
    for v in variants:
        have = dict(v.changes)
        full = tuple((k, have[k] if k in have else
                      _value(base_s if k in SYSTEM_CONSTANTS else base_m, k, "x1", "base"))
                     for k in names)
        out.append(dataclasses.replace(v, changes=full))
    return out


def machine_columns(spec: MachineSpec) -> dict[str, Any]:
    """A machine's constants as flat table columns (every field but the sources, the AMP
    units per dtype pair, and the derived aggregates)."""
    cols: dict[str, Any] = {"machine": spec.name}
    for f in dataclasses.fields(MachineSpec):
        if f.name in ("name", "sources", "amp_conv_units"):
            continue
        cols[f.name] = getattr(spec, f.name)
    for a, b, u in spec.amp_conv_units:
        cols[f"amp_units_{a}_{b}"] = u
    cols["total_sram_bytes"] = spec.total_bytes
    cols["exchange_bandwidth"] = spec.exchange_bandwidth
    cols["peak_flops_fp16"] = spec.peak_flops("float16", "float16")
    return cols


def system_columns(system: System | None) -> dict[str, Any]:
    """A system's constants as flat table columns (empty for a single-chip point)."""
    if system is None:
        return {}
    return {"system": system.name, "n_ipus": system.n_ipus, "n_links_total": len(system.links),
            "link_bytes_per_second_total": float(sum(ln.bytes_per_second for ln in system.links)),
            "host_bytes_per_second_system": system.host_bytes_per_second,
            "sync_latency_per_hop_s": system.sync_latency_per_hop_s}
