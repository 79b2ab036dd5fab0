"""Batch norm's training statistics, PopLibs' *stable* variant (``stableAlgo=true``).

PopLibs (``poplin::normStatistics`` / ``distributedNormStatistics``, ``lib/poplin/Norms.cpp``,
``normStatisticsImpl``): with ``stableAlgo`` false both per-channel reductions (sum and sum
of squares) run in one ``reduceMany`` and the variance is ``E[x^2] - E[x]^2``; with it true
the mean is reduced first (and all-reduced over the replica group with distributed
statistics), ``x - mean`` is computed element-wise (the mean cast to the activations' type),
then the sum of squares of the centred values is reduced (and all-reduced): the variance is
``E[(x - mean)^2]``, which does not cancel catastrophically when ``|mean| >> std`` ("slower
than when set to false", the header says). The gradient pass is the same in both.

Cost here, from the same building blocks as the default row
(:func:`ipukern.nn.grad_ops.bn_stats_row`): two cross-tile reductions of one quantity
instead of one of two (each with its own exchanges to the channel owners), the mean
broadcast back to the tiles, one element-wise subtract pass, and the per-channel finish
without the ``- mean^2`` term; with a replica group, two all-reduces of C values instead of
one of 2 C (:mod:`ipukern.systems.bn_group`).
"""
from __future__ import annotations

import numpy as np

from . import cycles
from .tile_reduce import channel_reduce

__all__ = ["bn_stats_stable_row", "finish_statistics"]


def finish_statistics(env, step, mean: np.ndarray, var: np.ndarray, n: int, cr) -> None:
    """On the channel owners, from the (group's) float64 mean and variance: rstd, the
    scale and shift broadcast back by ``cr`` (``env.bn_affine``), the statistics the backward
    uses (``env.bn``) and the running statistics (torch's update, momentum 0.1, unbiased
    variance)."""
    rstd = 1.0 / np.sqrt(var + step.layer.eps)
    gamma = np.asarray(env.params[f"{step.node}.weight"], np.float64)
    scale = gamma * rstd
    shift = np.asarray(env.params[f"{step.node}.bias"], np.float64) - mean * scale
    env.bn[step.node] = (mean, rstd, gamma)
    unbiased = var * n / max(n - 1, 1)
    for k, v in (("running_mean", mean), ("running_var", unbiased)):
        old = np.asarray(env.params[f"{step.node}.{k}"], np.float64)
        env.running[f"{step.node}.{k}"] = ((1 - 0.1) * old + 0.1 * v).astype(np.float32)
    env.bn_affine = cr.broadcast(np.stack([scale, shift], axis=1))


def bn_stats_stable_row(step, ctx, row_cls, rec, bn_dims, f):
    """The statistics row of a batch norm with ``stable=True`` (module docstring). Its
    ``runs`` pause twice at the replica group's sync points (``info["group_sync"]``): after
    the local sums of x, and after the local sums of the centred squares."""
    C, inner = bn_dims(step)
    out = step.plan.output
    nt = ctx.machine.n_tiles
    # mean: one quantity, scaled on the owners (1 pass), broadcast back to every tile
    cm = channel_reduce(ctx.machine, out, C, inner, quantities=1, broadcast=1, post_ops=1,
                        name="batch-norm mean")
    sub = rec(ctx, step, cycles.binary_cycles(ctx.machine, out.elems_per_tile(nt), ctx.dtype, 2),
              "x - mean per channel: one broadcast pass", suffix="stats.centre")
    # centred power: square on the tiles (1 pass), then on the owners: scale, + eps, rsqrt,
    # gamma * rstd, beta - mean * scale (2), the running mean and variance updates (2):
    # the default row's 9 per-channel passes without the "- mean^2" (2)
    cp = channel_reduce(ctx.machine, out, C, inner, quantities=1, broadcast=2, pre_ops=1, post_ops=7,
                        rsqrt=True, name="batch-norm centred power")
    count = out.n_elems // C
    key = (step.node, "mean")

    def sum_x(env):
        env.bn_sums[step.node] = cm.reduce([f(env.live[step.srcs[0]])])

    def centre(env):
        _, group, n = env.group_sums(step.node, count)
        mean = group.astype(np.float64)[:, 0] / n
        (mb,) = cm.broadcast(mean[:, None])           # the mean in float32 on every tile
        xc = f(env.live[step.srcs[0]]) - mb
        env.tmp[key] = (mean, n)
        env.bn_sums[step.node] = cp.reduce([xc * xc])

    def finish(env):
        mean, n = env.tmp.pop(key)
        _, group, _ = env.group_sums(step.node, count)
        finish_statistics(env, step, mean, group.astype(np.float64)[:, 0] / n, n, cp)

    return row_cls(f"{step.name}.stats", "batchnorm", "fwd", "reduce(mean); reduce((x - mean)^2)",
                   cm.records + [sub] + cp.records, 4 * out.n_elems, cm.total_bytes + cp.total_bytes,
                   info={"group_sync": (1, 2), "stable": True}, runs=(sum_x, centre, finish))
