"""Validation against measured hardware: the model next to public measurements of real IPUs.

``run()`` reads the table of published measurements shipped with the package
(``measurements.csv``: one row per point, each with its source, the table or figure it comes
from, the hardware, clock and configuration), runs every modellable point through the model
and returns the model/measured ratio per row plus, per group, the mean absolute percentage
error (MAPE), the geometric-mean ratio and the Pearson correlation of log(model) with
log(measured).

Every point is run on two machine variants: the project's default exchange rate (47.5 TB/s on
the GC200) and the datasheet IPU-Exchange rate (``with_datasheet_exchange()``, 8 TB/s).
Points the model cannot represent stay in the table with the reason; none are dropped.

Rules kept by this module: a measurement is recorded only with its source; no constant is
ever fitted to a point (the machine presets are used exactly as they are).
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..machine import MachineSpec, get_machine
from .._format import Rest, format_table
from .._version import schema
from ._table import read_table, select, write_table
from .models import MODELLERS, parse_params

__all__ = [
    "VARIANTS",
    "Measurement",
    "ValidationResult",
    "ValidationRow",
    "load_measurements",
    "run",
]

#: machine variants every point is modelled on: name -> how to derive it from the preset
VARIANTS: dict[str, str] = {
    "default": "the preset as shipped (default exchange rate)",
    "datasheet": "the preset with_datasheet_exchange() (8 TB/s IPU-Exchange)",
}
_FIELDS = ("id", "group", "hardware", "clock_ghz", "kind", "params", "quantity", "unit",
           "measured", "source", "locator", "note", "not_modelled")


@dataclass(frozen=True)
class Measurement:
    """One published measurement (a row of ``measurements.csv``)."""

    id: str
    group: str
    hardware: str
    clock_ghz: float
    kind: str
    params: str
    quantity: str
    unit: str
    measured: float
    source: str
    locator: str
    note: str = ""
    #: why the model cannot represent this point ("" when it can)
    not_modelled: str = ""


@dataclass
class ValidationRow:
    """A measurement with the model's value on each machine variant."""

    measurement: Measurement
    #: variant -> model value in the measurement's unit (absent: not modelled)
    model: dict[str, float] = field(default_factory=dict)
    #: how the model produced it (method chosen, vertex...)
    how: str = ""
    #: reason the point has no model value ("" when it has one)
    reason: str = ""

    def ratio(self, variant: str = "default") -> float | None:
        """model / measured on ``variant`` (None when not modelled)."""
        v = self.model.get(variant)
        return None if v is None else v / self.measurement.measured

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self.measurement)
        d.pop("not_modelled")
        for var in VARIANTS:
            d[f"model_{var}"] = self.model.get(var)
            r = self.ratio(var)
            d[f"ratio_{var}"] = None if r is None else round(r, 4)
        d["model_how"] = self.how
        d["not_modelled"] = self.reason
        return d


def _group_stats(rows: Sequence[ValidationRow], variant: str) -> dict[str, Any]:
    pairs = [(r.model[variant], r.measurement.measured) for r in rows if variant in r.model]
    out: dict[str, Any] = {"points": len(rows), "modelled": len(pairs)}
    if not pairs:
        return out | {"mape_pct": None, "geomean_ratio": None, "pearson_log": None}
    ape = [abs(m - x) / x for m, x in pairs]
    logs = [(math.log(m), math.log(x)) for m, x in pairs]
    out["mape_pct"] = round(100.0 * sum(ape) / len(ape), 2)
    out["geomean_ratio"] = round(math.exp(sum(a - b for a, b in logs) / len(logs)), 4)
    out["within_25pct"] = sum(1 for e in ape if e <= 0.25)
    out["pearson_log"] = _pearson([a for a, _ in logs], [b for _, b in logs])
    return out


def _pearson(x: list[float], y: list[float]) -> float | None:
    """Pearson r, or None with fewer than 3 points or a constant side."""
    n = len(x)
    if n < 3:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx <= 0 or syy <= 0:
        return None
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    return round(sxy / math.sqrt(sxx * syy), 4)


