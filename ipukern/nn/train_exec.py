"""Execute one training step of a network on real data: forward, backward, optimizer.

What runs on the simulated tiles: the forward pass of every layer (the network's own
programs, tile-resident), every conv/matmul backward-data and weight-update pass (each its
own planned conv, :mod:`ipukern.ops.conv_grad` / :mod:`ipukern.ops.matmul_grad`) and the
optimizer update (:func:`ipukern.optimizer_step`). What runs on the host, in float32
NumPy, with its cycles taken from the estimate: the backward of the element-wise,
pooling, normalisation and loss layers, and batch norm's training-mode forward (batch
statistics). Between passes tensors travel through the host in this execute path; the
profile returned is :func:`ipukern.estimate_network` with ``training=True`` (the costed
program keeps them on the tiles).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ops.conv_grad import conv2d_backward_data, conv2d_backward_weight
from ..ops.matmul_grad import matmul_backward_data, matmul_backward_weight
from ..ops.optim import get_optimizer, optimizer_step
from .api import _check_net, _context
from .compile import compile_network
from .layout import Resident
from .ops import act_fn
from .profile import NetworkProfile

__all__ = ["TrainStepRun", "train_step"]

#: layer ops the execute path supports (every op has a costed backward in backward.py)
SUPPORTED = ("conv2d", "linear", "batchnorm", "activation", "add", "maxpool", "avgpool",
             "global_avgpool", "reshape", "flatten", "softmax_cross_entropy")


@dataclass
class TrainStepRun:
    """Result of :func:`train_step`: ``loss`` (before the update), updated ``params``,
    ``grads`` (by parameter name), optimizer ``state`` and the training ``profile``."""

    loss: float
    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    state: dict[str, dict[str, np.ndarray]]
    profile: NetworkProfile


def _act_grad(kind: str, x: np.ndarray, g: np.ndarray) -> np.ndarray:
    if kind == "relu":
        return g * (x > 0)
    if kind == "relu6":
        return g * ((x > 0) & (x < 6))
    if kind == "sigmoid":
        s = act_fn("sigmoid", x)
        return g * s * (1 - s)
    if kind == "tanh":
        t = np.tanh(x)
        return g * (1 - t * t)
    if kind == "silu":
        s = act_fn("sigmoid", x)
        return g * (s * (1 + x * (1 - s)))
    raise NotImplementedError(f"train_step: no backward for activation {kind!r}")


def _pool_grad(layer, kind: str, x: np.ndarray, y: np.ndarray, g: np.ndarray) -> np.ndarray:
    (kh, kw), (sh, sw), (ph, pw) = layer.kernel_size, layer.stride, layer.padding
    N, C, H, W = x.shape
    Ho, Wo = y.shape[2:]
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    gx = np.zeros_like(xp)
    taken = np.zeros(y.shape, dtype=bool)
    for i in range(kh):
        for j in range(kw):
            sl = (slice(None), slice(None), slice(i, i + sh * (Ho - 1) + 1, sh),
                  slice(j, j + sw * (Wo - 1) + 1, sw))
            if kind == "max":     # the first maximum in scan order takes the gradient (as torch)
                hit = (xp[sl] == y) & ~taken
                taken |= hit
                gx[sl] += g * hit
            else:
                gx[sl] += g / (kh * kw)
    return gx[:, :, ph:ph + H, pw:pw + W]


def _bn_forward(x, p, eps):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    xh = (x - mean) / np.sqrt(var + eps)
    return xh * p["weight"][None, :, None, None] + p["bias"][None, :, None, None], (xh, var)


def _bn_backward(g, cache, p, eps):
    xh, var = cache
    m = g.shape[0] * g.shape[2] * g.shape[3]
    dbeta = g.sum(axis=(0, 2, 3))
    dgamma = (g * xh).sum(axis=(0, 2, 3))
    w = p["weight"][None, :, None, None]
    dx = (w / np.sqrt(var + eps)) * (g - dbeta[None, :, None, None] / m
                                      - xh * dgamma[None, :, None, None] / m)
    return dx.astype(np.float32), dgamma.astype(np.float32), dbeta.astype(np.float32)


def train_step(net, x: Any, labels: Any, params: dict[str, np.ndarray] | None = None, *,
               optimizer: Any = "sgd", state: dict | None = None, step: int = 1,
               machine: Any = "GC200", partials: Any = "float") -> TrainStepRun:
    """One float32 training step of ``net`` (a classifier ending in SoftmaxCrossEntropy).

    Parameters
    ----------
    net : Network
        Inputs: one float input (batch first) and one int input (the labels).
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
    fl = [n for n in net.inputs if net.nodes[n].kind == "float"]
    it = [n for n in net.inputs if net.nodes[n].kind == "int"]
    if len(fl) != 1 or len(it) != 1:
        raise ValueError(f"train_step needs one float input and one int (labels) input, network "
                         f"{net.name!r} has {net.inputs}")
    x = np.asarray(x, dtype=np.float32)
    labels = np.asarray(labels)
    batch = x.shape[0]
    if params is None:
        params = net.params if net.params is not None else net.init_params(seed=0)
    net.check_params(params)
    ctx = _context("float32", partials, machine)
    prog = compile_network(net, batch, ctx, fold_bn=False)
    for s in prog.steps:
        if s.op not in SUPPORTED or (s.op == "activation" and s.layer.kind == "gelu"):
            raise NotImplementedError(f"train_step: layer {s.name!r} ({s.op}) has no executable "
                                      f"backward yet; supported: {', '.join(SUPPORTED)}")
    nt = ctx.machine.n_tiles
    host = {fl[0]: x, it[0]: labels}
    live = {fl[0]: Resident.from_host(prog.input_layouts[fl[0]], nt, x), it[0]: labels}
    caches = {}
    for s in prog.steps:
        p = {k[len(s.node) + 1:]: np.asarray(v, np.float32) for k, v in params.items()
             if k.startswith(s.node + ".")}
        if s.op == "batchnorm":
            y, caches[s.node] = _bn_forward(host[s.srcs[0]], p, s.layer.eps)
            y = y.astype(np.float32)
            live[s.node] = Resident.from_host(s.plan.output, nt, y)
        else:
            live[s.node] = s.plan.run([live[n] for n in s.srcs], s.rearrs, s.params(params))
            v = live[s.node]
            y = v.to_host() if isinstance(v, Resident) else np.asarray(v)
        host[s.node] = np.asarray(y, np.float32)
    loss_node = net.outputs[0]
    loss = float(host[loss_node])
    grads_act: dict[str, np.ndarray] = {}
    grads: dict[str, np.ndarray] = {}
    kw = {"machine": machine, "partials": partials}

    def acc(name, g):
        if name in host and name != it[0] and name != fl[0]:
            grads_act[name] = grads_act[name] + g if name in grads_act else g.astype(np.float32)

    for s in reversed(prog.steps):
        L = s.layer
        xs = [host[n] for n in s.srcs]
        if s.op == "softmax_cross_entropy":
            z = xs[0].astype(np.float64)
            e = np.exp(z - z.max(axis=1, keepdims=True))
            sm = e / e.sum(axis=1, keepdims=True)
            sm[np.arange(batch), labels.astype(np.int64)] -= 1
            acc(s.srcs[0], (sm / batch).astype(np.float32))
            continue
        g = grads_act.get(s.node)
        if g is None:
            continue
        if s.op == "conv2d":
            hp = {"stride": L.stride, "padding": L.padding, "dilation": L.dilation, "groups": L.groups}
            w = np.asarray(params[f"{s.node}.weight"], np.float32)
            grads[f"{s.node}.weight"] = conv2d_backward_weight(g, xs[0], w.shape, **hp, **kw).output
            if L.bias:
                grads[f"{s.node}.bias"] = g.sum(axis=(0, 2, 3), dtype=np.float64).astype(np.float32)
            if s.srcs[0] != fl[0]:
                acc(s.srcs[0], conv2d_backward_data(g, w, xs[0].shape, **hp, **kw).output)
        elif s.op == "linear":
            w = np.asarray(params[f"{s.node}.weight"], np.float32)       # (out, in)
            a = xs[0].reshape(-1, L.in_features)
            g2 = g.reshape(-1, L.out_features)
            grads[f"{s.node}.weight"] = matmul_backward_weight(g2, a, (L.in_features, L.out_features),
                                                               **kw).output.T.copy()
            if L.bias:
                grads[f"{s.node}.bias"] = g2.sum(axis=0, dtype=np.float64).astype(np.float32)
            if s.srcs[0] != fl[0]:
                gx = matmul_backward_data(g2, a.shape, np.ascontiguousarray(w.T), **kw).output
                acc(s.srcs[0], gx.reshape(xs[0].shape))
        elif s.op == "batchnorm":
            p = {k: np.asarray(params[f"{s.node}.{k}"], np.float64) for k in ("weight", "bias")}
            dx, dgm, dbt = _bn_backward(g.astype(np.float64), caches[s.node], p, L.eps)
            grads[f"{s.node}.weight"], grads[f"{s.node}.bias"] = dgm, dbt
            acc(s.srcs[0], dx)
        elif s.op == "activation":
            acc(s.srcs[0], _act_grad(L.kind, xs[0], g))
        elif s.op == "add":
            if L.act is not None:
                g = _act_grad(L.act, xs[0] + xs[1], g)
            acc(s.srcs[0], g)
            acc(s.srcs[1], g)
        elif s.op in ("maxpool", "avgpool"):
            acc(s.srcs[0], _pool_grad(L, L.kind, xs[0], host[s.node], g).astype(np.float32))
        elif s.op == "global_avgpool":
            H, W = xs[0].shape[2:]
            acc(s.srcs[0], np.broadcast_to(g / (H * W), xs[0].shape).astype(np.float32))
        elif s.op in ("reshape", "flatten"):
            acc(s.srcs[0], g.reshape(xs[0].shape))
    opt = get_optimizer(optimizer)
    names = [k for k in params if k in grads]
    run = optimizer_step([np.asarray(params[k], np.float32) for k in names], [grads[k] for k in names],
                         None if state is None else [state[k] for k in names], optimizer=opt, step=step,
                         machine=machine)
    new = dict(params)
    new.update(dict(zip(names, run.params)))
    prof = estimate_network(net, batch, "float32", partials, machine, training=True, optimizer=opt,
                            allow_overflow=True)
    return TrainStepRun(loss=loss, params=new, grads=grads, state=dict(zip(names, run.state)),
                        profile=prof)
