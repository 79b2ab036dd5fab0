"""Element-wise ops between tensors beyond the residual add: the product of two activations
(a VAE's ``eps * std``, an LSTM's gates), ``exp(scale * x)`` (a VAE's ``std``), softplus
``log(1 + exp(x))`` and the compare-and-select ``where(a < b, x, y)`` (an HMC step's
log-probability and Metropolis accept).

All work in the producer's layout of their first input (the other operands are rearranged
to it, as :func:`~ipukern.nn.ops.add_plan` does) and are priced as the popops vertices that
compute them: BinaryOp1D for the product and the scale (:mod:`ipukern.core.cost`), UnaryOp1D
for the exponential and the logarithms (:func:`~ipukern.nn.cycles.unary_cycles`), BinaryOp1D
LESS_THAN and Select for the compare and the select (:mod:`ipukern.nn.cycles`).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..machine import MachineSpec
from . import cycles
from .layout import Layout
from .ops import OpPlan, _f32, _in, _store, _target, _zeros, compute_record

__all__ = ["SOFTPLUS_THRESHOLD", "exp_plan", "mul_plan", "select_plan", "softplus_plan"]

#: TensorFlow's softplus switches at ``log(eps) + 2`` (eps of float32, 2**-23): above minus it
#: the result is x, below it exp(x), each equal to log1p(exp(x)) to the dtype's precision
#: (tf2xla ``unary_ops.cc`` Softplus; TF's CPU/GPU kernels use the same threshold)
SOFTPLUS_THRESHOLD = np.float32(np.log(np.finfo(np.float32).eps) + 2.0)


def mul_plan(machine: MachineSpec, a: Layout, b_shape: Sequence[int]) -> OpPlan:
    """``a * b`` in the first operand's layout (popops mul, BinaryOp1D)."""
    nt = machine.n_tiles
    b_want = Layout(tuple(b_shape), a.dtype, a.mapping)
    n = a.elems_per_tile(nt)
    cyc = cycles.binary_cycles(machine, n, a.dtype, 2)
    out = Layout(a.shape, a.dtype, a.mapping)

    def run(srcs, rearrs, params, inplace=False):
        x, y = _in(srcs, rearrs, 0), _in(srcs, rearrs, 1)
        res = _target(out, nt, x, inplace)
        return _store(res, _f32(x.view()) * _f32(y.view()))

    rec = compute_record(machine, "mul", cyc, f"popops mul<{a.dtype}>: {int(n.max())} elements per tile")
    return OpPlan("mul", "fwd", "BinaryOp1D", [a, b_want], out, [rec], a.n_elems,
                  2 * out.bytes_per_tile(nt), _zeros(machine), run, (True, False), inplace=True)


def exp_plan(machine: MachineSpec, src: Layout, scale: float) -> OpPlan:
    """``exp(scale * x)`` in the producer's layout: a popops multiply by the constant
    (BinaryOp1D, one operand; none when ``scale`` is 1) then UnaryOp1D exp."""
    nt = machine.n_tiles
    n = src.elems_per_tile(nt)
    cyc = cycles.unary_cycles(machine, n, "exp", src.dtype)
    if scale != 1.0:
        cyc = cyc + cycles.binary_cycles(machine, n, src.dtype, 1)
    out = Layout(src.shape, src.dtype, src.mapping)
    s = np.float32(scale)

    def run(srcs, rearrs, params, inplace=False):
        x = _in(srcs, rearrs, 0)
        res = _target(out, nt, x, inplace)
        with np.errstate(over="ignore"):
            return _store(res, np.exp(_f32(x.view()) * s))

    rec = compute_record(machine, "exp", cyc, f"popops {'mul + ' if scale != 1.0 else ''}exp"
                         f"<{src.dtype}>: {int(n.max())} elements per tile")
    return OpPlan("exp", "fwd", "UnaryOp1D", [src], out, [rec], (2 if scale != 1.0 else 1) * src.n_elems,
                  out.bytes_per_tile(nt), _zeros(machine), run, (True,), inplace=True)


def softplus_plan(machine: MachineSpec, src: Layout) -> OpPlan:
    """``softplus(x) = log(1 + exp(x))`` in the producer's layout, as TensorFlow computes it
    (its XLA lowering, which Graphcore's TensorFlow compiles to popops): ``e = exp(x)``, then
    ``x`` where ``x > -t``, ``e`` where ``x < t`` and ``log1p(e)`` elsewhere (``t`` =
    :data:`SOFTPLUS_THRESHOLD`), so that it neither overflows nor loses small values. Priced
    unfused, op by op: UnaryOp1D exp and LOGARITHM_ONE_PLUS, two LESS_THAN compares and two
    Selects over the tile's elements."""
    nt = machine.n_tiles
    n = src.elems_per_tile(nt)
    dt = src.dtype
    cyc = (cycles.unary_cycles(machine, n, "exp", dt) + cycles.unary_cycles(machine, n, "log1p", dt)
           + 2 * cycles.less_than_cycles(machine, n, dt) + 2 * cycles.select_cycles(machine, n))
    out = Layout(src.shape, dt, src.mapping)
    t = SOFTPLUS_THRESHOLD

    def run(srcs, rearrs, params, inplace=False):
        src_res = _in(srcs, rearrs, 0)
        x = _f32(src_res.view())
        with np.errstate(over="ignore"):
            e = np.exp(x)
            v = np.where(x > -t, x, np.where(x < t, e, np.log1p(e)))
        return _store(_target(out, nt, src_res, inplace), v)

    rec = compute_record(machine, "softplus", cyc, f"popops exp, log1p, 2 x (lt, select)<{dt}>: "
                         f"{int(n.max())} elements per tile")
    return OpPlan("softplus", "fwd", "UnaryOp1D+Select", [src], out, [rec], 2 * src.n_elems,
                  out.bytes_per_tile(nt), _zeros(machine), run, (True,), inplace=True)


def select_plan(machine: MachineSpec, a: Layout, shapes: Sequence[Sequence[int]]) -> OpPlan:
    """``where(a < b, x, y)`` of four tensors of one shape in the first one's layout (the
    others rearranged to it): popops LESS_THAN into a bool mask, then Select. The chosen
    values are copied bit for bit."""
    nt = machine.n_tiles
    wants = [a] + [Layout(tuple(sh), a.dtype, a.mapping) for sh in shapes[1:]]
    n = a.elems_per_tile(nt)
    cyc = cycles.less_than_cycles(machine, n, a.dtype) + cycles.select_cycles(machine, n)
    out = Layout(a.shape, a.dtype, a.mapping)

    def run(srcs, rearrs, params, inplace=False):
        va, vb, vx, vy = (_in(srcs, rearrs, k) for k in range(4))
        res = _target(out, nt, va, inplace)
        return _store(res, np.where(va.view() < vb.view(), vx.view(), vy.view()))

    rec = compute_record(machine, "select", cyc, f"popops lt + select<{a.dtype}>: {int(n.max())} "
                         "elements per tile")
    # the bool mask (one byte per element) lives beside the output while the select runs
    total = 2 * out.bytes_per_tile(nt) + n
    return OpPlan("select", "fwd", "BinaryOp1D+Select", wants, out, [rec], a.n_elems, total,
                  _zeros(machine), run, (True, False, False, False), inplace=True)
