"""The conv entry: plan a conv (direct or expandDims) and build the program of any plan.

:func:`plan_conv` dispatches between the direct planner (:func:`~.planner.plan_direct`, over
the candidate search of :mod:`.search`) and PopLibs' expandDims transform
(:func:`~.planner.plan_expanded`, with the transform model of :mod:`.expand`), and by
default keeps the cheapest (:func:`choose_plan`). :func:`build_conv_program` builds a
plan's program: :func:`~.build.build_direct_program`, or for an expandDims plan the
on-chip transform followed by the expanded conv's program
(:func:`~.expand_build.build_expanded_program`). Nothing else in ``conv`` imports this
module; the layers above use it through :mod:`ipukern.conv`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..core import Device
from ..core import TileMemoryError
from ..machine import MachineSpec
from . import search
from .build import ConvProgram, build_direct_program
from .expand import expanded_lower_bound, transform_lower_bound
from .expand_build import build_expanded_program
from .layout import MAX_INPUT_OWNERS
from .params import ConvParams, expand_candidates
from .planner import ConvPlan, checked_kernel_split, plan_direct, plan_expanded, temp_bytes_bound

__all__ = ["plan_conv", "choose_plan", "build_conv_program"]


def plan_conv(params: ConvParams, machine: MachineSpec, *, bias: bool = False,
              method: str | None = None, expand_dims: str | None = None,
              kernel_split: int | None = None,
              available_memory_proportion: float | None = None) -> ConvPlan:
    """Choose the fastest plan whose busiest tile fits ``machine``'s per-tile budget and
    whose temporary memory fits ``available_memory_proportion`` of the tile.

    Parameters
    ----------
    params : ConvParams
    machine : MachineSpec
    bias : bool
        Whether the op adds a bias (one more element-wise pass and a small exchange).
    method : str, optional
        Restrict to one vertex method ("AMP", "SLIC", "VMAC", "HMAC"), e.g. to study it.
    expand_dims : {None, "", "h", "hw"}
        PopLibs' expandDims transform (:mod:`.expand`): None (default) plans the conv as it
        is and with each expandDims candidate, transform cost included, and keeps the
        cheapest; "" never expands; "h" / "hw" force that expansion.
    kernel_split : int, optional
        PopLibs' kernel split along the kernel rows: None (default) scores every useful
        split (when ``search.KERNEL_SPLITS``, the module switch, is on) and keeps the fastest; 1
        never splits; k > 1 forces k blocks of kernel rows (then no expandDims).
    available_memory_proportion : float in (0, 1], optional
        PopLibs' ``availableMemoryProportion`` option: the share of the tile's bytes the
        conv's temporary memory may use (here every buffer of the plan but its output:
        input windows, weights, partials, reduction and receive buffers). None means
        PopLibs' default, :data:`~.planner.AVAILABLE_MEMORY_PROPORTION` (0.6). As in PopLibs, when
        no plan meets it the conv is planned again without it (PopLibs then minimises
        memory; here the fastest plan that fits the tile budget is kept); the plan's
        ``temp_bytes_bound`` says which happened (0: bound not met).

    Raises
    ------
    TileMemoryError
        If no candidate fits even with serial splits; the message gives the smallest
        per-tile requirement found and the budget. Raised at once when the conv's tensors
        alone exceed the whole chip.
    ValueError
        If ``method`` names no valid candidate for this conv, or no split of the conv
        suits any candidate (e.g. a forced SLIC with stride_w > 2), or ``kernel_split``
        is not an int in 1..kernel_h.
    """
    kernel_split = checked_kernel_split(params, kernel_split)
    if kernel_split is not None and kernel_split > 1:
        if expand_dims:
            raise ValueError("a kernel split and expandDims cannot be forced together")
        expand_dims = ""
    amp = available_memory_proportion
    temp_bytes_bound(machine, amp)      # checks the proportion before any planning
    if expand_dims is None:
        try:
            direct: ConvPlan | Exception = plan_direct(params, machine, bias=bias, method=method,
                                                       kernel_split=kernel_split,
                                                       available_memory_proportion=amp)
        except (ValueError, TileMemoryError) as err:
            direct = err
        return choose_plan(params, machine, direct, bias=bias, method=method,
                           available_memory_proportion=amp)
    if expand_dims:
        return plan_expanded(params, machine, expand_dims, bias=bias, method=method,
                             available_memory_proportion=amp)
    return plan_direct(params, machine, bias=bias, method=method, kernel_split=kernel_split,
                       available_memory_proportion=amp)


def choose_plan(p: ConvParams, machine: MachineSpec, direct: ConvPlan | Exception, *,
                bias: bool = False, method: str | None = None,
                available_memory_proportion: float | None = None) -> ConvPlan:
    """The cheapest of ``direct`` (the plan without expandDims, or the exception planning it
    raised) and the expandDims candidates of ``p`` (PopLibs tries every subset and keeps
    the cheapest plan, the transform's cost included). Plans within the temporary-memory
    bound win first (``ConvPlan.temp_bytes_bound``), then fewer serial slices, as in
    :func:`plan_conv`; ties keep the direct plan. A candidate whose
    :func:`expanded_lower_bound` cannot beat the best plan so far (within the bound and
    without serial slices) is not planned, and one that is planned only looks for an
    expanded conv faster than that best less the transform's lower bound
    (:func:`~.expand.transform_lower_bound`; not when ``search.PRUNE`` is off): the choice
    is the same."""
    best = None if isinstance(direct, Exception) else direct
    n = best.n_candidates if best is not None else 0
    for dims in expand_candidates(p):
        # a candidate can only replace a plan without serial slices by beating its cycles
        # (and, unless the best meets the memory bound, a bounded candidate wins on memory),
        # so its expanded conv must beat them less the transform's least cost
        beat = None
        if search.PRUNE and best is not None and best.serial == 1 and best.temp_bytes_bound:
            if expanded_lower_bound(p, machine, dims, bias) >= best.estimated_cycles:
                continue
            beat = best.estimated_cycles - transform_lower_bound(p, machine, dims)
        try:
            cand = plan_expanded(p, machine, dims, bias=bias, method=method,
                                 available_memory_proportion=available_memory_proportion,
                                 beat=beat)
        except (ValueError, TileMemoryError):     # NotFaster included
            continue
        n += cand.n_candidates
        # a plan within the temporary-memory bound beats one planned without it
        if best is None or ((not cand.temp_bytes_bound, cand.serial > 1, cand.estimated_cycles)
                            < (not best.temp_bytes_bound, best.serial > 1, best.estimated_cycles)):
            best = cand
    if best is None:
        raise direct
    return replace(best, n_candidates=n)


def build_conv_program(plan: ConvPlan, device: Device | None = None, *,
                       vertex: Any = None, input_owners: int = MAX_INPUT_OWNERS) -> ConvProgram:
    """Lay out ``plan`` on a fresh device (or the given empty one) and build its program.

    ``vertex`` (a :class:`~ipukern.graph.tilefn.TileFunction` ``f(a, b, c)``) replaces the
    built-in conv vertex for 1x1, stride-1, single-row convs with one conv group per tile
    (matmuls): per tile ``a`` is the weights (K_j, C), ``b`` the window (C, columns) and
    ``c`` the fp32 partials (K_j, columns), overwritten. Plan, exchanges and reductions are
    unchanged. ``input_owners``: at most this many tiles sharing an input window own a
    share of its core (:data:`~.layout.MAX_INPUT_OWNERS`; an expandDims plan's transform
    chooses its own).

    The schedule is :mod:`.build`'s: one exchange of the inputs, then one superstep per
    serial slice (conv of slice j, finishing of slice j - 1, exchange of the next weights
    and of slice j's partials), then the last slice's finishing; an expandDims plan first
    builds the expanded input on chip (:mod:`.expand_build`).
    """
    if plan.expand_dims:
        return build_expanded_program(plan, device, vertex)
    return build_direct_program(plan, device, vertex=vertex, input_owners=input_owners)
