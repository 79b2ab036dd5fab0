"""The GPU side of every comparison, next to measured GPUs: ``ipukern validate --gpu``.

Three tables, each saying which rows any fitted constant saw:

1. **kernels**: NeuSight's single-kernel latencies (``ipukern/gpu/data/neusight/kernels.csv``)
   against :mod:`ipukern.gpu`'s kernel model, per (GPU, split, op class): rows, mean absolute
   percentage error (MAPE), geometric-mean model/measured, and whether the fit
   (``python -m ipukern.gpu.fit``) saw them. H100, L4, every ``test`` row and every conv
   row are held out.
2. **end to end**: NeuSight's measured BERT-Large / GPT-2 Large / GPT-3 XL and 2.7B / OPT-1.3B
   training and inference steps (eager PyTorch, FP32, one GPU), each priced from NeuSight's
   own op graph (:mod:`ipukern.gpu.traces`), next to NeuSight's, the roofline's and
   Habitat's predictions (NeuSight's repository ships them): the peer table. No end-to-end
   row is fitted. Rows not priced: multi-GPU (dp4/tp4/pp4) and ``-fusion`` rows (the op
   graph of a torch-compiled model is not shipped), Switch (no op graph).
3. **per op**: NeuSight's per-op forward/backward latencies of those models on the held-out
   H100, L4 and A100 80GB (``ops.csv``), per op class, with NeuSight's, the roofline's and
   Habitat's predictions of the same ops: the peer table at the op level. Rows where
   NeuSight predicts 0 or the op graph launches nothing are left out (counted).
4. **MLPerf**: the DGX A100 rows of ``validation/published_systems.csv`` through
   :func:`ipukern.gpu.estimate_network_gpu` with the ``"mlperf"`` stack.
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .._format import MISSING, fmt_num, format_table
from .._version import schema

__all__ = ["KernelGroup", "OpGroup", "E2ERow", "GPUValidationReport", "gpu_report"]


@dataclass(frozen=True)
class KernelGroup:
    gpu: str
    split: str
    op_class: str
    rows: int
    fitted: bool
    mape: float
    geomean_ratio: float


@dataclass(frozen=True)
class OpGroup:
    """One (GPU, op class) of the per-op table: MAPE of each method on the same rows."""

    gpu: str
    op_class: str
    rows: int
    mape: float
    neusight_mape: float
    roofline_mape: float
    habitat_mape: float


@dataclass(frozen=True)
class E2ERow:
    gpu: str
    config: str
    mode: str
    num_layer: int
    measured_ms: float
    model_ms: float
    neusight_ms: float | None
    roofline_ms: float | None
    habitat_ms: float | None

    def error(self, which: str = "model") -> float | None:
        v = getattr(self, f"{which}_ms")
        return None if v is None else v / self.measured_ms - 1.0


def _stats(pairs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    errs = [abs(p / m - 1.0) for p, m in pairs]
    logs = [math.log(p / m) for p, m in pairs]
    return 100.0 * sum(errs) / len(errs), math.exp(sum(logs) / len(logs))


def kernel_groups(progress: Any = None) -> list[KernelGroup]:
    from ..gpu.fit import TRAIN_GPUS
    from ..gpu.measured import load_measured_kernels, predict_seconds

    rows = load_measured_kernels()
    groups: dict[tuple, list] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r.gpu.name, r.split, r.op_class, r.gpu_name)].append((predict_seconds(r), r.seconds))
        if progress is not None and i % 500 == 0:
            progress(i, len(rows))
    out = []
    for (gpu, split, cls, raw), pairs in sorted(groups.items()):
        fitted = split == "train" and raw in TRAIN_GPUS and cls != "conv"
        mape, geo = _stats(pairs)
        out.append(KernelGroup(gpu, split, cls, len(pairs), fitted, mape, geo))
    return out


_OP_CLASSES = {"Linear": "linear", "BMM": "bmm", "VECln": "layernorm", "VECsoftmax": "softmax"}


def op_groups() -> tuple[list[OpGroup], int]:
    """(per (GPU, op class) groups, rows left out) of NeuSight's per-op labels.

    Only GEMMs, layer norms and softmaxes: the per-op labels of small element-wise ops sit at
    7-13 us (an add of 12 MB: 12.7 us), below the 28 us host cost the single-kernel rows fix
    (:data:`~ipukern.gpu.calibration.EAGER_HOST_S`), so the two timings differ in what they
    include around a small kernel and those rows would compare the conventions, not the
    kernels. They are counted as left out."""
    from ..gpu.specs import get_gpu
    from ..gpu.traces import node_seconds

    ref = resources.files("ipukern.gpu").joinpath("data/neusight/ops.csv")
    with ref.open("r", encoding="utf-8", newline="") as f:
        recs = list(csv.DictReader(f))
    methods = ("neusight", "roofline", "habitat")
    groups: dict[tuple[str, str], list[tuple[float, ...]]] = defaultdict(list)
    left_out = 0
    for r in recs:
        gpu = get_gpu(r["gpu_dir"])
        for d in ("fw", "bw"):
            meas, ns = float(r[f"measured_{d}_ms"]), float(r[f"neusight_{d}_ms"])
            if meas <= 0:
                continue        # no backward (inference, or an op without gradient)
            cls = _OP_CLASSES.get(r["opname"])
            model = None if cls is None else node_seconds(r["config"], r["name"], gpu, backward=d == "bw")
            if ns <= 0 or model is None:
                left_out += 1
                continue
            groups[(gpu.name, cls)].append(
                (meas, 1e3 * model, *(float(r[f"{m}_{d}_ms"]) for m in methods)))

    def mape(pts: list, i: int) -> float:
        return 100.0 * sum(abs(p[i] / p[0] - 1.0) for p in pts) / len(pts)

    out = [OpGroup(g, c, len(pts), mape(pts, 1), mape(pts, 2), mape(pts, 3), mape(pts, 4))
           for (g, c), pts in sorted(groups.items())]
    return out, left_out


def _opt(v: str) -> float | None:
    return float(v) if v not in ("", None) else None


def e2e_rows() -> tuple[list[E2ERow], list[str]]:
    """(priced rows, one line per row left out with the reason)."""
    from ..gpu.specs import get_gpu
    from ..gpu.traces import trace_configs, trace_step

    ref = resources.files("ipukern.gpu").joinpath("data/neusight/e2e.csv")
    with ref.open("r", encoding="utf-8", newline="") as f:
        recs = list(csv.DictReader(f))
    graphs = set(trace_configs())
    out, skipped = [], []
    for r in recs:
        config = f"{r['model']}-{r['mode']}-{r['seq']}-{r['batch']}"
        label = f"{r['gpu_dir']} {config}{'-' + r['parallel'] if r['parallel'] else ''}"
        if r["parallel"]:
            skipped.append(f"{label}: multi-GPU ({r['parallel']}), not priced")
            continue
        if r["fusion"] == "true":
            skipped.append(f"{label}-fusion: no op graph of the fused model")
            continue
        if config not in graphs or not r["num_layer"] or int(r["num_layer"]) == 0:
            skipped.append(f"{label}: no op graph (or no layer count) shipped")
            continue
        step = trace_step(config, int(r["num_layer"]), get_gpu(r["gpu_dir"]), training=r["mode"] == "train")
        out.append(E2ERow(r["gpu_dir"], config, r["mode"], int(r["num_layer"]), float(r["measured_e2e_ms"]),
                          step.seconds * 1e3, _opt(r["neusight_e2e_ms"]), _opt(r["roofline_e2e_ms"]),
                          _opt(r["habitat_e2e_ms"])))
    return out, skipped


def mlperf_rows(progress: Any = None) -> list[dict]:
    from .systems import load_published, systems_report

    ids = [r.id for r in load_published() if r.kind == "gpu_training"]
    rep = systems_report(ids=ids, progress=progress)
    return [{"id": r.run.id, "system": r.run.system, "published": r.run.published_throughput,
             "model": r.model_throughput, "ratio": r.throughput_ratio, "stack": "mlperf"}
            for r in rep.rows]


@dataclass
class GPUValidationReport:
    kernels: list[KernelGroup]
    e2e: list[E2ERow]
    skipped: list[str]
    mlperf: list[dict]
    ops: list[OpGroup] = field(default_factory=list)
    ops_left_out: int = 0

    def summary(self) -> dict[str, Any]:
        held = [g for g in self.kernels if g.gpu in ("H100", "L4")]
        by_cls: dict[str, list[str]] = defaultdict(list)
        for g in held:
            by_cls[g.op_class].append(f"{g.gpu} {g.mape:.1f}%")
        within = sum(1 for r in self.e2e if abs(r.error()) <= 0.15)
        ns = [r for r in self.e2e if r.neusight_ms is not None]
        return {
            "held_out_kernel_mape": {k: v for k, v in sorted(by_cls.items())},
            "e2e_rows": len(self.e2e),
            "e2e_within_15pct": within,
            "e2e_mape": round(100 * sum(abs(r.error()) for r in self.e2e) / max(len(self.e2e), 1), 1),
            "e2e_neusight_mape": round(100 * sum(abs(r.error("neusight")) for r in ns) / max(len(ns), 1), 1),
            "per_op_mape": {f"{g.gpu} {g.op_class}": {"ipukern": round(g.mape, 1),
                                                       "neusight": round(g.neusight_mape, 1)}
                            for g in self.ops},
            "mlperf_ratios": {r["id"]: None if r["ratio"] is None else round(r["ratio"], 2)
                              for r in self.mlperf},
        }

    def format_table(self) -> str:
        def pct(v: float | None) -> str:
            return MISSING if v is None else f"{100 * v:+.0f}%"

        kernels = format_table(["gpu", "split", "op class", "rows", "fitted", "MAPE", "model/meas"],
                               [[g.gpu, g.split, g.op_class, g.rows, "yes" if g.fitted else "no",
                                 f"{g.mape:.1f}%", f"{g.geomean_ratio:.2f}"] for g in self.kernels],
                               align="lllrrrr")
        e2e = format_table(["gpu", "config", "measured ms", "ipukern", "NeuSight", "roofline", "Habitat"],
                           [[r.gpu, r.config, f"{r.measured_ms:.1f}", pct(r.error()),
                             *(pct(r.error(k)) for k in ("neusight", "roofline", "habitat"))]
                            for r in self.e2e],
                           align="llrrrrr")
        ops = format_table(["gpu", "op class", "rows", "ipukern", "NeuSight", "roofline", "Habitat"],
                           [[g.gpu, g.op_class, g.rows, f"{g.mape:.1f}%", f"{g.neusight_mape:.1f}%",
                             f"{g.roofline_mape:.1f}%", f"{g.habitat_mape:.1f}%"] for g in self.ops],
                           align="llrrrrr")
        mlperf = format_table(["id", "published", "model", "ratio"],
                              [[r["id"], fmt_num(r["published"]), fmt_num(r["model"] or 0),
                                fmt_num(r["ratio"], 2)] for r in self.mlperf], align="lrrr")
        return "\n".join([
            "GPU kernels (NeuSight single-kernel latencies; fitted = seen by python -m ipukern.gpu.fit)",
            kernels, "",
            "End to end (NeuSight measured, eager PyTorch FP32; error = prediction / measured - 1; "
            "none of these rows is fitted)", e2e, "",
            "Per op (NeuSight's per-op forward and backward labels on held-out GPUs; MAPE of each "
            f"method on the same rows; {self.ops_left_out} rows left out: element-wise and other "
            "small ops, whose labels sit below the single-kernel rows' host cost, and ops NeuSight "
            "prices as 0 or the graph launches nothing for)", ops, "",
            "MLPerf Training DGX A100 (stack mlperf; model / published throughput)", mlperf, "",
            f"not priced: {len(self.skipped)} end-to-end rows (multi-GPU, -fusion, no op graph)"])

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps({**schema("validation.gpu"), "summary": self.summary(),
                           "kernels": [asdict(g) for g in self.kernels],
                           "e2e": [asdict(r) for r in self.e2e], "ops": [asdict(g) for g in self.ops],
                           "mlperf": self.mlperf,
                           "skipped": self.skipped}, indent=1)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        with path.open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["table", "gpu", "what", "rows", "fitted", "measured", "model", "error_pct",
                        "neusight_error_pct"])
            for g in self.kernels:
                w.writerow(["kernels", g.gpu, f"{g.split} {g.op_class}", g.rows, g.fitted, "", "",
                            round(g.mape, 2), ""])
            for r in self.e2e:
                ns = r.error("neusight")
                w.writerow(["e2e", r.gpu, r.config, 1, False, round(r.measured_ms, 3), round(r.model_ms, 3),
                            round(100 * r.error(), 2), "" if ns is None else round(100 * ns, 2)])
            for r in self.mlperf:
                err = None if r["ratio"] is None else round(100 * (r["ratio"] - 1), 2)
                w.writerow(["mlperf", r["system"], r["id"], 1, False, r["published"], r["model"], err, ""])
        return path


def gpu_report(*, mlperf: bool = True, progress: Any = None) -> GPUValidationReport:
    """All three tables (``mlperf=False`` skips the MLPerf rows, the slow part)."""
    kernels = kernel_groups(progress)
    e2e, skipped = e2e_rows()
    ops, left_out = op_groups()
    return GPUValidationReport(kernels, e2e, skipped, mlperf_rows() if mlperf else [], ops, left_out)
