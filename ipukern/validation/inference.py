"""Published whole-network inference figures next to the model.

``published_inference.csv`` (shipped with the package) holds public inference measurements
of real IPUs with the configuration they were run in (network, batch, precision, partials,
availableMemoryProportion, I/O tiles) and the published throughput and latency, each row with
its source (repository, file and commit, the command and the printed line) and how the value
was read. Where the source does not state the hardware the row says so in ``hardware`` and
lists every preset it may have run on in ``machines``; the model is shown on each of them and
the hardware is not inferred from the fit. A card that is not a preset (the C600) is in
:data:`CARDS`, built from the preset with the card's published figures.

:func:`inference_report` runs every modellable row through :func:`ipukern.estimate_network`
(one IPU, the forward pass, device time only: no host I/O) on each listed machine, as shipped
and with the datasheet IPU-Exchange rate (``with_datasheet_exchange()``), and gives the model's
samples/s, its seconds per batch and the ratio model/published. Nothing is fitted: the presets
are used as they are (less the row's I/O tiles, which PopLibs takes away from compute), and a
row the model cannot represent keeps its reason.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._table import build_network, geomean, read_table, select, write_table
from .._format import Rest, fmt_num, format_table
from .._version import schema

__all__ = ["CARDS", "InferenceReport", "InferenceRow", "PublishedInference", "inference_report",
           "load_inference", "machine_spec"]

_FIELDS = ("id", "benchmark", "network", "network_args", "batch", "dtype", "partials",
           "available_memory_proportion", "io_tiles", "machines", "published_throughput", "unit",
           "published_latency_ms", "clients", "source", "locator", "hardware", "note", "not_modelled")
#: machine variants every row is modelled on, as in :data:`ipukern.validation.VARIANTS`
VARIANTS = ("default", "datasheet")


def _c600() -> Any:
    from ..machine import GC200
    # C600 PCIe card: one Mk2 IPU, 1,472 tiles, 900 MB (GC200's 624 KiB a tile) [ByteMLPerf
    # byte_infer_perf/general_perf/backends/IPU/README.md, Graphcore's product table]; clock
    # 1.5 GHz [Graphcore, github.com/graphcore/PopRT tools/calc_ipu_utilization.py:
    # clock_sppeds 'C600': 1.5e9]. Its peaks, 280 TFLOPS FP16 and 70 FP32 (same README), are
    # GC200's per-cycle rates at 1.486 GHz, so the card is modelled as the GC200 tile at 1.5 GHz.
    return GC200.replace(name="C600", clock_hz=1.5e9,
                         sources=(("tiles/memory", "as GC200 (Mk2 IPU, 1472 tiles, 900 MB)"),
                                  ("clock", "PopRT tools/calc_ipu_utilization.py: C600 1.5 GHz"),
                                  ("exchange", "the GC200 default's per-tile-cycle rate")))


#: cards the published inference rows ran on that are not :data:`ipukern.machine.PRESETS`
CARDS = {"C600": _c600}


def machine_spec(name: str) -> Any:
    """A row's machine: a preset (``GC200``, ``BOW``...) or a card of :data:`CARDS`."""
    key = name.upper()
    if key in CARDS:
        return CARDS[key]()
    from ..machine import get_machine
    return get_machine(key)


@dataclass(frozen=True)
class PublishedInference:
    """One row of ``published_inference.csv``."""

    id: str
    benchmark: str
    network: str
    network_args: str
    batch: int
    dtype: str
    partials: str
    #: PopLibs' availableMemoryProportion of the run (None: not set, PopLibs' default)
    available_memory_proportion: float | None
    #: tiles the run gave to overlapped host I/O (taken from the compute tiles)
    io_tiles: int
    #: presets the run may have used, e.g. ("GC200", "BOW")
    machines: tuple[str, ...]
    published_throughput: float
    unit: str
    #: the published latency in ms, as the source defines it (``note``)
    published_latency_ms: float | None
    #: host threads the benchmark keeps in flight (None: not stated): the published latency
    #: of one call is then about ``clients`` batch times
    clients: int | None
    source: str
    locator: str
    #: what the source says of the hardware
    hardware: str
    note: str
    not_modelled: str

    @property
    def published_seconds_per_batch(self) -> float:
        """batch / published throughput: the steady-state time of one batch."""
        return self.batch / self.published_throughput


