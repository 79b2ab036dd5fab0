"""The backward passes of every network layer: what they cost and how much memory they use.

Convolutions and matmuls: PopLibs plans the backward-data ("bwd") and weight-update ("wu")
passes as convolutions of their own (reference/poplibs-planner.md §1.5); they are planned
and built here exactly as :func:`ipukern.conv2d_backward_data` /
:func:`ipukern.conv2d_backward_weight` / :func:`ipukern.matmul_backward_data` /
:func:`ipukern.matmul_backward_weight` do (:mod:`ipukern.conv.passes`), so their rows carry
the real programs' superstep records and per-tile memory.

Every other layer's backward is an element-wise or reduction program over the gradient,
costed with the same popops/popnn estimators as the forward ops (:mod:`ipukern.nn.cycles`),
in the layout of the forward op's output (gradients are produced where their activations
live):

==================  ==================================================================
activation          NonLinearityGrad: the non-linearity's derivative and a multiply
add (+act)          nothing (the gradient fans out); a fused activation's derivative
batchnorm (train)   forward statistics: two streaming reductions (sum, sum of squares);
                    backward: two reductions (dbeta, dgamma) and two broadcast passes
max/avg pooling     the pooling-grad vertex walks the same windows as the forward
global avg pool     one broadcast multiply over the input
reshape/flatten     nothing (a view); permute: the same rearrangement as the forward
linear/conv bias    one streaming reduction of the output gradient
softmax             a row reduction of g*y and two element-wise passes
layer norm          three row reductions and four element-wise passes
cross-entropy loss  softmax minus one-hot: the forward loss transform again
embedding           multiUpdateAdd: the forward gather's exchange and copy again
scale channels      a broadcast multiply (dx) and a multiply + plane reduction (ds)
==================  ==================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..conv.params import ConvParams
from ..conv.passes import backward_data_pass, weight_update_pass
from ..core.profile import SuperstepRecord
from ..ops.matmul import matmul_conv_params
from ..ops.matmul_grad import _pass_shapes
from . import cycles
from .convops import conv_program
from .ops import compute_record

__all__ = ["PassRow", "backward_rows", "bn_stats_row"]


@dataclass
class PassRow:
    """One backward-side pass of one layer (a row of the training profile)."""

    name: str
    op: str
    pass_: str
    method: str
    records: list[SuperstepRecord]
    flops: int
    #: per-tile working bytes while the pass runs (its own buffers)
    total_bytes: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return sum(r.total_cycles for r in self.records)


def _conv_row(name: str, op: str, pass_: str, params: ConvParams, machine, flops: int) -> PassRow:
    # the network's program cache (layers of equal shape share one, cleared with the
    # network caches), not the op-level LRU: a network has more distinct passes than it holds
    prog = conv_program(params, machine, False)
    return PassRow(name, op, pass_, prog.plan.method.label(), list(prog.program.records), flops,
                   prog.device.memory.used.copy(), {"plan": prog.plan.describe(),
                                                    "pass_conv": params.describe()})


def _matmul_rows(name, op, shape_a, shape_b, ctx, *, grad_a: bool, grad_b_pass: str | None):
    rows = []
    fl = 2 * int(np.prod(shape_a)) * int(shape_b[-1])
    for which, pass_, wanted in (("a", "bwd", grad_a), ("b", grad_b_pass, grad_b_pass is not None)):
        if not wanted:
            continue
        la, lb = _pass_shapes(shape_a, shape_b, which)
        p = matmul_conv_params(la, lb, ctx.dtype, ctx.partials)
        rows.append(_conv_row(f"{name}.{'grad_a' if which == 'a' else 'grad_b'}", op, pass_, p,
                              ctx.machine, fl))
    return rows


def _vec_row(machine, name, op, pass_, method, tile_cycles, why, flops=0, nbytes=None) -> PassRow:
    rec = compute_record(machine, name, tile_cycles, why)
    zeros = np.zeros(machine.n_tiles, np.int64)
    return PassRow(name, op, pass_, method, [rec], int(flops), zeros if nbytes is None else nbytes)


def bn_stats_row(step, ctx) -> PassRow:
    """Training batch norm's forward statistics (mean and variance per channel)."""
    m = ctx.machine
    n = step.plan.output.elems_per_tile(m.n_tiles)
    cyc = 2 * cycles.binary_cycles(m, n, ctx.dtype, 1)
    return _vec_row(m, f"{step.name}.stats", "batchnorm", "fwd", "reduce(sum, sum of squares)", cyc,
                    f"batch-norm statistics: 2 streaming reductions of {int(n.max())} elements",
                    3 * step.plan.output.n_elems)


