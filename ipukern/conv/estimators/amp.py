"""AMP vertices: ConvPartialnx1 (any kernel) and ConvPartial1x1Out (one tap, one row).

Constants from ``lib/poplin/PerformanceEstimation.hpp`` (worker instruction cycles of the
assembly kernels as PopLibs' estimator models them), beside the formulas that use them.
"""
from __future__ import annotations

from typing import Any


from ...core.cost import ZERO_WORKER_OVERHEAD, ceil_div
from ...dtypes import DTYPES
from ...machine import MachineSpec
from ._common import (BRNZDEC_STALL_CYCLES, ZERO_RETENTION_CYCLES, _check_kind, _check_machine,
                      _Dims, _distinct_pieces, _max2, _min2, _over_workers, _per_field, _sum_over_segments,
                      _total,
                      _vertex_dims, _where, _zero_cycles)
from .methods import _FLOAT, _HALF, TileConv, VertexMethod

__all__ = ["amp_uses_1x1", "amp_nx1_cycles", "amp_1x1_cycles", "amp_cycles_lower_bound",
           "amp_kernel_constants"]

# "Worker" constants are in worker instruction cycles; a tile runs its slowest worker
# n_workers times over (barrel scheduling).

#: PopLibs plans AMP weight loads with 64-bit loads unless the option use128BitConvUnitLoad
#: is set (default false, lib/poplin/ConvOptions.hpp), i.e. at half the coefficient rate.
AMP_128BIT_WEIGHT_LOAD = False

# ---- AMP nx1 (ConvPartialnx1): getConvPartialnx1WorkerCycles and supervisor loops
#: worker start-up before the work-list loop (+1 with half partials)
NX1_WORKER_START_CYCLES = 17
#: per work-list entry: build the second tri-pack pointer and the special stride
NX1_ENTRY_SETUP_CYCLES = 3
#: per work-list entry saved by retaining worker state between calls
NX1_ENTRY_RETENTION_CYCLES = 9
#: entry cycles for 1, 2 and 3 output positions; longer rows add the AMP core cycles per
#: position (MachineSpec.amp_cycles_per_position) beyond 3
NX1_ENTRY_CYCLES = {_HALF: (29, 33, 34), _FLOAT: (33, 44, 45)}
#: a 2-position half entry needs one more special stride with 16 units (half partials) or
#: 8 units (float partials)
NX1_TWO_POSITION_STRIDE_CYCLES = 1
#: "tag" cost charged to the least-loaded worker
NX1_MIN_WORKER_TAG_CYCLES = 9
#: supervisor cycles per outer (row) kernel position and per inner kernel position
NX1_KERNEL_OUTER_CYCLES = 14
NX1_KERNEL_INNER_CYCLES = 12
#: extra supervisor cycles per weight load by AMP weight height (rows of kernel in one load)
NX1_WEIGHT_HEIGHT_CYCLES = {1: 15, 2: 46, 4: 60}
NX1_WEIGHT_HEIGHT_CYCLES_PER_ROW = 20
NX1_WEIGHT_LOAD_EXTRA_CYCLES = 3
#: fixed supervisor cycles (convNx1Overhead)
NX1_SUPERVISOR_CYCLES = 109
#: per-worker state-retention set-up paid once per vertex

NX1_RETENTION_SETUP_CYCLES = 9
#: supervisor loops: zeroing loop per out-group, per conv-group bodies
NX1_ZERO_LOOP_CYCLES = 17
NX1_CONV_GROUP_CYCLES = 16
NX1_IN_GROUP_CYCLES = 14
NX1_OUT_GROUP_CYCLES = 14

# ---- AMP 1x1 (ConvPartial1x1Out): getConvPartial1x1Supervisor{Inner,Outer}LoopCycleEstimate
#: worker cycles for 0, 1, 2, >=3 positions on the "common" code path (half inputs with
#: float partials, or with 16 units); value without zeroing, zeroing saves one cycle
X1_COMMON_CYCLES = (22, 33, 42, 38)
#: the same for the other half path (zeroing adds (2 + zeroing cycles x positions))
X1_HALF_CYCLES = (24, 39, 40, 41)
#: float inputs
X1_FLOAT_CYCLES = (24, 47, 46, 46)
#: worker cycles (total, per in-group part) saved by state retention on the half paths
X1_RETENTION_CYCLES = (7, 3)
#: zeroing outputs inside the worker: fixed + per position, by path
X1_ZEROING_FIXED_CYCLES = 2
X1_ZEROING_CYCLES_PER_POSITION = {"float 16 units": 8, "float partials": 4,
                                  "half partials": 2}
