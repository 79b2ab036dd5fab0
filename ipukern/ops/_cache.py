"""Shared machinery of the public ops: the program cache, input checks, profile info, runs.

Private to :mod:`ipukern.ops`; :mod:`.conv` and :mod:`.matmul` import these names.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..conv.build import ConvProgram, build_conv_program
from ..conv.params import ConvParams
from ..conv.planner import plan_conv
from ..core.profile import Profile
from ..dtypes import canonical_dtype
from ..machine import MachineSpec

__all__ = ["PLAN_CACHE_SIZE", "clear_plan_cache", "cached_program", "profile_kw", "as_array",
           "execute"]

#: built programs kept for re-use, keyed by (params, machine, bias, method, vertex); each
#: holds a device whose arena keeps the pages it touched, so the cache is small
PLAN_CACHE_SIZE = 8
_CACHE: "OrderedDict[tuple, ConvProgram]" = OrderedDict()
_CACHE_LOCK = threading.Lock()


def clear_plan_cache() -> None:
    """Forget every cached plan and program (and the host memory their arenas hold)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def cached_program(params: ConvParams, machine: MachineSpec, bias: bool, method: str | None,
                   vertex: Any = None) -> ConvProgram:
    """The planned and built program for a conv, from the cache or built now (LRU)."""
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


def profile_kw(prog: ConvProgram, op: str = "conv2d") -> dict[str, Any]:
    """The FLOPs, peak and plan information a profile of ``prog`` reports."""
    plan = prog.plan
    p = plan.params
    return {
        "flops": p.flops,
        "peak_flops": plan.machine.peak_flops(p.dtype, p.partials),
        "info": {"op": op, "layer": p.describe(), "method": plan.method.label(),
                 "vertex_method": plan.method.method, "plan": plan.describe(),
                 "tiles_used": plan.tiles_used, "serial_splits": plan.serial,
                 "planner_estimate_cycles": plan.estimated_cycles},
    }


def as_array(a: Any, name: str) -> np.ndarray:
    """``a`` as a NumPy array of a supported dtype (TypeError otherwise)."""
    if not isinstance(a, np.ndarray):
        if hasattr(a, "__array__") and not isinstance(a, (list, tuple)):
            a = np.asarray(a)
        else:
            raise TypeError(f"{name} must be a NumPy array, got {type(a).__name__}")
    canonical_dtype(a.dtype)  # TypeError for unsupported dtypes
    return a


def execute(prog: ConvProgram, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
            kw: dict[str, Any]) -> tuple[np.ndarray, Profile]:
    """Place the inputs, run ``prog`` in execute mode and read the output, holding the
    device's arena lock so concurrent callers of a cached program do not interleave."""
    dev = prog.device
    with dev.arena.lock:
        prog.write_inputs(x, w, bias)
        profile = dev.run(prog.program, "execute", **kw)
        out = dev.read(prog.y)
    return out, profile
