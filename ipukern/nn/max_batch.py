"""The largest batch that fits: a doubling-then-bisection search guided by the bytes left.

:func:`search_max_batch` is the search over any monotone fit test; :func:`max_batch` runs
it for a network's inference program (``NetworkProfile.memory["max_batch"]``), and
:func:`ipukern.nn.training` for a training step. Each trial runs in scoped caches
(:class:`~ipukern.nn.host.host_memory.HostMemoryGuard`).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import _progress
from ..core import TileMemoryError
from .compile import compile_network
from .layers import PlanContext
from .network import Network

__all__ = ["MAX_BATCH_SEARCH", "max_batch", "search_max_batch"]

#: the max-batch search stops here (reported as this value when even it fits)
MAX_BATCH_SEARCH = 4096


def _spare(net: Network, batch: int, ctx: PlanContext, fold_bn: bool) -> float:
    """Bytes left on the fullest tile at ``batch`` (negative: over budget; -inf: a layer
    fits no plan)."""
    try:
        prog = compile_network(net, batch, ctx, fold_bn=fold_bn)
    except TileMemoryError:      # a layer fits no plan; a host MemoryError is not an answer
        return -math.inf
    live, _ = prog.liveness()
    m = ctx.machine
    return m.tile_bytes - m.reserved_bytes_per_tile - int(live.max())


def _fits(net: Network, batch: int, ctx: PlanContext, fold_bn: bool) -> bool:
    return _spare(net, batch, ctx, fold_bn) >= 0


def search_max_batch(fits: Callable[[int], bool] | None, start: int = 1,
                     limit: int = MAX_BATCH_SEARCH, *,
                     spare: Callable[[int], float] | None = None) -> int:
    """Largest batch in [1, limit] for which ``fits`` holds (0 if batch 1 does not), for a
    ``fits`` monotone in the batch: doubling (or halving) from ``start``, then bisection,
    so about 2 log2(answer / start) evaluations. Starting at the batch just estimated
    costs nothing there (its program is cached).

    ``spare`` (instead of ``fits``): the bytes left at batch b, ``fits(b)`` being
    ``spare(b) >= 0``. While growing, the next batch tried is the larger of the double and
    the batch where the line through the last two fitting batches' spare bytes reaches 0
    (capped at ``limit``; once, a zero short of the double, or the batch above when the
    zero is the batch itself): a network with bytes to spare gets there in a few evaluations
    (the tiny CNN of tests/nn/test_optimizer_state_dtype.py, fitting up to ``limit`` from
    batch 4: 4 instead of 11, each planning the whole network at a new batch); an
    overshoot only widens the bisection's bracket (at most about 2 log2(limit)
    evaluations in all). Exact whenever ``fits`` is monotone.
    """
    if (fits is None) == (spare is None) or not callable(fits if spare is None else spare):
        raise TypeError("search_max_batch needs exactly one of fits (batch -> bool) and "
                        "spare (batch -> bytes left), a callable")
    for name, v in (("start", start), ("limit", limit)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"search_max_batch: {name} must be an int, got {v!r}")
    if limit < 1:
        raise ValueError(f"search_max_batch: limit must be at least 1, got {limit}")
    start, limit = int(start), int(limit)
    got: dict[int, float] = {}
    tried: list[int] = []

    def ok(b: int) -> bool:
        tried.append(b)
        _progress.note(f"batch {b} (trial {len(tried)})")
        if spare is None:
            return bool(fits(b))
        got[b] = float(spare(b))
        if math.isnan(got[b]):
            raise ValueError(f"search_max_batch: spare({b}) is NaN")
        return got[b] >= 0

    b = min(max(1, start), limit)
    if ok(b):
        lo, hi, prev, near = b, None, None, True
        while hi is None and lo < limit:
            b = 2 * lo
            if prev is not None:                 # only with spare: the line's zero
                drop = (got[prev] - got[lo]) / (lo - prev)
                z = limit if drop <= 0 else lo + int(got[lo] / drop)
                if z >= b:
                    b = z
                elif near:                       # once: the zero is near (or at lo)
                    b, near = max(z, lo + 1), False
            b = min(b, limit)
            if ok(b):
                prev, lo = (lo if spare is not None else None), b
            else:
                hi = b
        if hi is None:
            return lo
    else:
        lo, hi = 0, b
        while lo == 0 and hi > 1:
            b = hi // 2
            if ok(b):
                lo = b
            else:
                hi = b
        if lo == 0:
            return 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def max_batch(net: Network, ctx: PlanContext, fold_bn: bool = True, start: int = 1) -> int:
    """Largest batch whose program fits the tiles (0 if batch 1 does not), found by
    doubling then bisection with the real planner and liveness, guided by the bytes left
    (:func:`search_max_batch`)."""
    from .host.host_memory import HostMemoryGuard
    return search_max_batch(None, start, spare=HostMemoryGuard(lambda b: _spare(net, b, ctx, fold_bn)))
