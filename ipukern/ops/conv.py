"""Grouped conv2d on the simulated IPU: validate, plan, build, run, gather."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


from ..conv import ConvParams, ConvPlan
from ..core import Profile
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from ._cache import (as_array, cached_program, clear_plan_cache, execute, plan_cache_info, profile_kw,
                     set_plan_cache_limit)
from ._torch import like_input, shape_and_dtype, to_numpy

__all__ = ["ConvRun", "conv2d", "estimate_conv2d", "plan_conv2d", "clear_plan_cache",
           "set_plan_cache_limit", "plan_cache_info"]

@dataclass
class ConvRun:
    """Result of :func:`conv2d`.

    Attributes
    ----------
    output : ndarray of shape (N, C_out, H_out, W_out)
        The convolution, in the input dtype, as computed tile by tile.
    profile : Profile
        Simulated cycles per superstep, seconds, TFLOP/s, utilisation, memory report.
    plan : ConvPlan
        Method, splits per axis, serial splits, per-tile memory estimate.
    """

    output: Any
    profile: Profile
    plan: ConvPlan

    def __repr__(self) -> str:
        return (f"ConvRun(output={type(self.output).__name__}{tuple(self.output.shape)} "
                f"{self.output.dtype}, plan={self.plan.method.label()!r}, profile={self.profile!r})")

    def _repr_html_(self) -> str:
        from html import escape
        return (f"<div><b>{escape(repr(self))}</b><br>plan: {escape(self.plan.describe())}"
                f"{self.profile._repr_html_()}</div>")


def plan_conv2d(input_shape: Sequence[int], weight_shape: Sequence[int], *,
                dtype: Any = "float16", stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                groups: int = 1, machine: MachineSpec | str = GC200, partials: Any = "float",
                bias: bool = False, method: str | None = None,
                available_memory_proportion: float | None = None) -> ConvPlan:
    """The plan :func:`conv2d` would use for these shapes (cached)."""
    params = ConvParams.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    return cached_program(params, get_machine(machine), bias, method,
                          amp=available_memory_proportion).plan


def conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, *, machine: MachineSpec | str = GC200,
           partials: Any = "float", method: str | None = None,
           available_memory_proportion: float | None = None) -> ConvRun:
    """Grouped 2-D convolution computed tile by tile on a simulated IPU.

    PyTorch semantics and signature (``torch.nn.functional.conv2d(input, weight, bias,
    stride, padding, dilation, groups)``): the same positional order and names. torch
    tensors are accepted (detached and moved to the CPU, ``requires_grad`` or not) and the
    output is then a torch tensor; NumPy in, NumPy out.

    Parameters
    ----------
    input : ndarray or torch.Tensor of shape (N, C, H, W) or unbatched (C, H, W), float32 or float16
    weight : ndarray or torch.Tensor of shape (C_out, C / groups, kh, kw), same dtype
    bias : ndarray or torch.Tensor of shape (C_out,), optional
    stride, padding, dilation : int or (int, int)
        ``padding`` may also be ``"valid"`` or ``"same"`` (stride 1).
    groups : int
    machine : MachineSpec or preset name
    partials : {"float", "half"}
        Accumulation dtype of the AMP and of inter-tile partial sums. fp16 inputs may use
        either; fp32 inputs accumulate in float.
    method : {"AMP", "SLIC", "VMAC", "HMAC"}, optional
        Force a vertex method instead of letting the planner choose.
    available_memory_proportion : float in (0, 1], optional
        PopLibs' ``availableMemoryProportion``: the share of each tile's bytes the op's
        temporary buffers may use when planning (None: PopLibs' default 0.6; see
        :func:`ipukern.conv.plan_conv`).

    Returns
    -------
    ConvRun
        ``output`` (N, C_out, H_out, W_out), or (C_out, H_out, W_out) for an unbatched
        input, in the input dtype (a torch tensor when the inputs were), ``profile``, ``plan``.

    Raises
    ------
    TypeError
        For non-array inputs, unsupported / mismatched dtypes (bfloat16 included) or meta
        tensors (use :func:`estimate_conv2d`).
    ValueError
        For bad shapes, hyper-parameters or bias.
    TileMemoryError
        If no plan fits the tiles' memory even with serial splits.
    """
    x = as_array(to_numpy(input, "input"), "input")
    w = as_array(to_numpy(weight, "weight"), "weight")
    unbatched = x.ndim == 3 and w.ndim == 4       # (C, H, W), as torch takes it: a batch of one
    if unbatched:
        x = x[None]
    elif x.ndim != 4:
        raise ValueError(f"input must have rank 4 (N, C, H, W) or 3 (C, H, W), got shape {x.shape}")
    dtype = canonical_dtype(x.dtype)
    if canonical_dtype(w.dtype) != dtype:
        raise TypeError(f"input is {x.dtype} but weight is {w.dtype}: both must have the same "
                        "dtype")
    params = ConvParams.from_shapes(x.shape, w.shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    torch_in = (input, weight, bias)
    if bias is not None:
        bias = as_array(to_numpy(bias, "bias"), "bias")
        if bias.shape != (params.out_channels,):
            raise ValueError(f"bias must have shape ({params.out_channels},), got {bias.shape}")
        if canonical_dtype(bias.dtype) != dtype:
            raise TypeError(f"bias is {bias.dtype} but input is {x.dtype}: both must have the "
                            "same dtype")
    prog = cached_program(params, get_machine(machine), bias is not None, method,
                          amp=available_memory_proportion)
    out, profile = execute(prog, x, w, bias, profile_kw(prog))
    return ConvRun(output=like_input(out[0] if unbatched else out, *torch_in), profile=profile,
                   plan=prog.plan)


def estimate_conv2d(input_shape: Any, weight_shape: Any, *, dtype: Any = None,
                    stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                    groups: int = 1, machine: MachineSpec | str = GC200, partials: Any = "float",
                    bias: bool = False, method: str | None = None,
                    available_memory_proportion: float | None = None) -> Profile:
    """The cycles :func:`conv2d` would report for these shapes, without touching data.

    Same planner, same program, same numbers as execute mode; no tensor bytes exist, so
    any shape the tiles can hold is cheap to estimate.

    ``input_shape`` and ``weight_shape`` may be shapes (tuples, ``torch.Size``) or tensors
    (NumPy arrays, torch tensors including meta tensors), whose shapes are used. ``dtype``
    defaults to the input tensor's dtype, or float16 for plain shapes.
    ``available_memory_proportion`` as in :func:`conv2d`.
    """
    input_shape, in_dtype = shape_and_dtype(input_shape)
    weight_shape, _ = shape_and_dtype(weight_shape)
    if dtype is None:
        dtype = in_dtype if in_dtype is not None else "float16"
    params = ConvParams.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    prog = cached_program(params, get_machine(machine), bias, method,
                          amp=available_memory_proportion)
    return prog.device.run(prog.program, "estimate", **profile_kw(prog))
