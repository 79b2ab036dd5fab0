"""The backward passes of every network layer: what they cost and how much memory they use.

Convolutions and matmuls: PopLibs plans the backward-data ("bwd") and weight-update ("wu")
passes as convolutions of their own (reference/poplibs-planner.md §1.5); they are planned
and built here exactly as :func:`ipukern.conv2d_backward_data` /
:func:`ipukern.conv2d_backward_weight` / :func:`ipukern.matmul_backward_data` /
:func:`ipukern.matmul_backward_weight` do (:mod:`ipukern.conv.passes`), so their rows carry
the real programs' superstep records and per-tile memory.

Every other layer's backward is an executable tile program (:mod:`ipukern.nn.grad_ops`):
its rows' records are what the estimate costs and their ``runs`` what
:func:`ipukern.nn.train_step` executes. Per-channel sums (batch-norm statistics and
gradients, layer-norm gain/bias, biases, position embeddings) are cross-tile reductions
(:mod:`ipukern.nn.tile_reduce`). Input gradients are computed in the layout the forward op
wanted and return to the producer's layout by the inverse rearrangement (costed), adding
to an earlier consumer's gradient where a tensor fans out:

==================  ==================================================================
activation          popnn NonLinearityGrad (:mod:`ipukern.nn.grad_cycles`)
add (+act)          the gradient fans out; a fused activation's NonLinearityGrad
batchnorm (train)   forward: cross-tile sum / sum of squares, owner rsqrt, scale/shift
                    broadcast; backward: cross-tile sums of g and g*x, 3 passes for dx
max/avg pooling     popnn Max/SumPoolingGrad; whole-field avg pool: popops mul + broadcast copy
reshape/flatten     views; permute: the inverse rearrangement exchange
linear/conv bias    cross-tile per-channel sum of the output gradient
softmax             a row reduction of g*y and three element-wise passes
layer norm          row statistics again, two row reductions, seven passes; gain/bias
                    gradients as a cross-tile reduction
cross-entropy loss  popnn LossTransform (softmax minus one-hot) and a 1/N scale
embedding           multiUpdateAdd: the gather's exchange in reverse, zero + add
scale channels      a broadcast multiply (dx) and a multiply + plane sums (ds), per tile
mul / exp           two popops multiplies / a multiply (and scale) from the output
==================  ==================================================================
"""
from __future__ import annotations

import numpy as np

from ..conv import ConvParams, backward_data_pass, weight_update_pass
from ..ops.matmul import matmul_conv, matmul_convs
from ..ops.matmul_grad import matmul_pass_shapes
from .convops import pass_program
from .grad_ops import (EXECUTABLE, FROM_OUTPUT, PassRow, bn_stats_row, deliver_rows, flush_rows,
                       vector_grad_rows)
from .tile_reduce import channel_reduce

__all__ = ["PassRow", "backward_reads", "backward_rows", "bn_stats_row"]


def backward_reads(step) -> tuple[tuple[bool, ...], bool]:
    """Which forward tensors a step's backward rows read: ``(per input, its output)``.

    A training step keeps a forward activation only as long as some backward pass reads
    it, as Poplar frees a variable after the last program that reads it. What each backward
    reads is what the PopLibs function computing it takes:

    - conv / linear: the weight update reads the input (``poplin::calculateWeightDeltas``
      takes the activations); backward-data reads only weights and output gradients;
      matmul: each operand's gradient reads the other operand;
    - batch norm / layer norm: the input (``popnn::bn::batchNormGradients`` /
      ``popnn::ln::layerNormGradients`` take the forward activations, whitened or not);
    - relu, relu6, sigmoid, tanh (alone or fused into an add): the *output*; GELU and SiLU:
      the input (:data:`FROM_OUTPUT`);
    - max pooling: input and output (``popnn::pooling::poolInputGradient(in, pooled, ...)``);
      average pooling, residual add, reshape/flatten/permute: nothing (shapes only);
    - softmax and exp: the output; element-wise mul: both inputs; the loss,
      squeeze-excitation scaling, embedding and anything else: every input (conservative).
    """
    op, layer, n = step.op, step.layer, len(step.srcs)
    if op in ("conv2d", "linear", "batchnorm", "layernorm"):
        return (True,) + (False,) * (n - 1), False
    if op == "activation":
        out = layer.kind in FROM_OUTPUT
        return (not out,), out
    if op == "add":
        act = getattr(layer, "act", None)
        if act is None or act in FROM_OUTPUT:
            return (False,) * n, act is not None
        return (True,) * n, False
    if op == "maxpool":
        return (True,), True
    if op in ("avgpool", "global_avgpool", "reshape", "flatten", "permute"):
        return (False,) * n, False
    if op in ("softmax", "exp"):
        return (False,) * n, True
    return (True,) * n, False