@dataclass
class ValidationResult:
    """Rows and per-group statistics of one validation run."""

    rows: list[ValidationRow]
    #: group -> variant -> statistics (points, modelled, mape_pct, geomean_ratio, ...)
    summary: dict[str, dict[str, dict[str, Any]]]

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def groups(self) -> list[str]:
        return list(self.summary)

    def to_csv(self, path: str | Path) -> Path:
        """One line per measurement: the source fields, model values and ratios."""
        return write_table(path, [r.to_dict() for r in self.rows], _FIELDS)

    def to_json(self, path: str | Path | None = None) -> str:
        """``{"variants", "summary", "rows"}`` as JSON; written to ``path`` when given."""
        text = json.dumps({**schema("validation"), "variants": VARIANTS, "summary": self.summary,
                           "rows": [r.to_dict() for r in self.rows]}, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def format_summary(self) -> str:
        """The per-group table: points, MAPE, geomean ratio and log-Pearson per variant."""
        head = ["group", "points", "modelled"]
        for v in VARIANTS:
            head += [f"{v} MAPE", "ratio", "r(log)"]
        rows = []
        for g, per in self.summary.items():
            first = per[next(iter(VARIANTS))]
            row = [g[:34], first["points"], first["modelled"]]
            for v in VARIANTS:
                s = per[v]
                row += [_fmt(s.get("mape_pct"), "%"), _fmt(s.get("geomean_ratio")),
                        _fmt(s.get("pearson_log"))]
            rows.append(row)
        return format_table(head, rows, align="l" + "r" * (len(head) - 1))

    def format_rows(self) -> str:
        """Every point: measured, model (default / datasheet), ratio, or why it is not modelled."""
        rows = []
        for r in self.rows:
            m = r.measurement
            cells = [m.id[:40], m.unit, f"{m.measured:.4g}"]
            if r.reason:
                rows.append(cells + [Rest(f"not modelled: {r.reason}")])
                continue
            rows.append(cells + [f"{r.model['default']:.4g}", f"{r.model['datasheet']:.4g}",
                                 f"{r.ratio('default'):.2f}"])
        return format_table(["id", "unit", "measured", "model", "datasheet", "ratio"], rows, align="llrrrr")


def _fmt(v: Any, suffix: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:.1f}{suffix}" if suffix else f"{v:.2f}"


def load_measurements(path: str | Path | None = None) -> list[Measurement]:
    """The measurement table (the packaged ``measurements.csv`` unless ``path`` is given).

    Raises ValueError naming the row when a field is missing or not a number, a measured
    value is not positive, a row has no source, or an id repeats.
    """
    where, records = read_table("measurements.csv", path, _FIELDS)
    out: list[Measurement] = []
    seen: set[str] = set()
    for lineno, rec in records:
        try:
            m = Measurement(**{k: rec[k] or "" for k in _FIELDS if k not in ("clock_ghz", "measured")},
                            clock_ghz=float(rec["clock_ghz"]), measured=float(rec["measured"]))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where} line {lineno}: {e}") from None
        if not (m.measured > 0 and math.isfinite(m.measured)):
            raise ValueError(f"{where} line {lineno}: measured must be positive, got {m.measured}")
        if not m.source.strip():
            raise ValueError(f"{where} line {lineno}: {m.id} has no source")
        if m.id in seen:
            raise ValueError(f"{where} line {lineno}: duplicate id {m.id!r}")
        if not m.not_modelled and m.kind not in MODELLERS:
            raise ValueError(f"{where} line {lineno}: unknown kind {m.kind!r} "
                             f"(known: {sorted(MODELLERS)}; or give a not_modelled reason)")
        seen.add(m.id)
        out.append(m)
    return out


def _machine(m: Measurement) -> MachineSpec:
    spec = get_machine(m.hardware)
    if not math.isclose(spec.clock_hz, m.clock_ghz * 1e9, rel_tol=1e-6):
        spec = spec.replace(clock_ghz=m.clock_ghz)   # the clock the measurement ran at
    return spec


def run(measurements: Sequence[Measurement] | None = None, *, groups: Sequence[str] | None = None,
        progress: Any = None) -> ValidationResult:
    """Run the measurements through the model.

    Parameters
    ----------
    measurements : list of Measurement, optional
        Defaults to the packaged table (:func:`load_measurements`).
    groups : list of str, optional
        Only these groups (exact names); unknown names raise ValueError.
    progress : callable(done, total, label), optional

    Returns
    -------
    ValidationResult
        ``rows`` in table order and ``summary[group][variant]``. A model error on a point
        (e.g. a shape that fits no plan) is recorded as that point's reason, not raised.
    """
    ms = select(list(load_measurements() if measurements is None else measurements), groups,
                lambda m: m.group, "group")
    rows: list[ValidationRow] = []
    for i, m in enumerate(ms):
        row = ValidationRow(m)
        if m.not_modelled:
            row.reason = m.not_modelled
        else:
            base = _machine(m)
            try:
                params = parse_params(m.params)
                for var, spec in (("default", base), ("datasheet", base.with_datasheet_exchange())):
                    row.model[var], row.how = MODELLERS[m.kind](params, spec)
            except (ValueError, MemoryError) as e:   # TileMemoryError is a MemoryError/ValueError
                row.model.clear()
                row.reason = "model error: " + " ".join(str(e).split())
        rows.append(row)
        if progress is not None:
            progress(i + 1, len(ms), m.id)
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for g in dict.fromkeys(r.measurement.group for r in rows):
        members = [r for r in rows if r.measurement.group == g]
        summary[g] = {v: _group_stats(members, v) for v in VARIANTS}
    return ValidationResult(rows, summary)
