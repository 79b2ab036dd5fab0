"""HMAC vertex (ConvPartialHorizontalMac): dot products over the input channels.

Constants from ``lib/poplin/PerformanceEstimation.hpp`` (getConvPartialHorizontalMac*,
getDenseDotProductCycles), beside the formulas that use them.
"""
from __future__ import annotations

from typing import Any


from ...core.cost import ceil_div
from ...machine import MachineSpec
from ._common import (ZERO_RETENTION_CYCLES, _check_kind, _check_machine,
                      _and, _Dims, _max2, _notional_worker, _total,
                      _vertex_dims, _where, _zero_cycles)
from .methods import _FLOAT, _HALF, TileConv, VertexMethod

__all__ = ["hmac_cycles", "hmac_cycles_lower_bound"]

# ---- HMAC (ConvPartialHorizontalMac): getConvPartialHorizontalMac*, getDenseDotProductCycles
HMAC_SUPERVISOR_CYCLES = {_FLOAT: 58, _HALF: 65}   # keyed by input dtype
HMAC_1X1_SUPERVISOR_SAVING = 10
HMAC_WORKER_CYCLES = 16          # per worker, and per kernel position
HMAC_1X1_RETENTION_CYCLES = 15
HMAC_HALF_RETENTION_CYCLES = 6
HMAC_CONV_GROUP_CYCLES = 23
HMAC_IN_GROUP_CYCLES = 15
HMAC_OUT_GROUP_CYCLES = 10
#: per work-list segment (13 for the 1x1 variant) and per position (7; the 1x1 variant with
#: one output channel: 2, plus 1 per segment to preload the weights pointer)
HMAC_SEGMENT_CYCLES = 19
HMAC_1X1_SEGMENT_CYCLES = 13
HMAC_POSITION_CYCLES = 7
HMAC_1X1_POSITION_CYCLES = 2
HMAC_1X1_PRELOAD_CYCLES = 1
#: dot product: rpt + wind-down per output channel, +1 format conversion for half->half,
#: 3 to add the previous partial (load, add, store), 1 branch
HMAC_DOT_CYCLES_PER_CHANNEL = 3
HMAC_DOT_FIXED_CYCLES = 3 + 1


