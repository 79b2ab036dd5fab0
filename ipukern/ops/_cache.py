"""Shared machinery of the public ops: the program cache, input checks, profile info, runs.

Private to :mod:`ipukern.ops`; :mod:`.conv` and :mod:`.matmul` import these names.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import _memo, _settings
from .._settings import DEFAULT_PLAN_CACHE_BYTES
from .._checks import as_int
from ..conv import (ConvParams, ConvPlan, ConvProgram, build_conv_program, clear_planner_caches,
                    normalize_amp, plan_conv)
from ..conv.host import take
from ..core import Profile
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

_PROGRAMS = _memo.register(_memo.LruCache("ops.conv_programs", maxsize=PLAN_CACHE_SIZE,
                                          max_bytes=_settings.plan_cache_bytes,   # read at use until set
                                          sizeof=lambda p: p.device.arena_bytes))
_PLANS = _memo.register(_memo.LruCache("ops.conv_plans", maxsize=PLAN_ONLY_CACHE_SIZE))
#: the conv planner's memoised split axes and vertex candidates
_memo.on_clear(clear_planner_caches, name="conv.planner")


def clear_plan_cache() -> None:
    """Forget every cached plan and program (and the host memory their arenas hold):
    every cache in :mod:`ipukern._memo`'s registry, the networks' compiled programs and
    conv programs, training schedules and the planner's memoised split axes included
    (the same as :func:`ipukern.nn.clear_network_caches`)."""
    _memo.clear_all()


def cached_plan(params: ConvParams, machine: MachineSpec, bias: bool,
                method: str | None, amp: float | None = None) -> ConvPlan:
    """``plan_conv`` through a small LRU cache; ``amp``: its ``available_memory_proportion``
    (validated and normalised first, so ``1`` and ``1.0`` share an entry and ``True`` is
    refused, never keyed).

    A planning error is cached as a :class:`_Failure` (its class and arguments) and raised
    anew, from None, at each hit: the exception itself would keep its traceback, whose
    frames hold the calling conv2d's input arrays, alive in the cache."""
    amp = normalize_amp(amp)
    key = (params, machine, bias, method, amp)
    hit = _PLANS.get(key)
    if hit is None:
        try:
            hit = take(params, machine, bias, amp) if method is None else None
            if hit is None:
                hit = plan_conv(params, machine, bias=bias, method=method,
                                available_memory_proportion=amp)
        except (ValueError, MemoryError) as e:
            hit = _Failure.of(e)
        hit = _PLANS.setdefault(key, hit)
    if isinstance(hit, _Failure):
        raise hit.exception() from None
    return hit


class _Failure:
    """A cached planning error: its class, arguments and attributes (no traceback, no
    context, so no frame of the failing call is kept)."""

    __slots__ = ("cls", "args", "attrs")

    def __init__(self, cls: type, args: tuple, attrs: dict):
        self.cls, self.args, self.attrs = cls, args, attrs

    @classmethod
    def of(cls, e: BaseException) -> "_Failure":
        attrs = {k: v for k, v in getattr(e, "__dict__", {}).items()
                 if isinstance(v, (int, float, str, bool, type(None)))}
        args = tuple(a for a in e.args if isinstance(a, (int, float, str, bool, type(None))))
        return cls(type(e), args if len(args) == len(e.args) else (str(e),), attrs)

    def exception(self) -> BaseException:
        try:
            e = self.cls.__new__(self.cls, *self.args)
            BaseException.__init__(e, *self.args)
        except Exception:           # pragma: no cover - an exception class refusing its args
            return ValueError(*self.args)
        for k, v in self.attrs.items():
            setattr(e, k, v)
        return e


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
        _PROGRAMS.set_limits(max_bytes=as_int(max_bytes, "max_bytes", minimum=0))
    if max_entries is not None:
        _PROGRAMS.set_limits(maxsize=as_int(max_entries, "max_entries", minimum=0))
    _PROGRAMS.trim()


def plan_cache_info() -> dict[str, Any]:
    """Entries and arena bytes the plan cache holds now, and its limits; ``"caches"``:
    every registered cache's entries, bytes and limits (:func:`ipukern._memo.info`)."""
    max_entries, max_bytes = _PROGRAMS.limits()
    return {"entries": len(_PROGRAMS), "arena_bytes": _PROGRAMS.nbytes(),
            "max_entries": max_entries, "max_bytes": max_bytes, "caches": _memo.info()}


def cached_program(params: ConvParams, machine: MachineSpec, bias: bool, method: str | None,
                   vertex: Any = None, amp: float | None = None) -> ConvProgram:
    """The planned and built program for a conv, from the cache or built now (LRU);
    ``amp``: the planner's ``available_memory_proportion``."""
    amp = normalize_amp(amp)
    key = (params, machine, bias, method, vertex, amp)
    prog = _PROGRAMS.get(key)
    if prog is not None:
        return prog
    plan = cached_plan(params, machine, bias, method, amp)
    prog = build_conv_program(plan, vertex=vertex)
    # another thread may have built the same program meanwhile: keep the first one
    return _PROGRAMS.setdefault(key, prog)


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
    _PROGRAMS.trim()                              # the program's arena exists now
    return out, profile
