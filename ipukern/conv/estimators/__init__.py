"""Per-tile convolution vertex cycle estimators: AMP (nx1 and 1x1), SLIC, VMAC, HMAC, plus the
zeroing, cast and partial-sum reduction vertices that surround them.

Every estimator returns **integer tile cycles** for one tile's sub-convolution (a
:class:`TileConv`) computed with one vertex type (a :class:`VertexMethod`). The planner calls
:func:`conv_vertex_cycles` (one tile, with a breakdown and a one-line explanation) or
:func:`conv_vertex_cycles_array` (many candidate tiles at once, NumPy, totals only).

Source
------
The formulas model Graphcore's PopLibs convolution planner, ``graphcore/poplibs`` mk2-main
(SDK 3.x). They are restated here in our own notation from:

- ``lib/poplin/PerformanceEstimation.hpp``: per-vertex cycle formulas and their constants;
- ``lib/poplin/ConvModel.cpp``: how the planner feeds tile sizes into them (vertex choice,
  weight-load rate, VMAC/HMAC work-list models, per-method bounds);
- ``lib/poplin/ConvVertexType.cpp``: the vertex candidates and their channel groupings;
- ``lib/poplin/ConvPlan.cpp``: the combineConvGroups factors;
- ``lib/poplin/ConvUtilInternal.cpp``: how output positions are split over worker threads.

Hardware constants (workers, conv units, load widths, vector width) come from
:class:`~ipukern.machine.MachineSpec`. Constants of the *vertex code* (instruction counts of
the assembly kernels as PopLibs' estimator models them) sit beside the formulas that use
them, one module per vertex family:

- :mod:`.methods`: the records (:class:`VertexMethod`, :class:`TileConv`, :class:`VertexCost`);
- :mod:`._common`: the int-or-array shim, the worker split, zeroing;
- :mod:`.amp`, :mod:`.slic`, :mod:`.vmac`, :mod:`.hmac`: one vertex family each;
- :mod:`.candidates`: which vertex types the planner tries for a conv.

Fidelity policy
---------------
The estimators reproduce PopLibs' planner numbers exactly (the mk2-main estimators, including
the 2023 VMAC fix, graphcore/poplibs 38f82620), with three exceptions where the PopLibs
arithmetic contradicts its own comments or the vertex's assembly and yields rates above what
the unit can do:

1. SLIC with more than 4 conv groups per group: PopLibs repeats the non-zeroing worker pass
   once per 4-group stride but runs the zeroing (first sub-kernel) pass only once. Here both
   passes repeat per stride, so SLIC 16x1 never beats the 16 MACs/cycle of the 4-chain unit.
2. HMAC with half partials: PopLibs halves the output-channel count once *per work-list
   segment* instead of once, so every segment after the first costs no dot product at all.
   Here it is halved once (the loop handles 2 output channels).
3. SLIC weight loads: PopLibs charges the sub-kernel loop (one weight load per sub-kernel)
   once, but the supervisor runs it inside its conv-group-block loop (ConvPartial1x4SLIC*.S),
   so here it is paid once per sub-kernel per conv-group block (depthwise layers on small
   fields: 11-15% more cycles).

``poplibs_literal=True`` on :func:`slic_cycles`, :func:`hmac_cycles` and
:func:`conv_vertex_cycles` restores PopLibs' literal arithmetic for comparisons.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..._kernels import plan_kernels
from ...core.cost import cast_cycles, reduce_cycles  # shared with the built-in vertices
from ...machine import MachineSpec
from ._common import _check_machine, _Dims, _total, _vertex_dims, worker_segments, zeroing_cycles
from .amp import (_amp_1x1_parts, _amp_nx1_parts, amp_1x1_cycles, amp_cycles_lower_bound,
                  amp_kernel_constants, amp_nx1_cycles, amp_uses_1x1)
from .candidates import candidate_methods, combine_group_factors, direct_output_candidates
from .hmac import (_hmac_dot_cycles, _hmac_parts, _hmac_uses_1x1, hmac_cycles,
                   hmac_cycles_lower_bound)
from .methods import METHODS, TileConv, VertexCost, VertexMethod, _positive_int, useful_macs
from .slic import _check_slic_tile, _slic_parts, slic_cycles, slic_cycles_lower_bound
from .vmac import _check_vmac_tile, _vmac_parts, vmac_cycles


__all__ = [
    "METHODS", "VertexMethod", "TileConv", "VertexCost",
    "candidate_methods", "combine_group_factors", "direct_output_candidates", "worker_segments",
    "useful_macs",
    "amp_uses_1x1", "amp_nx1_cycles", "amp_1x1_cycles", "slic_cycles", "vmac_cycles",
    "hmac_cycles", "zeroing_cycles", "cast_cycles", "reduce_cycles",
    "conv_vertex_cycles", "conv_vertex_cycles_array", "vertex_field", "vertex_cycles_lower_bound",
]


def vertex_field(params: Any, batch: Any, out_h: Any, out_w: Any) -> tuple[Any, Any, Any]:
    """The (batch, out_h, out_w) a tile's conv vertex sees for its output block.

    1x1, stride-1, unpadded convs (and matmuls) flatten the field into one row, PopLibs'
    flattenDims transform, so that the AMP 1x1 vertex applies. The planner and the program
    builder both call this, so the planned and the built vertex see the same field.

    Parameters
    ----------
    params : ConvParams
        The conv (kernel, stride and padding are read).
    batch, out_h, out_w : int or array of int
        The tile's output block.

    Returns
    -------
    tuple
        ``(batch, out_h, out_w)`` as the vertex sees them (same types as the inputs).
    """
    flat = (params.kernel_h * params.kernel_w == 1 and params.stride == (1, 1)
            and params.padding == (0, 0))
    if not flat:
        return batch, out_h, out_w
    return np.ones_like(batch), np.ones_like(out_h), batch * out_h * out_w


def _parts_for(machine: MachineSpec, method: VertexMethod, tile: TileConv,
               literal: bool) -> tuple[str, dict[str, Any]]:
    d = _vertex_dims(method, tile)
    if method.method == "AMP":
        if amp_uses_1x1(method, tile):
            return "AMP 1x1", _amp_1x1_parts(machine, method, d)
        return "AMP nx1", _amp_nx1_parts(machine, method, d)
    if method.method == "SLIC":
        _check_slic_tile(method, d, tile.stride[1])
        return "SLIC", _slic_parts(machine, method, d, tile.stride[1], literal)
    if method.method == "VMAC":
        _check_vmac_tile(d)
        return "VMAC", _vmac_parts(machine, method, d)
    use_1x1 = _hmac_uses_1x1(method, tile, tile.stride)
    return ("HMAC 1x1" if use_1x1 else "HMAC"), _hmac_parts(machine, method, d, use_1x1, literal)


def _why(machine: MachineSpec, method: VertexMethod, tile: TileConv, vertex: str,
         parts: Mapping[str, Any]) -> str:
    n_cg, n_ig, n_og = parts["_groups"]
    n = tile.n_positions
    nw = machine.n_workers
    comb = f" (groups combined x{method.combine_groups})" if method.combine_groups > 1 else ""
    if method.method == "AMP":
        cpp = machine.amp_cycles_per_position(method.in_dtype)
        passes = parts["_passes"]
        head = f"{vertex} {method.conv_units} units, {method.in_chans_per_group}x" \
               f"{method.out_chans_per_group}{comb}: {parts['_kernel']} kernel positions x " \
               f"{n_ig} in-groups x {n_og} out-groups"
        head += f" x {n_cg} conv groups" if n_cg > 1 else ""
        head += f" x {passes} passes" if passes > 1 else ""
        return f"{head}, {n} positions over {nw} workers, {cpp} cycles/position"
    if method.method == "SLIC":
        per_pos = parts["_passes"] * tile.stride[1]
        return (f"SLIC {method.conv_groups_per_group}x{method.in_chans_per_group} "
                f"{method.slic_chains} chains{comb}: {parts['_kernel']} sub-kernels x {n_cg} "
                f"group blocks, {n} positions over {nw} workers, {per_pos} "
                f"cycle(s)/position per sub-kernel")
    if method.method == "VMAC":
        return (f"VMAC {method.conv_groups_per_group} groups/vector: {tile.kernel_h}x"
                f"{tile.kernel_w} taps x {n_cg} group blocks x {n_ig} in-chans, {n} positions,"
                f" per-worker partials zeroed and summed")
    return (f"HMAC {method.in_chans_per_group} in x {method.out_chans_per_group} out{comb}: "
            f"{tile.kernel_h * tile.kernel_w} kernel positions x {n_ig} in-groups x {n_og} "
            f"out-groups x {n_cg} conv groups, {n} positions, "
            f"{_hmac_dot_cycles(machine, method)}-cycle dot products")


def conv_vertex_cycles(machine: MachineSpec, method: VertexMethod, tile: TileConv, *,
                       poplibs_literal: bool = False) -> VertexCost:
    """Cycles of one tile's conv compute: the entry point for the planner and the profile.

    Picks the vertex PopLibs would use for the method (AMP: 1x1 when :func:`amp_uses_1x1`,
    else nx1), applies the method's combineConvGroups factor and channel-group padding, and
    returns the total with a breakdown and a one-line explanation.

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
    tile : TileConv
    poplibs_literal : bool
        Reproduce PopLibs' literal SLIC/HMAC arithmetic (see the module docstring).

    Returns
    -------
    VertexCost

    Raises
    ------
    ValueError
        If the method does not exist on the machine or cannot run this tile (SLIC with more
        than one channel group or stride_w > 2, VMAC with more than one output channel).
    """
    _check_machine(machine, method)
    if not isinstance(tile, TileConv):
        raise ValueError(f"tile must be a TileConv, got {type(tile).__name__}")
    vertex, parts = _parts_for(machine, method, tile, poplibs_literal)
    public = {k: int(v) for k, v in parts.items() if not k.startswith("_")}
    public = {k: v for k, v in public.items() if v or k in ("weight_load", "supervisor",
                                                             "workers", "zeroing")}
    return VertexCost(cycles=sum(public.values()), breakdown=MappingProxyType(public),
                      why=_why(machine, method, tile, vertex, parts), vertex=vertex)


def vertex_cycles_lower_bound(machine: MachineSpec, method: VertexMethod, *, conv_groups: Any,
                              in_chans: Any, out_chans: Any, positions: Any, kernel_h: Any,
                              kernel_w: Any) -> Any:
    """A lower bound on :func:`conv_vertex_cycles_array` for tiles of these sizes
    (``positions`` = batch x out_h x out_w, however the vertex field is shaped), or None
    when the method has none beyond the useful-MACs one
    (:meth:`VertexMethod.macs_per_cycle_bound`; VMAC). AMP:
    :func:`.amp.amp_cycles_lower_bound`, SLIC: :func:`.slic.slic_cycles_lower_bound`, HMAC:
    :func:`.hmac.hmac_cycles_lower_bound`."""
    if method.method == "VMAC":
        return None
    d = _vertex_dims(method, _Dims(conv_groups, in_chans, out_chans, 1, 1, positions,
                                   kernel_h, kernel_w))
    if method.method == "SLIC":
        return slic_cycles_lower_bound(method, d)
    if method.method == "HMAC":
        return hmac_cycles_lower_bound(machine, method, d)
    return amp_cycles_lower_bound(machine, method, d)


def conv_vertex_cycles_array(machine: MachineSpec, method: VertexMethod, *, conv_groups: Any,
                             in_chans: Any, out_chans: Any, batch: Any = 1, out_h: Any = 1,
                             out_w: Any = 1, kernel_h: Any = 1, kernel_w: Any = 1,
                             stride: tuple[int, int] = (1, 1),
                             poplibs_literal: bool = False) -> np.ndarray:
    """Vectorised :func:`conv_vertex_cycles` totals for many candidate tiles at once.

    Parameters
    ----------
    machine : MachineSpec
    method : VertexMethod
    conv_groups, in_chans, out_chans, batch, out_h, out_w, kernel_h, kernel_w : array_like
        The :class:`TileConv` fields, broadcast against each other (ints or integer arrays,
        e.g. one entry per candidate split vector).
    stride : tuple of int
        Shared by all entries.
    poplibs_literal : bool
        As in :func:`conv_vertex_cycles`.

    Returns
    -------
    numpy.ndarray
        int64 total tile cycles, equal element by element to
        ``conv_vertex_cycles(...).cycles``.

    Raises
    ------
    ValueError
        If any size is < 1, or any element is invalid for the method (see
        :func:`conv_vertex_cycles`).
    """
    _check_machine(machine, method)
    sw = _positive_int("stride_w", stride[1])
    stride = (_positive_int("stride_h", stride[0]), sw)
    arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in (
        conv_groups, in_chans, out_chans, batch, out_h, out_w, kernel_h, kernel_w)))
    for name, a in zip(_Dims._fields, arrays):
        if a.size and a.min() < 1:
            raise ValueError(f"{name} must be >= 1 everywhere")
    # np.broadcast_arrays returns read-only views; copy so each is a plain array
    d = _vertex_dims(method, _Dims(*(np.array(a) for a in arrays)))
    raw = _Dims(*arrays)
    if method.method == "AMP":
        kernel = plan_kernels()
        if kernel is not None and raw.groups.size:
            nx1_k, x1_k = amp_kernel_constants(machine, method, stride)
            cols = tuple(np.ascontiguousarray(a.ravel()) for a in arrays)
            return kernel.amp_cycles(cols, nx1_k, x1_k).reshape(raw.groups.shape)
        nx1 = _total(_amp_nx1_parts(machine, method, d))
        if method.amp_weight_height == 1 and stride == (1, 1):
            eligible = (raw.kernel_h * raw.kernel_w == 1) & (raw.batch == 1) & (raw.out_h == 1)
            if np.any(eligible):
                x1 = _total(_amp_1x1_parts(machine, method, d))
                return np.where(eligible, x1, nx1).astype(np.int64)
        return np.asarray(nx1, dtype=np.int64)
    if method.method == "SLIC":
        _check_slic_tile(method, d, sw)
        return np.asarray(_total(_slic_parts(machine, method, d, sw, poplibs_literal)),
                          dtype=np.int64)
    if method.method == "VMAC":
        _check_vmac_tile(d)
        return np.asarray(_total(_vmac_parts(machine, method, d)), dtype=np.int64)
    use = _hmac_uses_1x1(method, raw, stride)
    return np.asarray(_total(_hmac_parts(machine, method, d, use, poplibs_literal)),
                      dtype=np.int64)
