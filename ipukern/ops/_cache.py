"""Shared machinery of the public ops: the program cache, input checks, profile info, runs.

Private to :mod:`ipukern.ops`; :mod:`.conv` and :mod:`.matmul` import these names.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .. import _settings
from .._settings import DEFAULT_PLAN_CACHE_BYTES
from .._checks import as_int
from ..conv import ConvParams, ConvPlan, ConvProgram, build_conv_program, clear_planner_caches, plan_conv
from ..conv.host import take
from ..core.profile import Profile
from ..dtypes import canonical_dtype
from ..machine import MachineSpec

__all__ = ["PLAN_CACHE_SIZE", "DEFAULT_PLAN_CACHE_BYTES", "clear_plan_cache", "set_plan_cache_limit",
           "plan_cache_info", "cached_plan", "cached_program", "profile_kw", "as_array", "execute"]

#: built programs kept for re-use, keyed by (params, machine, bias, method, vertex). Each
#: holds a device whose arena (created on the first execute) keeps the pages it touched,
#: so the cache is bounded both by entries and by the host bytes of those arenas.
PLAN_CACHE_SIZE = 8
#: plans alone (small records) kept for re-use, e.g. both orientations of a matmul
PLAN_ONLY_CACHE_SIZE = 256
_CACHE: "OrderedDict[tuple, ConvProgram]" = OrderedDict()
_PLANS: "OrderedDict[tuple, ConvPlan | Exception]" = OrderedDict()
_CACHE_LOCK = threading.Lock()


#: None: follow ``IPUKERN_PLAN_CACHE_BYTES`` (read at use) until set_plan_cache_limit sets it
_LIMITS: dict[str, int | None] = {"entries": PLAN_CACHE_SIZE, "bytes": None}


def _max_bytes() -> int:
    b = _LIMITS["bytes"]
    return _settings.plan_cache_bytes() if b is None else b


def clear_plan_cache() -> None:
    """Forget every cached plan and program (and the host memory their arenas hold), and
    the planner's memoised split axes."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _PLANS.clear()
    clear_planner_caches()


def cached_plan(params: ConvParams, machine: MachineSpec, bias: bool,
                method: str | None, amp: float | None = None) -> ConvPlan:
    """``plan_conv`` through a small LRU cache (a planning error is cached and re-raised);
    ``amp``: its ``available_memory_proportion``."""
    key = (params, machine, bias, method, amp)
    with _CACHE_LOCK:
        hit = _PLANS.get(key)
        if hit is not None:
            _PLANS.move_to_end(key)
    if hit is None:
        try:
            hit = take(params, machine, bias, amp) if method is None else None
            if hit is None:
                hit = plan_conv(params, machine, bias=bias, method=method,
                                available_memory_proportion=amp)
        except (ValueError, MemoryError) as e:
            hit = e
        with _CACHE_LOCK:
            hit = _PLANS.setdefault(key, hit)
            while len(_PLANS) > PLAN_ONLY_CACHE_SIZE:
                _PLANS.popitem(last=False)
    if isinstance(hit, Exception):
        raise hit
    return hit


def set_plan_cache_limit(max_bytes: int | None = None, *, max_entries: int | None = None) -> None:
    """Bound the plan cache of :func:`~ipukern.conv2d` and :func:`~ipukern.matmul`.

    Parameters
    ----------
    max_bytes : int, optional
        Host bytes the cached programs' arenas may hold together (default 512 MiB, or
        ``IPUKERN_PLAN_CACHE_BYTES``). After each execution the least recently used
        programs are dropped until the total fits; a program whose arena alone is larger
        is not kept at all (its memory is freed once the call returns). 0 keeps no arena.
    max_entries : int, optional
        Programs kept (default 8), whether executed or only estimated.
    """
    if max_bytes is not None:
        _LIMITS["bytes"] = as_int(max_bytes, "max_bytes", minimum=0)
    if max_entries is not None:
        _LIMITS["entries"] = as_int(max_entries, "max_entries", minimum=0)
    with _CACHE_LOCK:
        _trim_locked()


def plan_cache_info() -> dict[str, int]:
    """Entries and arena bytes the plan cache holds now, and its limits."""
    with _CACHE_LOCK:
        return {"entries": len(_CACHE),
                "arena_bytes": sum(p.device.arena_bytes for p in _CACHE.values()),
                "max_entries": _LIMITS["entries"], "max_bytes": _max_bytes()}


def _trim_locked() -> None:
    """Drop least recently used programs beyond the limits (caller holds the lock)."""
    while len(_CACHE) > _LIMITS["entries"]:
        _CACHE.popitem(last=False)
    total = sum(p.device.arena_bytes for p in _CACHE.values())
    while _CACHE and total > _max_bytes():
        _, old = _CACHE.popitem(last=False)
        total -= old.device.arena_bytes


def cached_program(params: ConvParams, machine: MachineSpec, bias: bool, method: str | None,
                   vertex: Any = None, amp: float | None = None) -> ConvProgram:
    """The planned and built program for a conv, from the cache or built now (LRU);
    ``amp``: the planner's ``available_memory_proportion``."""
    key = (params, machine, bias, method, vertex, amp)
    with _CACHE_LOCK:
        prog = _CACHE.get(key)
        if prog is not None:
            _CACHE.move_to_end(key)
            return prog
    plan = cached_plan(params, machine, bias, method, amp)
    prog = build_conv_program(plan, vertex=vertex)
    with _CACHE_LOCK:
        # another thread may have built the same program meanwhile: keep the first one
        prog = _CACHE.setdefault(key, prog)
        _CACHE.move_to_end(key)
        _trim_locked()
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
                 "expand_dims": plan.expand_dims, "kernel_split": plan.kernel_split,
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
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))   # big-endian data: converted, like every input
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
    with _CACHE_LOCK:
        _trim_locked()                            # the program's arena exists now
    return out, profile