def _conv_row(name: str, op: str, pass_: str, params: ConvParams, machine, flops: int, run=None,
              amp: float | None = None) -> PassRow:
    # the network's program cache (layers of equal shape share one, cleared with the
    # network caches), not the op-level LRU: a network has more distinct passes than it holds
    prog = pass_program(params, machine, amp)
    return PassRow(name, op, pass_, prog.plan.method.label(), list(prog.records), flops,
                   prog.memory_used.copy(), {"plan": prog.plan.describe(),
                                             "pass_conv": params.describe(), "measured": True},
                   runs=() if run is None else (run,))


def conv_pass_params(layer, in_shape, ctx) -> tuple[ConvParams, ConvParams, ConvParams]:
    """A Conv2d layer's forward conv and the convs of its backward-data and weight-update
    passes, as planned for ``ctx``."""
    fwd = ConvParams.from_shapes(in_shape, layer.weight_shape(), stride=layer.stride,
                                 padding=layer.padding, dilation=layer.dilation, groups=layer.groups,
                                 dtype=ctx.dtype, partials=ctx.partials)
    return fwd, backward_data_pass(fwd).params, weight_update_pass(fwd).params


def matmul_pass_convs(shape_a, shape_b, which: str, ctx) -> list:
    """Both orientations of the product a matmul's gradient pass runs (``which``: "a" for
    the input gradient of ``a``, "b" for that of ``b``)."""
    return matmul_convs(*matmul_pass_shapes(shape_a, shape_b, which), ctx.dtype, ctx.partials)


def _matmul_rows(name, op, shape_a, shape_b, ctx, *, grad_a: bool, grad_b_pass: str | None, runs=None):
    rows = []
    fl = 2 * int(np.prod(shape_a)) * int(shape_b[-1])
    for which, pass_, wanted in (("a", "bwd", grad_a), ("b", grad_b_pass, grad_b_pass is not None)):
        if not wanted:
            continue
        # the orientation ipukern.matmul would run (C = A B or C^T = B^T A^T)
        p, _ = matmul_conv(*matmul_pass_shapes(shape_a, shape_b, which), ctx.dtype, ctx.partials,
                           machine=ctx.machine, amp=ctx.amp)
        rows.append(_conv_row(f"{name}.{'grad_a' if which == 'a' else 'grad_b'}", op, pass_, p,
                              ctx.machine, fl, None if runs is None else runs[which], ctx.amp))
    return rows


def _host(env, node: str, shape=None) -> np.ndarray:
    v = env.live[node]
    a = v.to_host() if hasattr(v, "to_host") else np.asarray(v)
    return a if shape is None else a.reshape(shape)


def _conv_runs(step, ctx):
    """Execute the conv passes (planned convs of their own, :mod:`ipukern.ops.conv_grad`):
    operands leave the tiles and the results return to them through the host."""
    from ..ops import conv2d_backward_data, conv2d_backward_weight
    from .layout import Resident
    L, node, nt = step.layer, step.node, ctx.machine.n_tiles
    hp = {"stride": L.stride, "padding": L.padding, "dilation": L.dilation, "groups": L.groups}

    def gi(env):
        r = conv2d_backward_data(env.grad(step).to_host(), env.p(step, "weight"), step.in_shapes[0],
                                 **hp, **env.kw)
        env.cycles += r.profile.total_cycles
        env.tmp[(node, 0)] = Resident.from_host(step.rearrs[0].src, nt, r.output)

    def gw(env):
        r = conv2d_backward_weight(env.grad(step).to_host(), _host(env, step.srcs[0]),
                                   L.weight_shape(), **hp, **env.kw)
        env.cycles += r.profile.total_cycles
        env.pgrads[f"{node}.weight"] = r.output
    return gi, gw