def backward_rows(step, ctx, needs_input_grad: list[bool]) -> list[PassRow]:
    """The backward-data and weight-update rows of one forward step (reverse order of
    execution is the caller's business). ``needs_input_grad[k]``: input k is a tensor
    whose gradient someone needs (False for network inputs and host data)."""
    m = ctx.machine
    nt = m.n_tiles
    layer = step.layer
    op = step.op
    name = step.name
    n_out = step.plan.output.elems_per_tile(nt)
    dt = ctx.dtype
    if op == "conv2d":
        fwd = ConvParams.from_shapes(step.in_shapes[0], layer.weight_shape(), stride=layer.stride,
                                     padding=layer.padding, dilation=layer.dilation,
                                     groups=layer.groups, dtype=dt, partials=ctx.partials)
        rows = []
        if needs_input_grad[0]:
            rows.append(_conv_row(f"{name}.grad_input", op, "bwd", backward_data_pass(fwd).params, m,
                                  fwd.flops))
        rows.append(_conv_row(f"{name}.grad_weight", op, "wu", weight_update_pass(fwd).params, m,
                              fwd.flops))
        if layer.bias:
            rows.append(_bias_row(m, name, op, n_out, dt))
        return rows
    if op == "linear":
        s = step.in_shapes[0]
        rows_ = int(np.prod(s[:-1]))
        rows = _matmul_rows(name, op, (rows_, layer.in_features), (layer.in_features, layer.out_features),
                            ctx, grad_a=needs_input_grad[0], grad_b_pass="wu")
        if layer.bias:
            rows.append(_bias_row(m, name, op, n_out, dt))
        return rows
    if op == "matmul":
        return _matmul_rows(name, op, step.in_shapes[0], step.in_shapes[1], ctx,
                            grad_a=needs_input_grad[0], grad_b_pass="bwd" if needs_input_grad[1] else None)
    return _vector_rows(step, ctx, n_out)


def _bias_row(m, name, op, n_out, dt) -> PassRow:
    return _vec_row(m, f"{name}.grad_bias", op, "wu", "reduce", cycles.binary_cycles(m, n_out, dt, 1),
                    f"bias gradient: streaming reduction of {int(n_out.max())} elements per tile")


def _vector_rows(step, ctx, n_out) -> list[PassRow]:
    m = ctx.machine
    nt = m.n_tiles
    dt = ctx.dtype
    layer, op, name = step.layer, step.op, step.name

    def row(pass_, method, cyc, why, flops=0):
        return [_vec_row(m, f"{name}.grad", op, pass_, method, cyc, why, flops)]

    if op == "activation":
        cyc = cycles.nonlinearity_cycles(m, n_out, layer.kind, dt) + cycles.binary_cycles(m, n_out, dt, 2)
        return row("bwd", "NonLinearityGrad", cyc, f"{layer.kind}' * grad over {int(n_out.max())} elements",
                   2 * step.plan.output.n_elems)
    if op == "add":
        if getattr(layer, "act", None) is None:
            return []
        cyc = cycles.nonlinearity_cycles(m, n_out, layer.act, dt) + cycles.binary_cycles(m, n_out, dt, 2)
        return row("bwd", "NonLinearityGrad", cyc, f"fused {layer.act}' * grad")
    if op == "batchnorm":
        cyc = 2 * cycles.binary_cycles(m, n_out, dt, 2) + 2 * cycles.binary_cycles(m, n_out, dt, 2)
        return row("bwd", "reduce+broadcast", cyc, "batch-norm grad: 2 reductions (dbeta, dgamma) and "
                   "2 broadcast passes", 6 * step.plan.output.n_elems)
    if op in ("maxpool", "avgpool"):
        recs = [_relabel(r, f"{name}.grad") for r in step.plan.records]
        return [PassRow(f"{name}.grad", op, "bwd", f"{step.plan.method}Grad", recs, step.plan.flops,
                        np.zeros(nt, np.int64))]
    if op == "global_avgpool":
        n_in = step.plan.inputs[0].elems_per_tile(nt)
        return row("bwd", "BroadcastScale", cycles.binary_cycles(m, n_in, dt, 1),
                   "broadcast grad / (H*W) over the input")
    if op in ("reshape", "flatten"):
        return []
    if op in ("permute", "softmax_cross_entropy", "embedding"):
        recs = [_relabel(r, f"{name}.grad") for r in step.plan.records]
        pass_ = "wu" if op == "embedding" else "bwd"
        return [PassRow(f"{name}.grad", op, pass_, step.plan.method, recs, 0, np.zeros(nt, np.int64))]
    if op == "softmax":
        L = step.out_shape[-1]
        rows = n_out // max(L, 1)
        cyc = cycles.reduce_rows_cycles(m, rows, L, dt) + 2 * cycles.binary_cycles(m, n_out, dt, 2)
        return row("bwd", "reduce+mul", cyc, f"softmax grad: {int(rows.max())} rows of {L}")
    if op == "layernorm":
        L = step.out_shape[-1]
        rows = n_out // max(L, 1)
        cyc = 3 * cycles.reduce_rows_cycles(m, rows, L, dt) + 4 * cycles.binary_cycles(m, n_out, dt, 2)
        return row("bwd", "reduce+mul", cyc, f"layer-norm grad: {int(rows.max())} rows of {L}")
    if op == "scale_channels":
        cyc = 2 * cycles.binary_cycles(m, n_out, dt, 2) + cycles.binary_cycles(m, n_out, dt, 1)
        return row("bwd", "mul+reduce", cyc, "grad x: broadcast mul; grad s: mul + plane sums")
    raise NotImplementedError(f"layer {name!r}: no backward pass for op {op!r}")


def _relabel(r: SuperstepRecord, name: str) -> SuperstepRecord:
    from dataclasses import replace
    return replace(r, name=name)
