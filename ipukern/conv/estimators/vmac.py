"""VMAC vertex (ConvPartialVerticalMac): 4-16 conv groups per vector, one channel each.

Constants from ``lib/poplin/PerformanceEstimation.hpp`` (getConvPartialVerticalMac*); the
work-list model from ``lib/poplin/ConvModel.cpp``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...core.cost import ceil_div
from ...machine import MachineSpec
from ._common import (_check_kind, _check_machine,
                      _Dims, _notional_worker, _total,
                      _vertex_dims)
from .methods import _FLOAT, TileConv, VertexMethod

__all__ = ["vmac_cycles"]

# ---- VMAC (ConvPartialVerticalMac): getConvPartialVerticalMac*; work list from ConvModel.cpp
VMAC_SUPERVISOR_CYCLES = 61
VMAC_CORE_INIT_CYCLES = 14
#: worker state-retention init, 25 cycles + 1 with float partials. PopLibs wrote
#: ``25 + floatPartials ? 1 : 0`` (C++ reads ``(25 + fp) ? 1 : 0`` = 1) until graphcore/poplibs
#: commit 38f82620 (2023-05-18, "fix precedence in conv-vmac estimator", mk2-main) made it
#: ``25 + floatPartials``; ipukern follows the fixed estimator.
VMAC_RETENTION_INIT_CYCLES = 25
VMAC_CONV_GROUP_CYCLES = 32
VMAC_IN_GROUP_CYCLES = 24
#: worker start: cgpg 4 (half / float partials), cgpg 8, cgpg 16
VMAC_WORKER_START_CYCLES = {4: 18, 8: 13, 16: 25}
#: per work-list entry (one output position x one kernel row): cgpg 4: loop 7, store and
#: reload accumulators 3 (5 for float partials), dot-product overhead 3, then 2 cycles per
#: extra tap; cgpg 8/16: 7 + 15 + 3 per 8 groups, then 3 cycles per extra tap
VMAC_ENTRY_CYCLES_4 = 7 + 3
VMAC_ENTRY_FLOAT_EXTRA_CYCLES = 2
VMAC_ENTRY_CYCLES_8 = 7 + 15
VMAC_DOT_CYCLES = 3
VMAC_TAP_CYCLES = {4: 2, 8: 3}
#: per-worker partials buffers: zeroing 4 + 1 cycle per vector; cross-worker sum
#: 10 (- 1 float) + (7 (+ 2 float) + (1 or 2) per other worker) x elements per worker / cgpg
VMAC_ZERO_CYCLES = 4
VMAC_REDUCE_CYCLES = 10
VMAC_REDUCE_ELEM_CYCLES = 7

def _vmac_parts(machine: MachineSpec, method: VertexMethod, d: _Dims) -> dict[str, Any]:
    nw = machine.n_workers
    cgpg = method.conv_groups_per_group
    fp = 1 if method.partials_dtype == _FLOAT else 0
    # one work-list entry per (output position, kernel row): a kw-tap product along the
    # row, cgpg groups per vector
    split, whole, part = _notional_worker(d.batch * d.out_h * d.out_w, nw)
    part_width = ceil_div(d.kernel_w, split)

    def entries_sum(cost: Any) -> Any:
        return d.kernel_h * (whole * cost(d.kernel_w) + part * cost(part_width))

    if cgpg >= 8:
        per_8 = entries_sum(lambda k: VMAC_ENTRY_CYCLES_8 + VMAC_DOT_CYCLES
                            + VMAC_TAP_CYCLES[8] * (k - 1))
        worker = VMAC_WORKER_START_CYCLES[cgpg] + per_8 * (cgpg // 8)
    else:
        worker = VMAC_WORKER_START_CYCLES[4] + fp + entries_sum(
            lambda k: VMAC_ENTRY_CYCLES_4 + fp * VMAC_ENTRY_FLOAT_EXTRA_CYCLES + VMAC_DOT_CYCLES
            + VMAC_TAP_CYCLES[4] * (k - 1) * (cgpg // 4))
    inner = nw * worker
    # each worker zeroes and keeps a private partial buffer for the whole output; PopLibs'
    # planner sizes it as out_h x out_w elements (neither batch nor cgpg)
    n_out = d.out_h * d.out_w
    zero = VMAC_ZERO_CYCLES + ceil_div(n_out, machine.vector_elems(method.partials_dtype))
    reduction = (VMAC_REDUCE_CYCLES - fp
                 + (VMAC_REDUCE_ELEM_CYCLES + 2 * fp + (1 + fp) * (nw - 1))
                 * ceil_div(n_out, nw) // cgpg)
    n_cg = ceil_div(d.groups, cgpg)
    n_ig = d.in_chans
    work = n_cg * n_ig * inner
    total = (VMAC_SUPERVISOR_CYCLES + VMAC_CORE_INIT_CYCLES + VMAC_RETENTION_INIT_CYCLES + fp
             + n_cg * (zero + VMAC_CONV_GROUP_CYCLES + n_ig * (VMAC_IN_GROUP_CYCLES + inner)
                       + reduction))
    return {"weight_load": 0, "workers": work, "zeroing": n_cg * zero,
            "reduction": n_cg * reduction,
            "supervisor": total - work - n_cg * (zero + reduction),
            "_groups": (n_cg, n_ig, 1), "_kernel": 0, "_passes": 1}


def _check_vmac_tile(d: _Dims) -> None:
    if not np.all(d.out_chans == 1):
        raise ValueError("VMAC computes one output channel per group per tile "
                         "(out_chans on the tile, after combine, must be 1)")


def vmac_cycles(machine: MachineSpec, method: VertexMethod, tile: TileConv) -> int:
    """Tile cycles of the vertical-MAC vertex, ConvPartialVerticalMac (§3.5).

    The vector unit multiplies cgpg groups at once (one input channel each), one work-list
    entry per output position and kernel row, 2 cycles per kernel tap for 4 groups or 3 per
    8 groups; every worker accumulates into a private copy of the output, which is zeroed
    first and summed across workers at the end.

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
        A VMAC method.
    tile : TileConv
        One output channel per group (after any combine factor).

    Returns
    -------
    int
        Tile cycles.

    Raises
    ------
    ValueError
        If the tile has more than one output channel per group.
    """
    _check_kind(method, "VMAC")
    _check_machine(machine, method)
    d = _vertex_dims(method, tile)
    _check_vmac_tile(d)
    return _total(_vmac_parts(machine, method, d))
