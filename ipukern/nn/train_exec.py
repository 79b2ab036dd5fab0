"""Execute one training step of a network on real data: forward, backward, optimizer.

What runs on the simulated tiles, on tile-resident tensors: the forward pass of every layer
(the network's own programs), batch norm's training-mode statistics (a cross-tile
reduction, :mod:`ipukern.nn.tile_reduce`), the backward of every vector layer (activations,
residual add, pooling, batch norm, layer norm, softmax, softmax cross-entropy, embedding
scatter-add, views and permutes; :mod:`ipukern.nn.grad_ops`), the inverse rearrangements
and gradient accumulation between them, every per-channel parameter gradient, each conv /
matmul backward-data and weight-update pass (its own planned conv,
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

from ..ops.optim import get_optimizer, optimizer_step
from .api import _check_net, _context
from .backward import backward_rows
from .compile import compile_network
from .grad_ops import EXECUTABLE, GradEnv, accumulate_flags, bn_stats_row
from .layout import Resident
from .profile import NetworkProfile

__all__ = ["TrainStepRun", "train_step"]

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

    Returns
    -------
    TrainStepRun
    """
    from .api import estimate_network
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
    kind = net.nodes[data[0]].kind
    x = np.asarray(x, dtype=np.float32 if kind == "float" else np.int64)
    labels = np.asarray(labels)
    if x.ndim < 1:
        raise ValueError(f"train_step: input {data[0]!r} needs a batch axis, got shape {x.shape}")
    batch = x.shape[0]
    if params is None:
        params = net.params if net.params is not None else net.init_params(seed=0)
    net.check_params(params)
    ctx = _context("float32", partials, machine)
    prog = compile_network(net, batch, ctx, fold_bn=False)
    for s in prog.steps:
        if s.op not in SUPPORTED:
            raise NotImplementedError(f"train_step: layer {s.name!r} ({s.op}) has no executable "
                                      f"backward yet; supported: {', '.join(SUPPORTED)}")
    env = GradEnv(ctx.machine, {}, params, {data[0]: x, lab: labels},
                  {"machine": machine, "partials": partials})
    _forward(prog, env, ctx)
    loss = float(env.live[net.outputs[0]].to_host())
    env.grads[net.outputs[0]] = Resident.from_host(prog.layouts[net.outputs[0]], ctx.machine.n_tiles,
                                                   np.ones((), np.float32))     # the seed dL/dL
    produced = {s.node for s in prog.steps}
    acc = accumulate_flags(prog.steps)
    for i in range(len(prog.steps) - 1, -1, -1):
        s = prog.steps[i]
        needs = [src in produced and prog.layouts.get(src) is not None for src in s.srcs]
        for row in backward_rows(s, ctx, needs, acc[i]):
            for fn in row.runs:
                fn(env)
            if not row.info.get("measured"):
                env.cycles += row.cycles
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
    prof = estimate_network(net, batch, "float32", partials, machine, training=True, optimizer=opt,
                            allow_overflow=True)
    return TrainStepRun(loss=loss, params=new, grads={k: grads[k] for k in names},
                        state=dict(zip(names, run.state)), profile=prof, cycles=env.cycles)


def _forward(prog, env: GradEnv, ctx) -> None:
    """The forward pass on the tiles; batch norms normalise with their batch statistics."""
    nt = ctx.machine.n_tiles
    for name, v in env.feeds.items():
        lay = prog.input_layouts.get(name)
        env.live[name] = v if lay is None else Resident.from_host(lay, nt, v)
    for s in prog.steps:
        if s.op == "batchnorm":
            row = bn_stats_row(s, ctx)
            row.runs[0](env)
            env.cycles += row.cycles
            scale, shift = env.bn_affine
            src = s.rearrs[0].run(env.live[s.srcs[0]])
            out = Resident(s.plan.output, nt)
            out.view()[...] = src.view() * scale + shift
            env.live[s.node] = out
        else:
            env.live[s.node] = s.plan.run([env.live[n] for n in s.srcs], s.rearrs, s.params(env.params))
        env.cycles += sum(r.total_cycles for r in s.records())
