"""The conv plans a network estimate will ask for, in the order it asks for them.

A cold estimate hands this list to :func:`ipukern.conv.host.plan_worker`, which plans
the passes on the second core ahead of the estimate. The list is only a hint: a pass it
misses is planned by the estimate itself, one it lists needlessly costs the worker's time,
never a different result. It mirrors what :class:`~ipukern.nn.program.NetworkProgram`
(forward, node order) and :func:`~ipukern.nn.backward.backward_rows` (reverse node order:
backward-data, then weight update) plan, through the same helpers.
"""
from __future__ import annotations

import numpy as np

from contextlib import nullcontext
from typing import Any

from ..conv.host import PlanKey, plan_worker, spare_core, worker_enabled
from .backward import conv_pass_params, matmul_pass_convs
from .program import bn_folds
from .convops import built_keys, matmul_params
from .layers import Conv2d, Linear, MatMul, PlanContext
from .network import Network

__all__ = ["network_plan_keys", "prefetch_network_plans"]


def _matmul_pass_keys(shape_a, shape_b, which: str, ctx: PlanContext) -> list[PlanKey]:
    """Both orientations of a matmul gradient pass (its orientation is chosen by planning
    both, :func:`ipukern.ops.matmul.matmul_conv`)."""
    return [(p, ctx.machine, False, ctx.amp) for p in matmul_pass_convs(shape_a, shape_b, which, ctx)]


def _layer_keys(layer, in_shapes, ctx: PlanContext, bias: bool, backward: bool,
                grad_input: list[bool]) -> tuple[list[PlanKey], list[PlanKey]]:
    m, amp = ctx.machine, ctx.amp
    if isinstance(layer, Conv2d):
        fwd, bwd, wu = conv_pass_params(layer, in_shapes[0], ctx)
        back = ([(bwd, m, False, amp)] if grad_input[0] else []) + [(wu, m, False, amp)]
        return [(fwd, m, bias, amp)], back if backward else []
    if isinstance(layer, Linear):
        rows = int(np.prod(in_shapes[0][:-1]))
        a, b = (rows, layer.in_features), (layer.in_features, layer.out_features)
        fwd = [(matmul_params(a, b, ctx.dtype, ctx.partials), m, False, amp)]
        if not backward:
            return fwd, []
        back = _matmul_pass_keys(a, b, "a", ctx) if grad_input[0] else []
        return fwd, back + _matmul_pass_keys(a, b, "b", ctx)
    if isinstance(layer, MatMul):
        a, b = in_shapes
        fwd = [(matmul_params(a, b, ctx.dtype, ctx.partials), m, False, amp)]
        if not backward:
            return fwd, []
        back = [k for which, g in zip("ab", grad_input) if g
                for k in _matmul_pass_keys(a, b, which, ctx)]
        return fwd, back
    return [], []


def network_plan_keys(net: Network, batch: int, ctx: PlanContext, *, fold_bn: bool,
                      backward: bool) -> tuple[list[PlanKey], list[PlanKey]]:
    """The (params, machine, bias, amp) of every conv/matmul pass an estimate of ``net``
    plans and has not built yet: the forward passes in node order, then (``backward``) the
    gradient passes in reverse node order; and the conv gradient passes among them, which
    the estimate only costs (:func:`~ipukern.nn.convops.pass_program`). Shape errors are
    left to the estimate itself (the list then stops short)."""
    try:
        shapes = net.shapes(batch)
    except (ValueError, TypeError):
        return []
    folds = bn_folds(net) if fold_bn else {}
    fwd: list[PlanKey] = []
    back: list[list[PlanKey]] = []
    costed: list[PlanKey] = []
    for name, node in net.nodes.items():
        if node.layer is None:
            continue
        in_shapes = [shapes[i] for i in node.inputs]
        grad_input = [i not in net.inputs for i in node.inputs]
        bias = getattr(node.layer, "bias", False) is True or name in folds
        try:
            f, b = _layer_keys(node.layer, in_shapes, ctx, bias, backward, grad_input)
        except (ValueError, TypeError):
            break
        fwd += f
        back.append(b)
        if isinstance(node.layer, Conv2d):
            costed += b
    built = built_keys()
    keys = dict.fromkeys(fwd + [k for b in reversed(back) for k in b])    # first use, once
    keys = [k for k in keys if k not in built]
    forward = set(fwd)      # a forward conv of the same shape is built by the estimate anyway
    return keys, [k for k in costed if k not in built and k not in forward]


def prefetch_network_plans(net: Network, batch: int, ctx: PlanContext, *, fold_bn: bool,
                           backward: bool) -> Any:
    """A context in which a forked worker plans :func:`network_plan_keys` ahead of the
    estimate (:func:`ipukern.conv.host.plan_worker`), or a null context."""
    if not (worker_enabled() and spare_core()):
        return nullcontext()
    keys, costed = network_plan_keys(net, batch, ctx, fold_bn=fold_bn, backward=backward)
    return plan_worker(keys, costed)