def _parse(rec: dict[str, str], where: str) -> PublishedInference:
    vals: dict[str, Any] = {k: (rec[k] or "").strip() for k in _FIELDS}
    rid = vals["id"] or "?"
    try:
        vals["batch"] = int(vals["batch"])
        vals["io_tiles"] = int(vals["io_tiles"] or 0)
        vals["clients"] = int(vals["clients"]) if vals["clients"] else None
        vals["published_throughput"] = float(vals["published_throughput"])
        for k in ("available_memory_proportion", "published_latency_ms"):
            vals[k] = float(vals[k]) if vals[k] else None
    except ValueError as e:
        raise ValueError(f"{where}: {rid}: {e}") from None
    vals["machines"] = tuple(m.strip().upper() for m in vals["machines"].split("|") if m.strip())
    run = PublishedInference(**vals)
    if not run.id:
        raise ValueError(f"{where}: a row has no id")
    if not run.source or not run.locator:
        raise ValueError(f"{where}: {run.id} needs a source and a locator")
    if not (run.published_throughput > 0 and math.isfinite(run.published_throughput)):
        raise ValueError(f"{where}: {run.id}: published_throughput must be a positive number")
    if run.published_latency_ms is not None and not (run.published_latency_ms > 0
                                                     and math.isfinite(run.published_latency_ms)):
        raise ValueError(f"{where}: {run.id}: published_latency_ms must be a positive number")
    if run.batch < 1 or run.io_tiles < 0 or (run.clients is not None and run.clients < 1):
        raise ValueError(f"{where}: {run.id}: batch and clients must be >= 1 and io_tiles >= 0")
    amp = run.available_memory_proportion
    if amp is not None and not 0 < amp <= 1:
        raise ValueError(f"{where}: {run.id}: available_memory_proportion must be in (0, 1]")
    if not run.not_modelled:
        if not run.machines:
            raise ValueError(f"{where}: {run.id}: no machine to model it on (or a not_modelled reason)")
        for m in run.machines:
            if run.io_tiles >= machine_spec(m).n_tiles:
                raise ValueError(f"{where}: {run.id}: {run.io_tiles} I/O tiles leave no compute tile on {m}")
        from ..nn.models import MODELS
        if run.network not in MODELS:
            raise ValueError(f"{where}: {run.id}: unknown network {run.network!r}")
    return run


def load_inference(path: str | Path | None = None) -> list[PublishedInference]:
    """The published inference rows (the packaged ``published_inference.csv`` unless ``path``).

    Raises ValueError naming the row on a missing column, a bad number, a row without source
    or locator, an unknown machine or network, or a repeated id.
    """
    where, records = read_table("published_inference.csv", path, _FIELDS)
    out: list[PublishedInference] = []
    for lineno, rec in records:
        run = _parse(rec, f"{where} line {lineno}")
        if any(r.id == run.id for r in out):
            raise ValueError(f"{where} line {lineno}: duplicate id {run.id!r}")
        out.append(run)
    return out


@dataclass
class InferenceRow:
    """A published figure with the model's on each machine and exchange variant."""

    run: PublishedInference
    #: (machine, variant) -> model samples/s
    model: dict[tuple[str, str], float] = field(default_factory=dict)
    #: machine -> the per-tile memory verdict (default exchange): fits, peak_bytes, budget_bytes
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str = ""

    def ratio(self, machine: str, variant: str = "default") -> float | None:
        """model / published throughput (None when not modelled)."""
        v = self.model.get((machine, variant))
        return None if v is None else v / self.run.published_throughput

    def model_seconds(self, machine: str, variant: str = "default") -> float | None:
        """The model's seconds per batch."""
        v = self.model.get((machine, variant))
        return None if v is None else self.run.batch / v

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self.run)
        d["machines"] = "|".join(self.run.machines)
        d.pop("not_modelled")
        d["published_ms_per_batch"] = round(self.run.published_seconds_per_batch * 1e3, 4)
        for m in self.run.machines:
            for var in VARIANTS:
                key = f"{m.lower()}_{var}"
                v = self.model.get((m, var))
                d[f"model_{key}"] = None if v is None else round(v, 1)
                r = self.ratio(m, var)
                d[f"ratio_{key}"] = None if r is None else round(r, 3)
            mem = self.memory.get(m)
            d[f"fits_{m.lower()}"] = None if mem is None else mem["fits"]
        d["not_modelled"] = self.reason
        return d


