"""Running a :class:`~ipukern.core.program.Program` on the host arena.

The program is data (supersteps, validated and costed when built); this module executes it
in BSP order: each superstep's compute set, then its exchange. Where an exchange and the
compute set after it can run as one pass with the same bytes (:mod:`.fused`,
:mod:`.fused_reduce`), they do; only host speed differs, never a cycle or a result byte a
program can observe. ``IPUKERN_FUSED_EXCHANGE=0`` (:data:`.fused.FUSED_EXCHANGE`) turns
fusion off.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..program import Program
from . import fused
from .fused_reduce import fuse_reduce

__all__ = ["execute", "fused_step"]


def fused_step(program: Program, i: int) -> Any:
    """The :class:`~ipukern.core.host.fused.FusedStep` (or, for a receive-only partials
    exchange, :class:`~ipukern.core.host.fused_reduce.ReduceStep`) running step ``i``'s
    exchange together with step ``i + 1``'s compute set, or None (checked once per pair,
    then cached on the program). The checks look at every step (what else reads the bytes an
    exchange receives), so the cache holds while no step is replaced."""
    return _fused_pair(program, _pair_cache(program), i)


def _pair_cache(program: Program) -> dict[int, Any]:
    """The program's cache of fused pairs by step, emptied when a step was replaced since
    it was filled: one O(steps) identity check per call, so :func:`execute` makes it once
    per run, not once per step (that was quadratic in time, and in memory when each entry
    kept its own list of the steps)."""
    parts = [p for s in program.steps for p in (s.exchange, s.compute)]
    got = program.host_cache.get("fused")
    if got is None or len(got[0]) != len(parts) or any(a is not b for a, b in zip(got[0], parts)):
        got = program.host_cache["fused"] = (parts, {})
    return got[1]


def _fused_pair(program: Program, pairs: dict[int, Any], i: int) -> Any:
    steps = program.steps
    if i + 1 >= len(steps):
        return None
    if i not in pairs:
        x, c = steps[i].exchange, steps[i + 1].compute
        # a shadow receive an earlier build of this program planned (fused.ShadowHint)
        hint = program.host_cache.get("shadow_hints", {}).pop(i, None)
        pairs[i] = fused.fuse(x, c, steps, i, hint) or fuse_reduce(steps, i)
    return pairs[i]


def execute(program: Program, data: np.ndarray, n_threads: int) -> None:
    """Run ``program``'s supersteps in order (compute, sync, exchange) on the arena ``data``.

    An exchange followed by a compute set of fusable vertices runs together with it, tile by
    tile, when that gives the same bytes (off with ``IPUKERN_FUSED_EXCHANGE=0``).
    """
    if not isinstance(program, Program):
        raise TypeError(f"expected a Program, got {type(program).__name__}")
    fuse_on = None  # read at the first exchange (a program without one never asks)
    pairs = None    # the fused pairs cached on the program, checked once per run
    done = False    # the compute set of this step already ran with the previous exchange
    for i, step in enumerate(program.steps):
        if step.compute is not None and not done:
            step.compute.run(data, n_threads)
        done = False
        if step.exchange is None:
            continue
        if fuse_on is None:
            fuse_on = fused.fused_enabled()
            pairs = _pair_cache(program) if fuse_on else None
        f = _fused_pair(program, pairs, i) if fuse_on else None
        if f is None:
            step.exchange.run(data, n_threads)
        else:
            f.run(data, n_threads)
            done = True
