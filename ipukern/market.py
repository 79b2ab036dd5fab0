"""List prices and power of IPU and GPU systems, each with its public source.

The figures live in ``ipukern/data/market.csv`` (shipped with the package), one row per
figure: the record key ("IPU-M2000", "DGX A100 640G", "A100 SXM 80GB", ...), whether it is a
price (US$) or a power (W), the value, the date it was stated and the public document it comes
from. A key with no public price (most single GPUs, the DGX H100) simply has no price row:
nothing here is estimated, and derived figures (a GC200's share of its machine's power) say
how they were derived.

Where two sources disagree they stay two keys with their dates: the original DGX A100 (320 GB)
at US$199,000 (NVIDIA, May 2020) and the 640 GB system of the MLPerf v1.0 rows at about
US$300,000 (Graphcore, June 2021).

:func:`for_system` maps ipukern's system presets to their figures. This module sits beside
:mod:`ipukern.gpu` in the layers and imports neither it nor :mod:`ipukern.systems`, so it reads
a system by its attributes (an IPU ``System``'s ``name``, ``chip`` and ``n_machines``; a
``GPUSystem``'s ``name``, ``gpu``, ``gpus_per_node`` and ``nodes``) or takes a name.
"""
from __future__ import annotations

import csv
import functools
import math
import re
import textwrap
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from ._format import format_table

__all__ = ["Figure", "Efficiency", "price", "power", "keys", "figures", "describe", "for_system",
           "efficiency"]

_UNITS = {"price": "USD", "power": "W"}


@dataclass(frozen=True)
class Figure:
    """One sourced figure.

    Parameters
    ----------
    value : float
        US dollars (``unit == "USD"``) or watts (``unit == "W"``).
    unit : str
        "USD" or "W".
    source : str
        The public source: document, press release or article, date, URL where known.
    note : str
        What the figure covers (host server included or not, typical or maximum power) or how
        it was derived.
    key : str
        The record key (``"IPU-M2000"``; ``"4 x IPU-M2000"`` for a figure scaled by
        :func:`for_system`).
    date : str
        When the source stated it (ISO date, as precise as the source is).
    """

    value: float
    unit: str
    source: str
    note: str = ""
    key: str = ""
    date: str = ""

    def __post_init__(self) -> None:
        if self.unit not in _UNITS.values():
            raise ValueError(f"Figure.unit must be 'USD' or 'W', got {self.unit!r}")
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) \
                or not math.isfinite(self.value) or self.value <= 0:
            raise ValueError(f"Figure.value must be a positive finite number, got {self.value!r}")
        if not str(self.source).strip():
            raise ValueError(f"Figure {self.key!r}: source must name a public document")

    def label(self) -> str:
        """``"US$150,000"`` or ``"1,100 W"``."""
        return f"US${self.value:,.0f}" if self.unit == "USD" else f"{self.value:,.0f} W"

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "unit": self.unit, "date": self.date,
                "source": self.source, "note": self.note}

    def footnote(self) -> str:
        """One line: what, how much, when, from where (and the note)."""
        note = f"; {self.note}" if self.note else ""
        date = f" ({self.date})" if self.date else ""
        return f"{self.key} {self.label()}{date}: {self.source}{note}"


@dataclass(frozen=True)
class Efficiency:
    """A system's throughput per list-price dollar and per watt, with the figures used.

    ``samples_per_second_per_kusd`` (samples/s per US$1,000) and ``samples_per_second_per_watt``
    are None where no sourced figure exists (no public price for a DGX H100, for example).
    """

    system: str
    samples_per_second: float
    price: Figure | None
    power: Figure | None

    @property
    def samples_per_second_per_kusd(self) -> float | None:
        return None if self.price is None else self.samples_per_second / self.price.value * 1e3

    @property
    def samples_per_second_per_watt(self) -> float | None:
        return None if self.power is None else self.samples_per_second / self.power.value

    def to_dict(self) -> dict[str, Any]:
        return {"samples_per_second_per_kusd": self.samples_per_second_per_kusd,
                "samples_per_second_per_watt": self.samples_per_second_per_watt,
                "price": None if self.price is None else self.price.to_dict(),
                "power": None if self.power is None else self.power.to_dict()}


def _norm(name: str) -> str:
    """Case, spaces, ``-`` and ``_`` do not matter: "DGX_A100_320G" finds "DGX A100 320G"."""
    return re.sub(r"[^0-9A-Z]", "", name.upper())


