"""Execute one training step on a System: data-parallel replicas of pipelined IPUs, in one
process or across MPI ranks.

:func:`run_training_step` runs the step :func:`~ipukern.estimate_training` costs, on real
data:

- **replicas** (data parallel): replica k takes samples ``[k B/R, (k+1) B/R)`` of the
  global batch B and splits them into ``gradient_accumulation`` micro-batches.
- **stages** (``ipus_per_replica`` > 1): consecutive layers on consecutive IPUs (replica
  k's stage s on IPU ``k P + s``). Micro-batches flow through Graphcore's grouped schedule:
  in pipeline cycle t stage s runs the forward of micro-batch ``t - s`` and the backward of
  micro-batch ``t - 2(S-1) + s``; at the end of each cycle one
  :class:`~ipukern.systems.bsp.LinkExchange` carries, for every replica at once, the
  activations crossing each stage boundary forward and their gradients backward, over the
  IPU-Links (real bytes between the IPUs' tile memories; MPI messages between ranks).
- **gradients**: each stage accumulates its micro-batches' parameter gradients (in
  micro-batch order), then the replicas' copies are summed by the executed
  :func:`~ipukern.all_reduce` over the stage's IPUs and divided by ``R x M`` (the mean over
  the global batch).
- **optimizer**: :func:`~ipukern.optimizer_step` per stage on the reduced gradients.

What executes where: a stage's forward and backward run the network's compiled programs
(:func:`ipukern.nn.train_exec.forward_steps` / ``backward_steps``: forward, conv/matmul
backward and weight-update passes on simulated tiles of the system's chip, the other
backward ops on the host in float32) in the process that owns the stage's IPU; the tensors
crossing IPUs (boundary activations, their gradients, the gradients being all-reduced) live
in that IPU's tile memory of the :class:`~ipukern.SystemDevice` and move only by its link
exchanges and collectives. Batch norm uses each micro-batch's own statistics, or with
``bn_replica_group=N`` those of N replicas' micro-batches together: the replicas of a stage
run side by side and, at each batch norm (forward and backward), their local per-channel
sums are all-reduced over each group by an executed collective (:mod:`.bn_group`).

Cycles (deterministic, the same in every process): per pipeline cycle the slowest active
stage's forward/backward cycles (per-layer training costs of one micro-batch, as
:func:`~ipukern.estimate_training` uses) plus the cycle's link exchange and cross-chip sync
(from the executed link program's records) and, with batch-norm groups, the stage's group
all-reduces; then the gradient all-reduce of every stage at once (one concurrent program:
transfers of different stages crossing a link share it, as in the estimate) and the slowest
stage's optimizer step.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import _memo
from .._format import fmt_num, format_table
from ..core import TileMapping
from ..nn.train_exec import PassState, backward_iter, forward_iter, training_program
from ..ops import get_optimizer, optimizer_step
from .bsp import SystemDevice, SystemSuperstep
from .bn_group import check_bn_group, stats_program, stats_tensor
from .recompute import bn_syncs, stage_plan
from .collectives import all_reduce, concurrent
from .spec import get_system
from .config import TrainingConfig
from .training import _costs_from_network, estimate_training

__all__ = ["TrainingRun", "run_training_step", "with_loss"]

_STATS = ("running_mean", "running_var")
_WITH_LOSS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_memo.on_clear(_WITH_LOSS.clear, name="systems.with_loss", info=lambda: {"entries": len(_WITH_LOSS)})


def with_loss(net: Any, labels: str = "labels") -> Any:
    """``net`` itself when its one output is a SoftmaxCrossEntropy loss; otherwise a copy
    whose single output (logits, like the zoo's classifiers) feeds a SoftmaxCrossEntropy
    loss against a new int input ``labels``. Cached per network version, so repeated steps
    reuse one compiled program. Parameters keep their names."""
    from ..nn import layers as L
    from ..nn import Network
    if not isinstance(net, Network):
        raise TypeError(f"expected an ipukern.nn.Network, got {type(net).__name__}")
    out = net.nodes[net.outputs[0]].layer if len(net.outputs) == 1 else None
    if getattr(out, "op", None) == "softmax_cross_entropy":
        return net
    hit = _WITH_LOSS.get(net)
    if hit is not None and hit[0] == net.version:
        return hit[1]
    if len(net.outputs) != 1:
        raise ValueError(f"network {net.name!r} has outputs {net.outputs}; a loss needs exactly one (logits)")
    new = Network(net.name)
    for n, node in net.nodes.items():
        if node.layer is None:
            new.input(n, node.sample_shape, node.kind)
        else:
            new.add(node.layer, *node.inputs, name=n)
    lab = new.input(labels, (), kind="int")
    new.output(new.add(L.SoftmaxCrossEntropy(), net.outputs[0], lab, name="loss"))
    new.params = net.params
    _WITH_LOSS[net] = (net.version, new)
    return new


@dataclass
class TrainingRun:
    """What :func:`run_training_step` returns.

    ``loss`` is the mean loss over the global batch (before the update); ``params`` the
    updated parameters, ``grads`` the all-reduced mean gradients and ``state`` the optimizer
    state, by parameter name. ``cycles`` is the step's simulated length; ``phases``
    partitions it: ``compute`` (the slowest stage's forward + backward of every
    micro-batch), ``fill/drain`` (pipeline bubble: cycles the slowest stage waits),
    ``link exchange`` and ``sync`` (the pipeline cycles' IPU-Link exchanges and cross-chip
    syncs), ``all-reduce`` and ``optimizer``. ``stages`` has one row per stage, ``schedule``
    one per pipeline cycle.
    """

    loss: float
    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    state: dict[str, dict[str, np.ndarray]]
    cycles: int
    phases: dict[str, int]
    stages: list[dict]
    schedule: list[dict]
    system: str
    replicas: int
    ipus_per_replica: int
    micro_batch: int
    gradient_accumulation: int
    clock_hz: float
    info: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz

    def summary(self) -> str:
        lines = [f"{self.system}: {self.replicas} replica(s) x {self.ipus_per_replica} IPU(s), micro-batch "
                 f"{self.micro_batch} x {self.gradient_accumulation} accumulated, executed",
                 f"loss {self.loss!r}; step {self.cycles:,} cycles = {self.seconds * 1e3:.3f} ms"]
        lines += format_table(["phase", "cycles", "share"],
                              [[k, fmt_num(v), fmt_num(100 * v / max(1, self.cycles), 1, "%")]
                               for k, v in self.phases.items()], align="lrr", indent="  ").split("\n")
        for r in self.stages:
            lines.append(f"  stage {r['stage']} ({r['layers'][0]}..{r['layers'][-1]}, IPUs {r['ipus']}): "
                         f"compute {r['compute_cycles']:,}, all-reduce {r['all_reduce_cycles']:,}, "
                         f"optimizer {r['optimizer_cycles']:,} cycles")
        return "\n".join(lines)


@dataclass
class _Setup:
    """The planned step: program, stages, boundaries and the system device."""

    prog: Any
    x_name: str
    label_name: str
    loss_node: str
    R: int
    P: int
    M: int
    mb: int
    stages: list[list[str]]
    stage_steps: list[list]
    stage_params: list[list[str]]
    #: per boundary b (stage b -> b + 1): the node names crossing it, in program order
    crossing: list[list[str]]
    fwd: list[int]
    bwd: list[int]
    dev: SystemDevice
    #: batch-norm replica group size; per stage its batch norms (node, channels) in order
    N: int = 1
    bn_nodes: list = field(default_factory=list)
    #: per stage, one micro-batch's group all-reduce cycles of the forward pass, and of the
    #: backward pass (with the recomputed forward's)
    bn_cycles: list = field(default_factory=list)
    bn_bwd_cycles: list = field(default_factory=list)
    #: per stage, its recomputation (:func:`.recompute.stage_plan`)
    plans: list = field(default_factory=list)
    acts: list = field(default_factory=list)
    gacts: list = field(default_factory=list)
    grads: list = field(default_factory=list)
    programs: dict = field(default_factory=dict)

    def ipu(self, k: int, s: int) -> int:
        return k * self.P + s

    def local(self, k: int, s: int) -> bool:
        return self.dev.is_local(self.ipu(k, s))


def _check_data(prog: Any, x_name: str, label_name: str, x: Any,
                labels: Any) -> tuple[np.ndarray, np.ndarray]:
    net = prog.net
    x = np.asarray(x)
    want = tuple(net.nodes[x_name].sample_shape)
    if x.ndim != len(want) + 1 or tuple(x.shape[1:]) != want or not np.issubdtype(x.dtype, np.number):
        raise ValueError(f"x must be a numeric array of shape (batch, {', '.join(map(str, want))}), "
                         f"got {x.dtype} {x.shape}")
    labels = np.asarray(labels)
    if labels.shape != (x.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be {x.shape[0]} integers (one per sample), got {labels.dtype} "
                         f"{labels.shape}")
    classes = prog.shapes[net.nodes[net.outputs[0]].inputs[0]][-1]
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"labels must lie in 0..{classes - 1}")
    if net.nodes[x_name].kind == "int":
        return x, labels
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise ValueError("x holds non-finite values")
    return x, labels


def _plan(net: Any, x: Any, labels: Any, system: Any, cfg: TrainingConfig,
          comm: Any) -> tuple[_Setup, np.ndarray, np.ndarray]:
    system = get_system(system)
    P = cfg.ipus_per_replica
    R = system.n_ipus // P if cfg.replicas is None else cfg.replicas
    M = cfg.gradient_accumulation
    batch = np.shape(x)[0] if np.ndim(x) else 0
    if batch < 1 or batch % (R * M):
        raise ValueError(f"the batch ({batch}) must be a positive multiple of replicas x "
                         f"gradient_accumulation = {R} x {M}")
    mb = batch // (R * M)
    if cfg.micro_batch is not None and cfg.micro_batch != mb:
        raise ValueError(f"micro_batch={cfg.micro_batch} but the batch {batch} over {R} replica(s) x {M} "
                         f"micro-batches gives {mb}")
    if cfg.recompute == "auto":
        raise ValueError("recompute must be a bool, None or a list of layer names, got 'auto'")
    recompute = list(cfg.recompute) if isinstance(cfg.recompute, tuple) else cfg.recompute
    partials, bn_group = cfg.partials, cfg.bn_replica_group
    chip = system.chip
    net = with_loss(net)
    checkpoints = recompute if isinstance(recompute, list) else None
    costs = _costs_from_network(net, mb, chip, "float32", partials, checkpoints)
    sample = sum(math.prod(net.nodes[n].sample_shape) for n in net.inputs) * 4
    # validates the configuration (IPUs, split, memory per stage) and resolves "auto"
    est = estimate_training(net, system, cfg.replace(micro_batch=mb, replicas=R), sample_bytes=sample,
                            costs=None if checkpoints else costs)
    prog, x_name, label_name = training_program(net, mb, chip, partials)
    x, labels = _check_data(prog, x_name, label_name, x, labels)
    stage_of = {n: s for s, names in enumerate(est.stages) for n in names}
    by_name = {c.name: c for c in costs}
    stage_steps = [[st for st in prog.steps if stage_of[st.node] == s] for s in range(P)]
    stage_params = [[k for k in net.param_shapes() if stage_of[k.rsplit(".", 1)[0]] == s
                     and not k.endswith(_STATS)] for s in range(P)]
    produced = {st.node: stage_of[st.node] for st in prog.steps}
    last_use: dict[str, int] = {}
    for st in prog.steps:
        for n in st.srcs:
            if n in produced:
                last_use[n] = max(last_use.get(n, -1), stage_of[st.node])
    crossing = [[n for n in produced if produced[n] <= b < last_use.get(n, -1)] for b in range(P - 1)]
    dev = SystemDevice(system, R * P, comm=comm)
    setup = _Setup(prog, x_name, label_name, net.outputs[0], R, P, M, mb, est.stages, stage_steps,
                   stage_params, crossing,
                   [sum(by_name[n].fwd_cycles for n in names) for names in est.stages],
                   # stage recomputation re-runs the stage's forward before its backward
                   [sum(by_name[n].bwd_cycles + by_name[n].wu_cycles + (recompute is True)
                        * by_name[n].fwd_cycles for n in names) for names in est.stages],
                   dev, N=check_bn_group(bn_group, R))
    setup.plans = [stage_plan(prog, steps, recompute, {net.outputs[0]}) for steps in stage_steps]
    setup.bn_nodes = [[y for st in steps for y in bn_syncs(st, "fwd")] if setup.N > 1 else []
                      for steps in stage_steps]
    _allocate(setup, net)
    setup.bn_cycles = [sum(_bn_program(setup, s, c, k)[1] for _, c, k in nodes)
                       for s, nodes in enumerate(setup.bn_nodes)]
    setup.bn_bwd_cycles = [sum(_bn_program(setup, s, c, k)[1] for _, c, k in plan.bn_backward)
                           if setup.N > 1 else 0 for s, plan in enumerate(setup.plans)]
    return setup, x, labels


def _bn_program(su: _Setup, s: int, channels: int, per_channel: int = 2) -> tuple:
    """(statistics tensor, its cycles, concurrent group all-reduce program) of stage s for
    batch norms of ``channels`` channels, ``per_channel`` values each (built once)."""
    key = ("bn", s, channels, per_channel)
    hit = su.programs.get(key)
    if hit is None:
        t = stats_tensor(su.dev, f"bn{s}_{channels}_{per_channel}", channels,
                         [su.ipu(k, s) for k in range(su.R)], per_channel)
        prog = stats_program(su.dev, t, su.R, su.P, su.N, s, f"bn all-reduce stage {s}")
        hit = su.programs[key] = (t, su.dev.run(prog, "estimate").total_cycles, prog)
    return hit


def _allocate(su: _Setup, net: Any) -> None:
    """Boundary activation / gradient buffers and per-stage gradient buffers on the IPUs."""
    nt = su.dev.system.chip.n_tiles
    shapes = su.prog.shapes
    for b, names in enumerate(su.crossing):
        n = sum(math.prod(shapes[c]) for c in names)
        ipus = [su.ipu(k, s) for k in range(su.R) for s in (b, b + 1)]
        for kind, out in (("act", su.acts), ("grad", su.gacts)):
            out.append(su.dev.add_tensor(f"{kind}{b}", (n,), "float32", TileMapping.linear(n, nt), ipus=ipus)
                       if n else None)
    shp = net.param_shapes()
    for s, names in enumerate(su.stage_params):
        n = sum(math.prod(shp[k]) for k in names)
        su.grads.append(su.dev.add_tensor(f"grads{s}", (max(1, n),), "float32",
                                          TileMapping.linear(max(1, n), nt),
                                          ipus=[su.ipu(k, s) for k in range(su.R)]))


def _link_program(su: _Setup, sends: tuple) -> Any:
    """The cycle's link exchange: ``sends`` = ((boundary, direction), ...), every replica."""
    prog = su.programs.get(sends)
    if prog is None:
        cols: list[list[np.ndarray]] = [[] for _ in range(7)]
        for b, d in sends:
            t = su.acts[b] if d == "fwd" else su.gacts[b]
            if t is None:
                continue
            m = t.mapping
            for k in range(su.R):
                src, dst = su.ipu(k, b), su.ipu(k, b + 1)
                if d == "bwd":
                    src, dst = dst, src
                for col, v in zip(cols, (np.full(m.tile.size, src), m.tile, t.on(src).offset,
                                         np.full(m.tile.size, dst), m.tile, t.on(dst).offset, m.count * 4)):
                    col.append(v)
        steps = []
        if cols[0]:
            lx = su.dev.link_exchange(*(np.concatenate(c) for c in cols), name="pipeline links")
            steps.append(SystemSuperstep("pipeline links", {}, lx, category="exchange"))
        prog = su.programs[sends] = su.dev.program(steps, label="pipeline cycle")
    return prog


def _pack(names: list[str], values: dict[str, np.ndarray], shapes: dict) -> np.ndarray:
    """One flat float32 buffer of the named tensors (zeros for those ``values`` lacks)."""
    return np.concatenate([np.asarray(values[n], np.float32).ravel() if n in values
                           else np.zeros(math.prod(shapes[n]), np.float32) for n in names])


def _unpack(names: list[str], flat: np.ndarray, shapes: dict) -> dict[str, np.ndarray]:
    out, pos = {}, 0
    for n in names:
        size = math.prod(shapes[n])
        out[n] = flat[pos:pos + size].reshape(shapes[n]).astype(np.float32)   # a copy
        pos += size
    return out


def _forward(su: _Setup, k: int, s: int, i: int, x: np.ndarray, labels: np.ndarray, params: dict,
             machine: Any, partials: Any, running: dict):
    """Replica k's stage-s forward of micro-batch i (a generator: it yields ``(state,
    batch norm node)`` at each group sync point and returns the PassState)."""
    lo = (k * su.M + i) * su.mb
    # batch norms' running statistics advance micro-batch by micro-batch (as torch calling
    # forward M times); training-mode batch norm does not read them
    st = PassState(su.prog, {**params, **running}, su.x_name, su.label_name, labels[lo:lo + su.mb],
                   machine, partials)
    st.env.bn_group = su.N
    if any(su.x_name in step.srcs for step in su.stage_steps[s]):
        st.receive(su.x_name, x[lo:lo + su.mb])
    ipu, dev = su.ipu(k, s), su.dev.devices[su.ipu(k, s)]
    if s > 0 and su.acts[s - 1] is not None:
        got = _unpack(su.crossing[s - 1], dev.read(su.acts[s - 1].on(ipu)), su.prog.shapes)
        for n, v in got.items():
            st.receive(n, v)
    for node in forward_iter(st, su.stage_steps[s]):
        yield st, node
    running.update(st.env.running)
    if s < su.P - 1 and su.acts[s] is not None:
        dev.write(su.acts[s].on(ipu), _pack(su.crossing[s], st.host, su.prog.shapes))
    for n in su.plans[s].drop:          # recomputation: freed now, computed again before the backward
        st.env.live.pop(n, None)
        st.env.bn.pop(n, None)
    return st


def _backward(su: _Setup, k: int, s: int, st: PassState, acc: dict[str, np.ndarray]):
    """Replica k's stage-s backward (a generator like :func:`_forward`)."""
    ipu, dev = su.ipu(k, s), su.dev.devices[su.ipu(k, s)]
    if s < su.P - 1 and su.gacts[s] is not None:
        st.grads_act.update(_unpack(su.crossing[s], dev.read(su.gacts[s].on(ipu)), su.prog.shapes))
    for steps, again in reversed(su.plans[s].segments):
        if again:                        # the same programs on the same inputs: the same bits
            for node in forward_iter(st, steps):
                yield st, node
        for node in backward_iter(st, steps):
            yield st, node
    for name in su.stage_params[s]:          # accumulate in micro-batch order
        g = st.grads.get(name)
        if g is not None:
            acc[name] = g.astype(np.float32) if name not in acc else acc[name] + g
    if s > 0 and su.gacts[s - 1] is not None:
        dev.write(su.gacts[s - 1].on(ipu), _pack(su.crossing[s - 1], st.grads_act, su.prog.shapes))
    return st


def _lockstep(su: _Setup, s: int, gens: dict, order: list) -> tuple[dict, int]:
    """Run stage s's pass on the local replicas side by side: at each batch norm in
    ``order`` every replica's local sums are all-reduced over its group (one concurrent
    program, run by every process) before they go on. Returns the generators' results
    and the executed all-reduce cycles."""
    out: dict = {}

    def advance(k, g):
        try:
            return next(g)
        except StopIteration as stop:
            out[k] = stop.value
            return None

    cur = {k: advance(k, g) for k, g in gens.items()}
    cycles = 0
    for node, channels, per in order:
        t, _, prog = _bn_program(su, s, channels, per)
        for k, (st, got) in cur.items():
            assert got == node, (got, node)
            su.dev.write(t, su.ipu(k, s), st.env.bn_sums[node].reshape(-1))
        cycles += su.dev.run(prog).total_cycles
        for k, (st, _) in cur.items():
            ipu = su.ipu(k, s)
            st.env.bn_reduced[node] = su.dev.devices[ipu].read(t.on(ipu)).reshape(channels, per)
        cur = {k: advance(k, g) for k, g in gens.items()}
    return out, cycles


def _pipeline(su: _Setup, x: np.ndarray, labels: np.ndarray, params: dict, partials: Any):
    """Run the grouped schedule; returns (per-(replica, stage) accumulated gradients of the
    local IPUs, local losses by (replica, micro-batch), schedule rows, replica 0's batch-norm
    running statistics held here)."""
    S, M, machine = su.P, su.M, su.dev.system.chip
    accs: dict[tuple[int, int], dict] = {(k, s): {} for k in range(su.R) for s in range(S) if su.local(k, s)}
    running: dict[tuple[int, int], dict] = {key: {} for key in accs}
    stash: dict[tuple[int, int, int], PassState] = {}
    losses: dict[tuple[int, int], float] = {}
    schedule = []
    for t in range(M + 2 * S - 2):
        fwd = [(s, t - s) for s in range(S) if 0 <= t - s < M]
        bwd = [(s, t - 2 * (S - 1) + s) for s in range(S) if 0 <= t - 2 * (S - 1) + s < M]
        bn_run = 0
        for s, i in fwd:
            mine = [k for k in range(su.R) if su.local(k, s)]
            done, cyc = _lockstep(su, s, {k: _forward(su, k, s, i, x, labels, params, machine, partials,
                                                      running[(k, s)]) for k in mine}, su.bn_nodes[s])
            bn_run += cyc
            for k, st in done.items():
                stash[(k, s, i)] = st
                if s == S - 1:
                    losses[(k, i)] = float(st.host[su.loss_node])
        for s, j in bwd:
            mine = [k for k in range(su.R) if su.local(k, s)]
            _, cyc = _lockstep(su, s, {k: _backward(su, k, s, stash.pop((k, s, j)), accs[(k, s)])
                                       for k in mine}, su.plans[s].bn_backward if su.N > 1 else [])
            bn_run += cyc
        sends = tuple([(s, "fwd") for s, _ in fwd if s < S - 1] + [(s - 1, "bwd") for s, _ in bwd if s > 0])
        rec = [r for r in su.dev.run(_link_program(su, sends)).supersteps] if sends else []
        busy = [(su.fwd[s] + su.bn_cycles[s] if any(a == s for a, _ in fwd) else 0)
                + (su.bwd[s] + su.bn_bwd_cycles[s] if any(a == s for a, _ in bwd) else 0) for s in range(S)]
        schedule.append({"cycle": t, "forward": fwd, "backward": bwd, "compute_cycles": max(busy),
                         "bn_all_reduce_cycles": bn_run,
                         "link_cycles": sum(r.exchange_cycles for r in rec),
                         "sync_cycles": sum(r.sync_cycles for r in rec),
                         "link_bytes": sum(r.bytes_exchanged for r in rec)})
    held = {k: v for s in range(S) if su.local(0, s) for k, v in running[(0, s)].items()}
    return accs, losses, schedule, held


def _reduce(su: _Setup, accs: dict, shapes: dict) -> tuple[dict[str, np.ndarray], list[int], int]:
    """All-reduce every stage's accumulated gradients across the replicas, all stages at
    once (one :func:`~ipukern.systems.collectives.concurrent` program: the stages'
    transfers crossing a link share it). Returns the mean gradients (on every rank), each
    stage's all-reduce cycles alone and the cycles of the concurrent program."""
    grads: dict[str, np.ndarray] = {}
    scale = np.float32(su.R * su.M)
    progs = []
    for s, names in enumerate(su.stage_params):
        t = su.grads[s]
        for k in range(su.R):
            if su.local(k, s):
                flat = _pack(names, accs[(k, s)], shapes) if names else np.zeros(1, np.float32)
                su.dev.write(t, su.ipu(k, s), flat)
        if su.R > 1:
            progs.append(all_reduce(su.dev, t, name=f"all_reduce stage {s}"))
    alone = [sum(r.total_cycles for r in p.records) for p in progs] or [0] * su.P
    total = su.dev.run(concurrent(su.dev, progs, label="gradient all-reduce")).total_cycles if progs else 0
    for s, names in enumerate(su.stage_params):
        flat = su.dev.read(su.grads[s], su.ipu(0, s)) / scale
        grads.update(_unpack(names, flat, shapes))
    return grads, alone, total


def run_training_step(net: Any, x: Any, labels: Any, params: dict[str, np.ndarray] | None = None, *,
                      system: Any = "POD16", config: TrainingConfig | None = None,
                      state: dict | None = None, step: int = 1, comm: Any = None,
                      **options: Any) -> TrainingRun:
    """Execute one float32 training step of ``net`` on ``system`` (module docstring).

    Parameters
    ----------
    net : ipukern.nn.Network
        A classifier: one float input (batch first) and either one int labels input and a
        SoftmaxCrossEntropy loss (as :func:`ipukern.nn.train_step`) or a single logits
        output, to which :func:`with_loss` appends the loss.
    x, labels : ndarray
        The global batch: ``replicas x gradient_accumulation x micro_batch`` samples.
    params : dict, optional
        ``"<layer>.<param>" -> array`` (None: the network's own / ``init_params(0)``).
    system : System or preset name
    config : TrainingConfig, optional
        The options (Other Parameters; the rest of :class:`~ipukern.systems.TrainingConfig`
        as for :func:`~ipukern.estimate_training`) as one record, its ``dtype`` "float32";
        keyword options given as well replace its fields. Without it the defaults are ``optimizer="sgd"``,
        ``partials="float"``, ``dtype="float32"``.
    state, step : as :func:`~ipukern.optimizer_step` (``state`` by parameter name).
    comm : mpi4py communicator, optional
        Run across MPI ranks (every rank calls with the same arguments; each computes the
        stages of the IPUs it holds). All ranks return the same bits.

    Other Parameters
    ----------------
    replicas : int, optional
        Data-parallel replicas (default: as many as the system holds).
    ipus_per_replica : int
        1, 2, 4, 8 or 16; > 1 pipelines the network over that many IPUs.
    pipeline : None, "auto", list of split layers or list of stage layer lists
        As :func:`~ipukern.estimate_training` (None with ``ipus_per_replica`` > 1: "auto").
    gradient_accumulation : int
        Micro-batches per replica per step.
    micro_batch : int, optional
        Checked against ``len(x) / (replicas x gradient_accumulation)`` when given.
    optimizer : name or :class:`~ipukern.Optimizer`
    partials : accumulation dtype of the convolutions and matmuls: "float" (the step
        executes in float32).
    bn_replica_group : int
        Batch norms use the statistics of groups of this many consecutive replicas (their
        concatenated micro-batches; forward and backward sums all-reduced over the group,
        :mod:`ipukern.systems.bn_group`). 1 (default): each replica's own micro-batch.
    recompute : bool, list of str, or None
        As :func:`~ipukern.estimate_training`: True re-runs each stage's forward just before
        its backward (keeping only the stage's inputs); a list of checkpoint layers re-runs
        each segment's forward before the segment's backward (:mod:`.recompute`). Executed:
        the dropped activations are freed after the forward and computed again; the
        weights are bitwise those of the step without recomputation, the cycles the
        estimate's.

    Returns
    -------
    TrainingRun
    """
    if config is None:     # an executed step's defaults: float32, float partials, plain SGD
        options = {"optimizer": "sgd", "partials": "float", "dtype": "float32", **options}
    cfg = TrainingConfig.of(config, options)
    if cfg.dtype != "float32":
        raise ValueError(f"an executed training step runs in float32, got dtype={cfg.dtype!r}")
    opt = get_optimizer(cfg.optimizer)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"step must be an int >= 1, got {step!r}")
    partials = cfg.partials
    su, x, labels = _plan(net, x, labels, system, cfg, comm)
    net = su.prog.net
    if params is None:
        params = net.params if net.params is not None else net.init_params(seed=0)
    net.check_params(params)
    shapes = net.param_shapes()
    accs, losses, schedule, running = _pipeline(su, x, labels, params, partials)
    if comm is not None and comm.Get_size() > 1:
        for part_l, part_r in comm.allgather((losses, running)):
            losses.update(part_l)
            running.update(part_r)
    loss = float(np.mean([losses[(k, i)] for k in range(su.R) for i in range(su.M)]))
    grads, ar_cycles, ar_total = _reduce(su, accs, shapes)
    chip = su.dev.system.chip
    new, new_state, opt_cycles = dict(params), {}, []
    for names in su.stage_params:
        if not names:
            opt_cycles.append(0)
            continue
        run = optimizer_step([np.asarray(params[n], np.float32) for n in names], [grads[n] for n in names],
                             None if state is None else [state[n] for n in names], optimizer=opt,
                             step=step, machine=chip)
        new.update(zip(names, run.params))
        new_state.update(zip(names, run.state))
        opt_cycles.append(run.profile.total_cycles)
    new.update(running)
    return _result(su, loss, new, grads, new_state, schedule, ar_cycles, ar_total, opt_cycles)


