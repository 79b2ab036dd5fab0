"""Shared machinery of the conv vertex estimators.

- the int-or-array shim: each formula is written once and evaluated either on Python ints
  (one tile, exact and fast) or on int64 NumPy arrays (many candidate tiles at once);
- :class:`_Dims`, the tile sizes as the vertex sees them (after combineConvGroups);
- the worker split of a tile's output positions (PopLibs partitionConvPartialByWorker);
- the constants and helpers every vertex family uses (supervisor loop stall, zeroing).
"""
from __future__ import annotations

import math
from functools import lru_cache, reduce
from typing import Any, Mapping, NamedTuple

import numpy as np

from ... import _memo
from ...core.cost import ZERO_WORKER_OVERHEAD, ceil_div
from ...dtypes import canonical_dtype
from ...machine import MachineSpec
from .methods import _FLOAT, _HALF, TileConv, VertexMethod, _positive_int

__all__ = ["worker_segments", "zeroing_cycles"]

#: supervisor brnzdec loop: a 6-cycle stall on every iteration but the last
#: (lib/poplin/PerformanceEstimation.hpp)
BRNZDEC_STALL_CYCLES = 6

#: zeroing partials: per-worker state set-up that retention saves, float / half partials
ZERO_RETENTION_CYCLES = {_FLOAT: 9, _HALF: 10}


def _where(cond: Any, a: Any, b: Any) -> Any:
    if cond is True:
        return a
    if cond is False:
        return b
    if isinstance(cond, np.bool_):
        return a if cond else b
    return np.where(cond, a, b)


def _max2(a: Any, b: Any) -> Any:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return a if a >= b else b


def _min2(a: Any, b: Any) -> Any:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return a if a <= b else b


def _and(a: Any, b: Any) -> Any:
    if isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_)):
        return bool(a and b)
    return np.logical_and(a, b)



def _gcd(a: Any, b: Any) -> Any:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.gcd(a, b)
    return math.gcd(a, b)


class _Dims(NamedTuple):
    """Tile sizes as the vertex sees them (after combineConvGroups): ints or int64 arrays."""

    groups: Any
    in_chans: Any
    out_chans: Any
    batch: Any
    out_h: Any
    out_w: Any
    kernel_h: Any
    kernel_w: Any


def _vertex_dims(method: VertexMethod, tile: TileConv | _Dims) -> _Dims:
    f = method.combine_groups
    if isinstance(tile, TileConv):
        t = _Dims(tile.conv_groups, tile.in_chans, tile.out_chans, tile.batch, tile.out_h,
                  tile.out_w, tile.kernel_h, tile.kernel_w)
    else:
        t = tile
    if f == 1:
        return t
    return t._replace(groups=ceil_div(t.groups, f), in_chans=t.in_chans * f,
                      out_chans=t.out_chans * f)


# --------------------------------------------------------------------------- worker split
def _worker_pieces(n_rows: Any, width: Any, n_workers: int) -> list[tuple[Any, Any, Any]]:
    """Closed-form work lists: per worker (first, n_full, last) segment widths.

    PopLibs (partitionConvPartialByWorker) flattens the tile's (batch, row, x) output
    positions, gives worker i the range [i*N//W, (i+1)*N//W) and cuts it at row ends. So a
    worker has at most a partial first row, some full rows of ``width`` and a partial last
    row. ``first`` is 0 for an idle worker; ``last`` is 0 when the range has one segment.
    """
    return [_worker_piece(i, n_rows, width, n_workers) for i in range(n_workers)]


def _worker_piece(i: Any, n_rows: Any, width: Any, n_workers: int) -> tuple[Any, Any, Any]:
    """Worker ``i``'s (first, n_full, last); ``i`` may be an array of worker indices."""
    total = n_rows * width
    begin = i * total // n_workers
    end = (i + 1) * total // n_workers
    busy = end > begin
    end_m1 = _max2(end - 1, 0)
    row_b, row_l = begin // width, end_m1 // width
    one = row_b == row_l
    first = _where(busy, _where(one, end - begin, width - begin % width), 0)
    n_full = _where(busy, _max2(row_l - row_b - 1, 0), 0)
    last = _where(busy, _where(one, 0, end_m1 % width + 1), 0)
    return first, n_full, last


