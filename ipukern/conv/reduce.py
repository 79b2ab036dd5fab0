"""Multi-stage reduction of a conv's partial sums over its input-channel split.

A conv split ``R`` ways over its input channels leaves ``R`` tiles with partial sums of the
same outputs. PopLibs (``lib/poplin/ConvReducePlan.cpp``) reduces them in stages so that no
tile receives ``R`` messages: 1 stage below depth 16, 2 from 16, 3 from 125; each
intermediate depth is about ``R**((n - 1) / n)``, rounded down or up, whichever gives
fewer messages per tile (``sum over stages of depth``).

ipukern executes the reduction as a hierarchical reduce-scatter over the ``R`` tiles of a
block, which needs the stage depths to multiply to ``R`` exactly (PopLibs' ceil-based depths
may overshoot: 17 = 5 x 4 - 3). :func:`reduce_stages` therefore returns PopLibs' depths when
they are exact, else the exact factorisation of ``R`` into PopLibs' number of stages with the
fewest messages; the planner tries only in-channel splits whose exact stages stay close to
PopLibs' plan (:func:`planner_tries_depth`). The planner's cost and the built program use
the same stages.

Stage layout (digits of a tile's in-channel index ``ii = m1 + f1 * (m2 + f2 * m3)``): stage
``s`` groups the tiles that differ only in digit ``m_s``; the group's range of outputs is
cut into ``f_s`` contiguous parts and member ``m_s`` sums part ``m_s`` from the group (its
own piece is read in place, the ``f_s - 1`` others arrive by exchange). Ranges nest, so
after the last stage every tile holds one contiguous, disjoint slice of the block's outputs.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .. import _memo

__all__ = ["poplibs_reduce_plan", "poplibs_stage_depths", "reduce_stages",
           "planner_tries_depth", "stage_range", "stage_size_max", "MULTI_STAGE_DEPTHS"]

#: reduction depths from which PopLibs uses 2 and 3 stages (getNumReduceStages)
MULTI_STAGE_DEPTHS = (16, 125)
#: the planner tries an exact staging whose messages per tile (sum of stage depths) are at
#: most this factor above PopLibs' plan for the same depth
MESSAGE_SLACK = 1.5


def _num_stages(depth: int) -> int:
    return 1 + sum(depth >= d for d in MULTI_STAGE_DEPTHS)


def _plan_and_cost(depth: int, n: int) -> tuple[tuple[int, ...], float]:
    """PopLibs' getMultiStageReducePlanAndCost: intermediate depths and messages per tile
    (in float32, as PopLibs adds them; a tie rounds up, as its strict "<" does)."""
    if n == 1:
        return (), np.float32(depth)
    down = int(math.pow(depth, (n - 1.0) / n))
    plan_d, cost_d = _plan_and_cost(down, n - 1)
    plan_u, cost_u = _plan_and_cost(down + 1, n - 1)
    cost_d = np.float32(cost_d + np.float32(depth) / np.float32(down))
    cost_u = np.float32(cost_u + np.float32(depth) / np.float32(down + 1))
    if cost_d < cost_u:
        return (down,) + plan_d, cost_d
    return (down + 1,) + plan_u, cost_u


@lru_cache(maxsize=4096)
def poplibs_reduce_plan(depth: int) -> tuple[int, ...]:
    """PopLibs' multi-stage reduce plan for ``depth`` partials: the depth of the partials
    tensor after each intermediate stage (empty: one stage). 64 -> (8,), 1472 -> (130, 11)."""
    return _plan_and_cost(int(depth), _num_stages(int(depth)))[0]


@lru_cache(maxsize=4096)
def poplibs_stage_depths(depth: int) -> tuple[int, ...]:
    """Partials summed per output at each stage, as PopLibs' estimator walks the plan
    (``estimateConvReduceCycles``); their product may exceed ``depth``."""
    remaining, out = int(depth), []
    for d in poplibs_reduce_plan(depth):
        this = -(-remaining // d)
        out.append(this)
        remaining = -(-remaining // this)
    if remaining > 1 or not out:
        out.append(remaining)
    return tuple(out)


def _factorisations(n: int, k: int, least: int = 2) -> list[tuple[int, ...]]:
    """Unordered factorisations of n into exactly k factors >= least (ascending)."""
    if k == 1:
        return [(n,)] if n >= least else []
    out = []
    f = least
    while f ** k <= n:
        if n % f == 0:
            out += [(f,) + rest for rest in _factorisations(n // f, k - 1, f)]
        f += 1
    return out


@lru_cache(maxsize=4096)
def reduce_stages(depth: int) -> tuple[int, ...]:
    """The stage depths ipukern executes for a reduction of ``depth`` partials; their
    product is ``depth``. PopLibs' depths when they multiply to ``depth``; else the exact
    factorisation into PopLibs' number of stages with the fewest messages (sum of depths),
    in ascending order; with fewer stages when ``depth`` has too few prime factors."""
    depth = int(depth)
    if depth < 1:
        raise ValueError(f"reduction depth must be >= 1, got {depth}")
    pl = poplibs_stage_depths(depth)
    if math.prod(pl) == depth:
        return pl
    for k in range(len(pl), 0, -1):
        fs = _factorisations(depth, k)
        if fs:
            return min(fs, key=lambda f: (sum(f), f))
    return (depth,)


@lru_cache(maxsize=4096)
def planner_tries_depth(depth: int) -> bool:
    """Whether the planner scores an input-channel split of ``depth``: below 16 always;
    from 16 only when :func:`reduce_stages` has PopLibs' number of stages and at most
    ``MESSAGE_SLACK`` times PopLibs' messages per tile (so a prime split, reduced in one
    stage here, does not undercut the staged reductions PopLibs would run)."""
    depth = int(depth)
    pl = _plan_and_cost(depth, _num_stages(depth))
    st = reduce_stages(depth)
    return len(st) == _num_stages(depth) and sum(st) <= MESSAGE_SLACK * pl[1]


def stage_range(P, ii, stages: tuple[int, ...], s: int):
    """Range ``[lo, hi)`` of a block's ``P`` outputs that in-channel tile ``ii`` holds after
    stage ``s`` (0: all of them, the partials; ``len(stages)``: its final slice).
    ``P`` and ``ii`` broadcast (ints or int64 arrays)."""
    lo = np.zeros(np.broadcast(P, ii).shape, dtype=np.int64)
    hi = lo + P
    rest = np.asarray(ii, dtype=np.int64)
    for f in stages[:s]:
        m = rest % f
        rest = rest // f
        n = hi - lo
        lo, hi = lo + m * n // f, lo + (m + 1) * n // f
    return lo, hi


def stage_size_max(P, stages: tuple[int, ...], s: int):
    """Largest range any tile holds after stage ``s``: P cut into f parts s times (ceil)."""
    out = np.asarray(P, dtype=np.int64)
    for f in stages[:s]:
        out = -(-out // f)
    return out


for _fn in (poplibs_reduce_plan, poplibs_stage_depths, reduce_stages, planner_tries_depth):
    _memo.register_lru(f"conv.reduce.{_fn.__name__}", _fn)