#: ipukern's preset names (ipukern.systems SYSTEM_PRESETS, ipukern.gpu GPU_SYSTEMS and GPU
#: specs) for the record keys they are
_ALIASES = {
    "M2000": "IPU-M2000", "POD16": "IPU-POD16", "POD64": "IPU-POD64",
    "DGX_A100": "DGX A100 640G", "DGX_A100_80GB": "DGX A100 640G", "DGX_A100_40GB": "DGX A100 320G",
    "A100_80GB": "A100 SXM 80GB", "A100_40GB": "A100 SXM 40GB", "A100": "A100 SXM 40GB",
    "A100_PCIE_40GB": "A100 PCIe", "A100_PCIE_80GB": "A100 PCIe 80GB",
    "V100": "V100 SXM", "V100_PCIE": "V100 PCIe", "H100": "H100 SXM", "H100_PCIE": "H100 PCIe",
    "DGX_H100": "DGX H100",
}
#: IPU systems priced and powered as so many IPU-M2000 when no figure names them (the IPU-POD
#: reference designs are M2000s plus host servers and switches: IPU-POD datasheets)
_IPU_MACHINES = {"8x IPU-M2000": 8, "IPU-POD16": 4, "IPU-POD64": 16}
#: the machine of each IPU chip with figures here
_MACHINE_OF_CHIP = {"GC200": "IPU-M2000", "BOW": "Bow-2000"}
#: what a system object must be to take a key's figures by its name: (chip or GPU preset,
#: IPUs or GPUs per node). A POD16 of GC2 chips, or a DGX_A100 given other GPUs, is not the
#: product the figure was stated for.
_PRODUCT = {"IPU-M2000": ("GC200", 4), "8x IPU-M2000": ("GC200", 32), "IPU-POD16": ("GC200", 16),
            "IPU-POD64": ("GC200", 64), "Bow-2000": ("BOW", 4), "DGX A100 640G": ("A100_80GB", 8),
            "DGX A100 320G": ("A100_40GB", 8), "DGX H100": ("H100", 8), "DGX-1 V100": ("V100", 8),
            "DGX-2": ("V100", 16)}


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, Figure]]:
    """``{key: {"price": Figure, "power": Figure}}``, read once from market.csv."""
    text = resources.files("ipukern").joinpath("data/market.csv").read_text(encoding="utf-8")
    out: dict[str, dict[str, Figure]] = {}
    for line, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        kind = row["kind"]
        if kind not in _UNITS or row["unit"] != _UNITS[kind]:
            raise ValueError(f"market.csv line {line}: kind {kind!r} with unit {row['unit']!r}")
        if kind in out.get(row["key"], {}):
            raise ValueError(f"market.csv line {line}: a second {kind} for {row['key']!r}")
        out.setdefault(row["key"], {})[kind] = Figure(float(row["value"]), row["unit"], row["source"],
                                                      row["note"], row["key"], row["date"])
    return out


def keys() -> tuple[str, ...]:
    """Every record key with at least one figure, in the CSV's order."""
    return tuple(_table())


def figures() -> tuple[Figure, ...]:
    """Every figure, in the CSV's order of keys (price before power)."""
    return tuple(f for kinds in _table().values() for k in _UNITS if (f := kinds.get(k)) is not None)


