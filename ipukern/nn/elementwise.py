"""Element-wise ops between tensors beyond the residual add: the product of two activations
(a VAE's ``eps * std``, an LSTM's gates) and ``exp(scale * x)`` (a VAE's ``std``).

Both work in the producer's layout of their first input (the second operand is rearranged
to it, as :func:`~ipukern.nn.ops.add_plan` does) and are priced as the popops vertices that
compute them: BinaryOp1D for the product and the scale (:mod:`ipukern.core.cost`), UnaryOp1D
for the exponential (:func:`~ipukern.nn.cycles.unary_cycles`).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..machine import MachineSpec
from . import cycles
from .layout import Layout
from .ops import OpPlan, _f32, _in, _store, _target, _zeros, compute_record

__all__ = ["exp_plan", "mul_plan"]


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
