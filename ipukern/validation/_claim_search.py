"""Each side of a claim at its best configuration: small, stated searches over batch sizes
and layouts, one estimate per candidate, the fastest that fits kept.

These are the narrowed searches of ``ipukern claims`` (the full :func:`ipukern.tune` costs
about a minute per IPU-POD16 search, the whole report has three minutes): every candidate
tried is listed in the result with its throughput or why it did not fit, so a reader sees
what "best" was chosen from. The GPU model has no memory limit, so its batches are bounded by
the candidate list, which the claim rows state.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from ..machine import MachineSpec

#: the GPU software every claim row's GPU side runs: NVIDIA's tuned stack (fused kernels, CUDA
#: graphs), the one Graphcore's comparisons were made against (NVIDIA-published figures)
GPU_STACK = "mlperf"


@dataclass
class Best:
    """The fastest fitting candidate of a search, and every candidate's outcome."""

    label: str = ""
    samples_per_second: float | None = None
    #: seconds per step (inference: the latency of one batch)
    seconds: float | None = None
    #: IPUs or GPUs the throughput is spread over (per-chip figures divide by it)
    chips: int = 1
    #: candidate label -> samples/s, or the reason it does not fit
    tried: dict[str, Any] = field(default_factory=dict)
    #: the estimate function's extra result fields of the best candidate
    extra: dict[str, Any] = field(default_factory=dict)
    #: what the throughput counts (the MCMC row counts chain-steps, not samples of a batch)
    unit: str = "samples/s"

    @property
    def per_chip(self) -> float | None:
        return None if self.samples_per_second is None else self.samples_per_second / self.chips

    def describe(self) -> str:
        if self.samples_per_second is None:
            return "no candidate fits (" + "; ".join(f"{k}: {v}" for k, v in self.tried.items()) + ")"
        return f"{self.label}: {self.samples_per_second:,.0f} {self.unit}"


def search(candidates: list[tuple[str, Callable[[], Any]]],
           chips: Callable[[Any], int] | None = None, unit: str = "samples/s") -> Best:
    """Run ``(label, thunk)`` candidates; a thunk returns an estimate with ``samples_per_second``
    (and ``seconds`` or ``step_seconds``), counted in ``unit``; one that raises (does not fit)
    is recorded."""
    best = Best(unit=unit)
    for label, thunk in candidates:
        try:
            est = thunk()
        except (ValueError, MemoryError) as e:        # TileMemoryError and StageMemoryError too
            best.tried[label] = "does not fit: " + " ".join(str(e).split())[:160]
            continue
        if hasattr(est, "info") and not est.info.get("fits", True):
            best.tried[label] = "does not fit (per-tile memory)"
            continue
        sps = float(est.samples_per_second)
        best.tried[label] = round(sps, 1)
        if best.samples_per_second is None or sps > best.samples_per_second:
            secs = getattr(est, "step_seconds", None) or getattr(est, "seconds", None)
            best.label, best.samples_per_second, best.seconds = label, sps, secs
            best.chips = chips(est) if chips is not None else 1
            best.extra = {"stages": getattr(est, "stages", None)}
    return best


def ipu_inference(net: Any, machine: MachineSpec, batches: tuple[int, ...]) -> Best:
    """One IPU, the forward pass in float16 with half partials (Graphcore's inference
    precision, FP16.16), at each batch."""
    from ..nn import estimate_network
    return search([(f"batch {b}", lambda b=b: estimate_network(net, batch=b, machine=machine, dtype="float16",
                                                                  partials="half"))
                   for b in batches])


def gpu_inference(net: Any, system: Any, batches: tuple[int, ...]) -> Best:
    """One GPU of ``system``, the forward pass in float16 on :data:`GPU_STACK`."""
    from ..gpu import estimate_network_gpu
    return search([(f"batch {b}", lambda b=b: estimate_network_gpu(net, b, system, dtype="float16", n_gpus=1,
                                                                      stack=GPU_STACK))
                   for b in batches])