def _result(su: _Setup, loss, params, grads, state, schedule, ar_cycles, ar_total, opt_cycles) -> TrainingRun:
    bns = [su.M * (f + b) for f, b in zip(su.bn_cycles, su.bn_bwd_cycles)]
    busy = [su.M * (f + b) + n for f, b, n in zip(su.fwd, su.bwd, bns)]
    slow = int(np.argmax(busy))
    bn = bns[slow]
    phases = {"compute": busy[slow] - bn, "bn all-reduce": bn,
              "fill/drain": sum(r["compute_cycles"] for r in schedule) - busy[slow],
              "link exchange": sum(r["link_cycles"] for r in schedule),
              "sync": sum(r["sync_cycles"] for r in schedule),
              "all-reduce": ar_total, "optimizer": max(opt_cycles)}
    stages = [{"stage": s, "layers": names, "ipus": [su.ipu(k, s) for k in range(su.R)],
               "fwd_cycles": su.fwd[s], "bwd_cycles": su.bwd[s], "compute_cycles": busy[s],
               "bn_all_reduce_cycles": bns[s],
               "all_reduce_cycles": ar_cycles[s], "optimizer_cycles": opt_cycles[s],
               "params": len(su.stage_params[s])} for s, names in enumerate(su.stages)]
    sysm = su.dev.system
    return TrainingRun(loss, params, grads, state, sum(phases.values()), phases, stages, schedule,
                       sysm.name, su.R, su.P, su.mb, su.M, sysm.chip.clock_hz,
                       info={"slowest_stage": slow, "bn_replica_group": su.N,
                             "bn_all_reduce_executed": sum(r["bn_all_reduce_cycles"] for r in schedule),
                             "link_bytes": sum(r["link_bytes"] for r in schedule)})
