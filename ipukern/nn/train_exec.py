"""Execute one training step of a network on real data: forward, backward, optimizer.

What runs on the simulated tiles, on tile-resident tensors: the forward pass of every layer
(the network's own programs), batch norm's training-mode statistics (a cross-tile
reduction, :mod:`ipukern.nn.tile_reduce`), the backward of every vector layer (activations,
residual add, pooling, batch norm, layer norm, softmax, softmax cross-entropy, embedding
scatter-add, squeeze-excitation scale, views and permutes; :mod:`ipukern.nn.grad_ops`),
the inverse rearrangements and gradient accumulation between them, every per-channel
parameter gradient, each conv / matmul backward-data and weight-update pass (its own planned conv,
:mod:`ipukern.ops.conv_grad` / :mod:`ipukern.ops.matmul_grad`) and the optimizer update
(:func:`ipukern.optimizer_step`). Still through the host: the operands and results of the
conv/matmul passes (they are separate programs with their own input layouts: the gradient
is fetched from the tiles, the pass runs, its result is placed back in the producer's
layout; this host I/O is not costed) and the parameter gradients handed to the optimizer.

The rows executed are the rows :func:`ipukern.estimate_network` costs (``training=True``,
no recomputation): ``TrainStepRun.cycles`` sums the executed programs' cycles (each conv
pass's own run profile) and equals ``profile.total_cycles`` (tested).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops import get_optimizer, optimizer_step
from .api import _check_net
from .layers import plan_context
from .backward import backward_rows
from .compile import compile_network
from .grad_ops import EXECUTABLE, GradEnv, accumulate_flags, bn_stats_row
from .layout import Resident
from .profile import NetworkProfile

__all__ = ["PassState", "TrainStepRun", "backward_iter", "backward_steps", "forward_iter", "forward_steps",
           "train_step", "training_program"]

#: layer ops the execute path supports
SUPPORTED = ("conv2d", "linear", "matmul") + EXECUTABLE


@dataclass
class TrainStepRun:
    """Result of :func:`train_step`: ``loss`` (before the update), updated ``params``
    (batch norms' running statistics updated as torch does, momentum 0.1), ``grads`` (by
    parameter name), optimizer ``state``, the training ``profile`` and ``cycles``, the
    executed programs' cycles (equal to ``profile.total_cycles``)."""

    loss: float
    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    state: dict[str, dict[str, np.ndarray]]
    profile: NetworkProfile
    cycles: int = 0


class _Values:
    """Host view of tile-resident tensors by node name (forward values or activation
    gradients): reading fetches from the tiles, writing places in the node's layout."""

    def __init__(self, st: PassState, store: dict):
        self.st, self.store = st, store

    def __getitem__(self, name: str) -> np.ndarray:
        v = self.store[name]
        return v.to_host() if isinstance(v, Resident) else np.asarray(v)

    def __setitem__(self, name: str, value) -> None:
        self.st.receive(name, value, gradient=self.store is self.st.env.grads)

    def __contains__(self, name) -> bool:
        return name in self.store

    def __iter__(self):
        return iter(list(self.store))

    def __len__(self) -> int:
        return len(self.store)

    def get(self, name: str, default=None):
        return self[name] if name in self.store else default

    def keys(self):
        return list(self.store)

    def items(self):
        return [(k, self[k]) for k in list(self.store)]

    def update(self, values: dict) -> None:
        for k, v in dict(values).items():
            self[k] = v