X1_MIN_WORKER_TAG_CYCLES = 14
X1_SUPERVISOR_CYCLES = 50
#: supervisor loop bodies; the common path moves one cycle from the in-group loop and the
#: zeroing out-group loop into the conv-group body
X1_CONV_GROUP_CYCLES = 12
X1_IN_GROUP_CYCLES = 16        # 15 + 1 for the excess in-channel handling
X1_ZEROING_IN_GROUP_CYCLES = 11
X1_OUT_GROUP_CYCLES = 19
X1_PASS_CYCLES = 6             # per output pass, beyond weight load and workers
X1_ZEROING_PASS_CYCLES = 7


def _amp_weight_load_cycles(machine: MachineSpec, method: VertexMethod, height: int) -> int:
    """Supervisor cycles to load one set of AMP weights: units x bytes per unit / rate.

    The rate is the target's coefficient load rate, halved for 64-bit loads (PopLibs'
    default) and halved again for weight height 4, whose data shuffle cannot use ld128
    (getConvPartialAmpSupervisorWeightLoadCycleEstimate).
    """
    unit_bytes = machine.amp_in_chans(method.in_dtype) * DTYPES[method.in_dtype].itemsize
    rate = machine.coeff_load_bytes_per_cycle
    if not AMP_128BIT_WEIGHT_LOAD:
        rate = max(1, rate // 2)     # a 1 B/cycle what-if machine: no load below 1 B/cycle
    if height == 4 and rate > machine.vector_width_bits // 8:
        rate //= 2
    return method.conv_units * unit_bytes // rate


def amp_uses_1x1(method: VertexMethod, tile: TileConv) -> bool:
    """Whether PopLibs runs this AMP tile on the 1x1 vertex (ConvPartial1x1Out).

    Needs weight height 1 (icpg = weights per unit), a single kernel tap on the tile, stride
    1, one batch element and one output row (the 1x1 vertex has one work-list entry per
    worker). The planner should flatten the batch into the width for 1x1 convs and matmuls
    (PopLibs' flattenDims transform) so that this holds.

    Parameters
    ----------
    method : VertexMethod
    tile : TileConv

    Returns
    -------
    bool
        False for non-AMP methods.
    """
    if method.method != "AMP":
        return False
    return (method.amp_weight_height == 1 and tile.kernel_h * tile.kernel_w == 1
            and tile.stride == (1, 1) and tile.batch == 1 and tile.out_h == 1)


def _amp_nx1_parts(machine: MachineSpec, method: VertexMethod, d: _Dims) -> dict[str, Any]:
    nw = machine.n_workers
    half_in = method.in_dtype == _HALF
    float_partials = method.partials_dtype == _FLOAT
    units = method.conv_units
    height = method.amp_weight_height
    passes = method.out_chans_per_group // units
    core = machine.amp_cycles_per_position(method.in_dtype)
    c1, c2, c3 = NX1_ENTRY_CYCLES[method.in_dtype]
    if half_in and ((not float_partials and units == 16) or (float_partials and units == 8)):
        c2 += NX1_TWO_POSITION_STRIDE_CYCLES

    def entry(n: Any) -> Any:
        body = _where(n >= 3, c3 + core * (n - 3), _where(n == 2, c2, c1))
        return NX1_ENTRY_SETUP_CYCLES + body - NX1_ENTRY_RETENTION_CYCLES

    start = NX1_WORKER_START_CYCLES + (0 if float_partials else 1)

    def pass_cycles(rows: Any, width: Any) -> Any:
        workers = [start + _sum_over_segments(entry, p, width)
                   for p in _distinct_pieces(rows, width, nw)]
        return _max2(nw * _over_workers(_max2, workers),
                     nw * _over_workers(_min2, workers) + NX1_MIN_WORKER_TAG_CYCLES)

    per_pass = _per_field(pass_cycles, d.batch * d.out_h, d.out_w)

    n_cg = ceil_div(d.groups, method.conv_groups_per_group)
    n_ig = ceil_div(d.in_chans, method.in_chans_per_group)
    n_og = ceil_div(d.out_chans, method.out_chans_per_group)
    k_outer = ceil_div(d.kernel_h, height)
    k_inner = d.kernel_w
    wl = _amp_weight_load_cycles(machine, method, height)
    per_load = (wl + NX1_WEIGHT_HEIGHT_CYCLES.get(height, NX1_WEIGHT_HEIGHT_CYCLES_PER_ROW * height)
                + NX1_WEIGHT_LOAD_EXTRA_CYCLES)
    kernel_loop = (k_outer * (NX1_KERNEL_OUTER_CYCLES
                              + k_inner * (NX1_KERNEL_INNER_CYCLES + passes * per_load))
                   + k_outer * k_inner * passes * per_pass)
    zero_retention = ZERO_RETENTION_CYCLES[_FLOAT if float_partials else _HALF]
    total = (NX1_SUPERVISOR_CYCLES + nw * (NX1_RETENTION_SETUP_CYCLES + zero_retention)
             + n_cg * (NX1_ZERO_LOOP_CYCLES * n_og + BRNZDEC_STALL_CYCLES * (n_og - 1) + 1)
             + BRNZDEC_STALL_CYCLES * (n_cg - 1) + 1
             + n_cg * (NX1_CONV_GROUP_CYCLES
                       + n_ig * (NX1_IN_GROUP_CYCLES
                                 + n_og * (NX1_OUT_GROUP_CYCLES + kernel_loop))))
    # the partials are zeroed by a separate zero vertex; PopLibs models it with float
    # vectors whatever the partials type (estimateZeroSupervisorCycles)
    zeroing = _zero_cycles(machine, d.batch * d.out_h * d.out_w * method.out_chans_per_group,
                           n_og * n_cg, _FLOAT)
    n_runs = n_cg * n_ig * n_og * k_outer * k_inner * passes
    weight_load = n_runs * wl
    work = n_runs * per_pass
    return {"weight_load": weight_load, "workers": work, "zeroing": zeroing,
            "supervisor": total - weight_load - work,
            "_groups": (n_cg, n_ig, n_og), "_kernel": k_outer * k_inner, "_passes": passes}


def _amp_1x1_parts(machine: MachineSpec, method: VertexMethod, d: _Dims) -> dict[str, Any]:
    nw = machine.n_workers
    half_in = method.in_dtype == _HALF
    float_partials = method.partials_dtype == _FLOAT
    units = method.conv_units
    core = machine.amp_cycles_per_position(method.in_dtype)
    common = (half_in and units == 16) or float_partials
    retention = X1_RETENTION_CYCLES if half_in and (float_partials or units == 16) else (0, 0)
    zero_per_pos = X1_ZEROING_CYCLES_PER_POSITION[
        "float 16 units" if (not half_in and units == 16)
        else "float partials" if float_partials else "half partials"]
    zf = X1_ZEROING_FIXED_CYCLES

    def worker(n: Any, zeroing: bool) -> Any:
        if half_in and common:
            c0, c1, c2, c3 = X1_COMMON_CYCLES
            z = 1 if zeroing else 0
            body = _where(n >= 3, c3 - z + core * (n - 3),
                          _where(n == 2, c2 - z, _where(n == 1, c1 - z, c0 - z)))
        else:
            c0, c1, c2, c3 = X1_HALF_CYCLES if half_in else X1_FLOAT_CYCLES
            z = 1 if zeroing else 0
            body = _where(n >= 3, c3 + (zf + zero_per_pos * n) * z + core * (n - 3),
                          _where(n == 2, c2 + (zf + 2 * zero_per_pos) * z,
                                 _where(n == 1, c1 + (zf + zero_per_pos) * z, c0)))
        return _where(n > 0, body - retention[0], 0)

    def inner(positions: Any, zeroing: bool) -> Any:
        # one entry per worker: the tile is a single row of positions
        ws = [worker(p[0], zeroing) for p in _distinct_pieces(1, positions, nw)]
        return _max2(nw * _over_workers(_max2, ws),
                     nw * _over_workers(_min2, ws) + X1_MIN_WORKER_TAG_CYCLES)

    positions = d.batch * d.out_h * d.out_w
    inner_zero, inner_acc = _per_field(lambda _, n: (inner(n, True), inner(n, False)), 1,
                                       positions)
    n_cg = ceil_div(d.groups, method.conv_groups_per_group)
    n_ig = ceil_div(d.in_chans, method.in_chans_per_group)
    n_og = ceil_div(d.out_chans, method.out_chans_per_group)
    passes = ceil_div(method.out_chans_per_group, units)
    wl = _amp_weight_load_cycles(machine, method, 1)
    c = 1 if common else 0
    total = (X1_SUPERVISOR_CYCLES + nw * (retention[0] + retention[1] * (n_ig * n_cg - 1))
             + n_cg * (X1_CONV_GROUP_CYCLES + c
                       + (n_ig - 1) * (X1_IN_GROUP_CYCLES - c + n_og * (
                           X1_OUT_GROUP_CYCLES + passes * (X1_PASS_CYCLES + wl + inner_acc)))
                       + X1_ZEROING_IN_GROUP_CYCLES + n_og * (
                           X1_OUT_GROUP_CYCLES - c
                           + passes * (X1_ZEROING_PASS_CYCLES + wl + inner_zero))))
    weight_load = n_cg * n_ig * n_og * passes * wl
    work = n_cg * n_og * passes * (inner_zero + (n_ig - 1) * inner_acc)
    return {"weight_load": weight_load, "workers": work, "zeroing": 0,
            "supervisor": total - weight_load - work,
            "_groups": (n_cg, n_ig, n_og), "_kernel": 1, "_passes": passes}


def amp_cycles_lower_bound(machine: MachineSpec, method: VertexMethod, d: _Dims) -> Any:
    """A lower bound on both AMP vertices' cycles (nx1 and 1x1) for the vertex dims ``d``:
    every run (conv group x in-group x out-group x kernel load x output pass) streams each
    of the tile's output positions through the AMP at ``amp_cycles_per_position``.

    Why it holds: every work-list entry of n positions costs at least ``core * n`` (the
    entry constants above exceed ``3 * core``), the slowest worker times the worker count
    bounds the sum over workers, and every other term of both estimates is >= 0. Unlike the
    planner's useful-MACs bound it counts the channel padding to the method's grouping and
    the kernel rows padded to the weight height, so a 16-channel AMP on a depthwise tile is
    bounded by its real work (the search prunes with it: :func:`~ipukern.conv.search`)."""
    n_runs = (ceil_div(d.groups, method.conv_groups_per_group)
              * ceil_div(d.in_chans, method.in_chans_per_group)
              * ceil_div(d.out_chans, method.out_chans_per_group)
              * ceil_div(d.kernel_h, method.amp_weight_height) * d.kernel_w
              * (method.out_chans_per_group // method.conv_units))
    return n_runs * (d.batch * d.out_h * d.out_w) * machine.amp_cycles_per_position(method.in_dtype)


def amp_nx1_cycles(machine: MachineSpec, method: VertexMethod, tile: TileConv) -> int:
    """Tile cycles of the AMP ConvPartialnx1 vertex plus its zeroing vertex (§3.2).

    Per kernel position and output pass, the tile waits for its slowest worker (work-list
    entries of 4 cycles per position for half, 8 for float, plus per-entry overhead); the
    supervisor loads weights (``conv_units`` x 32 bytes at half the coefficient rate) and
    loops over conv groups x in-groups x out-groups x kernel positions. The kernel height
    is padded to a multiple of the AMP weight height (16 / icpg rows for half).

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
        An AMP method.
    tile : TileConv

    Returns
    -------
    int
        Tile cycles.
    """
    _check_kind(method, "AMP")
    _check_machine(machine, method)
    parts = _amp_nx1_parts(machine, method, _vertex_dims(method, tile))
    return _total(parts)


def amp_1x1_cycles(machine: MachineSpec, method: VertexMethod, tile: TileConv) -> int:
    """Tile cycles of the AMP ConvPartial1x1Out vertex (§3.3).

    The tile is one row of positions, one work-list entry per worker; outputs are zeroed by
    the workers during the first in-group pass (no zero vertex).

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
        An AMP method with weight height 1.
    tile : TileConv

    Returns
    -------
    int
        Tile cycles.

    Raises
    ------
    ValueError
        If :func:`amp_uses_1x1` is false for this method and tile.
    """
    _check_kind(method, "AMP")
    _check_machine(machine, method)
    if not amp_uses_1x1(method, tile):
        raise ValueError("the AMP 1x1 vertex needs weight height 1, a 1x1 kernel on the tile, "
                         "stride 1, batch 1 and one output row")
    return _total(_amp_1x1_parts(machine, method, _vertex_dims(method, tile)))


def amp_kernel_constants(machine: MachineSpec, method: VertexMethod, stride: tuple[int, int]
                         ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The constants of :func:`_amp_nx1_parts` and :func:`_amp_1x1_parts` for the compiled
    row loop (``ipukern._kernels._plan.amp_cycles``), in its order; the 1x1 tuple is empty
    when no tile of this method and stride can take the 1x1 vertex. Derived here from the
    named constants above, so the compiled loop holds formulas only."""
    nw = machine.n_workers
    half_in = method.in_dtype == _HALF
    float_partials = method.partials_dtype == _FLOAT
    units = method.conv_units
    height = method.amp_weight_height
    core = machine.amp_cycles_per_position(method.in_dtype)
    c1, c2, c3 = NX1_ENTRY_CYCLES[method.in_dtype]
    if half_in and ((not float_partials and units == 16) or (float_partials and units == 8)):
        c2 += NX1_TWO_POSITION_STRIDE_CYCLES
    wl = _amp_weight_load_cycles(machine, method, height)
    per_load = (wl + NX1_WEIGHT_HEIGHT_CYCLES.get(height, NX1_WEIGHT_HEIGHT_CYCLES_PER_ROW * height)
                + NX1_WEIGHT_LOAD_EXTRA_CYCLES)
    zero_retention = ZERO_RETENTION_CYCLES[_FLOAT if float_partials else _HALF]
    nx1 = (nw, method.combine_groups, method.conv_groups_per_group, method.in_chans_per_group,
           method.out_chans_per_group, NX1_WORKER_START_CYCLES + (0 if float_partials else 1),
           NX1_MIN_WORKER_TAG_CYCLES, NX1_ENTRY_SETUP_CYCLES - NX1_ENTRY_RETENTION_CYCLES,
           c1, c2, c3, core, height, method.out_chans_per_group // units, per_load,
           NX1_KERNEL_OUTER_CYCLES, NX1_KERNEL_INNER_CYCLES,
           NX1_SUPERVISOR_CYCLES + nw * (NX1_RETENTION_SETUP_CYCLES + zero_retention),
           NX1_ZERO_LOOP_CYCLES, BRNZDEC_STALL_CYCLES, NX1_CONV_GROUP_CYCLES,
           NX1_IN_GROUP_CYCLES, NX1_OUT_GROUP_CYCLES, machine.vector_elems(_FLOAT),
           ZERO_WORKER_OVERHEAD)
    if not (height == 1 and tuple(stride) == (1, 1)):
        return nx1, ()
    common = (half_in and units == 16) or float_partials
    retention = X1_RETENTION_CYCLES if half_in and (float_partials or units == 16) else (0, 0)
    zero_per_pos = X1_ZEROING_CYCLES_PER_POSITION[
        "float 16 units" if (not half_in and units == 16)
        else "float partials" if float_partials else "half partials"]
    table = X1_COMMON_CYCLES if half_in and common else (X1_HALF_CYCLES if half_in
                                                         else X1_FLOAT_CYCLES)
    x1 = (nw, X1_MIN_WORKER_TAG_CYCLES, int(half_in and common), *table, X1_ZEROING_FIXED_CYCLES,
          zero_per_pos, retention[0], core, X1_SUPERVISOR_CYCLES, retention[0], retention[1],
          X1_CONV_GROUP_CYCLES, 1 if common else 0, X1_IN_GROUP_CYCLES, X1_OUT_GROUP_CYCLES,
          X1_PASS_CYCLES, _amp_weight_load_cycles(machine, method, 1),
          ceil_div(method.out_chans_per_group, units), X1_ZEROING_IN_GROUP_CYCLES,
          X1_ZEROING_PASS_CYCLES)
    return nx1, x1
