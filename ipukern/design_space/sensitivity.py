"""How much each network gains from each varied constant: the sensitivity summary.

For a network and a constant varied from its lowest value ``lo`` to its highest ``hi``, the
gain is the throughput at ``hi`` over the throughput at ``lo`` between points that differ in
that constant alone (the same network, settings and every other constant), as a geometric
mean over all such pairs. In a grid that averages over the other constants' values; in a
one-at-a-time design (:func:`~ipukern.design_space.one_at_a_time`) it is the single pair
around the base. Pairs with a point that did not fit or failed are left out (their count is
reported), so a constant that only makes points fit shows as ``pairs=0``.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

__all__ = ["Sensitivity", "sensitivity"]

@dataclass(frozen=True)
class Sensitivity:
    """One network's gain from moving one constant from ``low`` to ``high``."""

    network: str
    constant: str
    low: float
    high: float
    gain: float | None           # throughput(high) / throughput(low), geometric mean; None: no pair
    pairs: int
    skipped: int                 # pairs left out (a point that did not fit or failed)

    def sentence(self) -> str:
        factor = self.high / self.low if self.low else float("inf")
        if self.gain is None:
            why = (f"no pair of points that both fit ({self.skipped} left out)" if self.skipped
                   else "no pair of points differing in it alone")
            return f"{self.network}: {self.constant} {self.low:g} -> {self.high:g}: {why}"
        return (f"{self.network} gains {self.gain:.2f}x from {factor:.3g}x {self.constant} "
                f"({self.low:g} -> {self.high:g}; {self.pairs} pair{'s' * (self.pairs != 1)})")


def _varied(rows: list[dict]) -> list[str]:
    """The constants the variants changed (their ``varied`` column), in order of appearance."""
    names: list[str] = []
    for r in rows:
        for k in (r.get("varied") or "").split(","):
            if k and k not in names:
                names.append(k)
    return names


def _hashable(v: Any) -> Any:
    return repr(v) if isinstance(v, (list, dict)) else v


def sensitivity(rows: list[dict], measure: str = "samples_per_second") -> list[Sensitivity]:
    """The gain of every network from every constant that varies (module docstring), in the
    order networks and constants first appear."""
    out = []
    networks = list(dict.fromkeys(r["network"] for r in rows))
    constants = _varied(rows)
    for net in networks:
        mine = [r for r in rows if r["network"] == net]
        for c in constants:
            values = sorted({r[c] for r in mine if isinstance(r.get(c), (int, float))})
            if len(values) < 2:
                continue
            lo, hi = values[0], values[-1]
            others = [k for k in constants if k != c] + [k for k in mine[0] if k.startswith("setting_")]
            groups: dict[tuple, dict] = defaultdict(dict)
            for r in mine:
                if r[c] in (lo, hi):
                    groups[tuple(_hashable(r.get(k)) for k in others)][r[c]] = r
            logs, skipped = [], 0
            for g in groups.values():
                if lo not in g or hi not in g:
                    continue
                a, b = g[lo], g[hi]
                if a["status"] != "ok" or b["status"] != "ok" or not a.get(measure) or not b.get(measure):
                    skipped += 1
                    continue
                logs.append(math.log(b[measure] / a[measure]))
            gain = math.exp(math.fsum(logs) / len(logs)) if logs else None
            out.append(Sensitivity(net, c, float(lo), float(hi), gain, len(logs), skipped))
    return out