def worker_segments(batch: int, out_h: int, out_w: int, n_workers: int) -> list[list[int]]:
    """Work-list entries (row-segment widths) of each worker for a tile's output field.

    The batch x out_h x out_w positions are flattened and worker ``i`` takes positions
    ``[i*N//n_workers, (i+1)*N//n_workers)``; each range is cut at row ends, and every piece
    is one work-list entry (PopLibs partitionConvPartialByWorker).

    Parameters
    ----------
    batch, out_h, out_w : int
        The tile's output field.
    n_workers : int
        Worker threads per tile (``machine.n_workers``).

    Returns
    -------
    list of list of int
        ``n_workers`` lists of segment widths (empty for an idle worker). Lists grow with the
        number of rows; the estimators use the closed form internally instead.
    """
    for name, v in (("batch", batch), ("out_h", out_h), ("out_w", out_w),
                    ("n_workers", n_workers)):
        _positive_int(name, v)
    out = []
    for first, n_full, last in _worker_pieces(batch * out_h, out_w, n_workers):
        segs = ([first] if first else []) + [out_w] * n_full + ([last] if last else [])
        out.append(segs)
    return out


@lru_cache(maxsize=4096)
def _distinct_pieces_int(n_rows: int, width: int,
                         n_workers: int) -> tuple[tuple[int, int, int], ...]:
    return tuple(dict.fromkeys(_worker_pieces(n_rows, width, n_workers)))


def _distinct_pieces(n_rows: Any, width: Any, n_workers: int) -> Any:
    """Worker pieces with duplicates dropped (max/min over workers are unchanged); cached for
    scalar tiles, whose workers mostly share one of two or three patterns. For arrays, one
    piece whose fields have a leading worker axis (reduce it with :func:`_over_workers`)."""
    if isinstance(n_rows, int) and isinstance(width, int):
        return _distinct_pieces_int(n_rows, width, n_workers)
    if isinstance(n_rows, np.ndarray) or isinstance(width, np.ndarray):
        shape = np.shape(n_rows * width)
        workers = np.arange(n_workers).reshape((n_workers,) + (1,) * len(shape))
        return [_worker_piece(workers, n_rows, width, n_workers)]
    return _worker_pieces(n_rows, width, n_workers)


def _over_workers(op: Any, per_worker: list[Any]) -> Any:
    """max or min (``op``: _max2 / _min2) over the workers of :func:`_distinct_pieces`."""
    if len(per_worker) == 1 and isinstance(per_worker[0], np.ndarray):
        stacked = per_worker[0]
        return stacked.max(axis=0) if op is _max2 else stacked.min(axis=0)
    return reduce(op, per_worker)


#: below this many entries a field cost is evaluated directly (np.unique would cost more)
_DEDUPE_MIN = 256


def _per_field(cost: Any, n_rows: Any, width: Any) -> Any:
    """``cost(n_rows, width)`` (a value or a tuple of values) evaluated once per distinct
    (n_rows, width) pair: the worker split of a tile's positions is the costly part of a
    vertex estimate, and the planner's thousands of candidate tiles have a few hundred
    distinct output fields."""
    if not isinstance(n_rows, np.ndarray) and not isinstance(width, np.ndarray):
        return cost(n_rows, width)
    r, w = np.broadcast_arrays(np.asarray(n_rows, dtype=np.int64),
                               np.asarray(width, dtype=np.int64))
    if r.size < _DEDUPE_MIN:
        return cost(r, w)
    base = int(w.max()) + 1
    if int(r.max()) >= 2**62 // base:
        return cost(r, w)
    uniq, inv = np.unique(r * base + w, return_inverse=True)
    ur, uw = np.divmod(uniq, base)
    inv = inv.reshape(r.shape)
    out = cost(ur, uw)
    if isinstance(out, tuple):
        return tuple(np.broadcast_to(o, uniq.shape)[inv] for o in out)
    return np.broadcast_to(out, uniq.shape)[inv]


def _sum_over_segments(cost: Any, pieces: tuple[Any, Any, Any], width: Any) -> Any:
    """Sum of cost(n) over one worker's segments, from its closed-form pieces."""
    first, n_full, last = pieces
    return (_where(first > 0, cost(first), 0) + n_full * cost(width)
            + _where(last > 0, cost(last), 0))