def _hmac_dot_cycles(machine: MachineSpec, method: VertexMethod) -> int:
    """Worker cycles of one HMAC dot product over icpg inputs (getDenseDotProductCycles):
    one 64-bit step per cycle at the widest power-of-two width dividing icpg (2 cycles per
    step, plus a warm-up cycle per output channel, when narrower than 64 bits)."""
    half_in = method.in_dtype == _HALF
    hh = half_in and method.partials_dtype == _HALF
    n_out = 2 if hh else 1
    fixed = HMAC_DOT_CYCLES_PER_CHANNEL * n_out + (1 if hh else 0) + HMAC_DOT_FIXED_CYCLES
    vw = machine.vector_elems(method.in_dtype)
    width = vw
    while method.in_chans_per_group % width:
        width //= 2
    narrow = width < vw
    return (fixed + (n_out if narrow else 0) + (method.in_chans_per_group // width)
            * (2 if narrow else 1) - (1 if half_in else 0))


def _hmac_uses_1x1(method: VertexMethod, tile: TileConv | _Dims,
                   stride: tuple[int, int]) -> Any:
    """The 1x1 HMAC variant (half inputs, float partials) needs the AMP 1x1 conditions."""
    spec = method.in_dtype == _HALF and method.partials_dtype == _FLOAT
    if not spec or stride != (1, 1):
        return False
    return _and(_and(tile.kernel_h * tile.kernel_w == 1, tile.batch == 1), tile.out_h == 1)


def _hmac_parts(machine: MachineSpec, method: VertexMethod, d: _Dims, use_1x1: Any,
                literal: bool) -> dict[str, Any]:
    nw = machine.n_workers
    half_partials = method.partials_dtype == _HALF
    half_in = method.in_dtype == _HALF
    pcpg = method.out_chans_per_group
    dot = _hmac_dot_cycles(machine, method)
    rows = d.batch * d.out_h
    split, whole, part = _notional_worker(rows, nw)
    part_width = part * (d.out_w + split - 1) // split
    # half partials: the inner loop produces 2 output channels per pass
    out_loops = pcpg // 2 if half_partials else pcpg
    seg_fixed = _where(use_1x1, HMAC_1X1_SEGMENT_CYCLES, HMAC_SEGMENT_CYCLES)
    # the 1x1 variant with a single output channel preloads the weights pointer once per
    # segment and saves the per-position channel loop
    single = _and(use_1x1, out_loops == 1)
    per_pos = _where(single, HMAC_1X1_POSITION_CYCLES + dot,
                     HMAC_POSITION_CYCLES + out_loops * dot)
    pre_pos = _where(single, HMAC_1X1_PRELOAD_CYCLES, 0)
    retention = _where(use_1x1, HMAC_1X1_RETENTION_CYCLES,
                       0 if not half_in else HMAC_HALF_RETENTION_CYCLES)
    if literal and half_partials:
        # PopLibs halves the channel count again for every segment: the first segment of
        # each kernel position costs 1 channel loop, the rest none
        n_segs = whole + _where(part > 0, 1, 0)
        first_width = _where(whole > 0, d.out_w, part_width)
        segs = (_where(n_segs > 0, seg_fixed + first_width * (HMAC_POSITION_CYCLES + dot), 0)
                + _max2(n_segs - 1, 0) * seg_fixed
                + (d.out_w * whole + _where(part > 0, part_width, 0) - first_width)
                * HMAC_POSITION_CYCLES)
    else:
        segs = (whole * (seg_fixed + pre_pos + d.out_w * per_pos)
                + _where(part > 0, seg_fixed + pre_pos + part_width * per_pos, 0))
    per_kernel = HMAC_WORKER_CYCLES - retention + segs
    inner = nw * (d.kernel_h * d.kernel_w * per_kernel + HMAC_WORKER_CYCLES)
    n_cg = ceil_div(d.groups, method.conv_groups_per_group)
    n_ig = ceil_div(d.in_chans, method.in_chans_per_group)
    n_og = ceil_div(d.out_chans, pcpg)
    # PopLibs passes the partials flag where the activations flag is expected here
    outer_retention = _where(use_1x1, HMAC_1X1_RETENTION_CYCLES,
                             HMAC_HALF_RETENTION_CYCLES if half_partials else 0)
    zero_retention = ZERO_RETENTION_CYCLES[_HALF if half_partials else _FLOAT]
    work = n_cg * n_ig * n_og * inner
    total = (HMAC_SUPERVISOR_CYCLES[method.in_dtype]
             - _where(use_1x1, HMAC_1X1_SUPERVISOR_SAVING, 0)
             + nw * zero_retention + nw * outer_retention
             + n_cg * (HMAC_CONV_GROUP_CYCLES
                       + n_ig * (HMAC_IN_GROUP_CYCLES + n_og * (HMAC_OUT_GROUP_CYCLES + inner))))
    # the 1x1 vertex with one in-group and one output channel writes without zeroing
    skip_zero = _and(_and(use_1x1, n_ig == 1), pcpg == 1)
    zeroing = _where(skip_zero, 0, _zero_cycles(machine, rows * d.out_w * pcpg, n_og * n_cg,
                                                 _FLOAT))
    return {"weight_load": 0, "workers": work, "zeroing": zeroing,
            "supervisor": total - work, "_groups": (n_cg, n_ig, n_og),
            "_kernel": d.kernel_h * d.kernel_w, "_passes": 1}


def hmac_cycles_lower_bound(machine: MachineSpec, method: VertexMethod, d: _Dims) -> Any:
    """A lower bound on the HMAC vertex's cycles (both variants) for the vertex dims ``d``:
    every (conv group, in-group, out-group, kernel tap) pays each output position's
    cheapest per-position cost (the 1x1 single-channel loop, else the channel loop).

    Why it holds: the busiest worker's positions times the worker count cover the tile's
    positions, and every other term (segments, retention-adjusted worker set-up,
    supervisor, zeroing) is >= 0. The non-literal estimate, which the planner uses."""
    dot = _hmac_dot_cycles(machine, method)
    out_loops = (method.out_chans_per_group // 2 if method.partials_dtype == _HALF
                 else method.out_chans_per_group)
    per_pos = (HMAC_1X1_POSITION_CYCLES + dot if out_loops == 1
               else HMAC_POSITION_CYCLES + out_loops * dot)
    n_runs = (ceil_div(d.groups, method.conv_groups_per_group)
              * ceil_div(d.in_chans, method.in_chans_per_group)
              * ceil_div(d.out_chans, method.out_chans_per_group) * d.kernel_h * d.kernel_w)
    return n_runs * (d.batch * d.out_h * d.out_w) * per_pos


def hmac_cycles(machine: MachineSpec, method: VertexMethod, tile: TileConv, *,
                poplibs_literal: bool = False) -> int:
    """Tile cycles of the horizontal-MAC vertex, ConvPartialHorizontalMac (§3.6), plus its
    zeroing vertex.

    Each output position and output channel is a dot product over icpg inputs on the vector
    unit (1 cycle per 64 bits). Half inputs with float partials and a 1x1 tile kernel use the
    specialised 1x1 variant.

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
        An HMAC method.
    tile : TileConv
    poplibs_literal : bool
        Reproduce PopLibs exactly: with half partials only the first work-list segment of
        each kernel position pays for its dot products (see the module docstring).

    Returns
    -------
    int
        Tile cycles.
    """
    _check_kind(method, "HMAC")
    _check_machine(machine, method)
    d = _vertex_dims(method, tile)
    use = _hmac_uses_1x1(method, tile, tile.stride)
    return _total(_hmac_parts(machine, method, d, use, poplibs_literal))