def _matmul_runs(step, ctx, linear: bool):
    from ..ops import matmul_backward_data, matmul_backward_weight
    from .layout import Resident
    L, node, nt = step.layer, step.node, ctx.machine.n_tiles
    s0 = step.in_shapes[0]

    def operands(env):
        g = env.grad(step).to_host()
        return g.reshape(-1, L.out_features) if linear else g

    def ga(env):
        g = operands(env)
        if linear:
            b = np.ascontiguousarray(env.p(step, "weight").T)
            r = matmul_backward_data(g, (g.shape[0], L.in_features), b, **env.kw)
        else:
            r = matmul_backward_data(g, s0, _host(env, step.srcs[1]), **env.kw)
        env.cycles += r.profile.total_cycles
        env.tmp[(node, 0)] = Resident.from_host(step.rearrs[0].src, nt, r.output.reshape(s0))

    def gb(env):
        g = operands(env)
        if linear:
            r = matmul_backward_weight(g, _host(env, step.srcs[0], (-1, L.in_features)),
                                       (L.in_features, L.out_features), **env.kw)
            env.pgrads[f"{node}.weight"] = np.ascontiguousarray(r.output.T)
        else:
            r = matmul_backward_weight(g, _host(env, step.srcs[0]), step.in_shapes[1], **env.kw)
            env.tmp[(node, 1)] = Resident.from_host(step.rearrs[1].src, nt, r.output)
        env.cycles += r.profile.total_cycles
    return {"a": ga, "b": gb}


def _bias_row(step, ctx, channels: int, inner: int) -> PassRow:
    """Bias gradient: the output gradient summed per channel across the tiles."""
    cr = channel_reduce(ctx.machine, step.plan.output, channels, inner, quantities=1,
                        name="bias gradient")

    def run(env):
        env.pgrads[f"{step.node}.bias"] = cr.reduce([env.grad(step).view()])[:, 0]
    return PassRow(f"{step.name}.grad_bias", step.op, "wu", "reduce", list(cr.records),
                   int(step.plan.output.n_elems), cr.total_bytes, runs=(run,))


def backward_rows(step, ctx, needs_input_grad: list[bool],
                  accumulate: list[bool] | None = None) -> list[PassRow]:
    """The backward-data and weight-update rows of one forward step (reverse order of
    execution is the caller's business). ``needs_input_grad[k]``: input k is a tensor
    whose gradient someone needs (False for network inputs and host data);
    ``accumulate[k]``: its gradient adds to one delivered before (several consumers).
    Rows carry ``runs`` executing them (:func:`ipukern.nn.train_step`) where the op is
    executable."""
    m = ctx.machine
    layer = step.layer
    op = step.op
    name = step.name
    acc = list(accumulate) if accumulate is not None else [False] * len(step.srcs)
    if op == "conv2d":
        fwd, bwd_params, wu_params = conv_pass_params(layer, step.in_shapes[0], ctx)
        gi, gw = _conv_runs(step, ctx)
        rows = []
        if needs_input_grad[0]:
            rows.append(_conv_row(f"{name}.grad_input", op, "bwd", bwd_params, m, fwd.flops, gi,
                                  ctx.amp))
            rows += deliver_rows(step, 0, ctx, acc[0], rearrange=False)
        rows.append(_conv_row(f"{name}.grad_weight", op, "wu", wu_params, m, fwd.flops, gw, ctx.amp))
        if layer.bias:
            rows.append(_bias_row(step, ctx, layer.out_channels, int(np.prod(step.out_shape[2:]))))
        return flush_rows(rows)
    if op in ("linear", "matmul"):
        lin = op == "linear"
        runs = _matmul_runs(step, ctx, lin)
        if lin:
            rows_ = int(np.prod(step.in_shapes[0][:-1]))
            rows = _matmul_rows(name, op, (rows_, layer.in_features), (layer.in_features, layer.out_features),
                                ctx, grad_a=needs_input_grad[0], grad_b_pass="wu", runs=runs)
        else:
            rows = _matmul_rows(name, op, step.in_shapes[0], step.in_shapes[1], ctx,
                                grad_a=needs_input_grad[0],
                                grad_b_pass="bwd" if needs_input_grad[1] else None, runs=runs)
        out = []
        for r in rows:
            out.append(r)
            k = 0 if r.name.endswith("grad_a") else 1
            if r.pass_ == "bwd":
                out += deliver_rows(step, k, ctx, acc[k], rearrange=False)
        if lin and layer.bias:
            out.append(_bias_row(step, ctx, layer.out_features, 1))
        return flush_rows(out)
    if op in EXECUTABLE:
        return flush_rows(vector_grad_rows(step, ctx, needs_input_grad, acc))
    raise NotImplementedError(f"layer {name!r}: no backward pass for op {op!r}")