def describe(width: int = 100) -> str:
    """Every figure with its date, source and note, wrapped to ``width`` columns."""
    wrap = textwrap.TextWrapper(width=width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    figs = figures()
    # one aligned table (the house helper), each row followed by its wrapped source and note
    head, *rows = format_table(["key", "unit", "value", "date"],
                               [[f.key, f.unit, f.label(), f.date] for f in figs],
                               align="llrl").splitlines()
    lines = [head]
    for f, row in zip(figs, rows):
        lines += [row, wrap.fill("source: " + f.source)]
        lines += [wrap.fill("note: " + f.note)] if f.note else []
    return "\n".join(lines)


def _key(name: Any) -> str | None:
    """The record key ``name`` means (a key or a preset alias), or None."""
    if not isinstance(name, str):
        raise TypeError(f"market key must be a str, got {type(name).__name__} {name!r}")
    by_norm = {_norm(k): k for k in _table()} | {_norm(k): v for k, v in _ALIASES.items()}
    by_norm |= {_norm(k): k for k in _IPU_MACHINES}
    return by_norm.get(_norm(name))


def _get(key: str, kind: str) -> Figure:
    name = _key(key)
    if name is None:
        raise ValueError(f"unknown market key {key!r}; known keys: {', '.join(keys())}")
    fig = _table().get(name, {}).get(kind)
    if fig is None:
        have = [k for k, kinds in _table().items() if kind in kinds]
        raise ValueError(f"no public {kind} for {name!r} in ipukern's market data; keys with a {kind}: "
                         f"{', '.join(have)}")
    return fig


def price(key: str) -> Figure:
    """The list price (US$) of ``key``; ValueError for an unknown key or one with no public price."""
    return _get(key, "price")


def power(key: str) -> Figure:
    """The power (W) of ``key``; ValueError for an unknown key or one with no public power figure."""
    return _get(key, "power")


def _scaled(fig: Figure | None, n: int, what: str) -> Figure | None:
    if fig is None or n == 1:
        return fig
    return replace(fig, value=fig.value * n, key=f"{n} x {fig.key}",
                   note=f"{n} x {fig.label()} ({what}); " + fig.note)


def _pair(key: str) -> tuple[Figure | None, Figure | None]:
    kinds = _table().get(key, {})
    return kinds.get("price"), kinds.get("power")


def _ipu_machines(key: str | None, system: Any) -> tuple[str, int] | None:
    """(machine key, count) an IPU system is priced as, or None."""
    if key in _IPU_MACHINES:
        return "IPU-M2000", _IPU_MACHINES[key]
    chip = getattr(getattr(system, "chip", None), "name", None)
    n = getattr(system, "n_machines", None)
    if chip in _MACHINE_OF_CHIP and isinstance(n, int):
        return _MACHINE_OF_CHIP[chip], n
    return None


def _object_key(system: Any) -> str | None:
    """The key a System / GPUSystem's name means, if the object is that product."""
    key = _key(system.name)
    if key not in _PRODUCT:
        return key
    if hasattr(system, "gpus_per_node"):
        made = (getattr(system.gpu, "name", None), system.gpus_per_node)
    else:
        made = (getattr(getattr(system, "chip", None), "name", None), getattr(system, "n_ipus", None))
    return key if made == _PRODUCT[key] else None


def for_system(system: Any) -> tuple[Figure | None, Figure | None]:
    """(price, power) of an ipukern system, or of a key / preset name; None where no source exists.

    Parameters
    ----------
    system : str, ipukern System or ipukern.gpu GPUSystem
        A key or preset name ("POD16", "DGX_A100", "A100_80GB"), or a system object. A system
        with its own figures (the IPU-POD16 price, the DGX A100 power) takes them; an IPU system
        without one counts as its IPU-M2000 (or Bow-2000) machines, a multi-node GPU system as
        its nodes, and a GPU system with an unnamed layout as its GPUs (power only: single GPUs
        have no list price). A scaled figure's ``note`` says so; host servers and switches are
        never added.

    Raises
    ------
    ValueError
        An unknown name.
    TypeError
        Neither a name nor a system object.
    """
    if isinstance(system, str):
        key = _key(system)
        if key is None:
            raise ValueError(f"unknown market key {system!r}; known keys: {', '.join(keys())}")
        obj = None
    elif isinstance(getattr(system, "name", None), str):
        key, obj = _object_key(system), system
    else:
        raise TypeError(f"for_system takes a key or an ipukern System / GPUSystem, got "
                        f"{type(system).__name__}")
    if obj is not None and hasattr(obj, "gpus_per_node"):
        return _gpu_system(key, obj)
    own_price, own_power = _pair(key) if key is not None else (None, None)
    machines = _ipu_machines(key, obj) if own_price is None or own_power is None else None
    if machines is not None:
        m_price, m_power = _pair(machines[0])
        what = f"{machines[1]} {machines[0]} machines; no host server or switch"
        own_price = own_price or _scaled(m_price, machines[1], what)
        own_power = own_power or _scaled(m_power, machines[1], what)
    return own_price, own_power


def _gpu_system(key: str | None, system: Any) -> tuple[Figure | None, Figure | None]:
    nodes = int(getattr(system, "nodes", 1))
    if key is not None and key in _table():
        s_price, s_power = _pair(key)
        what = f"{nodes} nodes"
        return _scaled(s_price, nodes, what), _scaled(s_power, nodes, what)
    gpu_key = _key(getattr(getattr(system, "gpu", None), "name", "") or "")
    if gpu_key is None:
        return None, None
    n = int(system.gpus_per_node) * nodes
    return None, _scaled(_pair(gpu_key)[1], n, f"{n} GPUs at their TDP; no host, switch or cooling")


def efficiency(samples_per_second: float, system: Any, *, price_usd: float | None = None) -> Efficiency:
    """Throughput per US$1,000 and per watt of ``system`` (figures from :func:`for_system`).

    Parameters
    ----------
    samples_per_second : float
        The system's throughput (an estimate's ``samples_per_second``).
    system : str, ipukern System or ipukern.gpu GPUSystem
        As :func:`for_system` takes it.
    price_usd : float, optional
        A price of your own instead of the sourced one (its source says so).

    Raises
    ------
    ValueError
        A negative or non-finite throughput or price, or an unknown system name.
    """
    if isinstance(samples_per_second, bool) or not isinstance(samples_per_second, (int, float)) \
            or not math.isfinite(samples_per_second) or samples_per_second < 0:
        raise ValueError(f"samples_per_second must be a finite number >= 0, got {samples_per_second!r}")
    fig_price, fig_power = for_system(system)
    name = system if isinstance(system, str) else system.name
    if price_usd is not None:
        if isinstance(price_usd, bool) or not isinstance(price_usd, (int, float)) \
                or not math.isfinite(price_usd) or price_usd <= 0:
            raise ValueError(f"price_usd must be a positive finite number of US$, got {price_usd!r}")
        fig_price = Figure(float(price_usd), "USD", "given by the user (not a sourced list price)",
                           key=name)
    return Efficiency(name, float(samples_per_second), fig_price, fig_power)