def gpu_training(net: Any, system: Any, batches: tuple[int, ...], *, n_gpus: int = 1,
                 optimizer: str = "sgd_momentum") -> Best:
    """``n_gpus`` GPUs of ``system`` data parallel, a training step in float16 (mixed
    precision) on :data:`GPU_STACK` at each batch per GPU."""
    from ..gpu import estimate_network_gpu
    return search([(f"batch {b}/GPU", lambda b=b: estimate_network_gpu(
        net, b, system, dtype="float16", training=True, n_gpus=n_gpus, optimizer=optimizer, stack=GPU_STACK))
        for b in batches], chips=lambda est: est.n_gpus)


@dataclass(frozen=True)
class Layout:
    """One IPU training candidate: replicas x IPUs per replica, micro-batch, accumulation."""

    replicas: int
    micro_batch: int
    gradient_accumulation: int = 16
    ipus_per_replica: int = 1
    pipeline: Any = None
    recompute: Any = None
    #: further estimate_training options of this candidate, as (name, value) pairs
    options: tuple[tuple[str, Any], ...] = ()

    def label(self) -> str:
        rc = {None: "", True: ", recompute stage", "auto": ", recompute auto"}.get(
            self.recompute if not isinstance(self.recompute, list) else "list", ", recompute checkpoints")
        opts = "".join(f", {k} {v}" for k, v in self.options)
        return (f"{self.replicas}x{self.ipus_per_replica} IPUs, mb {self.micro_batch}, "
                f"ga {self.gradient_accumulation}{rc}{opts}")


def ipu_training(net: Any, system: Any, layouts: list[Layout], **options: Any) -> Best:
    """:func:`ipukern.estimate_training` at each layout (float16, half partials unless
    ``options`` say otherwise); per-chip figures divide by the IPUs the layout uses."""
    from ..systems import estimate_training
    options = {"dtype": "float16", "partials": "half", **options}

    def run(lay: Layout) -> Any:
        return estimate_training(net, system, micro_batch=lay.micro_batch,
                                 gradient_accumulation=lay.gradient_accumulation, replicas=lay.replicas,
                                 ipus_per_replica=lay.ipus_per_replica, pipeline=lay.pipeline,
                                 recompute=lay.recompute, **(options | dict(lay.options)))
    return search([(lay.label(), lambda lay=lay: run(lay)) for lay in layouts],
                  chips=lambda est: est.replicas * est.ipus_per_replica)


def datasheet_system(system: Any) -> Any:
    """``system`` with its chips' datasheet IPU-Exchange rate (8 TB/s on the GC200)."""
    from ..systems import get_system
    system = get_system(system)
    return system.replace(chip=system.chip.with_datasheet_exchange())


def on_datasheet(net: Any, system: Any, layouts: list[Layout], best: Best, **options: Any) -> Best | None:
    """The best layout of a search again on the datasheet exchange, with the pipeline split
    the default search found (so the rerun compares the exchange alone, and skips the
    ``"auto"`` split search); None when the search found nothing."""
    if best.samples_per_second is None:
        return None
    lay = next(lay for lay in layouts if lay.label() == best.label)
    if lay.pipeline == "auto" and best.extra.get("stages"):
        lay = dataclasses.replace(lay, pipeline=[list(s) for s in best.extra["stages"]])
    return ipu_training(net, datasheet_system(system), [lay], **options)


def layer_checkpoints(net: Any) -> list[str]:
    """A recomputation checkpoint at each BERT encoder layer's output (PopART's
    ``recompute_checkpoint_every_layer``, as the MLPerf BERT rows)."""
    return [n for n in net.nodes if re.fullmatch(r"encoder\.layer\.\d+\.output\.LayerNorm", n)]


def even_bert_splits(layers: int, stages: int) -> list[str]:
    """Pipeline split layers for ``stages`` stages: the embeddings alone on the first, the
    encoder layers spread evenly over the others (PopART BERT's ``encoder_start_ipu 1``)."""
    cuts = sorted({0} | {round(i * layers / (stages - 1)) for i in range(1, stages - 1)})
    return [f"encoder.layer.{c}.attention.self.query" for c in cuts]