class PassState:
    """One (micro-)batch's tensors through the steps of a compiled training network.

    The tensors live on the tiles (a :class:`~ipukern.nn.grad_ops.GradEnv`): ``host`` and
    ``grads_act`` are host views of the forward values and of the activation gradients by
    node name (reading fetches, writing places them in the node's layout), ``grads`` holds
    the parameter gradients and ``cycles`` the executed programs' cycles. A pipeline stage
    seeds the tensors it receives (:meth:`receive`) and runs :func:`forward_steps` /
    :func:`backward_steps` on its own steps only.
    """

    def __init__(self, prog, params: dict[str, np.ndarray], x_name: str, label_name: str,
                 labels: np.ndarray, machine: Any = "GC200", partials: Any = "float"):
        self.prog, self.params, self.x_name, self.label_name = prog, params, x_name, label_name
        self.labels = np.asarray(labels)
        self.machine, self.partials = machine, partials
        self.env = GradEnv(prog.machine, {}, params, {label_name: self.labels},
                           {"machine": machine, "partials": partials})
        self.env.live[label_name] = self.labels
        self.host = _Values(self, self.env.live)
        self.grads_act = _Values(self, self.env.grads)

    @property
    def grads(self) -> dict[str, np.ndarray]:
        return self.env.pgrads

    @property
    def cycles(self) -> int:
        return self.env.cycles

    def receive(self, name: str, value: Any, *, gradient: bool = False) -> None:
        """Place a value computed elsewhere (the network input, the labels, an activation
        or, with ``gradient=True``, an activation gradient sent by another pipeline stage)
        on the tiles in its compiled layout."""
        prog, env = self.prog, self.env
        lay = prog.input_layouts.get(name) if name in prog.input_layouts else prog.layouts.get(name)
        int_input = name in prog.input_layouts and lay is None
        value = np.asarray(value) if int_input else np.asarray(value, np.float32)
        if gradient:
            env.grads[name] = Resident.from_host(lay, prog.machine.n_tiles, value)
            return
        if name in prog.input_layouts:
            env.feeds[name] = value
        env.live[name] = value if lay is None else Resident.from_host(lay, prog.machine.n_tiles, value)


def training_program(net, batch: int, machine: Any = "GC200", partials: Any = "float"):
    """``(program, data input name, label input name)``: ``net`` compiled for float32
    training steps of ``batch`` samples (batch norms unfolded), checked executable."""
    net = _check_net(net)
    loss_nodes = [n for n in net.outputs if net.nodes[n].layer is not None
                  and net.nodes[n].layer.op == "softmax_cross_entropy"]
    if len(net.outputs) != 1 or not loss_nodes:
        raise ValueError(f"train_step needs a network whose one output is a SoftmaxCrossEntropy loss; "
                         f"network {net.name!r} outputs {net.outputs}")
    lab = net.nodes[loss_nodes[0]].inputs[1]
    data = [n for n in net.inputs if n != lab]
    if len(data) != 1 or lab not in net.inputs:
        raise ValueError(f"train_step needs one data input and one labels input, network "
                         f"{net.name!r} has inputs {net.inputs}")
    ctx = plan_context("float32", partials, machine)
    prog = compile_network(net, batch, ctx, fold_bn=False)
    for s in prog.steps:
        if s.op not in SUPPORTED:
            raise NotImplementedError(f"train_step: layer {s.name!r} ({s.op}) has no executable "
                                      f"backward yet; supported: {', '.join(SUPPORTED)}")
    return prog, data[0], lab


def forward_steps(st: PassState, steps) -> None:
    """Run ``steps`` (in order) forward on the tiles; their inputs must be in ``st``.
    Batch norms normalise with their batch statistics (a cross-tile reduction)."""
    for _ in forward_iter(st, steps):
        pass


def forward_iter(st: PassState, steps):
    """:func:`forward_steps` as a generator: with ``st.env.bn_group > 1`` it yields each
    batch norm's node name once its local per-channel sums are in ``st.env.bn_sums``, so a
    driver can put the replica group's sums in ``st.env.bn_reduced`` before it resumes."""
    env, prog = st.env, st.prog
    nt = prog.machine.n_tiles
    for s in steps:
        if s.op == "batchnorm":
            row = bn_stats_row(s, prog.ctx)
            yield from _run_row(env, row, s.node)
            env.cycles += row.cycles
            scale, shift = env.bn_affine
            src = s.rearrs[0].run(env.live[s.srcs[0]])
            out = Resident(s.plan.output, nt)
            out.view()[...] = src.view() * scale + shift
            env.live[s.node] = out
        else:
            env.live[s.node] = s.plan.run([env.live[n] for n in s.srcs], s.rearrs, s.params(env.params))
        env.cycles += sum(r.total_cycles for r in s.records())


