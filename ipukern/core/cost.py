"""Cycle costs of the BSP building blocks: exchange, sync and the built-in vertices.

Pure functions of sizes and a :class:`~ipukern.machine.MachineSpec`; integer tile cycles.
Convolution and matmul vertices (AMP, SLIC, VMAC, HMAC) live in :mod:`ipukern.conv.estimators`.

Vertex cost convention (PopLibs [S16], ``PerformanceEstimation.hpp``): a tile's 6 worker
contexts are barrel-scheduled, so a vertex whose slowest worker takes W worker cycles costs
``6 * W`` tile cycles, plus the supervisor's own cycles.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..machine import MachineSpec

__all__ = [
    "exchange_rate", "exchange_cycles", "tile_exchange_cycles", "exchange_loads",
    "elementwise_cycles", "elementwise_cycles_array", "reduce_cycles",
    "zero_cycles", "cast_cycles", "cast_cycles_array", "reduce_cycles_array",
]

# --------------------------------------------------------------------------- exchange

#: exchange rates are rounded to 1/scale B/cycle with at least this many steps (< 1.6% off)
_MIN_RATE_STEPS = 64


def exchange_rate(machine: MachineSpec) -> tuple[int, int]:
    """The exchange rate as a fraction of integers: ``rate / scale`` bytes per cycle.

    PopLibs keeps bytes/cycle as an integer x16 so fractional rates ceil-divide exactly
    (popops/ExchangeEstimator.cpp) [S16]; every preset rate is >= 4 B/cycle, where x16 is
    within 1.6%. Slower fabrics (what-if studies) double the scale until the rounded rate
    has at least 64 steps, instead of clamping every rate under 1/32 B/cycle to 1/16
    (which made 1 GB/s and 100 GB/s cost the same on a GC200).
    """
    bpc = machine.exchange_bytes_per_cycle
    scale = 16
    if 16 * bpc < _MIN_RATE_STEPS - 0.5:
        scale = 16 << max(0, math.ceil(math.log2((_MIN_RATE_STEPS - 0.5) / (16 * bpc))))
    return scale, max(1, int(round(scale * bpc)))


def _ceil_rate(scaled_bytes: np.ndarray, factor: int, rate: int) -> np.ndarray:
    """``ceil(scaled_bytes * factor / rate)`` exactly, as int64 (ValueError past 2**62)."""
    scaled_bytes = np.asarray(scaled_bytes, dtype=np.int64)
    if not scaled_bytes.size or int(scaled_bytes.max()) <= (2**62) // factor:
        return -(-(scaled_bytes * factor) // rate)
    out = [-(-int(x) * factor // rate) for x in scaled_bytes.reshape(-1)]   # exact Python ints
    if max(out) >= 2**62:
        raise ValueError(f"an exchange of {int(scaled_bytes.max())} B needs {max(out)} cycles at "
                         "this exchange rate: more than a cycle counter holds")
    return np.asarray(out, dtype=np.int64).reshape(scaled_bytes.shape)


def exchange_cycles(nbytes: Any, machine: MachineSpec, *, with_overhead: bool = False) -> Any:
    """Cycles for one tile to receive ``nbytes`` at the machine's exchange rate:
    ``ceil(nbytes * scale / rate)`` with :func:`exchange_rate` (x16 on every preset).

    Parameters
    ----------
    nbytes : int or ndarray of int
        Bytes received (an array gives one answer per element, e.g. per planner candidate).
    machine : MachineSpec
    with_overhead : bool
        Add the machine's fixed ``exchange_overhead_cycles`` wherever ``nbytes > 0`` (an
        exchange that moves nothing is not run).

    Returns
    -------
    int or ndarray of int64
    """
    scale, rate = exchange_rate(machine)
    if isinstance(nbytes, np.ndarray):
        nb = nbytes.astype(np.int64)
        if nb.size and nb.min() < 0:
            raise ValueError("nbytes must be >= 0")
        cyc = _ceil_rate(nb, scale, rate)
        return np.where(nb > 0, cyc + machine.exchange_overhead_cycles, 0) if with_overhead else cyc
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    cyc = int(_ceil_rate(np.array([int(nbytes)]), scale, rate)[0])
    return cyc + machine.exchange_overhead_cycles if (with_overhead and nbytes > 0) else cyc


def exchange_loads(src_tile: np.ndarray, src_off: np.ndarray, dst_tile: np.ndarray,
                   nbytes: np.ndarray, n_tiles: int, tiles_per_bus: int,
                   shared_bus: Any = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-tile exchange load of a copy table.

    Returns ``(recv_bytes, paired_bytes, send_bytes)``, int64 arrays of length n_tiles:

    - recv_bytes: bytes each tile receives;
    - paired_bytes: the part of recv_bytes that the tile's bus partner receives too, from
      the same source region in the same exchange. Tiles ``b*k .. b*k+b-1`` share a bus
      (b = ``tiles_per_bus``); such data crosses the bus once for both, so each tile is
      charged half of it (PopLibs: 2x rate for super-tile broadcast [S16]);
    - send_bytes: distinct bytes each tile transmits (a broadcast is sent once).

    ``shared_bus`` (a bool, or one bool per copy) says which copies may use the shared-bus
    rate at all: PopLibs grants it to a conv's inputs only, and only when the out-channel
    split is even (``ExchangeEstimator.hpp``). Copies outside it are never paired.
    """
    mask = np.broadcast_to(np.asarray(shared_bus, dtype=bool), np.shape(nbytes))
    if not mask.all():
        recv, _, send = exchange_loads(src_tile, src_off, dst_tile, nbytes, n_tiles, 1)
        if mask.any():
            paired = _loads(np.asarray(src_tile)[mask], np.asarray(src_off)[mask],
                            np.asarray(dst_tile)[mask], np.asarray(nbytes)[mask],
                            n_tiles, tiles_per_bus, send=False)[1]
        else:
            paired = np.zeros(n_tiles, dtype=np.int64)
        return recv, paired, send
    return _loads(src_tile, src_off, dst_tile, nbytes, n_tiles, tiles_per_bus)


