"""Training on a System: data-parallel replicas of one or more pipelined IPUs.

``estimate_training`` composes per-layer costs of one micro-batch on one chip (forward,
backward-data, weight-update cycles; weight, stash and working bytes) into a step:

- **pipeline** (``ipus_per_replica`` > 1): stages of consecutive layers on consecutive IPUs.
  Graphcore's grouped schedule runs ``M + S - 1`` pipeline cycles for M micro-batches
  (``gradient_accumulation``) and S stages; a cycle lasts as long as the slowest stage's
  forward + backward of one micro-batch, plus the activation / gradient transfers to the
  neighbour stages over the IPU-Links (``System.route``, link rate and latency) and one
  cross-chip sync. The ``S - 1`` extra cycles are the fill/drain bubble. ``recompute=True``
  re-runs each stage's forward in its backward and stashes only the stage input.
- **data parallel**: after the M micro-batches, the gradients of each stage are all-reduced
  across the replicas (:func:`~ipukern.systems.collectives.concurrent_seconds`: ring in a
  POD64, hierarchical across GW-Links), every stage's group at once, their transfers sharing
  the links they cross; ``replicated_sharding`` reduce-scatters instead, runs the optimizer
  on 1/R of the weights and all-gathers them.
- **optimizer**: element-wise over the stage's parameters, streaming ``OPTIMIZER_WORDS``
  words per parameter through the tile's load/store path (weights and gradients in
  ``dtype``, the state's words in ``optimizer_state_dtype``: float32 by default, float16 or
  one type per state slot); ``optimizer_state="streaming"`` keeps the state in Streaming
  Memory and moves its bytes in and out once per step at the machine's Streaming Memory
  bandwidth (shared by its 4 IPUs). Weights are stored and updated in ``dtype``: no float32
  master copy is modelled.
- **host I/O**: the step's input samples over the hosts' links, one micro-batch per pipeline
  cycle: without I/O tiles (Graphcore's MLPerf TF1 runs) a synchronous host exchange in every
  cycle, with ``io_tiles`` overlapped with compute (only the excess over it counts).
- **host sync**: the IPU <-> host handshake of every host exchange on the step's critical
  path (``System.host_sync_s``): the synchronous input copy of each pipeline cycle and the
  step's one output copy (TF1's pipeline ``accumulate_outfeed``: loss and accuracy once per
  step). Replicas sync with their hosts independently (the runs set
  ``target.syncReplicasIndependently``), so there is no host barrier across replicas.
- **memory** per IPU, stage by stage, per tile with liveness
  (:mod:`ipukern.systems.stage_memory`): the one-chip training model of
  :mod:`ipukern.nn.training` applied to the stage's rows, with its weights, gradient
  accumulators, optimizer state (unless streamed; 1/R when sharded) and the stash of the
  micro-batches in flight at that stage (``2 (S - 1 - s) + 1`` in the grouped schedule, at
  most M); the busiest tile's peak plus the reserve must fit the tile, otherwise a
  :class:`StageMemoryError` names the stage, IPU, tile, step, bytes and budget
  (``allow_overflow=True`` reports it instead). With ``costs=`` and no network there are no
  per-tile layouts: weights, gradients, state, ``S - s`` stashes and the largest working set
  must fit ``n_tiles x tile budget`` (a whole-chip rule).

Per-layer costs come from :func:`ipukern.nn.estimate_network` with ``training=True`` when the
training passes are available, or from ``costs=`` (a list of :class:`LayerCost`: measured or
what-if numbers).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._format import Rest, fmt_num, format_table
from ..dtypes import DTYPES
from ..nn.checkpoints import network_checkpoints
# words streamed per parameter by one optimizer step and its state words: the executed
# update vertices' traffic, one table for the IPU and GPU system models
from ..ops import OPTIMIZER_STATE_WORDS, OPTIMIZER_WORDS
from .bn_group import check_bn_group, layer_cycles
from .collectives import concurrent_seconds
from .config import TrainingConfig
from .spec import System, SystemConfigError, get_system
from ._report import _kinds, _memory_cell, _memory_model, _no_fit
from .stage_memory import tile_memory
from .views import training_schedule, training_to_dict, training_to_pandas, training_trace

__all__ = ["LayerCost", "TrainingEstimate", "StageMemoryError", "estimate_training", "OPTIMIZER_WORDS",
           "OPTIMIZER_STATE_WORDS"]



#: where each part of a step's breakdown (``info["parts_s"]``) comes from
PART_SOURCES: dict[str, str] = {
    "pipeline compute": "per-layer cycles of the planned passes (PopLibs-equal estimators), "
                        "slowest stage x micro-batches",
    "bn all-reduce": "batch-norm group statistics over bn_replica_group replicas, per pass "
                     "(ipukern.systems.bn_group, ring over IPU-Links)",
    "fill/drain": "(IPUs per replica - 1) pipeline cycles (grouped schedule)",
    "links + sync": "stage-boundary activations over the routed IPU-Links + cross-IPU sync "
                    "(PopLibs IPUModel 15 ns/hop) per pipeline cycle",
    "all-reduce": "gradient all-reduce as GCL's rings run it (ipukern.systems.collectives: "
                  "chunk per step, link sharing, per-step sync and add)",
    "optimizer": "weight update's load/store words per parameter over all tiles "
                 "(ipukern.ops.optim.OPTIMIZER_WORDS)",
    "streaming memory": "optimizer state read and written over the Streaming Memory links",
    "host I/O": "inputs over each host's 2 x 100 GbE link (MLPerf system descriptions); with "
                "io_tiles 0 (Graphcore's MLPerf TF1 runs: --num-io-tiles default 0) every "
                "micro-batch's copy is a synchronous host exchange, else overlapped",
    "host sync": "IPU <-> host handshake per host exchange on the critical path (each synchronous "
                 "input copy + the step's output copy), System.host_sync_s: 0.36 us, "
                 "gc-hostsynclatencytest documentation example (not a benchmark)",
}


class StageMemoryError(MemoryError):
    """A pipeline stage does not fit its IPU's tile memory."""