def _run_row(env, row, node: str):
    """Execute a row's runs, pausing (yield ``node``) at its replica-group sync point."""
    sync = row.info.get("group_sync") if env.bn_group > 1 else None
    syncs = () if sync is None else (sync,) if isinstance(sync, int) else tuple(sync)
    for k, fn in enumerate(row.runs):
        if k in syncs:
            yield node
        fn(env)


def backward_steps(st: PassState, steps) -> None:
    """Backward of ``steps`` (given in forward order, run in reverse) on the tiles: the
    rows :func:`ipukern.estimate_network` costs, executed. Parameter gradients go to
    ``st.grads``, activation gradients to ``st.grads_act`` (seed those arriving from later
    steps first; the loss is seeded with dL/dL = 1)."""
    for _ in backward_iter(st, steps):
        pass


def backward_iter(st: PassState, steps):
    """:func:`backward_steps` as a generator, pausing at batch norms' group sync points
    like :func:`forward_iter` (the local sums of dy and dy * x)."""
    env, prog = st.env, st.prog
    index = {s.node: i for i, s in enumerate(prog.steps)}
    acc = accumulate_flags(prog.steps)
    for s in reversed(list(steps)):
        if s.op == "softmax_cross_entropy" and s.node not in env.grads:
            env.grads[s.node] = Resident.from_host(s.plan.output, prog.machine.n_tiles,
                                                   np.ones((), np.float32))
        needs = [src in index and prog.layouts.get(src) is not None for src in s.srcs]
        for row in backward_rows(s, prog.ctx, needs, acc[index[s.node]]):
            yield from _run_row(env, row, s.node)
            if not row.info.get("measured"):
                env.cycles += row.cycles


def train_step(net, x: Any, labels: Any, params: dict[str, np.ndarray] | None = None, *,
               optimizer: Any = "sgd", state: dict | None = None, step: int = 1,
               machine: Any = "GC200", partials: Any = "float") -> TrainStepRun:
    """One float32 training step of ``net`` (a classifier ending in SoftmaxCrossEntropy).

    Parameters
    ----------
    net : Network
        Inputs: one data input (float images/features, or int token ids for an embedding;
        batch first) and the loss's int labels input.
    x, labels : ndarray
    params : dict, optional
        ``"<layer>.<param>" -> array`` (None: the network's own / ``init_params(0)``).
    optimizer : name or :class:`~ipukern.Optimizer`
    state, step : the optimizer state by parameter name and the step number.
    machine, partials : the machine and partials type of the passes.

    Returns
    -------
    TrainStepRun
    """
    from .api import estimate_network
    net = _check_net(net)
    x = np.asarray(x)
    if x.ndim < 1:
        raise ValueError(f"train_step: the input needs a batch axis, got shape {x.shape}")
    prog, x_name, lab = training_program(net, x.shape[0], machine, partials)
    if params is None:
        params = net.params if net.params is not None else net.init_params(seed=0)
    net.check_params(params)
    st = PassState(prog, params, x_name, lab, np.asarray(labels), machine, partials)
    st.receive(x_name, x)
    forward_steps(st, prog.steps)
    loss = float(st.host[net.outputs[0]])
    backward_steps(st, prog.steps)
    env = st.env
    grads = env.pgrads
    opt = get_optimizer(optimizer)
    names = [k for k in net.param_shapes() if not k.endswith(("running_mean", "running_var"))]
    run = optimizer_step([np.asarray(params[k], np.float32) for k in names], [grads[k] for k in names],
                         None if state is None else [state[k] for k in names], optimizer=opt, step=step,
                         machine=machine)
    new = dict(params)
    new.update(dict(zip(names, run.params)))
    new.update(env.running)
    env.cycles += run.profile.total_cycles
    prof = estimate_network(net, x.shape[0], "float32", partials, machine, training=True, optimizer=opt,
                            allow_overflow=True)
    return TrainStepRun(loss=loss, params=new, grads={k: grads[k] for k in names},
                        state=dict(zip(names, run.state)), profile=prof, cycles=env.cycles)
