"""Published system-level training results next to the model.

``published_systems.csv`` (shipped with the package) holds the configurations and measured
results of public training runs: Graphcore's MLPerf Training v1.0/v1.1 submissions (ResNet-50
and BERT-Large on IPU-POD16 and POD64), NVIDIA's DGX A100 submissions of the same rounds, and
rows of Graphcore's published performance table. Every row names its source (repository and
log/config files, or the web page and table row) and how the published value was derived.

:func:`systems_report` runs each configuration through the model as it stands:
:func:`ipukern.estimate_training` for IPU systems, :func:`ipukern.gpu.estimate_network_gpu`
for the DGX A100. The model's throughput and time-to-train sit next to the published ones with
the ratio per row, plus the POD16 -> POD64 scaling factors. Nothing here is fitted: the
presets are used as they are, and a row the model cannot represent keeps its reason.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._format import MISSING, fmt_num, format_table
from .._version import schema
from ._table import build_network, geomean, read_table, select, write_table

__all__ = ["PublishedRun", "SystemsReport", "SystemsRow", "load_published", "systems_report"]

_INT = ("replicas", "ipus_per_replica", "micro_batch", "gradient_accumulation", "replicated_sharding",
        "items_per_sample", "sample_bytes", "train_items", "bn_group")
_FLOAT = ("published_minutes", "published_throughput", "available_memory_proportion")
_FIELDS = ("id", "kind", "round", "benchmark", "system", "network", "network_args", *_INT[:4], "pipeline",
           "recompute", "optimizer", "optimizer_state", "optimizer_state_dtype", "replicated_sharding",
           "dtype", "partials",
           "available_memory_proportion", "bn_group", "items_per_sample", "sample_bytes", "train_items",
           *_FLOAT[:2], "unit", "source",
           "locator", "note", "not_modelled")
_KINDS = ("ipu_training", "gpu_training")


@dataclass(frozen=True)
class PublishedRun:
    """One row of ``published_systems.csv`` (empty numeric fields are None)."""

    id: str
    kind: str
    round: str
    benchmark: str
    system: str
    network: str
    network_args: str
    replicas: int | None
    ipus_per_replica: int | None
    micro_batch: int | None
    gradient_accumulation: int | None
    pipeline: str
    recompute: str
    optimizer: str
    optimizer_state: str
    replicated_sharding: int | None
    dtype: str
    partials: str
    #: batch norm statistics over groups of this many replicas (None: per replica)
    bn_group: int | None
    #: published items (images, sequences) per model sample (2: a BERT pack of 2 sequences)
    items_per_sample: int | None
    sample_bytes: int | None
    #: items trained until convergence (for time-to-train)
    train_items: int | None
    published_minutes: float | None
    published_throughput: float | None
    unit: str
    source: str
    locator: str
    note: str
    not_modelled: str
    #: PopLibs' availableMemoryProportion of the configuration's convs and matmuls (None: the
    #: default 0.6)
    available_memory_proportion: float | None = None
    #: optimizer state storage: "float32", "float16" or one per state slot joined by "|"
    #: (empty: float32)
    optimizer_state_dtype: str = ""

    @property
    def state_dtype(self) -> Any:
        """``optimizer_state_dtype`` as :func:`ipukern.estimate_training` takes it."""
        parts = [p for p in self.optimizer_state_dtype.split("|") if p]
        return "float32" if not parts else parts[0] if len(parts) == 1 else tuple(parts)


@dataclass
class SystemsRow:
    """A published run with the model's figures (or the reason it has none)."""

    run: PublishedRun
    model_throughput: float | None = None
    model_minutes: float | None = None
    #: IPU rows: the throughput with the datasheet IPU-Exchange rate (``with_datasheet_exchange``)
    model_datasheet: float | None = None
    #: what bounds the modelled step (the estimate's bottleneck)
    how: str = ""
    reason: str = ""
    details: dict = field(default_factory=dict)

    @property
    def throughput_ratio(self) -> float | None:
        """model / published throughput."""
        p = self.run.published_throughput
        return None if self.model_throughput is None or not p else self.model_throughput / p

    @property
    def datasheet_ratio(self) -> float | None:
        """model (datasheet exchange) / published throughput."""
        p = self.run.published_throughput
        return None if self.model_datasheet is None or not p else self.model_datasheet / p

    @property
    def minutes_ratio(self) -> float | None:
        """model / published time-to-train."""
        p = self.run.published_minutes
        return None if self.model_minutes is None or not p else self.model_minutes / p

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self.run)
        d.pop("not_modelled")
        d.update(model_throughput=_round(self.model_throughput), model_minutes=_round(self.model_minutes, 2),
                 throughput_ratio=_round(self.throughput_ratio, 3),
                 model_datasheet_throughput=_round(self.model_datasheet),
                 datasheet_ratio=_round(self.datasheet_ratio, 3), minutes_ratio=_round(self.minutes_ratio, 3),
                 model_how=self.how, not_modelled=self.reason)
        return d


