"""Cycle costs of the BSP building blocks: exchange, sync and the built-in vertices.

Pure functions of sizes and a :class:`~ipukern.machine.MachineSpec`; integer tile cycles.
Convolution and matmul vertices (AMP, SLIC, VMAC, HMAC) live in :mod:`ipukern.convcost`.

Vertex cost convention (PopLibs [S16], ``PerformanceEstimation.hpp``): a tile's 6 worker
contexts are barrel-scheduled, so a vertex whose slowest worker takes W worker cycles costs
``6 * W`` tile cycles, plus the supervisor's own cycles.
"""
from __future__ import annotations

import math

import numpy as np

from .machine import MachineSpec

__all__ = [
    "exchange_cycles", "tile_exchange_cycles", "exchange_loads",
    "elementwise_cycles", "reduce_cycles", "copy_cycles", "zero_cycles", "cast_cycles",
]

# --------------------------------------------------------------------------- exchange

def _bpc16(machine: MachineSpec) -> int:
    # PopLibs keeps bytes/cycle as an integer x16 so fractional rates ceil-divide exactly
    # (popops/ExchangeEstimator.cpp) [S16]
    return max(1, int(round(16 * machine.exchange_bytes_per_cycle)))


def exchange_cycles(nbytes: int, machine: MachineSpec) -> int:
    """Cycles for one tile to receive ``nbytes`` at the machine's exchange rate:
    ``ceil(16 * nbytes / round(16 * bytes_per_cycle))`` (no fixed overhead)."""
    if nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    return -(-16 * int(nbytes) // _bpc16(machine))


def exchange_loads(src_tile: np.ndarray, src_off: np.ndarray, dst_tile: np.ndarray,
                   nbytes: np.ndarray, n_tiles: int, tiles_per_bus: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-tile exchange load of a copy table.

    Returns ``(recv_bytes, paired_bytes, send_bytes)``, int64 arrays of length n_tiles:

    - recv_bytes: bytes each tile receives;
    - paired_bytes: the part of recv_bytes that the tile's bus partner receives too, from
      the same source region in the same exchange. Tiles ``b*k .. b*k+b-1`` share a bus
      (b = ``tiles_per_bus``); such data crosses the bus once for both, so each tile is
      charged half of it (PopLibs: 2x rate for super-tile broadcast [S16]);
    - send_bytes: distinct bytes each tile transmits (a broadcast is sent once).
    """
    recv = np.bincount(dst_tile, weights=nbytes, minlength=n_tiles).astype(np.int64)
    paired = np.zeros(n_tiles, dtype=np.int64)
    send = np.zeros(n_tiles, dtype=np.int64)
    if nbytes.size == 0:
        return recv, paired, send
    # distinct source regions: a region broadcast to many tiles is transmitted once
    region, first = _factorize_rows(src_tile, src_off, nbytes)
    send = np.bincount(src_tile[first], weights=nbytes[first], minlength=n_tiles).astype(np.int64)
    if tiles_per_bus > 1:
        bus = dst_tile.astype(np.int64) // tiles_per_bus
        # one row per (bus, source region, receiving tile); count receivers on the bus
        _, row_first = _factorize_rows(bus, region, dst_tile)
        group, _ = _factorize_rows(bus[row_first], region[row_first])
        counts = np.bincount(group)
        shared = row_first[counts[group] > 1]
        paired = np.bincount(dst_tile[shared], weights=nbytes[shared],
                             minlength=n_tiles).astype(np.int64)
    return recv, paired, send


def _factorize_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group equal rows of non-negative integer columns.

    Returns ``(ids, first)``: ``ids[i]`` numbers row i's distinct value (0..k-1) and
    ``first[g]`` is the index of one row of group g. Packs the columns into one int64 key
    when their bit widths fit (a 1-D sort: ~20x faster than ``np.unique(axis=0)`` on the
    millions of rows of an all-to-all exchange), else falls back to ``np.unique(axis=0)``.
    """
    cols = [np.asarray(c, dtype=np.int64) for c in cols]
    widths = [max(1, int(c.max()).bit_length()) if c.size else 1 for c in cols]
    if sum(widths) <= 62 and all(int(c.min()) >= 0 for c in cols if c.size):
        key = np.zeros(cols[0].size, dtype=np.int64)
        for c, w in zip(cols, widths):
            key = (key << w) | c
        _, first, ids = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, first, ids = np.unique(np.stack(cols, axis=1), axis=0, return_index=True,
                                  return_inverse=True)
    return ids.reshape(-1), first


def tile_exchange_cycles(recv_bytes: np.ndarray, paired_bytes: np.ndarray,
                         send_bytes: np.ndarray, machine: MachineSpec) -> np.ndarray:
    """Per-tile exchange cycles: ``ceil(max(recv - paired/2, send) / bytes_per_cycle)``
    using PopLibs' x16 integer rate (no fixed overhead; the caller adds it once)."""
    # work in half-bytes so the paired 2x rate stays integral
    load2 = np.maximum(2 * recv_bytes - paired_bytes, 2 * send_bytes)
    return -(-(load2 * 8) // _bpc16(machine))


# --------------------------------------------------------------------------- vertices
# Worker and supervisor overheads of the popops vertices, as described in the PopLibs
# estimators summarised in reference/poplibs-planner.md §3.8, §4.3, §4.4 [S16].
ELEMENTWISE_WORKER_OVERHEAD = 58   # popops binary/add-in-place worker setup (§4.4)
SUPERVISOR_OVERHEAD = 33           # supervisor launch of 6 workers (single-input reduce, §4.3)
ZERO_WORKER_OVERHEAD = 5           # zero-supervisor per-worker constant (§3.8)
CAST_WORKER_OVERHEAD = 26          # cast per-worker constant (§3.8)
REDUCE_SUPERVISOR = 32             # multi-input reduce vertex supervisor (§4.3)
REDUCE_LOOP_OVERHEAD = 7           # per-loop overhead of the reduce inner loop, 6..9 (§4.3)


def _per_worker(n: int, machine: MachineSpec) -> int:
    return -(-int(n) // machine.n_workers)


def elementwise_cycles(machine: MachineSpec, n_elems: int, dtype: str, n_inputs: int = 2) -> int:
    """Element-wise vertex (add, mul, scale, ...) over ``n_elems`` on one tile.

    Each worker streams ceil(n/6) elements in 64-bit vectors; one vector costs one cycle
    per input load (the store dual-issues), at least one.
    """
    if n_elems <= 0:
        return 0
    vw = machine.vector_elems(dtype)
    vectors = -(-_per_worker(n_elems, machine) // vw)
    worker = ELEMENTWISE_WORKER_OVERHEAD + vectors * max(1, n_inputs)
    return machine.n_workers * worker + SUPERVISOR_OVERHEAD


def reduce_cycles(machine: MachineSpec, n_outputs: int, depth: int, partials_dtype: str) -> int:
    """Sum ``depth`` partial vectors of ``n_outputs`` elements into one (§4.3 multi-input).

    Accumulator width 4 (float partials) or 8 (half); each loop loads ``acc/vw`` 64-bit
    vectors per input plus one cycle of loop overhead: ``cyclesPerLoop * depth + c`` per
    loop, loops split over 6 workers.
    """
    if n_outputs <= 0 or depth <= 0:
        return 0
    acc = 4 if partials_dtype == "float32" else 8
    vw = machine.vector_elems(partials_dtype)
    cycles_per_loop = acc // min(acc, vw) + 1
    loops = -(-int(n_outputs) // acc)
    loops_per_worker = -(-loops // machine.n_workers)
    worker = (cycles_per_loop * depth + REDUCE_LOOP_OVERHEAD) * loops_per_worker
    return REDUCE_SUPERVISOR + machine.n_workers * worker


def copy_cycles(machine: MachineSpec, nbytes: int) -> int:
    """On-tile copy (rearrangement) of ``nbytes`` at ``memcpy_bytes_per_cycle``."""
    if nbytes <= 0:
        return 0
    per_worker = -(-_per_worker(nbytes, machine) // machine.memcpy_bytes_per_cycle)
    return machine.n_workers * (per_worker + ELEMENTWISE_WORKER_OVERHEAD // 2) + SUPERVISOR_OVERHEAD


def zero_cycles(machine: MachineSpec, n_elems: int, dtype: str) -> int:
    """Zero (or fill) ``n_elems``: per worker ceil(elems/vw) + 5, times 6 (§3.8)."""
    if n_elems <= 0:
        return 0
    vw = machine.vector_elems(dtype)
    return machine.n_workers * (-(-_per_worker(n_elems, machine) // vw) + ZERO_WORKER_OVERHEAD)


def cast_cycles(machine: MachineSpec, n_elems: int, in_dtype: str, out_dtype: str) -> int:
    """Cast ``n_elems``: (max(ceil(n/6/vw_in), ceil(n/6/vw_out)) + 26) x 6 (§3.8)."""
    if n_elems <= 0 or in_dtype == out_dtype:
        return 0
    per = _per_worker(n_elems, machine)
    vec = max(-(-per // machine.vector_elems(in_dtype)), -(-per // machine.vector_elems(out_dtype)))
    return machine.n_workers * (vec + CAST_WORKER_OVERHEAD)


def ceil_div(a: int, b: int) -> int:
    """Integer ceil(a / b) for non-negative a and positive b."""
    return -(-a // b)


def log2_ceil(n: int) -> int:
    return 0 if n <= 1 else int(math.ceil(math.log2(n)))