@dataclass
class InferenceReport:
    """Rows in table order."""

    rows: list[InferenceRow]

    def summary(self) -> dict[str, Any]:
        """Geometric-mean model/published throughput per (machine, variant) over modelled rows."""
        keys = dict.fromkeys(k for r in self.rows for k in r.model)
        return {"rows": len(self.rows), "modelled": sum(1 for r in self.rows if not r.reason),
                "geomean_ratio": {f"{m}/{v}": geomean([r.ratio(m, v) for r in self.rows if (m, v) in r.model])
                                  for m, v in keys}}

    def to_csv(self, path: str | Path) -> Path:
        """One line per row: the published fields, the model's samples/s and ratios."""
        dicts = [r.to_dict() for r in self.rows]
        cols = list(dict.fromkeys(k for d in dicts for k in d))
        return write_table(path, [{k: d.get(k) for k in cols} for d in dicts], _FIELDS)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps({**schema("validation.inference"),
                           "rows": [r.to_dict() | {"memory": r.memory} for r in self.rows],
                           "summary": self.summary()}, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def format_table(self) -> str:
        """An aligned table (:func:`ipukern._format.format_table`), one line per row and
        machine: published samples/s and ms per batch, the model's samples/s (default
        exchange and 8 TB/s) and model/published."""
        head = ["id", "batch", "published", "published ms/batch", "machine", "model", "ratio",
                "model, 8 TB/s exchange", "ratio"]
        lines = []
        for r in self.rows:
            u = r.run
            cells = [u.id, str(u.batch), f"{fmt_num(u.published_throughput)} {u.unit}",
                     f"{u.published_seconds_per_batch * 1e3:.2f}"]
            if r.reason:
                lines.append(cells + [Rest(f"not modelled: {r.reason}")])
                continue
            for m in u.machines:
                fit = "" if r.memory.get(m, {}).get("fits", True) else " (does not fit)"
                lines.append(cells + [m, fmt_num(r.model.get((m, "default"))) + fit, fmt_num(r.ratio(m), 2),
                                      fmt_num(r.model.get((m, "datasheet"))),
                                      fmt_num(r.ratio(m, "datasheet"), 2)])
        return format_table(head, lines, align="lrrrlrrrr")


def _machine(name: str, io_tiles: int, datasheet: bool) -> Any:
    spec = machine_spec(name)
    if io_tiles:
        spec = spec.replace(n_tiles=spec.n_tiles - io_tiles, name=f"{spec.name}-{io_tiles}io")
    return spec.with_datasheet_exchange() if datasheet else spec


def _plans(run: PublishedInference) -> int:
    """What one cold estimate of ``run`` plans: its distinct conv and matmul layers at its batch.

    The planner's search is most of an estimate's time and repeated layers come from the plan
    cache, so ResNet-50 (about 25 distinct convs) costs several times a BERT (6 matmul shapes)
    however many layers each has; counting estimates alone made the ETA 4-5x off.
    """
    from ..nn.layers import Conv2d, Linear, MatMul

    net = build_network(run.network, run.network_args)
    shapes = net.shapes(run.batch)
    return max(1, len({(repr(layer), shapes[name]) for name, layer in net.layers
                       if isinstance(layer, (Conv2d, Linear, MatMul))}))


def inference_report(runs: Sequence[PublishedInference] | None = None, *, ids: Sequence[str] | None = None,
                     datasheet: bool = True, progress: Any = None) -> InferenceReport:
    """Run the published inference configurations through :func:`ipukern.estimate_network`.

    Parameters
    ----------
    runs : list of PublishedInference, optional
        Defaults to the packaged table (:func:`load_inference`).
    ids : list of str, optional
        Only these rows (exact ids); unknown ids raise ValueError.
    datasheet : bool
        Also model each row with the datasheet IPU-Exchange rate (8 TB/s).
    progress : callable(done, total, label), optional

    Returns
    -------
    InferenceReport
        A model error on a row becomes that row's reason; it is not raised. A row whose
        per-tile memory does not fit in the model is still modelled (the published run ran)
        and its verdict recorded.
    """
    from ..nn import estimate_network

    runs = select(list(load_inference() if runs is None else runs), ids, lambda r: r.id, "id")
    rows: list[InferenceRow] = []
    if hasattr(progress, "set_costs"):     # the ETA's weights (a skip is ~free)
        progress.set_costs([0.0 if r.not_modelled else
                            len(r.machines) * (len(VARIANTS) if datasheet else 1) * _plans(r)
                            for r in runs])
    for k, run in enumerate(runs):
        row = InferenceRow(run)
        if run.not_modelled:
            row.reason = run.not_modelled
        else:
            try:
                net = build_network(run.network, run.network_args)
                for m in run.machines:
                    for var in VARIANTS if datasheet else VARIANTS[:1]:
                        prof = estimate_network(net, batch=run.batch, dtype=run.dtype, partials=run.partials,
                                                machine=_machine(m, run.io_tiles, var == "datasheet"),
                                                allow_overflow=True,
                                                available_memory_proportion=run.available_memory_proportion)
                        row.model[(m, var)] = prof.samples_per_second
                        if var == "default":
                            mem = prof.to_dict()["memory"]   # .memory would search the max batch
                            row.memory[m] = {"fits": bool(mem["fits"]), "peak_bytes": int(mem["peak_bytes"]),
                                             "budget_bytes": int(mem["budget_bytes"]),
                                             "busiest_layer": mem["busiest_layer"]}
            except (ValueError, MemoryError, NotImplementedError) as e:
                row.model.clear()
                row.memory.clear()
                row.reason = "model error: " + " ".join(str(e).split())
        rows.append(row)
        if progress is not None:
            progress(k + 1, len(runs), run.id)
    return InferenceReport(rows)