def _loads(src_tile, src_off, dst_tile, nbytes, n_tiles: int, tiles_per_bus: int,
           send: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`exchange_loads` with every copy on the shared bus; ``send=False`` skips the
    receive and send bytes (zeros; the distinct-source sort is then not needed)."""
    recv = (np.bincount(dst_tile, weights=nbytes, minlength=n_tiles).astype(np.int64) if send
            else np.zeros(n_tiles, dtype=np.int64))
    paired = np.zeros(n_tiles, dtype=np.int64)
    out_send = np.zeros(n_tiles, dtype=np.int64)
    if nbytes.size == 0:
        return recv, paired, out_send
    st = np.asarray(src_tile, dtype=np.int64)
    so = np.asarray(src_off, dtype=np.int64)
    nb = np.asarray(nbytes, dtype=np.int64)
    dt = np.asarray(dst_tile, dtype=np.int64)
    # NOTE: a source region (tile, offset, size) is packed into one int64 so the distinct
    # regions come from a 1-D sort. np.unique(..., axis=0) on the stacked columns took 11 s
    # for the 3.7M-copy input exchange of a batch-32 strided conv (MobileNetV1 conv_dw_2);
    # the packed sort takes well under a second. Tables whose fields need more than 63 bits
    # fall back to the stacked form.
    b_tile = max(int(n_tiles - 1).bit_length(), 1)
    b_off = max(int(so.max()).bit_length(), 1)
    b_nb = max(int(nb.max()).bit_length(), 1)
    if (so < 0).any() or 2 * b_tile + b_off + b_nb > 63:
        return _exchange_loads_stacked(st, so, dt, nb, n_tiles, tiles_per_bus, recv)
    region = (st << (b_off + b_nb)) | (so << b_nb) | nb
    if send:
        uniq = _sorted_unique(region)
        out_send = np.bincount(uniq >> (b_off + b_nb), weights=uniq & ((1 << b_nb) - 1),
                               minlength=n_tiles).astype(np.int64)
    if tiles_per_bus > 1:
        b_region = b_tile + b_off + b_nb
        # one entry per (receiving tile, source region); the tile fixes its bus
        rows = _sorted_unique((dt << b_region) | region)
        row_tile = rows >> b_region
        row_region = rows & ((1 << b_region) - 1)
        bus_key = ((row_tile // tiles_per_bus) << b_region) | row_region
        keys, counts = _sorted_unique(bus_key, return_counts=True)
        shared = counts[np.searchsorted(keys, bus_key)] > 1
        paired = np.bincount(row_tile[shared], weights=row_region[shared] & ((1 << b_nb) - 1),
                             minlength=n_tiles).astype(np.int64)
    return recv, paired, out_send


def _sorted_unique(a: np.ndarray, return_counts: bool = False):
    """Sorted distinct values of a 1-D int64 array (optionally with their counts).

    NOTE: np.unique on int64 in NumPy 2.4 took 3.5 s for 3.7M values that a sort and a
    neighbour comparison handle in 0.05 s.
    """
    s = np.sort(a)
    first = np.empty(s.size, dtype=bool)
    first[:1] = True
    np.not_equal(s[1:], s[:-1], out=first[1:])
    if not return_counts:
        return s[first]
    starts = np.flatnonzero(first)
    return s[starts], np.diff(np.append(starts, s.size))


def _exchange_loads_stacked(st, so, dt, nb, n_tiles, tiles_per_bus, recv):
    """:func:`exchange_loads` on stacked columns (any field widths, slower)."""
    paired = np.zeros(n_tiles, dtype=np.int64)
    src_key = np.stack([st, so, nb], axis=1)
    uniq = np.unique(src_key, axis=0)
    send = np.bincount(uniq[:, 0], weights=uniq[:, 2], minlength=n_tiles).astype(np.int64)
    if tiles_per_bus > 1:
        bus = dt // tiles_per_bus
        key = np.stack([bus, st, so, nb], axis=1)
        # one row per (bus, source region, receiving tile); count receivers on the bus
        rows = np.unique(np.concatenate([key, dt[:, None]], axis=1), axis=0)
        _, inv, counts = np.unique(rows[:, :4], axis=0, return_inverse=True, return_counts=True)
        shared = counts[inv.ravel()] > 1
        paired = np.bincount(rows[shared, 4], weights=rows[shared, 3],
                             minlength=n_tiles).astype(np.int64)
    return recv, paired, send


def tile_exchange_cycles(recv_bytes: np.ndarray, paired_bytes: np.ndarray,
                         send_bytes: np.ndarray, machine: MachineSpec) -> np.ndarray:
    """Per-tile exchange cycles: ``ceil(max(recv - paired/2, send) / bytes_per_cycle)``
    using :func:`exchange_rate` (no fixed overhead; the caller adds it once)."""
    # work in half-bytes so the paired 2x rate stays integral
    load2 = np.maximum(2 * recv_bytes - paired_bytes, 2 * send_bytes)
    scale, rate = exchange_rate(machine)
    return _ceil_rate(load2, scale // 2, rate)


# --------------------------------------------------------------------------- vertices
# Worker and supervisor overheads of the popops vertices, as described in the PopLibs
# estimators summarised in reference/poplibs-planner.md §3.8, §4.3, §4.4 [S16].
ELEMENTWISE_WORKER_OVERHEAD = 58   # popops binary/add-in-place worker setup (§4.4)
SUPERVISOR_OVERHEAD = 33           # supervisor launch of 6 workers (single-input reduce, §4.3)
ZERO_WORKER_OVERHEAD = 5           # zero-supervisor per-worker constant (§3.8)


def ceil_div(a: Any, b: Any) -> Any:
    """Integer ceil(a / b) for non-negative a and positive b (ints or integer arrays)."""
    return -(-a // b)


# Each built-in vertex cost below is written once, on int64 arrays (one entry per tile or
# per planner candidate); the scalar function validates its arguments and calls it.
def elementwise_cycles_array(machine: MachineSpec, n_elems: np.ndarray, dtype: str,
                             n_inputs: int = 2) -> np.ndarray:
    """:func:`elementwise_cycles` for an array of sizes (0 where n_elems <= 0)."""
    n = np.asarray(n_elems, dtype=np.int64)
    vectors = ceil_div(ceil_div(n, machine.n_workers), machine.vector_elems(dtype))
    worker = ELEMENTWISE_WORKER_OVERHEAD + vectors * max(1, n_inputs)
    return np.where(n > 0, machine.n_workers * worker + SUPERVISOR_OVERHEAD, 0)


def elementwise_cycles(machine: MachineSpec, n_elems: int, dtype: str, n_inputs: int = 2) -> int:
    """Element-wise vertex (add, mul, scale, ...) over ``n_elems`` on one tile.

    Each worker streams ceil(n/6) elements in 64-bit vectors; one vector costs one cycle
    per input load (the store dual-issues), at least one.
    """
    return int(elementwise_cycles_array(machine, int(n_elems), dtype, n_inputs))


def zero_cycles(machine: MachineSpec, n_elems: int, dtype: str) -> int:
    """Zero (or fill) ``n_elems``: per worker ceil(elems/vw) + 5, times 6 (§3.8)."""
    if n_elems <= 0:
        return 0
    vectors = ceil_div(ceil_div(int(n_elems), machine.n_workers), machine.vector_elems(dtype))
    return machine.n_workers * (vectors + ZERO_WORKER_OVERHEAD)


# --------------------------------------------------------------------------- casts, reductions
# PopLibs estimateCastCycles / getReduceCycleEstimate (reference §3.8, §4.3) [S16]
CAST_WORKER_CYCLES = 26
#: the reduce vertices accumulate 128 bits at a time: 4 floats or 8 halves
REDUCE_ACCUMULATOR_BITS = 128
REDUCE_MULTI_CYCLES = 32
REDUCE_SINGLE_WORKER_CYCLES = 20
REDUCE_SINGLE_SUPERVISOR_CYCLES = 33
#: per-loop overhead by (float partials, float output)
REDUCE_MULTI_LOOP_CYCLES = {(True, True): 7, (True, False): 6, (False, True): 9,
                            (False, False): 8}
REDUCE_SINGLE_LOOP_CYCLES = {(True, True): 8, (True, False): 7, (False, True): 10,
                             (False, False): 9}
#: multi-input: a remainder below the accumulator width costs 2 per partial + 13 (11 half)
REDUCE_REMAINDER_CYCLES = {True: 13, False: 11}
#: PopLibs picks the single-input reduce vertex when the exchanged partials fit in 1/16
#: of tile memory (ConvReducePlan.hpp; memory-element rounding is not modelled)
REDUCE_SINGLE_INPUT_MEMORY_FRACTION = 16


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def cast_cycles_array(machine: MachineSpec, n_elems: np.ndarray, in_dtype: str,
                      out_dtype: str) -> np.ndarray:
    """:func:`cast_cycles` for an array of sizes."""
    n = np.asarray(n_elems, dtype=np.int64)
    a, b = canonical_dtype(in_dtype), canonical_dtype(out_dtype)
    if a == b:
        return np.zeros(n.shape, dtype=np.int64)
    per_worker = ceil_div(n, machine.n_workers)
    vectors = np.maximum(ceil_div(per_worker, machine.vector_elems(a)),
                         ceil_div(per_worker, machine.vector_elems(b)))
    return np.where(n > 0, (vectors + CAST_WORKER_CYCLES) * machine.n_workers, 0)


def cast_cycles(machine: MachineSpec, n_elems: int, in_dtype: str, out_dtype: str) -> int:
    """Tile cycles to cast ``n_elems`` elements on one tile (§3.8, estimateCastCycles).

    Each worker converts ceil(n / n_workers) elements at one vector of the wider type per
    cycle, plus 26 cycles of overhead.

    Parameters
    ----------
    machine : MachineSpec
    n_elems : int
        Elements cast on the tile.
    in_dtype, out_dtype : str

    Returns
    -------
    int
        Tile cycles; 0 for 0 elements or equal dtypes (no vertex).
    """
    if isinstance(n_elems, bool) or not isinstance(n_elems, (int, np.integer)) or n_elems < 0:
        raise ValueError(f"n_elems must be a non-negative int, got {n_elems!r}")
    return int(cast_cycles_array(machine, int(n_elems), in_dtype, out_dtype))


def reduce_cycles(machine: MachineSpec, n_outputs: int, depth: int, partials_dtype: str,
                  out_dtype: str, *, vertex: str = "auto", fast_reduce: bool = False) -> int:
    """Tile cycles of one partial-sum reduction stage on one tile (§4.3).

    Sums ``depth`` partials for each of ``n_outputs`` outputs (getReduceCycleEstimate):

    - multi-input vertex: workers share loops of one 128-bit accumulator (4 floats / 8
      halves), 3 cycles per partial per loop (2 loads of 64 bits + a pointer load);
    - single-input vertex: the tile's own partial is the initial value, so only
      ``depth - 1`` partials are read, at 2 cycles each (1 with ``fast_reduce``, whose
      partials sit in interleaved memory).

    Parameters
    ----------
    machine : MachineSpec
    n_outputs : int
        Outputs this tile produces (after reduction).
    depth : int
        Partials per output, including the tile's own. 1 means no reduction: a cast if the
        dtypes differ, else 0.
    partials_dtype, out_dtype : str
        Type of the partials and of this stage's result.
    vertex : {"auto", "multi", "single"}
        "auto" picks like PopLibs: single-input when ``n_outputs`` is a multiple of the
        accumulator width and (``fast_reduce`` or the exchanged partials, (depth - 1) x
        n_outputs elements, fit in 1/16 of tile memory).
    fast_reduce : bool
        PopLibs option enableFastReduce.

    Returns
    -------
    int
        Tile cycles.
    """
    _positive_int("n_outputs", n_outputs)
    _positive_int("depth", depth)
    if vertex not in ("auto", "multi", "single"):
        raise ValueError(f"vertex must be 'auto', 'multi' or 'single', got {vertex!r}")
    acc = REDUCE_ACCUMULATOR_BITS // (8 * DTYPES[canonical_dtype(partials_dtype)].itemsize)
    if vertex == "single" and depth > 1 and n_outputs % acc:
        raise ValueError(f"the single-input reduce needs n_outputs a multiple of {acc}")
    return int(reduce_cycles_array(machine, int(n_outputs), int(depth), partials_dtype,
                                   out_dtype, vertex=vertex, fast_reduce=fast_reduce))


def reduce_cycles_array(machine: MachineSpec, n_outputs: np.ndarray, depth: np.ndarray,
                        partials_dtype: str, out_dtype: str, *, vertex: str = "auto",
                        fast_reduce: bool = False) -> np.ndarray:
    """:func:`reduce_cycles` for arrays of sizes and depths, equal element by element to
    the scalar function; 0 where n or depth < 1. ``vertex="single"`` assumes every
    ``n_outputs`` is a multiple of the accumulator width (the scalar function checks)."""
    n = np.asarray(n_outputs, dtype=np.int64)
    d = np.asarray(depth, dtype=np.int64)
    n, d = np.broadcast_arrays(n, d)
    pt, ot = canonical_dtype(partials_dtype), canonical_dtype(out_dtype)
    nw = machine.n_workers
    fp, fo = pt == "float32", ot == "float32"
    item = DTYPES[pt].itemsize
    acc = REDUCE_ACCUMULATOR_BITS // (8 * item)
    per_load = machine.vector_elems(pt)
    if vertex == "auto":
        small = (d - 1) * n * item < machine.tile_bytes // REDUCE_SINGLE_INPUT_MEMORY_FRACTION
        single = (n % acc == 0) & (small | fast_reduce)
    else:
        single = np.full(n.shape, vertex == "single")
    # single-input vertex: the tile's own partial is the initial value
    s_per_partial = acc // min(acc, per_load * (2 if fast_reduce else 1))
    s_worker = (REDUCE_SINGLE_WORKER_CYCLES
                + (s_per_partial * (d - 1) + REDUCE_SINGLE_LOOP_CYCLES[fp, fo])
                * ceil_div(n // acc, nw))
    s_total = s_worker * nw + REDUCE_SINGLE_SUPERVISOR_CYCLES
    # multi-input vertex: the remainder runs one short loop per set bit (acc <= 8: 3 bits)
    rem = n % acc
    bits = (rem & 1) + ((rem >> 1) & 1) + ((rem >> 2) & 1) + ((rem >> 3) & 1)
    loops = n // acc + bits
    lpw = loops // nw
    extra = loops % nw != 0
    cycles = np.full(n.shape, REDUCE_MULTI_CYCLES, dtype=np.int64)
    cycles = cycles + np.where(extra & (rem != 0), 2 * d + REDUCE_REMAINDER_CYCLES[fp], 0)
    lpw = lpw + (extra & (rem == 0))
    cycles = cycles + ((acc // min(acc, per_load) + 1) * d + REDUCE_MULTI_LOOP_CYCLES[fp, fo]) * lpw
    m_total = cycles * nw
    total = np.where(single, s_total, m_total)
    total = np.where(d == 1, cast_cycles_array(machine, n, pt, ot), total)
    return np.where((n >= 1) & (d >= 1), total, 0).astype(np.int64)
