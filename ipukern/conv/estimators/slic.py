"""SLIC vertex (ConvPartial1xNSLIC): a 1x4 sliding window over 1-4 channels per group.

Constants from ``lib/poplin/PerformanceEstimation.hpp`` (getConvPartialSlic*), beside the
formulas that use them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...core.cost import ceil_div
from ...machine import MachineSpec
from ._common import (BRNZDEC_STALL_CYCLES, _check_kind, _check_machine,
                      _Dims, _distinct_pieces, _max2, _over_workers, _per_field,
                      _sum_over_segments, _total,
                      _vertex_dims, _where)
from .methods import _FLOAT, TileConv, VertexMethod
from .methods import SLIC_WINDOW_WIDTH

__all__ = ["slic_cycles", "slic_cycles_lower_bound", "SLIC_WINDOW_WIDTH"]

# ---- SLIC (ConvPartial1xNSLIC): getConvPartialSlic*

SLIC_WORKER_PREAMBLE_CYCLES = 17
SLIC_WORKER_GROUP_INDEX_CYCLES = 4        # extra preamble when cgpg > 4
SLIC_SEGMENT_CYCLES = {True: 9, False: 10}    # keyed by "half8" (2 chains, half partials)
SLIC_MERGE_DECISION_CYCLES = 2            # half8: decide whether to merge the 2 outputs
#: half8 merges its two output halves once, on the zeroing pass: 2 + 2 per position
SLIC_MERGE_FIXED_CYCLES = 2
SLIC_MERGE_CYCLES_PER_POSITION = 2
SLIC_SUPERVISOR_PREAMBLE = {True: 25, False: 28}
SLIC_CONV_GROUP_GROUP_CYCLES = {True: 12, False: 15}
SLIC_SUBKERNEL_CYCLES = {True: 16, False: 20}  # beyond the weight load, cgpg <= 4
SLIC_STRIDE_BODY_CYCLES = 21              # beyond the weight load, per 4-group stride
SLIC_STRIDE_SUBKERNEL_CYCLES = 15         # per sub-kernel, cgpg > 4
SLIC_STRIDE_GROUP_CYCLES = 8              # extra per conv-group group, cgpg > 4
SLIC_WEIGHT_LOAD_4CHANS = 34              # chans = 4: no worker rearrangement
SLIC_WEIGHT_LOAD_FIXED = 37               # other chans: supervisor part
SLIC_WEIGHT_LOAD_WORKER = {2: 12, 4: 10}  # per worker, by cgpg (+1 when cgpg > 4)
#: worker cycles of one row segment of n positions per input pass. Rows below the loop
#: threshold (5, or 6 for half8) are unrolled: 13 (+n if n > 1) when zeroing, 13 (n = 1) or
#: 17 + n when accumulating. Longer rows loop at 1 cycle per position: 10 + n, +3 for half8
#: when accumulating. Stride 2: 13 (n = 1), 15 (n = 2), else 9 + 2n. Float partials: -1.
SLIC_LOOP_THRESHOLD = {True: 6, False: 5}     # keyed by half8
SLIC_STRIDE2_LOOP_THRESHOLD = 3
SLIC_SHORT_ROW_CYCLES = 13
SLIC_SHORT_ACC_ROW_CYCLES = 17
SLIC_LONG_ROW_CYCLES = 10
SLIC_HALF8_ACC_ROW_CYCLES = 3
SLIC_STRIDE2_ROW_CYCLES = (13, 15, 9)
SLIC_FLOAT_PARTIALS_SEGMENT_CYCLES = 3


def _slic_parts(machine: MachineSpec, method: VertexMethod, d: _Dims, stride_w: int,
                literal: bool) -> dict[str, Any]:
    nw = machine.n_workers
    cgpg, chans = method.conv_groups_per_group, method.in_chans_per_group
    float_partials = method.partials_dtype == _FLOAT
    half8 = method.slic_chains == 2 and not float_partials
    passes = 1 if method.slic_chains == 4 else 2
    threshold = SLIC_LOOP_THRESHOLD[half8]

    def row(n: Any, zeroing: bool) -> Any:
        # worker cycles of one row segment per input pass: 1 cycle per position in the loop
        if stride_w == 1:
            base = SLIC_SHORT_ROW_CYCLES
            short = (_where(n > 1, base + n, base) if zeroing
                     else _where(n == 1, base, SLIC_SHORT_ACC_ROW_CYCLES + n))
            long = (SLIC_LONG_ROW_CYCLES + n
                    + (SLIC_HALF8_ACC_ROW_CYCLES if (half8 and not zeroing) else 0))
            r = _where(n < threshold, short, long)
        else:
            one, two, fixed = SLIC_STRIDE2_ROW_CYCLES
            r = _where(n < SLIC_STRIDE2_LOOP_THRESHOLD, _where(n == 1, one, two), fixed + 2 * n)
        return r - (1 if float_partials else 0)

    def segment(zeroing: bool):
        fixed = (SLIC_SEGMENT_CYCLES[half8] + (1 if zeroing else 0)
                 + (SLIC_FLOAT_PARTIALS_SEGMENT_CYCLES if float_partials else 0))
        return lambda n: fixed + passes * row(n, zeroing)

    preamble = SLIC_WORKER_PREAMBLE_CYCLES + (SLIC_WORKER_GROUP_INDEX_CYCLES if cgpg > 4 else 0)

    def field_cycles(rows: Any, width: Any, zeroing: bool) -> Any:
        cost = segment(zeroing)
        ws = [preamble + _sum_over_segments(cost, p, width)
              + (SLIC_MERGE_DECISION_CYCLES if half8 else 0)
              for p in _distinct_pieces(rows, width, nw)]
        merge = (SLIC_MERGE_FIXED_CYCLES + SLIC_MERGE_CYCLES_PER_POSITION * rows * width
                 if (half8 and zeroing) else 0)
        return nw * _over_workers(_max2, ws) + merge

    def both(r: Any, w: Any) -> tuple[Any, Any]:
        return field_cycles(r, w, True), field_cycles(r, w, False)

    if chans == 4:
        wl = SLIC_WEIGHT_LOAD_4CHANS
    else:
        per_worker = SLIC_WEIGHT_LOAD_WORKER[2 if cgpg == 2 else 4] + (1 if cgpg > 4 else 0)
        wl = SLIC_WEIGHT_LOAD_FIXED + nw * per_worker

    def brnzdec(n: Any) -> Any:
        return BRNZDEC_STALL_CYCLES * (n - 1) + 1

    n_cgg = ceil_div(d.groups, cgpg)
    n_sub = ceil_div(d.kernel_w, SLIC_WINDOW_WIDTH) * d.kernel_h
    inner_zero, inner_acc = _per_field(both, d.batch * d.out_h, d.out_w)
    cgg_body = SLIC_CONV_GROUP_GROUP_CYCLES[half8]
    if cgpg <= 4:
        strides = 1
        sub_body = wl + SLIC_SUBKERNEL_CYCLES[half8]
    else:
        # 8 and 16 groups run the 4-group vertex once per stride of 4 groups
        strides = cgpg // 4
        sub_body = (strides * (wl + SLIC_STRIDE_BODY_CYCLES) + brnzdec(strides)
                    + SLIC_STRIDE_SUBKERNEL_CYCLES)
        cgg_body += SLIC_STRIDE_GROUP_CYCLES
        inner_acc = inner_acc * strides
        if not literal:
            inner_zero = inner_zero * strides
    work = n_cgg * inner_zero + n_cgg * (n_sub - 1) * inner_acc
    # The supervisor runs the sub-kernel loop -- a weight load per sub-kernel -- inside its
    # conv-group-group loop (.LSubKernelLoop within .LConvGroupGroupsLoop in all three
    # ConvPartial1x4SLIC*.S of graphcore/poplibs mk2-main @7eac0f26), so the hardware pays it
    # once per sub-kernel per conv-group block. PopLibs' estimator (getConvPartialSlic*)
    # charges it once per sub-kernel: poplibs_literal keeps that.
    sub_loops = 1 if literal else n_cgg
    total = (SLIC_SUPERVISOR_PREAMBLE[half8] + cgg_body * n_cgg + brnzdec(n_cgg)
             + sub_loops * (sub_body * n_sub + brnzdec(n_sub)) + work)
    weight_load = sub_loops * n_sub * strides * wl
    return {"weight_load": weight_load, "workers": work, "zeroing": 0,
            "supervisor": total - weight_load - work, "_groups": (n_cgg, 1, 1),
            "_kernel": n_sub, "_passes": passes}


def slic_cycles_lower_bound(method: VertexMethod, d: _Dims) -> Any:
    """A lower bound on the SLIC vertex's cycles for the vertex dims ``d``: each conv-group
    block runs every sub-kernel over all of the tile's output positions, one cycle per
    position per input pass (and per 4-group stride when cgpg > 4).

    Why it holds: every row segment of n positions costs at least n per pass (stride 2:
    2n; the short-row constants exceed the loop threshold), the slowest worker times the
    worker count bounds the sum over workers, and every other term is >= 0 (the
    non-literal estimate, which the planner uses)."""
    strides = max(1, method.conv_groups_per_group // 4)
    passes = 1 if method.slic_chains == 4 else 2
    n_cgg = ceil_div(d.groups, method.conv_groups_per_group)
    n_sub = ceil_div(d.kernel_w, SLIC_WINDOW_WIDTH) * d.kernel_h
    return n_cgg * n_sub * strides * passes * (d.batch * d.out_h * d.out_w)


def _check_slic_tile(method: VertexMethod, d: _Dims, stride_w: int) -> None:
    if stride_w > 2:
        raise ValueError(f"SLIC supports stride_w <= 2, got {stride_w}")
    ok = (d.in_chans <= method.in_chans_per_group) & (d.out_chans <= method.out_chans_per_group)
    if not np.all(ok):
        raise ValueError("SLIC needs one in- and out-channel group per tile: in/out chans per "
                         f"group on the tile must be <= {method.in_chans_per_group}")


def slic_cycles(machine: MachineSpec, method: VertexMethod, tile: TileConv, *,
                poplibs_literal: bool = False) -> int:
    """Tile cycles of the SLIC (1x4 sliding-window) vertex, ConvPartial1xNSLIC (§3.4).

    Workers stream row segments at 1 cycle per position per input pass (1 pass with 4
    chains, 2 with 2 chains); the kernel is cut into ceil(kw / 4) x kh sub-kernels, the first
    of which also zeroes the partials. Groupings with more than 4 conv groups run the
    4-group vertex once per stride of 4 groups.

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
        A SLIC method.
    tile : TileConv
        At most one channel group (Ci_t, Co_t <= chans) and stride_w <= 2.
    poplibs_literal : bool
        Reproduce PopLibs' estimator exactly: with cgpg > 4 the zeroing pass is not repeated
        per 4-group stride (see the module docstring), and the sub-kernel loop with its
        weight loads is charged once rather than once per conv-group block.

    Returns
    -------
    int
        Tile cycles.
    """
    _check_kind(method, "SLIC")
    _check_machine(machine, method)
    d = _vertex_dims(method, tile)
    _check_slic_tile(method, d, tile.stride[1])
    return _total(_slic_parts(machine, method, d, tile.stride[1], poplibs_literal))
