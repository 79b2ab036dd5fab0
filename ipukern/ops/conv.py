"""Grouped conv2d on the simulated IPU: validate, plan, build, run, gather."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..conv.build import ConvProgram, build_conv_program
from ..dtypes import canonical_dtype
from ..machine import GC200, MachineSpec, get_machine
from ..conv.params import ConvParams
from ..conv.planner import ConvPlan, plan_conv
from ..core.profile import Profile

__all__ = ["ConvRun", "conv2d", "estimate_conv2d", "plan_conv2d", "clear_plan_cache"]

#: built programs kept for re-use, keyed by (params, machine, bias, method); each holds a
#: device whose arena keeps the pages it touched, so the cache is small
PLAN_CACHE_SIZE = 8
_CACHE: "OrderedDict[tuple, ConvProgram]" = OrderedDict()
_CACHE_LOCK = threading.Lock()


def clear_plan_cache() -> None:
    """Forget every cached plan and program (and the host memory their arenas hold)."""
    with _CACHE_LOCK:
        _CACHE.clear()


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

    output: np.ndarray
    profile: Profile
    plan: ConvPlan


def _program(params: ConvParams, machine: MachineSpec, bias: bool, method: str | None,
             vertex: Any = None) -> ConvProgram:
    key = (params, machine, bias, method, vertex)
    with _CACHE_LOCK:
        prog = _CACHE.get(key)
        if prog is not None:
            _CACHE.move_to_end(key)
            return prog
    plan = plan_conv(params, machine, bias=bias, method=method)
    prog = build_conv_program(plan, vertex=vertex)
    with _CACHE_LOCK:
        # another thread may have built the same program meanwhile: keep the first one
        prog = _CACHE.setdefault(key, prog)
        _CACHE.move_to_end(key)
        while len(_CACHE) > PLAN_CACHE_SIZE:
            _CACHE.popitem(last=False)
    return prog


def _profile_kw(prog: ConvProgram) -> dict[str, Any]:
    plan = prog.plan
    p = plan.params
    return {
        "flops": p.flops,
        "peak_flops": plan.machine.peak_flops(p.dtype, p.partials),
        "info": {"op": "conv2d", "layer": p.describe(), "method": plan.method.label(),
                 "vertex_method": plan.method.method, "plan": plan.describe(),
                 "tiles_used": plan.tiles_used, "serial_splits": plan.serial,
                 "planner_estimate_cycles": plan.estimated_cycles},
    }


def plan_conv2d(input_shape: Sequence[int], weight_shape: Sequence[int], *,
                dtype: Any = "float16", stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                groups: int = 1, machine: MachineSpec | str = GC200, partials: Any = "float",
                bias: bool = False, method: str | None = None) -> ConvPlan:
    """The plan :func:`conv2d` would use for these shapes (cached)."""
    params = ConvParams.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    return _program(params, get_machine(machine), bias, method).plan


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1,
           machine: MachineSpec | str = GC200, partials: Any = "float",
           method: str | None = None) -> ConvRun:
    """Grouped 2-D convolution computed tile by tile on a simulated IPU.

    PyTorch semantics (``torch.nn.functional.conv2d``).

    Parameters
    ----------
    x : ndarray of shape (N, C, H, W), float32 or float16
    w : ndarray of shape (C_out, C / groups, kh, kw), same dtype as ``x``
    bias : ndarray of shape (C_out,), optional
    stride, padding, dilation : int or (int, int)
        ``padding`` may also be ``"valid"`` or ``"same"`` (stride 1).
    groups : int
    machine : MachineSpec or preset name
    partials : {"float", "half"}
        Accumulation dtype of the AMP and of inter-tile partial sums. fp16 inputs may use
        either; fp32 inputs accumulate in float.
    method : {"AMP", "SLIC", "VMAC", "HMAC"}, optional
        Force a vertex method instead of letting the planner choose.

    Returns
    -------
    ConvRun
        ``output`` (N, C_out, H_out, W_out) in the input dtype, ``profile``, ``plan``.

    Raises
    ------
    TypeError
        For non-array inputs or unsupported / mismatched dtypes.
    ValueError
        For bad shapes, hyper-parameters or bias.
    TileMemoryError
        If no plan fits the tiles' memory even with serial splits.
    """
    x = _as_array(x, "x")
    w = _as_array(w, "w")
    dtype = canonical_dtype(x.dtype)
    if canonical_dtype(w.dtype) != dtype:
        raise TypeError(f"x is {x.dtype} but w is {w.dtype}: both must have the same dtype")
    params = ConvParams.from_shapes(x.shape, w.shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    if bias is not None:
        bias = _as_array(bias, "bias")
        if bias.shape != (params.out_channels,):
            raise ValueError(f"bias must have shape ({params.out_channels},), got {bias.shape}")
        if canonical_dtype(bias.dtype) != dtype:
            raise TypeError(f"bias is {bias.dtype} but x is {x.dtype}: both must have the same dtype")
    prog = _program(params, get_machine(machine), bias is not None, method)
    dev = prog.device
    with dev.arena.lock:
        prog.write_inputs(x, w, bias)
        profile = dev.run(prog.program, "execute", **_profile_kw(prog))
        out = dev.read(prog.y)
    return ConvRun(output=out, profile=profile, plan=prog.plan)


def estimate_conv2d(input_shape: Sequence[int], weight_shape: Sequence[int], *,
                    dtype: Any = "float16", stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                    groups: int = 1, machine: MachineSpec | str = GC200, partials: Any = "float",
                    bias: bool = False, method: str | None = None) -> Profile:
    """The cycles :func:`conv2d` would report for these shapes, without touching data.

    Same planner, same program, same numbers as execute mode; no tensor bytes exist, so
    any shape the tiles can hold is cheap to estimate.
    """
    params = ConvParams.from_shapes(input_shape, weight_shape, stride=stride, padding=padding,
                                    dilation=dilation, groups=groups, dtype=dtype,
                                    partials=partials)
    prog = _program(params, get_machine(machine), bias, method)
    return prog.device.run(prog.program, "estimate", **_profile_kw(prog))


def _as_array(a: Any, name: str) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        if hasattr(a, "__array__") and not isinstance(a, (list, tuple)):
            a = np.asarray(a)
        else:
            raise TypeError(f"{name} must be a NumPy array, got {type(a).__name__}")
    canonical_dtype(a.dtype)  # TypeError for unsupported dtypes
    return a
