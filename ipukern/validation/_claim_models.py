"""What the model says for each claim of ``claims.csv``: one function per claim (or group of
rows), each returning the configuration it ran on both sides, why that basis was chosen,
and the model's number on the default and the datasheet exchange.

Nothing here knows the claimed value: a modeller computes what the model says about the
quantity a claim names, and :mod:`ipukern.validation.claims` compares. Expensive work (the
MLPerf systems rows, searches shared by several rows) is computed once per report through
:class:`Context`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..machine import GC200, MachineSpec
from . import _claim_search as cs

#: the MLPerf Training v1.0 rows of ``published_systems.csv`` claims 1-4, 15 and 16 use
MLPERF_V10 = ("mlperf1.0-resnet-pod16", "mlperf1.0-bert-pod16", "mlperf1.0-resnet-pod64",
              "mlperf1.0-bert-pod64", "mlperf1.0-resnet-dgxa100", "mlperf1.0-bert-dgxa100")
#: the per-chip basis of claims 5-9 and why (stated in every such row)
PER_CHIP = ("per chip: one GC200 against one A100 SXM4 40 GB (the GPU of the DGX A100 Graphcore "
            "compared with in 2020); the statements name the chips, and Graphcore's 'closest platform "
            "in price and power' (IPU-M2000, 4 GC200, against DGX A100, 8 A100) is given beside it")
_NO_IPU = "no IPU in this row: the same number on both exchange rates"


@dataclass
class Modelled:
    """The model's side of one claim row."""

    ipu: str = ""
    other: str = ""
    basis: str = ""
    default: float | None = None
    datasheet: float | None = None
    #: "" when modelled; otherwise what is missing (the verdict is then "not modelled: ...")
    not_modelled: str = ""
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class Context:
    """Results shared by the rows of one report (each computed once, on first use)."""

    def __init__(self, fast: bool, claimed: dict[str, float] | None = None) -> None:
        #: fewer candidates per search and no datasheet-exchange runs (the tests' cheap mode)
        self.fast = fast
        #: claim id -> the claimed figure (a row that quotes another row's claim reads it here)
        self.claimed = dict(claimed or {})
        self._cache: dict[Any, Any] = {}

    def once(self, key: Any, fn: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = fn()
        return self._cache[key]

    def has(self, key: Any) -> bool:
        """Whether ``key`` was computed already (rows that add to it only when it is free)."""
        return key in self._cache

    def pick(self, full: tuple, fast: tuple) -> tuple:
        return fast if self.fast else full

    def variants(self, machine: MachineSpec = GC200) -> list[tuple[str, MachineSpec]]:
        """("default", spec) and, unless fast, ("datasheet", spec with 8 TB/s exchange)."""
        out = [("default", machine)]
        return out if self.fast else out + [("datasheet", machine.with_datasheet_exchange())]

    def systems(self) -> dict[str, Any]:
        from .systems import systems_report
        return self.once("systems", lambda: {r.run.id: r for r in systems_report(
            ids=list(MLPERF_V10), datasheet=not self.fast).rows})


def _net(name: str, **kw: Any) -> Any:
    from ..nn.models import MODELS
    return MODELS[name](**kw)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _no_fit(m: Modelled, ipu: cs.Best, gpu: cs.Best) -> bool:
    """Whether a side of a row found no fitting candidate; then ``m`` is "not modelled" with
    that side's candidates and why each failed (the IPU's first)."""
    for side in (ipu, gpu):
        if side.samples_per_second is None:
            m.not_modelled = "no fitting configuration: " + side.describe()
            return True
    return False


# =========================================================================== claims 1-4: MLPerf v1.0
def _minutes(row: Any, datasheet: bool) -> float | None:
    if datasheet:
        if row.run.kind != "ipu_training":
            return row.model_minutes
        return None if not row.model_datasheet else row.run.train_items / row.model_datasheet / 60.0
    return row.model_minutes


def _config(row: Any) -> str:
    u = row.run
    what = "GPUs" if u.kind == "gpu_training" else "IPUs"
    return (f"{u.system}: {u.replicas} x {u.ipus_per_replica or 1} {what}, "
            f"micro-batch {u.micro_batch}, accumulation {u.gradient_accumulation}, {u.optimizer}, "
            f"{u.dtype} ({u.id}, the published configuration)")


def mlperf_time(ctx: Context, run_id: str, note: str = "") -> Modelled:
    """Claims 1 and 3: time-to-train of a published MLPerf v1.0 configuration."""
    row = ctx.systems()[run_id]
    m = Modelled(basis="the published MLPerf configuration as submitted (not re-tuned: the claim "
                       "is that run)",
                 note=note)
    side = "ipu" if row.run.kind == "ipu_training" else "other"
    setattr(m, side, _config(row))
    if row.reason:
        m.not_modelled = row.reason
        return m
    m.default, m.datasheet = _minutes(row, False), (None if ctx.fast else _minutes(row, True))
    if row.run.kind != "ipu_training":
        m.note = (m.note + "; " if m.note else "") + _NO_IPU
    m.details = {"published_minutes": row.run.published_minutes, "model_bound_by": row.how,
                 "train_items": row.run.train_items}
    return m


def bert_scaling(ctx: Context) -> Modelled:
    """Claim 2: POD16 -> POD64 BERT time factor, like for like (closed / closed)."""
    claimed = ctx.claimed
    if not {"1b", "1d"} <= claimed.keys():
        raise ValueError("claim 2 quotes the times of claims 1b and 1d, which the claims table lacks")
    rows = ctx.systems()
    small, big = rows["mlperf1.0-bert-pod16"], rows["mlperf1.0-bert-pod64"]
    closed = small.run.published_minutes / big.run.published_minutes
    as_claimed = claimed["1b"] / claimed["1d"]
    m = Modelled(ipu=f"{_config(small)} -> {_config(big)}",
                 basis="like for like: both closed-division configurations (the only POD64 BERT "
                       "configuration in the table is the closed one)",
                 note=f"the claim divides a closed-division time (POD16, {claimed['1b']} min, "
                      f"claim 1b) by an "
                      f"open-division one (POD64, {claimed['1d']} min, claim 1d): {as_claimed:.2f}x; the "
                      f"published closed/closed factor is {closed:.2f}x")
    m.default = _ratio(_minutes(small, False), _minutes(big, False))
    if not ctx.fast:
        m.datasheet = _ratio(_minutes(small, True), _minutes(big, True))
    m.details = {"claim_arithmetic_closed_over_open": round(as_claimed, 3),
                 "published_closed_over_closed": round(closed, 3)}
    return m


def per_dollar(ctx: Context, bench: str) -> Modelled:
    """Claim 4: (time x price) of the DGX A100 over that of the POD16."""
    from ..market import price
    rows = ctx.systems()
    pod, dgx = rows[f"mlperf1.0-{bench}-pod16"], rows[f"mlperf1.0-{bench}-dgxa100"]
    p_pod, p_dgx = price("IPU-POD16"), price("DGX A100 640G")
    m = Modelled(ipu=_config(pod), other=_config(dgx),
                 basis=f"time-to-train x list price: {p_pod.label()} (IPU-POD16) and "
                       f"{p_dgx.label()} (DGX A100 "
                       "640G), the prices of Graphcore's statement (ipukern.market)",
                 note=f"prices: {p_pod.source}; {p_dgx.source}")

    def adv(ds: bool) -> float | None:
        t_pod, t_dgx = _minutes(pod, ds), _minutes(dgx, ds)
        return None if t_pod is None or t_dgx is None else (t_dgx * p_dgx.value) / (t_pod * p_pod.value)
    m.default = adv(False)
    m.datasheet = None if ctx.fast else adv(True)
    m.details = {"published_times_advantage": round(dgx.run.published_minutes * p_dgx.value
                                                    / (pod.run.published_minutes * p_pod.value), 3)}
    return m


# =========================================================================== claims 5-8: per chip vs A100
def _gpu_system() -> Any:
    from ..gpu import DGX_A100_40GB
    return DGX_A100_40GB


def _inference_pair(ctx: Context, name: str, ipu_b: tuple, gpu_b: tuple) -> dict[str, Any]:
    """Both sides' inference searches of one network, and the IPU's best batch on the
    datasheet exchange."""
    def run() -> dict[str, Any]:
        net = _net(name)
        ipu = cs.ipu_inference(net, GC200, ipu_b)
        gpu = cs.gpu_inference(net, _gpu_system(), gpu_b)
        out = {"ipu": ipu, "gpu": gpu, "datasheet": None}
        if not ctx.fast and ipu.samples_per_second is not None:
            b = int(ipu.label.split()[-1])
            out["datasheet"] = cs.ipu_inference(net, GC200.with_datasheet_exchange(), (b,))
        return out
    return ctx.once(("inference", name), run)


def _sides(ipu: cs.Best, gpu: cs.Best, what: str) -> tuple[str, str]:
    return (f"GC200 (47.5 TB/s default exchange), {what}, float16 with half partials; best of "
            f"[{', '.join(ipu.tried)}]: {ipu.describe()}",
            f"A100 SXM4 40 GB, {what}, float16, GPU stack '{cs.GPU_STACK}'; "
            f"best of [{', '.join(gpu.tried)}]: "
            f"{gpu.describe()}")


def inference_advantage(ctx: Context, name: str, *, latency: bool = False) -> Modelled:
    """Claims 5a, 6a, 6b: per-chip inference throughput (or GPU latency / IPU latency) at
    each side's best-throughput batch."""
    r = _inference_pair(ctx, name, ctx.pick((4, 32), (8,)), ctx.pick((1, 8, 64, 256), (64,)))
    ipu, gpu, ds = r["ipu"], r["gpu"], r["datasheet"]
    m = Modelled(basis=PER_CHIP)
    m.ipu, m.other = _sides(ipu, gpu, f"{name} inference (forward pass, device time)")
    if _no_fit(m, ipu, gpu):
        return m
    if latency:
        m.note = "latency at the batches of the throughput row (each side's best-throughput batch)"
        m.default = _ratio(gpu.seconds, ipu.seconds)
        m.datasheet = None if ds is None else _ratio(gpu.seconds, ds.seconds)
        m.details = {"ipu_latency_ms": ipu.seconds * 1e3, "gpu_latency_ms": gpu.seconds * 1e3}
        return m
    m.default = ipu.samples_per_second / gpu.samples_per_second
    m.datasheet = None if ds is None else _ratio(ds.samples_per_second, gpu.samples_per_second)
    # IPU-M2000 (4 GC200) against DGX A100 (8 A100): inference replicas exchange nothing
    m.details = {"m2000_vs_dgx_a100": round(m.default * 4 / 8, 3), "ipu_tried": ipu.tried,
                 "gpu_tried": gpu.tried}
    return m


def _cnn_layouts(ctx: Context) -> list[cs.Layout]:
    # a 4-image micro-batch without recomputation, an 8-image one with it (the 16-image one of
    # EfficientNet-B0 does not fit one GC200 in the model)
    full = [cs.Layout(1, 4, 16), cs.Layout(1, 8, 16, recompute="auto")]
    return full[:1] if ctx.fast else full


def training_advantage(ctx: Context, name: str, *, layouts: list[cs.Layout] | None = None,
                       gpu_batches: tuple = (32, 64, 128, 256), system: str = "M2000",
                       optimizer: str = "sgd_momentum") -> Modelled:
    """Claims 5b, 7, 8b, 9b-d: per-chip training throughput, IPU over A100, each at the best
    of its candidates."""
    lays = layouts if layouts is not None else _cnn_layouts(ctx)
    lays = lays[:1] if ctx.fast else lays

    def run() -> dict[str, Any]:
        net = _net(name)
        ipu = cs.ipu_training(net, system, lays, optimizer=optimizer)
        gpu = cs.gpu_training(net, _gpu_system(), ctx.pick(gpu_batches, gpu_batches[-1:]),
                              optimizer=optimizer)
        ds = None if ctx.fast else cs.on_datasheet(net, system, lays, ipu, optimizer=optimizer)
        return {"ipu": ipu, "gpu": gpu, "datasheet": ds}
    r = ctx.once(("training", name, system), run)
    ipu, gpu, ds = r["ipu"], r["gpu"], r["datasheet"]
    m = Modelled(basis=PER_CHIP)
    m.ipu, m.other = _sides(ipu, gpu, f"{name} training ({optimizer})")
    if _no_fit(m, ipu, gpu):
        return m
    m.default = ipu.per_chip / gpu.per_chip
    m.datasheet = None if ds is None else _ratio(ds.per_chip, gpu.per_chip)
    m.details = {"ipu_tried": ipu.tried, "gpu_tried": gpu.tried,
                 "ipu_samples_per_s_per_chip": round(ipu.per_chip, 1),
                 "gpu_samples_per_s_per_gpu": round(gpu.per_chip, 1)}
    return m


def bert_base_same_latency(ctx: Context) -> Modelled:
    """Claim 8a: BERT-Base (seq 128) inference throughput at equal latency: the GPU's best
    throughput within the latency of the IPU's best-throughput batch."""
    from ..gpu import estimate_network_gpu
    r = _inference_pair(ctx, "bert_base", ctx.pick((1, 2, 4, 8, 16, 32, 64), (16,)), (1,))
    ipu, ds = r["ipu"], r["datasheet"]
    net = _net("bert_base")
    gpus = [(b, estimate_network_gpu(net, b, _gpu_system(), dtype="float16", n_gpus=1, stack=cs.GPU_STACK))
            for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    m = Modelled(basis=PER_CHIP, note="equal latency: the IPU at its best-throughput batch; the GPU at its "
                                      "largest batch (of 1..256) whose latency is not above the IPU's")
    if ipu.samples_per_second is None:
        m.not_modelled = "no fitting IPU configuration: " + ipu.describe()
        return m

    def at(lat: float) -> tuple[int, float]:
        ok = [(b, e) for b, e in gpus if e.step_seconds <= lat] or gpus[:1]
        b, e = ok[-1]
        return b, e.samples_per_second
    b_gpu, sps_gpu = at(ipu.seconds)
    m.ipu = (f"GC200, bert_base seq 128 inference, float16 half partials; best of [{', '.join(ipu.tried)}]: "
             f"{ipu.describe()}, latency {ipu.seconds * 1e3:.2f} ms")
    m.other = f"A100 SXM4 40 GB, stack '{cs.GPU_STACK}', batch {b_gpu}: {sps_gpu:,.0f} samples/s"
    m.default = ipu.samples_per_second / sps_gpu
    if ds is not None and ds.samples_per_second is not None:
        m.datasheet = ds.samples_per_second / at(ds.seconds)[1]
    return m


def bert_base_training(ctx: Context) -> Modelled:
    """Claim 8b: BERT-Base training; the 36.3 h absolute needs the full pre-training
    schedule (phases, steps), which the row does not model: the time ratio only."""
    lays = [cs.Layout(1, mb, 64, ipus_per_replica=4, pipeline="auto", recompute=True) for mb in (8, 16)]
    m = training_advantage(ctx, "bert_base", layouts=lays, gpu_batches=(32, 64, 128), optimizer="lamb")
    m.basis = ("per chip, one IPU-M2000 (4 GC200, BERT-Base pipelined over 4 IPUs as Graphcore's "
               "BERT configurations are) against A100 SXM4 40 GB; the GPU side per GPU; equal samples, so "
               "the time ratio is the throughput ratio")
    m.note = ("the 36.3 h absolute needs the pre-training schedule (phase 1/2 steps and batch sizes): "
              "not modelled")
    return m


# =========================================================================== claim 9a: MCMC
#: chains of one HMC step tried on each side (one data set; samples = chain-steps)
MCMC_CHAINS = (64, 256, 1024, 4096)
#: what the MCMC row's throughput counts: one chain-step is one HMC step of one chain, i.e.
#: L leapfrog steps (each a gradient of the log posterior over the data) and the accept, not a
#: sample of a training batch
MCMC_UNIT = "chain-steps/s"
#: and why that is the claim's quantity: Graphcore's figure is "15x faster time to train for
#: MCMC" (graphcore.ai/mk1-benchmarks), the time of a sampling run; for a run of a fixed
#: number of steps the time ratio is the inverse of the chain-steps/s ratio
MCMC_COUNTS = ("chain-steps per second (one chain-step = one HMC step of one chain: a proposal of 10 "
               "leapfrog steps and its accept); Graphcore's figure is a time to train, the time of a "
               "sampling run, which for a fixed number of steps is chain-steps / (chain-steps per "
               "second): the same ratio")
#: the zoo's HMC step leaves these out on both sides (ipukern.nn.zoo_mcmc)
MCMC_LEFT_OUT = ("the step is TFP's whole HMC step on both sides: the leapfrog, the log-probability "
                 "TFP evaluates beside each gradient and the Metropolis accept (softplus, compare and "
                 "select: PopLibs' LOGARITHM_ONE_PLUS, LESS_THAN and Select on the IPU, memory-bound "
                 "element-wise kernels on the GPU); left out on both: the random draws (momentum, "
                 "log u) and TFP's NaN guard on the ratio")


@dataclass
class _ChainRate:
    """An HMC step estimate as a search candidate: chain-steps per second."""

    samples_per_second: float
    seconds: float


def _hmc_ipu(chains: int, machine: MachineSpec) -> _ChainRate:
    from ..nn import estimate_network
    s = estimate_network(_net("hmc_logistic", chains=chains), batch=1, machine=machine, dtype="float32",
                         partials="float").seconds
    return _ChainRate(chains / s, s)


def _hmc_gpu(chains: int, stack: str) -> _ChainRate:
    from ..gpu import estimate_network_gpu
    s = estimate_network_gpu(_net("hmc_logistic", chains=chains), 1, _gpu_system(), dtype="float32",
                             n_gpus=1, stack=stack).step_seconds
    return _ChainRate(chains / s, s)


def mcmc(ctx: Context) -> Modelled:
    """Claim 9a: HMC sampling throughput (chain-steps per second), one GC200 against one A100,
    each at its best chain count, on the zoo's ``hmc_logistic`` (TFP's HMC step)."""
    chains = ctx.pick(MCMC_CHAINS, (1024,))
    ipu = cs.search([(f"{c} chains", lambda c=c: _hmc_ipu(c, GC200)) for c in chains], unit=MCMC_UNIT)
    gpu = cs.search([(f"{c} chains", lambda c=c: _hmc_gpu(c, cs.GPU_STACK)) for c in chains],
                    unit=MCMC_UNIT)
    what = ("hmc_logistic: one TFP HMC step (10 leapfrog steps and the Metropolis accept), Bayesian "
            "logistic regression 1000 x 25 (German credit shape), one data set, float32 (TFP's dtype)")
    m = Modelled(basis=PER_CHIP + "; throughput = " + MCMC_COUNTS,
                 ipu=f"GC200, {what}; best of [{', '.join(ipu.tried)}]: {ipu.describe()}",
                 other=(f"A100 SXM4 40 GB, {what}, GPU stack '{cs.GPU_STACK}'; best of "
                        f"[{', '.join(gpu.tried)}]: {gpu.describe()}"),
                 note=("the claim's workload ('representative finance workload for alpha estimation', "
                       "graphcore.ai/mk1-benchmarks) is not public: the German credit logistic "
                       "regression stands in; the statement names no GPU, batch or chain count; "
                       + MCMC_LEFT_OUT))
    if _no_fit(m, ipu, gpu):
        return m
    m.default = ipu.per_chip / gpu.per_chip
    best = int(ipu.label.split()[0])
    if not ctx.fast:
        m.datasheet = _hmc_ipu(best, GC200.with_datasheet_exchange()).samples_per_second / gpu.per_chip
    # the GPU's best chain count on the other stacks: TF1 graph mode launches op by op from
    # the host, nearer the eager stack than CUDA graphs (shown, not the verdict's)
    c_gpu = int(gpu.label.split()[0])
    other = {st: _hmc_gpu(c_gpu, st).samples_per_second for st in ("cuda-graphs", "pytorch-eager")}
    m.details = {"ipu_tried": ipu.tried, "gpu_tried": gpu.tried,
                 "ipu_chain_steps_per_s": round(ipu.per_chip, 1),
                 "gpu_chain_steps_per_s": round(gpu.per_chip, 1), "other_stacks_chains": c_gpu,
                 **{f"advantage_vs_stack_{st}": round(ipu.per_chip / v, 3) for st, v in other.items()}}
    return m


# =========================================================================== claims 9b-d
def small_model(ctx: Context, name: str) -> Modelled:
    """Claims 9b-d: the zoo's dense networks, training, per chip."""
    lays = [cs.Layout(1, mb, 1) for mb in (16, 64, 256)]
    m = training_advantage(ctx, name, layouts=lays, gpu_batches=(16, 64, 256, 1024), optimizer="adam")
    m.note = ("the statement names neither the GPU nor the batch: A100 assumed, each side at its best batch "
              "of the candidates; training with Adam, float16 on both sides")
    return m