# --------------------------------------------------------------------------- helpers
def _check_machine(machine: MachineSpec, method: VertexMethod) -> None:
    if not isinstance(machine, MachineSpec):
        raise ValueError(f"machine must be a MachineSpec, got {type(machine).__name__}")
    if method.method == "AMP":
        on_chip = machine.amp_units(method.in_dtype, method.partials_dtype)
        if on_chip == 0:
            raise ValueError(f"{machine.name} has no AMP mode {method.in_dtype}->"
                             f"{method.partials_dtype}")
        if method.conv_units > on_chip or on_chip % method.conv_units:
            raise ValueError(f"{method.conv_units} conv units is not a mode of {machine.name}'s "
                             f"{on_chip}-unit AMP for {method.in_dtype}->{method.partials_dtype}")
        wpu = machine.amp_in_chans(method.in_dtype)
        vw = machine.vector_elems(method.in_dtype)
        if wpu % method.in_chans_per_group or method.in_chans_per_group % vw:
            raise ValueError(f"AMP in_chans_per_group must divide {wpu} and be a multiple of "
                             f"{vw}, got {method.in_chans_per_group}")
    elif method.method == "SLIC":
        hh_units = machine.amp_units(_HALF, _HALF)
        if (method.slic_chains == 4 or method.conv_groups_per_group > 4) and hh_units < 16:
            raise ValueError(f"{method.label()} needs 16 half->half conv units; {machine.name} "
                             f"has {hh_units}")


def _zero_cycles(machine: MachineSpec, n_elems_per_group: Any, n_groups: Any,
                 dtype: str) -> Any:
    per_worker = ceil_div(n_elems_per_group, machine.n_workers)
    vectors = ceil_div(per_worker, machine.vector_elems(dtype))
    return (vectors + ZERO_WORKER_OVERHEAD) * machine.n_workers * n_groups


def _int(x: Any) -> Any:
    return int(x) if isinstance(x, (np.integer, np.bool_)) else x


def _check_kind(method: VertexMethod, *kinds: str) -> None:
    if method.method not in kinds:
        raise ValueError(f"expected a {'/'.join(kinds)} method, got {method.method}")


def _total(parts: Mapping[str, Any]) -> Any:
    return _int(sum(v for k, v in parts.items() if not k.startswith("_")))


def _notional_worker(n_rows: Any, n_workers: int) -> tuple[Any, Any, Any]:
    """PopLibs' VMAC/HMAC planner work list for the busiest worker: rows are cut into
    ``n_workers / gcd(n_workers, rows)`` parts so they share out evenly; the busiest worker
    gets ``whole`` full rows and ``part`` part-rows (ConvModel / PerformanceEstimation)."""
    split = n_workers // _gcd(n_workers, n_rows)
    max_part_rows = ceil_div(n_rows * split, n_workers)
    return split, max_part_rows // split, max_part_rows % split


# --------------------------------------------------------------------------- zero, cast, reduce
def zeroing_cycles(machine: MachineSpec, n_elems_per_group: int, n_groups: int,
                   dtype: str = "float32") -> int:
    """Tile cycles of the zero-supervisor vertex (§3.8).

    Each of the ``n_groups`` regions of ``n_elems_per_group`` elements is split over the
    workers; a worker writes one 64-bit vector per cycle plus a 5-cycle overhead.

    Parameters
    ----------
    machine : MachineSpec
    n_elems_per_group : int
        Elements per zeroed region (AMP/HMAC: positions x pcpg).
    n_groups : int
        Regions (AMP/HMAC: out-groups x conv groups).
    dtype : str
        Element type. PopLibs' planner always costs float vectors, so the conv estimators
        pass ``"float32"`` whatever the partials type.

    Returns
    -------
    int
        Tile cycles.
    """
    _positive_int("n_elems_per_group", n_elems_per_group)
    _positive_int("n_groups", n_groups)
    return _zero_cycles(machine, n_elems_per_group, n_groups, canonical_dtype(dtype))


_memo.register_lru("conv.estimators.distinct_pieces", _distinct_pieces_int)