@dataclass(frozen=True)
class LayerCost:
    """One layer, one micro-batch, one chip."""

    name: str
    fwd_cycles: int
    bwd_cycles: int
    wu_cycles: int
    n_params: int
    #: activation bytes kept for the backward pass (per micro-batch)
    stash_bytes: int
    #: bytes handed to the next layer (sent over a link at a stage boundary)
    out_bytes: int
    #: working memory of the layer's passes beyond weights and stash
    work_bytes: int = 0
    #: channels of a batch norm layer (0: not one); with ``bn_replica_group`` > 1 its
    #: statistics are all-reduced over the replica group in each pass
    bn_channels: int = 0
    #: 1 if the layer's forward runs again before its backward (a recomputed checkpoint
    #: segment; its rows are in ``fwd_cycles``): its batch-norm group all-reduce runs again
    recomputed: int = 0
    #: 1 for a batch norm with PopLibs' stable statistics (two forward all-reduces of C values)
    bn_stable: int = 0


@dataclass
class TrainingEstimate:
    """What :func:`estimate_training` returns."""

    system: str
    replicas: int
    ipus_per_replica: int
    micro_batch: int
    gradient_accumulation: int
    stages: list[list[str]]
    step_seconds: float
    breakdown: list[dict]
    bottleneck: str
    info: dict = field(default_factory=dict)

    @property
    def global_batch(self) -> int:
        return self.replicas * self.micro_batch * self.gradient_accumulation

    @property
    def samples_per_second(self) -> float:
        return self.global_batch / self.step_seconds

    def time_to_train(self, *, epochs: float | None = None, dataset_size: int | None = None,
                      samples: float | None = None) -> float:
        """Seconds for ``samples`` (or ``epochs x dataset_size``) training samples."""
        return training_samples(epochs, dataset_size, samples) / self.samples_per_second

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dictionary (totals, stages, info, per-IPU breakdown)."""
        return training_to_dict(self)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_pandas(self) -> Any:
        """One row per IPU (the breakdown), indexed by IPU. Needs pandas."""
        return training_to_pandas(self)

    def schedule(self, *, replica: int | None = 0) -> list[dict[str, Any]]:
        """What each IPU does when during the step (:func:`ipukern.systems.views.training_schedule`)."""
        return training_schedule(self, replica=replica)

    def to_trace(self, path: Any = None) -> dict[str, Any]:
        """Chrome / Perfetto trace-event JSON of the step: one row per IPU (pipeline stage), one
        span per micro-batch, then all-reduce and optimizer; writes ``path`` when given."""
        return training_trace(self, path)

    def summary(self) -> str:
        lines = [f"{self.system}: {self.replicas} replicas x {self.ipus_per_replica} IPU(s), "
                 f"micro-batch {self.micro_batch} x accumulation {self.gradient_accumulation} "
                 f"= global batch {self.global_batch}",
                 f"  step {self.step_seconds * 1e3:.3f} ms, {self.samples_per_second:,.0f} samples/s; "
                 f"bound by {self.bottleneck}",
                 *([f"  optimizer state {'/'.join(self.info['optimizer_state_dtype'])}; weights "
                    f"{self.info.get('weights', '')}"] if self.info.get("optimizer_state_dtype") else []),
                 ]
        ms = lambda r, k: fmt_num(r.get(k, 0.0) * 1e3, 3)  # noqa: E731 - one cell format
        cols = ("compute_s", "bn_all_reduce_s", "fill_drain_s", "links_s", "sync_s", "all_reduce_s",
                "optimizer_s", "host_io_s")
        lines += format_table(
            ["IPU", "stage", "compute ms", "BN all-reduce ms", "fill/drain ms", "links ms", "sync ms",
             "all-reduce ms", "optimizer ms", "host I/O ms", "memory / budget"],
            [[r["ipu"], r["stage"], *(ms(r, k) for k in cols), Rest(_memory_cell(r))]
             for r in self.breakdown], align="r" * 10 + "l", indent="  ").split("\n")
        for r in self.breakdown[:self.ipus_per_replica]:
            if r.get("tile_bytes_by_kind"):
                lines.append(f"  stage {r['stage']} tile {r['busiest_tile']}: "
                             + _kinds(r["tile_bytes_by_kind"]))
        return "\n".join(lines)


def training_samples(epochs: float | None, dataset_size: int | None, samples: float | None) -> float:
    """``samples``, or ``epochs x dataset_size``, validated (shared by the GPU side)."""
    if samples is None:
        if epochs is None or dataset_size is None:
            raise ValueError("give samples=, or epochs= and dataset_size=")
        samples = float(epochs) * float(dataset_size)
    if not (samples > 0 and math.isfinite(samples)):
        raise ValueError(f"the number of samples must be positive, got {samples!r}")
    return float(samples)


def _split(names: list[str], pipeline: Any, n_stages: int) -> list[list[str]] | None:
    """Stages from a list of split points (the first layer of stages 2..S) or of stage
    layer lists; None for "auto"."""
    if pipeline is None:
        return [names] if n_stages == 1 else None
    if isinstance(pipeline, str):
        if pipeline != "auto":
            raise ValueError(f"pipeline must be None, 'auto' or a list, got {pipeline!r}")
        return None
    pipeline = list(pipeline)
    index = {n: i for i, n in enumerate(names)}
    if pipeline and all(isinstance(p, (list, tuple)) for p in pipeline):
        stages = [list(p) for p in pipeline]
        flat = [n for s in stages for n in s]
        for n in flat:
            if n not in index:
                raise ValueError(f"pipeline names layer {n!r}, which the network does not have")
        if flat != names:
            raise ValueError("pipeline stages must list every layer once, consecutive, in network order")
    else:
        for n in pipeline:
            if n not in index:
                raise ValueError(f"pipeline split names layer {n!r}, which the network does not have")
        cuts = [index[n] for n in pipeline]
        if cuts != sorted(set(cuts)) or (cuts and cuts[0] == 0):
            raise ValueError("pipeline split points must be distinct layers in network order, "
                             "after the first layer")
        bounds = [0] + cuts + [len(names)]
        stages = [names[a:b] for a, b in zip(bounds, bounds[1:])]
    if len(stages) != n_stages:
        raise ValueError(f"the pipeline has {len(stages)} stages but ipus_per_replica is {n_stages}")
    return stages


def _auto(costs: list[LayerCost], n_stages: int, fits, stage_cycles) -> list[list[str]]:
    """Consecutive stages minimising the slowest stage's cycles among those that fit
    (dynamic programme over split points). ``stage_cycles(s)`` gives, per layer, its cycles
    when it runs on stage s (compute, recomputation and batch-norm group all-reduces: what
    :func:`_compose` charges, so the balance is the estimate's own)."""
    n = len(costs)
    if n < n_stages:
        raise ValueError(f"{n} layers cannot fill {n_stages} pipeline stages")
    pre = []
    for s in range(n_stages):
        p = [0]
        for c in stage_cycles(s):
            p.append(p[-1] + c)
        pre.append(p)
    if isinstance(fits, (set, frozenset)):
        best, arg = _auto_table(pre, n, n_stages, fits)
    else:
        inf = float("inf")
        best = [[inf] * (n + 1) for _ in range(n_stages + 1)]
        arg = [[-1] * (n + 1) for _ in range(n_stages + 1)]
        best[0][0] = 0
        for s in range(1, n_stages + 1):
            ps = pre[s - 1]
            for j in range(s, n + 1):
                for i in range(s - 1, j):
                    if best[s - 1][i] == inf or not fits(s - 1, i, j):
                        continue
                    v = max(best[s - 1][i], ps[j] - ps[i])
                    if v < best[s][j]:
                        best[s][j], arg[s][j] = v, i
    if best[n_stages][n] == float("inf"):
        raise StageMemoryError(f"no split of the network into {n_stages} stages fits the IPUs' memory; "
                               f"recompute, a smaller micro-batch or more IPUs per replica would help")
    bounds, j = [n], n
    for s in range(n_stages, 0, -1):
        j = arg[s][j]
        bounds.append(j)
    bounds = bounds[::-1]
    return [[c.name for c in costs[a:b]] for a, b in zip(bounds, bounds[1:])]


def _auto_table(pre: list[list[int]], n: int, n_stages: int, bad: set) -> tuple[list, list]:
    """:func:`_auto`'s dynamic programme in NumPy when the spans that do not fit are a known
    set ``bad`` of (stage, first, end) (the lazy per-tile check): the same table as its loop
    (per stage an (i, j) matrix; argmin takes the first, smallest i, as the loop's strict
    ``<`` does), in milliseconds instead of seconds per call on BERT-Large's ~500 layers."""
    big = np.iinfo(np.int64).max // 4           # "no split": above every cycle count
    best = np.full((n_stages + 1, n + 1), big, dtype=np.int64)
    arg = np.full((n_stages + 1, n + 1), -1, dtype=np.int64)
    best[0, 0] = 0
    i_idx, j_idx = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    for s in range(1, n_stages + 1):
        ps = np.asarray(pre[s - 1], dtype=np.int64)
        v = np.maximum(best[s - 1][:, None], ps[None, :] - ps[:, None])
        v[(i_idx >= j_idx) | (i_idx < s - 1) | (best[s - 1][:, None] >= big)] = big
        for st, i, j in bad:
            if st == s - 1:
                v[i, j] = big
        k = np.argmin(v, axis=0)
        val = v[k, np.arange(n + 1)]
        ok = (val < big) & (np.arange(n + 1) >= s)
        best[s, ok], arg[s, ok] = val[ok], k[ok]
    out = best.astype(object)
    out[best >= big] = float("inf")
    return out.tolist(), arg.tolist()


def _layer_cycles(c: LayerCost, recompute: bool, bn: int) -> int:
    """One micro-batch of layer ``c`` on its stage: forward (twice with stage
    recomputation), backward, weight update, and ``bn``, its batch norm's group all-reduces."""
    return c.fwd_cycles * (1 + recompute) + c.bwd_cycles + c.wu_cycles + bn


def _bn_cycles(system, reps: int, ipr: int, group: int, s: int, c: LayerCost, recompute: bool) -> int:
    """Layer ``c``'s batch-norm group all-reduces per micro-batch on stage s (0: none)."""
    if not c.bn_channels or group <= 1:
        return 0
    return layer_cycles(system, reps, ipr, group, s, c.bn_channels, bool(c.bn_stable),
                        recompute or bool(c.recomputed))


def _costs_from_network(net: Any, micro_batch: int, chip: Any, dtype: str, partials: Any,
                        checkpoints: list[str] | None = None, amp: float | None = None) -> list[LayerCost]:
    """Per-layer costs from ``estimate_network(training=True)`` on one chip, without the
    optimizer row (the update is costed per stage, whose parameters need not fit one chip).
    With ``checkpoints`` the recomputed forward rows count in their layer's ``fwd_cycles``
    and only what PopLibs-style recomputation keeps is stashed (:func:`_stashed_inputs`)."""
    from ..nn import estimate_network
    try:
        prof = estimate_network(net, micro_batch, dtype, partials, machine=chip, training=True,
                                recompute=checkpoints, optimizer=None, allow_overflow=True,
                                available_memory_proportion=amp)
    except NotImplementedError as e:
        raise NotImplementedError("estimate_training needs the training passes (ipukern.nn.training), "
                                  "which this build does not have; pass costs=[LayerCost(...)]") from e
    layers = [n for n, _ in net.layers]
    layer_set = set(layers)
    cycles: dict[str, dict[str, int]] = {n: {"fwd": 0, "bwd": 0, "wu": 0} for n in layers}
    again: set[str] = set()
    for row in prof.layers:
        if "pass" not in row:
            raise NotImplementedError("the network profile has no per-pass rows; pass costs=")
        if row["pass"] not in ("fwd", "bwd", "wu"):
            continue          # the optimizer row: costed per stage below
        owner = _owner(row["name"], layer_set)
        cycles[owner][row["pass"]] += int(row["cycles"])
        if row["name"].endswith(" (recompute)"):
            again.add(owner)
    item = DTYPES[dtype].itemsize
    shapes = net.shapes(micro_batch)
    params: dict[str, int] = {}
    for pname, shp in net.param_shapes().items():
        layer = pname.rsplit(".", 1)[0]
        params[layer] = params.get(layer, 0) + math.prod(shp)
    stashed = _stashed_inputs(net, checkpoints)
    out = []
    for name, _layer in net.layers:
        d = cycles.get(name, {"fwd": 0, "bwd": 0, "wu": 0})
        out.append(LayerCost(name, d["fwd"], d["bwd"], d["wu"], params.get(name, 0),
                             stash_bytes=sum(math.prod(shapes[i]) for i in stashed[name]) * item,
                             out_bytes=math.prod(shapes[name]) * item,
                             bn_channels=_layer.num_features if _layer.op == "batchnorm" else 0,
                             recomputed=int(name in again),
                             bn_stable=int(bool(getattr(_layer, "stable", False)))))
    return out


def _stashed_inputs(net: Any, checkpoints: list[str] | None) -> dict[str, list[str]]:
    """Per layer, the inputs kept for its backward pass: all of them without checkpoints;
    with checkpoints (the rule of :mod:`ipukern.nn.training`) a network input, a checkpoint's
    output, an input from another segment, or any input of the last segment (not recomputed)."""
    names = [n for n, _ in net.layers]
    ins = {n: list(net.nodes[n].inputs) for n in names}
    if not checkpoints:
        return ins
    cuts = set(checkpoints)
    seg: dict[str, int] = {}
    k = 0
    for n in names:
        seg[n] = k
        if n in cuts:
            k += 1
    last = k
    return {n: [i for i in ins[n] if i not in seg or i in cuts or seg[n] == last or seg[i] != seg[n]]
            for n in names}


def _owner(row_name: str, layers: set[str]) -> str:
    """The layer a profile row belongs to: its name, or the longest layer name the row's
    name starts with ("conv1.grad_a", "conv1 (recompute)", "conv1: rearrange ..."), found
    by looking its prefixes up, longest first (not by scanning every layer per row)."""
    for k in range(len(row_name), 0, -1):
        if row_name[:k] in layers:
            return row_name[:k]
    raise NotImplementedError(f"profile row {row_name!r} names no layer of the network; pass costs=")


def _check_costs(costs: Any) -> list[LayerCost]:
    costs = list(costs)
    if not costs or not all(isinstance(c, LayerCost) for c in costs):
        raise TypeError("costs must be a non-empty list of LayerCost")
    names = [c.name for c in costs]
    if len(set(names)) != len(names):
        raise ValueError("costs name a layer twice")
    for c in costs:
        for f in ("fwd_cycles", "bwd_cycles", "wu_cycles", "n_params", "stash_bytes", "out_bytes",
                  "work_bytes", "bn_channels", "recomputed", "bn_stable"):
            v = getattr(c, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"LayerCost {c.name!r}: {f} must be an int >= 0, got {v!r}")
    return costs


def _compute_chip(chip: Any, io_tiles: int, fixed_costs: bool) -> Any:
    """The chip the network is planned on: I/O tiles hold the stream buffers, the rest
    compute (Poplar User Guide, "I/O tiles"; TF IPU ``config.io_tiles.num_io_tiles``)."""
    if not io_tiles:
        return chip
    if io_tiles >= chip.n_tiles:
        raise ValueError(f"io_tiles must be below the chip's {chip.n_tiles} tiles, got {io_tiles}")
    if fixed_costs:
        raise ValueError("io_tiles needs a network (the costs= rows are fixed to one chip)")
    return chip.replace(n_tiles=chip.n_tiles - io_tiles, name=f"{chip.name}-{io_tiles}io")


def estimate_training(net: Any = None, system: System | str = "POD16", config: TrainingConfig | None = None,
                      *, costs: Any = None, **options: Any) -> TrainingEstimate:
    """Throughput and step time of training ``net`` on ``system`` (module docstring).

    Parameters
    ----------
    net : ipukern.nn.Network, optional when ``costs`` is given
    system : System or preset name
    config : TrainingConfig, optional
        The options (Other Parameters) as one record (:class:`~ipukern.systems.TrainingConfig`);
        keyword options given as well replace its fields.
    costs : list of LayerCost, optional
        Per-layer costs of one micro-batch on one chip (default: from ``estimate_network``).

    Other Parameters
    ----------------
    micro_batch : int
        Samples per replica per micro-batch.
    gradient_accumulation : int
        Micro-batches per step (per replica).
    replicas : int, optional
        Default: as many as the system holds.
    ipus_per_replica : int
        1, 2, 4, 8 or 16 (GCL replica sizes); > 1 pipelines the network.
    pipeline : None, "auto", list of split layers, or list of stage layer lists
    dtype, partials : str
    recompute : bool, "auto", list of str, or None
        True: re-run each stage's forward in its backward and stash only the stage input.
        "auto": checkpoints at about sqrt(n) of the network's n block boundaries
        (:mod:`ipukern.nn.checkpoints`), listed in ``est.info["recompute_checkpoints"]``.
        A list of layer names: recomputation checkpoints inside the network (as in
        :func:`ipukern.estimate_network`), e.g. the ResNet-50 MLPerf configs' "pipeline splits"
        on one IPU; the recomputed forward rows are part of the per-layer costs.
    optimizer : {"sgd", "sgd_momentum", "adam", "lamb", "lars"}
    optimizer_state : {"chip", "streaming"}
    optimizer_state_dtype : {"float32", "float16"} or one per state slot
        Storage type of the optimizer state: its per-tile bytes on chip, the update's
        load/store bytes and the bytes streamed with ``optimizer_state="streaming"``.
        Graphcore's MLPerf ResNet-50 (TF1, ``--precision 16.16``) keeps float16 momentum;
        its v1.1 POD16 BERT LAMB ``("float16", "float32")`` (``lamb_m_dtype``); see README.
    replicated_sharding : bool
        Shard the optimizer state and update across replicas.
    sample_bytes : int, optional
        Host bytes per sample (default: the network's inputs in ``dtype``).
    bn_replica_group : int
        Batch norm statistics over groups of this many consecutive replicas (Graphcore's
        MLPerf ResNet-50 used 2): per batch norm, pass and micro-batch, one all-reduce of
        2 x channels float32 values over each group, all groups at once
        (:mod:`ipukern.systems.bn_group`), counted as ``"bn all-reduce"``. 1 (default):
        per-replica statistics, no communication.
    allow_overflow : bool
        Report stages that do not fit (``fits`` False in their breakdown rows) instead of
        raising :class:`StageMemoryError`, as :func:`ipukern.estimate_network` does; "auto"
        then picks the fastest split among those that fit, or the fastest if none does.
    available_memory_proportion : float in (0, 1], optional
        PopLibs' option of that name for every conv and matmul pass (the share of a tile
        their temporary buffers may take; None: PopLibs' default 0.6), as for
        :func:`ipukern.estimate_network`. Graphcore's MLPerf ResNet-50 configurations set
        0.15 (graphcore/examples ``vision/cnns/tensorflow2/configs.yml``,
        ``resnet50_mlperf_pod16_bs20``: ``available-memory-proportion: [15]``, in percent).
    """
    cfg = TrainingConfig.of(config, options)
    system = get_system(system)
    chip = _compute_chip(system.chip, cfg.io_tiles, costs is not None)
    if cfg.micro_batch is None:
        raise ValueError("estimate_training needs micro_batch (samples per replica per micro-batch)")
    ipr = cfg.ipus_per_replica
    reps = system.n_ipus // ipr if cfg.replicas is None else cfg.replicas
    if reps * ipr > system.n_ipus or reps < 1:
        raise SystemConfigError(f"{reps} replicas x {ipr} IPUs per replica = {reps * ipr} IPUs, but "
                                f"{system.name} has {system.n_ipus}")
    bn_group = check_bn_group(cfg.bn_replica_group, reps)
    mb, dt, partials, amp = cfg.micro_batch, cfg.dtype, cfg.partials, cfg.available_memory_proportion
    item = DTYPES[dt].itemsize
    checkpoints = None
    auto = cfg.recompute == "auto"
    if isinstance(cfg.recompute, tuple) or auto:
        if costs is not None or net is None:
            raise ValueError("recompute checkpoints need a network (the costs= rows are fixed)")
        checkpoints = network_checkpoints(net, mb, chip, dt, partials, amp) if auto else list(cfg.recompute)
    # the recomputed rows of checkpoints are inside the per-layer costs
    recompute = cfg.recompute is True
    if costs is not None and amp is not None:
        raise ValueError("available_memory_proportion needs a network (the costs= rows are fixed)")
    if costs is None:
        if net is None:
            raise ValueError("give a network or costs=")
        costs = _costs_from_network(net, mb, chip, dt, partials, checkpoints, amp)
    costs = _check_costs(costs)
    sample_bytes = cfg.sample_bytes
    if sample_bytes is None:
        sample_bytes = (sum(math.prod(net.nodes[i].sample_shape) for i in net.inputs) * item
                        if net is not None else 0)
    sh = _Layout(reps, ipr, mb, cfg.gradient_accumulation, item, recompute,
                 reps if cfg.replicated_sharding else 1, sample_bytes, bn_group, cfg.optimizer_state_dtype)
    memory = _stage_memory(net, costs, chip, cfg, sh, checkpoints)
    names = [c.name for c in costs]
    stages = _split(names, cfg.pipeline, ipr)
    if stages is None:
        def stage_cycles(s: int) -> list[int]:
            return [_layer_cycles(c, recompute, _bn_cycles(system, reps, ipr, bn_group, s, c, recompute))
                    for c in costs]
        try:
            stages = _auto_fitting(costs, ipr, memory, stage_cycles, memory.per_tile)
        except StageMemoryError:
            if not cfg.allow_overflow:
                raise
            stages = _auto(costs, ipr, set(), stage_cycles)
    est = _compose(system, costs, stages, cfg, sh, memory)
    est.info["recompute"] = "stage" if recompute else "auto" if auto else (
        "checkpoints" if checkpoints else None)
    est.info["recompute_checkpoints"] = list(checkpoints or [])
    return est


@dataclass(frozen=True)
class _Layout:
    """The configuration resolved against a system: the numbers the step model uses."""

    reps: int
    ipr: int
    mb: int
    m: int
    item: int
    recompute: bool
    shard: int
    sample_bytes: int
    bn_group: int
    sdt: tuple[str, ...]

    @property
    def state_bytes(self) -> int:
        """Optimizer state bytes per parameter (the state slots in their types)."""
        return sum(DTYPES[d].itemsize for d in self.sdt)


class _StageMemory:
    """Memory of stage s = layers i..j-1 (``memory(s, i, j)``): per-tile liveness with a
    network whose layers are the costs' rows, else the whole-chip rule."""

    def __init__(self, tiles: Any, costs: list[LayerCost], chip: Any, cfg: TrainingConfig,
                 sh: _Layout) -> None:
        self.tiles, self.costs, self.cfg, self.sh = tiles, costs, cfg, sh
        self.per_tile = tiles is not None
        self.budget = chip.n_tiles * chip.tile_budget_bytes

    def __call__(self, s: int, i: int, j: int) -> dict:
        if self.tiles is not None:
            return self.tiles(s, i, j)
        sh, costs = self.sh, self.costs
        layers = costs[i:j]
        p = sum(c.n_params for c in layers)
        state = 0 if self.cfg.optimizer_state == "streaming" else p * sh.state_bytes // sh.shard
        stash = (costs[i - 1].out_bytes if i else sh.sample_bytes * sh.mb) if sh.recompute else \
            sum(c.stash_bytes for c in layers)
        b = 2 * p * sh.item + state + (sh.ipr - s) * stash + max(c.work_bytes for c in layers)
        return {"memory_bytes": b, "fits": b <= self.budget, "budget_bytes": self.budget}


def _stage_memory(net: Any, costs: list[LayerCost], chip: Any, cfg: TrainingConfig, sh: _Layout,
                  checkpoints: list[str] | None) -> _StageMemory:
    tiles = None
    if net is not None and [c.name for c in costs] == [n for n, _ in net.layers]:
        tiles = tile_memory(net, sh.mb, chip, cfg.dtype, cfg.partials, checkpoints, sh.recompute, sh.m,
                            0 if cfg.optimizer_state == "streaming" else sh.state_bytes, sh.shard, sh.ipr,
                            cfg.available_memory_proportion)
    return _StageMemory(tiles, costs, chip, cfg, sh)


def _auto_fitting(costs, ipr: int, memory, stage_cycles, lazy: bool) -> list[list[str]]:
    """"auto" stages that fit. With the per-tile model a stage's fit is checked lazily:
    the dynamic programme runs with the fits found so far, the chosen stages are checked,
    and any that do not fit are excluded before it runs again."""
    bad: set[tuple[int, int, int]] = set()
    fits = bad if lazy else (lambda s, i, j: memory(s, i, j)["fits"])
    pos = {c.name: k for k, c in enumerate(costs)}
    for _ in range(_AUTO_TRIES):
        stages = _auto(costs, ipr, fits, stage_cycles)
        if not lazy:
            return stages
        spans = [(s, pos[st[0]], pos[st[-1]] + 1) for s, st in enumerate(stages)]
        failing = [sp for sp in spans if not memory(*sp)["fits"]]
        if not failing:
            return stages
        bad.update(failing)
    raise StageMemoryError(f"no split of the network into {ipr} stages that fits was found in {_AUTO_TRIES} "
                           f"tries; give the split (pipeline=[...]), recompute, or a smaller micro-batch")


#: "auto" pipeline: how many candidate splits are checked per tile before giving up
_AUTO_TRIES = 64


def _host_io(system: System, sh: _Layout, overlapped: bool, pipeline_s: float, n_cycles: int
             ) -> tuple[float, float, int]:
    """(transfer seconds, seconds added to the step, host syncs on the critical path) of the
    step's host exchanges. Each host's link carries its replicas' inputs, one micro-batch per
    pipeline cycle. Without I/O tiles a stream copy is a host exchange every IPU of the
    replica waits for (it ends the compute superstep), so it adds to every pipeline cycle and
    so does its handshake; with I/O tiles it overlaps compute and only what exceeds the
    pipeline shows. The step's one output copy (loss, accuracy) is a host exchange either way."""
    mb_io = math.ceil(sh.reps / system.n_hosts) * sh.mb * sh.sample_bytes / system.host_bytes_per_second
    host_io = sh.m * mb_io
    syncs = 1 + (n_cycles if sh.sample_bytes and not overlapped else 0)
    return host_io, (max(0.0, host_io - pipeline_s) if overlapped else n_cycles * mb_io), syncs


def _update_seconds(system: System, params: list[int], sh: _Layout, optimizer: str, optimizer_state: str
                    ) -> tuple[list[float], list[float]]:
    """Per stage: the optimizer's seconds (its words through every tile's load/store path)
    and the optimizer state's Streaming Memory traffic (0 unless streamed)."""
    chip = system.chip
    sbytes = sh.state_bytes
    # bytes through the load/store path per parameter: the weight, gradient (and LAMB's
    # norms) words in dtype, each state word read and written in its own type
    nw = OPTIMIZER_STATE_WORDS[optimizer]
    per_param = (OPTIMIZER_WORDS[optimizer] - 2 * nw) * sh.item + 2 * sbytes
    per_ipu_bw = system.streaming_bytes_per_second / min(4, system.n_ipus)
    opt, stream = [], []
    for n in params:
        p = n / sh.shard
        opt.append(p * per_param / (chip.n_tiles * chip.load_bytes_per_cycle) / chip.clock_hz)
        stream.append(2 * p * sbytes / per_ipu_bw if optimizer_state == "streaming" else 0.0)
    return opt, stream


def _compose(system: System, costs: list[LayerCost], stages: list[list[str]], cfg: TrainingConfig,
             sh: _Layout, memory: _StageMemory) -> TrainingEstimate:
    reps, ipr, mb, m, item, recompute = sh.reps, sh.ipr, sh.mb, sh.m, sh.item, sh.recompute
    shard, bn_group, sdt = sh.shard, sh.bn_group, sh.sdt
    optimizer, optimizer_state, allow_overflow = cfg.optimizer_name, cfg.optimizer_state, cfg.allow_overflow
    chip = system.chip
    clock = chip.clock_hz
    pos = {c.name: k for k, c in enumerate(costs)}
    rows = []
    for s, names in enumerate(stages):
        i, j = pos[names[0]], pos[names[-1]] + 1
        mem = memory(s, i, j)
        if not mem["fits"] and not allow_overflow:
            raise StageMemoryError(_no_fit(s, names, mem, chip, cfg.recompute))
        layers = costs[i:j]
        fwd = sum(c.fwd_cycles for c in layers)
        bwd = sum(c.bwd_cycles + c.wu_cycles for c in layers) + (fwd if recompute else 0)
        links = 0.0
        for nb, nxt in ((layers[-1].out_bytes, s + 1), (costs[i - 1].out_bytes if i else 0, s - 1)):
            if 0 <= nxt < ipr and nb:
                path = system.route(s, nxt)
                lk = [system.link(u, v) for u, v in zip(path[:-1], path[1:])]
                links = max(links, nb / min(x.bytes_per_second for x in lk) + sum(x.latency_s for x in lk))
        p = sum(c.n_params for c in layers)
        # group statistics: forward and backward all-reduce per batch norm (recomputation
        # re-runs the forward's, as PopLibs' recomputed forward does)
        bn = sum(_bn_cycles(system, reps, ipr, bn_group, s, c, recompute) for c in layers)
        rows.append({"stage": s, "layers": names, "compute_mb_s": (fwd + bwd) / clock, "links_s": links,
                     "bn_mb_s": bn / clock, "params": p, "memory": mem})
    sync_s = 2 * system.sync_cycles(ipr) / clock if ipr > 1 else 0.0
    link_s = max(r["links_s"] for r in rows)
    slow = max(rows, key=lambda r: r["compute_mb_s"] + r["bn_mb_s"])
    slow_s = slow["compute_mb_s"] + slow["bn_mb_s"]
    cycle_s = slow_s + link_s + sync_s
    n_cycles = m + ipr - 1
    pipeline_s = n_cycles * cycle_s
    # gradients: every stage's IPUs across replicas, all stages at once in lockstep; the
    # stages' transfers crossing the same link share it (pipelined replicas' groups do)
    jobs = [(r["params"] * item, [k * ipr + s for k in range(reps)]) for s, r in enumerate(rows)]
    if shard > 1:
        t = (concurrent_seconds(system, "reduce_scatter", jobs).seconds
             + concurrent_seconds(system, "all_gather", jobs).seconds)
    else:
        t = concurrent_seconds(system, "all_reduce", jobs).seconds
    ar = [t] * len(rows)
    opt, stream = _update_seconds(system, [r["params"] for r in rows], sh, optimizer, optimizer_state)
    host_io, host_excess, host_syncs = _host_io(system, sh, bool(cfg.io_tiles), pipeline_s, n_cycles)
    host_sync = host_syncs * system.host_sync_s
    update_s = max(a + o + st for a, o, st in zip(ar, opt, stream))
    step = pipeline_s + update_s + host_excess + host_sync
    breakdown = []
    for k in range(reps):
        for s, r in enumerate(rows):
            breakdown.append({
                "ipu": k * ipr + s, "replica": k, "stage": s,
                "layers": f"{r['layers'][0]}..{r['layers'][-1]}",
                "compute_s": m * r["compute_mb_s"], "bn_all_reduce_s": m * r["bn_mb_s"],
                "fill_drain_s": (ipr - 1) * cycle_s,
                "idle_s": m * (slow_s - r["compute_mb_s"] - r["bn_mb_s"]),
                "links_s": n_cycles * link_s, "sync_s": n_cycles * sync_s, "all_reduce_s": ar[s],
                "optimizer_s": opt[s], "streaming_s": stream[s], "host_io_s": host_io,
                "host_sync_s": host_sync,
                **r["memory"]})
    parts = {"pipeline compute": m * slow["compute_mb_s"], "bn all-reduce": m * slow["bn_mb_s"],
             "fill/drain": (ipr - 1) * cycle_s,
             "links + sync": n_cycles * (link_s + sync_s), "all-reduce": max(ar),
             "optimizer": max(opt), "streaming memory": max(stream), "host I/O": host_excess,
             "host sync": host_sync}
    top = max(parts, key=parts.get)
    why = f"{top}" + (f" (slowest stage {slow['stage']}: {slow['layers'][0]}..{slow['layers'][-1]})"
                      if top == "pipeline compute" and ipr > 1 else "")
    return TrainingEstimate(system.name, reps, ipr, mb, m, [list(s) for s in stages], step, breakdown, why,
                            info={"parts_s": parts, "part_sources": PART_SOURCES,
                                  "pipeline_cycle_s": cycle_s, "host_io_s": host_io,
                                  "host_syncs": host_syncs,
                                  "host_io_overlapped": bool(cfg.io_tiles), "io_tiles": cfg.io_tiles,
                                  "bn_replica_group": bn_group, "optimizer_state_dtype": list(sdt),
                                  "weights": f"{'float16' if item == 2 else 'float32'}, updated in "
                                             "place (no float32 master copy)",
                                  "fits": all(r["memory"]["fits"] for r in rows),
                                  "memory_model": _memory_model(rows[0]["memory"])})