def _round(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(v, nd)


def _parse(rec: dict[str, str], where: str) -> PublishedRun:
    vals: dict[str, Any] = {k: (rec[k] or "").strip() for k in _FIELDS}
    for k in _INT:
        vals[k] = int(vals[k]) if vals[k] else None
    for k in _FLOAT:
        vals[k] = float(vals[k]) if vals[k] else None
    run = PublishedRun(**vals)
    if run.kind not in _KINDS:
        raise ValueError(f"{where}: {run.id}: kind must be one of {_KINDS}, got {run.kind!r}")
    if not run.source:
        raise ValueError(f"{where}: {run.id} has no source")
    if run.published_minutes is None and run.published_throughput is None:
        raise ValueError(f"{where}: {run.id} has neither a published time nor a throughput")
    for k in (*_INT, *_FLOAT):
        v = getattr(run, k)
        if v is not None and not (v >= 0 and math.isfinite(v)):
            raise ValueError(f"{where}: {run.id}: {k} must be a finite number >= 0, got {v}")
    if run.optimizer:           # a known optimizer (both kinds), its state types (IPU rows)
        from ..ops import state_dtypes
        state_dtypes(run.optimizer, run.state_dtype)
    if not run.not_modelled and None in (run.replicas, run.micro_batch, run.gradient_accumulation):
        raise ValueError(f"{where}: {run.id}: replicas, micro_batch and gradient_accumulation are "
                         "needed unless the row says why it is not modelled")
    return run


def load_published(path: str | Path | None = None) -> list[PublishedRun]:
    """The published runs (the packaged ``published_systems.csv`` unless ``path`` is given).

    Raises ValueError naming the row on a missing column, a bad number, a row without
    source or published value, or a repeated id.
    """
    where, records = read_table("published_systems.csv", path, _FIELDS)
    out: list[PublishedRun] = []
    for lineno, rec in records:
        try:
            run = _parse(rec, f"{where} line {lineno}")
        except (TypeError, ValueError) as e:
            raise ValueError(str(e) if str(e).startswith(where) else f"{where} line {lineno}: {e}") from None
        if any(r.id == run.id for r in out):
            raise ValueError(f"{where} line {lineno}: duplicate id {run.id!r}")
        out.append(run)
    return out


def _network(run: PublishedRun) -> Any:
    return build_network(run.network, run.network_args)


def _every_layer_checkpoints(run: PublishedRun, net: Any) -> list[str]:
    """PopART's ``recompute_checkpoint_every_layer``: a checkpoint at each encoder layer's
    output except the last layer of each pipeline stage, whose output is copied to the next
    stage (Graphcore's ``bert_model.py``, ``Bert.should_checkpoint``: "Only checkpoint tensors
    that are not to be copied to the next pipelineStage"; the last encoder layer feeds the
    heads' stage)."""
    layers = [n for n in net.nodes if re.fullmatch(r"encoder\.layer\.\d+\.output\.LayerNorm", n)]
    if not layers:
        raise ValueError(f"{run.id}: recompute 'every_layer' needs encoder layers in {run.network}")
    order = {n: k for k, n in enumerate(net.nodes)}
    splits = [] if run.pipeline in ("", "auto") else run.pipeline.split("|")
    cuts = sorted(order[c] for c in splits if c in order) + [len(order)]
    # a stage's last checkpoint: the last encoder output before a cut
    last = {max((c for c in layers if order[c] < cut), key=order.get, default=None) for cut in cuts}
    return [c for c in layers if c not in last]


def _model_ipu(run: PublishedRun, net: Any, datasheet: bool = False) -> tuple[float, str, dict]:
    from ..systems import get_system
    from ..systems import estimate_training
    system = get_system(run.system)
    if datasheet:
        system = system.replace(chip=system.chip.with_datasheet_exchange())
    if run.recompute == "stage":
        recompute: Any = True
    elif run.recompute == "every_layer":
        recompute = _every_layer_checkpoints(run, net)
    elif run.recompute == "auto":       # the estimator picks the checkpoints that fit
        recompute = "auto"
    else:
        recompute = [c for c in run.recompute.split("|") if c] or None
    pipeline: Any = None
    if run.pipeline == "auto":
        pipeline = "auto"
    elif run.pipeline:
        pipeline = run.pipeline.split("|")
    est = estimate_training(net, system, micro_batch=run.micro_batch,
                            gradient_accumulation=run.gradient_accumulation, replicas=run.replicas,
                            ipus_per_replica=run.ipus_per_replica or 1, pipeline=pipeline, dtype=run.dtype,
                            partials=run.partials or "half", recompute=recompute, optimizer=run.optimizer,
                            optimizer_state=run.optimizer_state or "chip",
                            optimizer_state_dtype=run.state_dtype,
                            replicated_sharding=bool(run.replicated_sharding), sample_bytes=run.sample_bytes,
                            bn_replica_group=run.bn_group or 1, allow_overflow=True,
                            available_memory_proportion=run.available_memory_proportion)
    parts = {k: round(v * 1e3, 3) for k, v in est.info["parts_s"].items()}
    # the published configurations ran; where the model's per-tile memory says a stage does
    # not fit, the throughput is still modelled and the verdict recorded
    worst = max(est.breakdown, key=lambda r: r.get("peak_tile_bytes", 0))
    memory = {"fits": est.info["fits"], "peak_tile_bytes": worst.get("peak_tile_bytes"),
              "stage": worst["stage"], "at": worst.get("busiest_step")}
    how = est.bottleneck if est.info["fits"] else (
        f"{est.bottleneck}; the model's per-tile memory does not fit: stage {worst['stage']} "
        f"{worst['peak_tile_bytes']:,} B > {worst['tile_bytes']:,} B per tile")
    return est.samples_per_second, how, {"step_ms": round(est.step_seconds * 1e3, 3),
                                                      "parts_ms": parts, "stages": len(est.stages),
                                                      "memory": memory}


def _model_gpu(run: PublishedRun, net: Any) -> tuple[float, str, dict]:
    from ..gpu import estimate_network_gpu, get_gpu_system
    # "DGX_A100_80GB" (MLPerf's DGX A100: 8 x A100-SXM4-80GB, system JSON) names the DGX_A100 preset
    system = get_gpu_system(run.system)
    est = estimate_network_gpu(net, run.micro_batch, system, dtype=run.dtype, training=True,
                               n_gpus=run.replicas, optimizer=run.optimizer or "sgd_momentum",
                               stack="mlperf")
    parts = {f"{k}_ms": round(getattr(est, f"{k}_seconds") * 1e3, 3)
             for k in ("forward", "backward", "optimizer", "all_reduce", "exposed_all_reduce")}
    details = {"step_ms": round(est.step_seconds * 1e3, 3), "parts_ms": parts, "stack": est.stack}
    return est.samples_per_second, f"kernel-level GPU model (stack {est.stack})", details


@dataclass
class SystemsReport:
    """Rows in table order and the POD16 -> POD64 scaling comparisons."""

    rows: list[SystemsRow]
    #: one dict per (round, benchmark) with a POD16 and a POD64 row: model and published factors
    scaling: list[dict]

    def to_csv(self, path: str | Path) -> Path:
        """One line per published run: its fields, the model's figures and the ratios."""
        return write_table(path, [r.to_dict() for r in self.rows], _FIELDS)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps({**schema("validation.systems"),
                           "rows": [r.to_dict() | {"details": r.details} for r in self.rows],
                           "scaling": self.scaling, "summary": self.summary()}, indent=1)
        if path is not None:
            Path(path).write_text(text)
        return text

    def summary(self) -> dict[str, Any]:
        """Geometric-mean model/published ratios (throughput, time) over the modelled rows,
        overall and per kind (``ipu_training``, ``gpu_training``)."""
        def stats(rows: list[SystemsRow]) -> dict[str, Any]:
            def geo(attr: str) -> float | None:
                return geomean([getattr(r, attr) for r in rows if getattr(r, attr)])
            return {"rows": len(rows), "modelled": sum(1 for r in rows if not r.reason),
                    "geomean_throughput_ratio": geo("throughput_ratio"),
                    "geomean_datasheet_ratio": geo("datasheet_ratio"),
                    "geomean_minutes_ratio": geo("minutes_ratio")}
        out = stats(self.rows)
        out["by_kind"] = {k: stats([r for r in self.rows if r.run.kind == k])
                          for k in dict.fromkeys(r.run.kind for r in self.rows)}
        return out

    def format_table(self) -> str:
        """An aligned table (:func:`ipukern._format.format_table`): published and model
        throughput and time-to-train, ratios, what bounds the model (or why a row is not
        modelled)."""
        head = ["id", "system", "config", "published", "model", "ratio", "model, 8 TB/s exchange", "ratio",
                "published min", "model min", "ratio", "model bound by"]
        lines = []
        for r in self.rows:
            u = r.run
            cfg = (f"{u.replicas}x{u.ipus_per_replica or 1}, mb {u.micro_batch}, ga {u.gradient_accumulation}"
                   if u.replicas else MISSING)
            if r.reason:
                lines.append([u.id, u.system, cfg, f"{fmt_num(u.published_throughput)} {u.unit}",
                              *[MISSING] * 4, fmt_num(u.published_minutes, 2), MISSING, MISSING,
                              f"not modelled: {r.reason}"])
                continue
            lines.append([u.id, u.system, cfg, fmt_num(u.published_throughput), fmt_num(r.model_throughput),
                          fmt_num(r.throughput_ratio, 2), fmt_num(r.model_datasheet),
                          fmt_num(r.datasheet_ratio, 2), fmt_num(u.published_minutes, 2),
                          fmt_num(r.model_minutes, 2), fmt_num(r.minutes_ratio, 2), r.how])
        return format_table(head, lines, align="lllrrrrrrrrl")

    def format_scaling(self) -> str:
        head = ["round", "benchmark", "published POD64/POD16 throughput", "model",
                "published time POD16/POD64", "model"]
        keys = ("published_throughput_factor", "model_throughput_factor", "published_time_factor",
                "model_time_factor")
        return format_table(head, [[s["round"], s["benchmark"], *(fmt_num(s[k], 2) for k in keys)]
                                   for s in self.scaling], align="llrrrr")


def _scaling(rows: list[SystemsRow]) -> list[dict]:
    out = []
    by = {(r.run.round, r.run.benchmark, r.run.system): r for r in rows}
    for (rnd, bench, sysname), small in by.items():
        if sysname != "POD16" or (rnd, bench, "POD64") not in by:
            continue
        big = by[(rnd, bench, "POD64")]

        def ratio(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None or b == 0 else round(a / b, 3)
        out.append({"round": rnd, "benchmark": bench,
                    "published_throughput_factor": ratio(big.run.published_throughput,
                                                         small.run.published_throughput),
                    "model_throughput_factor": ratio(big.model_throughput, small.model_throughput),
                    "published_time_factor": ratio(small.run.published_minutes, big.run.published_minutes),
                    "model_time_factor": ratio(small.model_minutes, big.model_minutes)})
    return out


def systems_report(runs: Sequence[PublishedRun] | None = None, *, ids: Sequence[str] | None = None,
                   datasheet: bool = True, progress: Any = None) -> SystemsReport:
    """Run the published configurations through the model.

    Parameters
    ----------
    runs : list of PublishedRun, optional
        Defaults to the packaged table (:func:`load_published`).
    ids : list of str, optional
        Only these rows (exact ids); unknown ids raise ValueError.
    datasheet : bool
        Also model the IPU rows with the datasheet IPU-Exchange rate (8 TB/s), as
        :func:`ipukern.validation.run` does for every point (twice the planning work).
    progress : callable(done, total, label), optional

    Returns
    -------
    SystemsReport
        A model error on a row (a stage that does not fit, a layer without a model) becomes
        that row's reason; it is not raised.
    """
    runs = select(list(load_published() if runs is None else runs), ids, lambda r: r.id, "id")
    nets: dict[tuple[str, str], Any] = {}
    rows: list[SystemsRow] = []
    if hasattr(progress, "set_costs"):     # the ETA's weights: estimates per row (a skip is ~free)
        progress.set_costs([0.0 if r.not_modelled else 1 + (datasheet and r.kind == "ipu_training")
                            for r in runs])
    for k, run in enumerate(runs):
        row = SystemsRow(run)
        if run.not_modelled:
            row.reason = run.not_modelled
        else:
            try:
                key = (run.network, run.network_args)
                if key not in nets:
                    nets[key] = _network(run)
                model = _model_ipu if run.kind == "ipu_training" else _model_gpu
                sps, row.how, row.details = model(run, nets[key])
                row.model_throughput = sps * (run.items_per_sample or 1)
                if run.kind == "ipu_training" and datasheet:
                    sps_ds = _model_ipu(run, nets[key], datasheet=True)[0]
                    row.model_datasheet = sps_ds * (run.items_per_sample or 1)
                if run.train_items:
                    row.model_minutes = run.train_items / row.model_throughput / 60.0
            except (ValueError, MemoryError, NotImplementedError) as e:
                row.reason = "model error: " + " ".join(str(e).split())
        rows.append(row)
        if progress is not None:
            progress(k + 1, len(runs), run.id)
    return SystemsReport(rows, _scaling(rows))
