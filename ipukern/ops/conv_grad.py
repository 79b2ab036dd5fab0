"""The backward passes of conv2d on the simulated IPU: gradient of the input and of the weights.

Each pass is planned, built and run as its own convolution (PopLibs plans TRAINING_BWD and
TRAINING_WU separately, reference/poplibs-planner.md §1.5); the mapping of a pass onto a
plain conv is in :mod:`ipukern.conv.passes`. Both functions follow
``torch.nn.grad.conv2d_input`` / ``conv2d_weight`` semantics.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..conv import ConvParams, backward_data_pass, weight_update_pass
from ..core import Profile
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from ._cache import as_array, cached_program, execute, profile_kw
from .conv import ConvRun

__all__ = ["conv2d_backward_data", "conv2d_backward_weight", "estimate_conv2d_backward_data",
           "estimate_conv2d_backward_weight"]


def _params(input_shape, weight_shape, stride, padding, dilation, groups, dtype, partials):
    return ConvParams.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                  dilation=dilation, groups=groups, dtype=dtype, partials=partials)


def _pass_profile_kw(prog, fwd: ConvParams, op: str) -> dict[str, Any]:
    kw = profile_kw(prog, op)
    # useful work is the forward conv's MAC count: inserted zeros are not counted
    kw["flops"] = fwd.flops
    kw["info"].update({"pass": "bwd" if op.endswith("data") else "wu",
                       "layer": fwd.describe(), "pass_conv": prog.plan.params.describe()})
    return kw


def _check_grad(gy: np.ndarray, fwd: ConvParams, name: str = "grad_output") -> None:
    if gy.shape != fwd.output_shape:
        raise ValueError(f"{name} must have the forward output's shape {fwd.output_shape}, "
                         f"got {gy.shape}")


def _check_dtype(a: np.ndarray, dtype: str, name: str, other: str) -> None:
    if canonical_dtype(a.dtype) != dtype:
        raise TypeError(f"{name} is {a.dtype} but {other} is {dtype}: both must have the same dtype")


def _run(params: ConvParams, machine, method, x, w, fwd: ConvParams, op: str):
    prog = cached_program(params, get_machine(machine), False, method)
    out, profile = execute(prog, x, w, None, _pass_profile_kw(prog, fwd, op))
    return out, profile, prog.plan


def conv2d_backward_data(grad_output: np.ndarray, weight: np.ndarray,
                         input_shape: Sequence[int], *, stride: Any = 1, padding: Any = 0,
                         dilation: Any = 1, groups: int = 1, machine: MachineSpec | str = GC200,
                         partials: Any = "float", method: str | None = None) -> ConvRun:
    """Gradient of :func:`conv2d`'s input, computed tile by tile as its own planned conv.

    The pass is a transposed convolution: input and output channels swapped, the kernel
    flipped, the forward stride turned into zero insertion (see :mod:`ipukern.conv.passes`).

    Parameters
    ----------
    grad_output : ndarray (N, C_out, H_out, W_out)
        dL/dy of the forward conv.
    weight : ndarray (C_out, C/groups, kh, kw)
        The forward weights.
    input_shape : (N, C, H, W)
        The forward input's shape.
    stride, padding, dilation, groups, machine, partials, method
        As for :func:`conv2d` (of the forward conv).

    Returns
    -------
    ConvRun
        ``output`` = dL/dx (N, C, H, W); ``profile`` with ``info["pass"] == "bwd"`` and
        ``flops`` the forward conv's; ``plan`` of the pass conv.
    """
    gy = as_array(grad_output, "grad_output")
    w = as_array(weight, "weight")
    dtype = canonical_dtype(gy.dtype)
    _check_dtype(w, dtype, "weight", "grad_output")
    fwd = _params(input_shape, w.shape, stride, padding, dilation, groups, dtype, partials)
    _check_grad(gy, fwd)
    bwd = backward_data_pass(fwd)
    out, profile, plan = _run(bwd.params, machine, method, bwd.operand.apply(gy),
                              bwd.weights(w, fwd.groups), fwd, "conv2d_backward_data")
    return ConvRun(output=bwd.finish(out), profile=profile, plan=plan)


def conv2d_backward_weight(grad_output: np.ndarray, x: np.ndarray, weight_shape: Sequence[int],
                           *, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                           groups: int = 1, machine: MachineSpec | str = GC200,
                           partials: Any = "float", method: str | None = None) -> ConvRun:
    """Gradient of :func:`conv2d`'s weights, computed tile by tile as its own planned conv.

    The pass is a conv whose kernel is the output gradient, whose batch is the input
    channels (per group) and whose reduction runs over the forward batch and field.

    Parameters
    ----------
    grad_output : ndarray (N, C_out, H_out, W_out)
    x : ndarray (N, C, H, W)
        The forward input.
    weight_shape : (C_out, C/groups, kh, kw)
    stride, padding, dilation, groups, machine, partials, method
        As for :func:`conv2d` (of the forward conv).

    Returns
    -------
    ConvRun
        ``output`` = dL/dw (C_out, C/groups, kh, kw); ``profile`` (``info["pass"] == "wu"``).
    """
    gy = as_array(grad_output, "grad_output")
    x = as_array(x, "x")
    dtype = canonical_dtype(x.dtype)
    _check_dtype(gy, dtype, "grad_output", "x")
    fwd = _params(x.shape, weight_shape, stride, padding, dilation, groups, dtype, partials)
    _check_grad(gy, fwd)
    wu = weight_update_pass(fwd)
    out, profile, plan = _run(wu.params, machine, method, wu.inputs(x),
                              wu.kernel(gy), fwd, "conv2d_backward_weight")
    return ConvRun(output=wu.finish(out), profile=profile, plan=plan)


def _estimate(pass_params: ConvParams, fwd: ConvParams, machine, method, op: str) -> Profile:
    prog = cached_program(pass_params, get_machine(machine), False, method)
    return prog.device.run(prog.program, "estimate", **_pass_profile_kw(prog, fwd, op))


def estimate_conv2d_backward_data(input_shape: Sequence[int], weight_shape: Sequence[int], *,
                                  dtype: Any = "float16", stride: Any = 1, padding: Any = 0,
                                  dilation: Any = 1, groups: int = 1,
                                  machine: MachineSpec | str = GC200, partials: Any = "float",
                                  method: str | None = None) -> Profile:
    """The cycles :func:`conv2d_backward_data` reports for the forward conv with these
    shapes, without touching data (same plan, same program)."""
    fwd = _params(input_shape, weight_shape, stride, padding, dilation, groups, dtype, partials)
    return _estimate(backward_data_pass(fwd).params, fwd, machine, method, "conv2d_backward_data")


def estimate_conv2d_backward_weight(input_shape: Sequence[int], weight_shape: Sequence[int], *,
                                    dtype: Any = "float16", stride: Any = 1, padding: Any = 0,
                                    dilation: Any = 1, groups: int = 1,
                                    machine: MachineSpec | str = GC200, partials: Any = "float",
                                    method: str | None = None) -> Profile:
    """The cycles :func:`conv2d_backward_weight` reports for the forward conv with these
    shapes, without touching data."""
    fwd = _params(input_shape, weight_shape, stride, padding, dilation, groups, dtype, partials)
    return _estimate(weight_update_pass(fwd).params, fwd, machine, method,
                     "conv2d_backward_weight")
