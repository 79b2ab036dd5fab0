"""The direct conv planner: a :class:`ConvPlan` from the search, or why there is none.

:func:`plan_direct` plans a conv as it is (no expandDims): the fastest plan whose busiest
tile fits the machine's per-tile budget and whose temporary bytes fit PopLibs'
``availableMemoryProportion`` of the tile (relaxed as PopLibs does when none does). The
candidate search and its scoring are :mod:`.search`'s. :func:`plan_expanded` plans the conv
under one expandDims transform: the direct plan of the expanded conv (:func:`~.params.
expanded_params`) plus the transform's estimate (:mod:`.expand`). Choosing between the
direct plan and the expandDims ones is :func:`ipukern.conv.compile.plan_conv`'s (the conv
entry); :func:`rank_candidates` ranks the best plan of every vertex method, expandDims
included, as it chooses.

If even the largest serial split does not fit, :func:`plan_direct` raises
:class:`~ipukern.core.memory.TileMemoryError` with the smallest requirement it found.
Modelled and documented simplifications: kernel columns are never split across tiles
(only rows); only output channels are split serially.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._format import fmt_bytes
from ..core.cost import ceil_div
from ..core import TileMemoryError
from ..machine import MachineSpec
from .estimators import VertexMethod
from .expand import transform_estimate, with_transform
from .layout import Split
from .params import ConvParams, expand_candidates, expanded_params
from .reduce import reduce_stages
from .search import score_each_method, search, writes_output_type

__all__ = ["ConvPlan", "PlanCandidate", "NotFaster", "plan_direct", "plan_expanded", "rank_candidates",
           "expanded_candidates", "normalize_amp", "temp_bytes_bound", "AVAILABLE_MEMORY_PROPORTION"]

#: PopLibs' default ``availableMemoryProportion`` (poplin convolution/matmul option, "the
#: proportion of tile memory to be made available as temporary memory for this
#: convolution", default 0.6; ConvOptions.cpp, ConvPlan.cpp ``availableTileMem =
#: target.getBytesPerTile() * options.availableMemoryProportion``)
AVAILABLE_MEMORY_PROPORTION = 0.6


@dataclass(frozen=True)
class ConvPlan:
    """A conv mapped onto the tiles: method, split and the planner's estimates.

    Attributes
    ----------
    params : ConvParams
    machine : MachineSpec
    method : VertexMethod
        The vertex type (method, channel grouping, conv units / chains, combine factor).
    split : Split
        Parallel splits per axis (groups, in-chans, batch, rows, cols, out-chans).
    serial : int
        Serial split of each tile's output channels (1 = none).
    estimated_cycles : int
        The planner's closed-form estimate of the whole program.
    estimated_bytes_per_tile : int
        The planner's estimate of the busiest tile's data bytes.
    breakdown : dict
        Planner estimate by category (exchange, compute, reduction, cast, bias, sync).
    n_candidates : int
        Split vectors scored (expandDims candidates pruned by their lower bound are not
        scored). A statistic of the search: plans compare equal without it.
    expand_dims : str
        PopLibs' expandDims transform: "" (none), "h" (kernel rows folded into the input
        channels) or "hw" (both kernel dims: a 1x1 conv). When set, ``method``, ``split``
        and ``serial`` are those of the expanded conv (:attr:`conv_params`), whose input
        the program builds on chip first (:mod:`.expand`).
    temp_bytes_bound : int
        The per-tile bound on temporary bytes the plan was chosen under (PopLibs'
        ``availableMemoryProportion`` of the tile, :func:`plan_direct`); 0 when no plan met
        it and the conv was planned against the tile budget alone.
    temp_bytes : int
        The planner's estimate of the busiest tile's temporary bytes (all but the output;
        of the expanded conv for an expandDims plan), what ``temp_bytes_bound`` was checked
        against. A statistic: plans compare equal without it.
    """

    params: ConvParams
    machine: MachineSpec
    method: VertexMethod
    split: Split
    serial: int
    bias: bool
    estimated_cycles: int
    estimated_bytes_per_tile: int
    breakdown: dict = field(default_factory=dict, compare=False)
    n_candidates: int = field(default=0, compare=False)
    expand_dims: str = ""
    temp_bytes_bound: int = 0
    temp_bytes: int = field(default=0, compare=False)

    @property
    def conv_params(self) -> ConvParams:
        """The conv the vertices run: ``params``, or its expandDims form."""
        if not self.expand_dims:
            return self.params
        return expanded_params(self.params, self.expand_dims)

    @property
    def conv_output_dtype(self) -> str:
        """What the conv vertex writes: the partials type, or the output type itself for
        a direct-output AMP candidate (see :func:`~.search.writes_output_type`)."""
        return self.params.dtype if writes_output_type(self.params, self.method) else self.params.partials

    @property
    def tiles_used(self) -> int:
        return self.split.n_tiles

    @property
    def reduction_depth(self) -> int:
        """Partials per output: in-chan split x kernel split."""
        return self.split.reduction

    @property
    def kernel_split(self) -> int:
        """Kernel-row blocks across tiles (PopLibs' kernelSplit along the height; 1: none)."""
        return self.split.kernel_rows

    @property
    def reduction_stages(self) -> tuple[int, ...]:
        """Partials summed per output at each reduction stage (empty: no reduction)."""
        r = self.split.reduction
        return reduce_stages(r) if r > 1 else ()

    def describe(self) -> str:
        s = self.split
        serial = f", {self.serial} serial out-chan slices" if self.serial > 1 else ""
        st = self.reduction_stages
        red = (f", reduced in {len(st)} stages ({'x'.join(map(str, st))})"
               if len(st) > 1 else "")
        e = self.conv_params
        exp = (f"expandDims {self.expand_dims} (C_in/group {self.params.in_per_group} -> "
               f"{e.in_per_group}, kernel {self.params.kernel_h}x{self.params.kernel_w} -> "
               f"{e.kernel_h}x{e.kernel_w}); " if self.expand_dims else "")
        ksp = f"kernel rows {s.kernel_rows} x " if s.kernel_rows > 1 else ""
        return (f"{exp}{self.method.label()}; splits groups {s.groups} x in-chans {s.in_chans} x {ksp}"
                f"batch {s.batch} x rows {s.rows} x cols {s.cols} x out-chans {s.out_chans} "
                f"= {s.n_tiles} tiles{serial}{red}")

    def candidates(self, k: int = 5) -> list["PlanCandidate"]:
        """The ``k`` best plans of the vertex methods the planner weighed for this conv,
        fastest first, each with its estimated cycles and busiest-tile bytes; methods that
        fit no split come last with the smallest requirement found. Answers "why SLIC and
        not AMP?". See :func:`rank_candidates`."""
        return rank_candidates(self.params, self.machine, bias=self.bias, k=k)

    def to_dict(self) -> dict[str, Any]:
        s = self.split
        return {"method": self.method.label(), "vertex_method": self.method.method,
                "expand_dims": self.expand_dims, "kernel_split": s.kernel_rows,
                "combine_groups": self.method.combine_groups,
                "splits": {"groups": s.groups, "in_chans": s.in_chans, "batch": s.batch,
                           "rows": s.rows, "cols": s.cols, "out_chans": s.out_chans},
                "serial_out_chan_split": self.serial,
                "reduction_stages": list(self.reduction_stages),
                "tiles_used": s.n_tiles, "estimated_cycles": self.estimated_cycles,
                "estimated_bytes_per_tile": self.estimated_bytes_per_tile,
                "temp_bytes_bound": self.temp_bytes_bound,
                "breakdown": dict(self.breakdown)}




@dataclass(frozen=True)
class PlanCandidate:
    """The best plan of one vertex method (see :meth:`ConvPlan.candidates`).

    Attributes
    ----------
    method : VertexMethod
    fits : bool
        False when no split of this method fits the tiles' memory.
    estimated_cycles : int or None
        The planner's estimate of the whole program (None when it does not fit).
    estimated_bytes_per_tile : int
        The busiest tile's data bytes (when it does not fit: the smallest requirement seen).
    split : Split or None
    serial : int
    breakdown : dict
        Estimated cycles by category (exchange, compute, reduction, cast, bias, sync).
    """

    method: VertexMethod
    fits: bool
    estimated_cycles: int | None
    estimated_bytes_per_tile: int
    split: Split | None = None
    serial: int = 1
    breakdown: dict = field(default_factory=dict, compare=False)
    #: the plan's expandDims transform ("" none), see :attr:`ConvPlan.expand_dims`
    expand_dims: str = ""

    def describe(self) -> str:
        if not self.fits:
            return (f"{self.method.label()}: does not fit (needs {fmt_bytes(self.estimated_bytes_per_tile)} "
                    f"on its busiest tile with {self.serial} serial slices)")
        s = self.split
        serial = f", {self.serial} serial slices" if self.serial > 1 else ""
        parts = ", ".join(f"{k} {v:,}" for k, v in self.breakdown.items() if v)
        exp = f" after expandDims {self.expand_dims}" if self.expand_dims else ""
        return (f"{self.method.label()}{exp}: {self.estimated_cycles:,} cycles ({parts}); "
                f"{s.groups}x{s.in_chans}x{s.batch}x{s.rows}x{s.cols}x{s.out_chans} = "
                f"{s.n_tiles} tiles{serial}, {self.estimated_bytes_per_tile:,} B/tile")




def checked_kernel_split(params: ConvParams, kernel_split: Any) -> int | None:
    """``kernel_split`` as an int (None stays None).

    Raises
    ------
    ValueError
        Unless it is None or an int in 1..kernel_h."""
    if kernel_split is None:
        return None
    if (isinstance(kernel_split, bool) or not isinstance(kernel_split, (int, np.integer))
            or not 1 <= kernel_split <= params.kernel_h):
        raise ValueError(f"kernel_split must be an int in 1..{params.kernel_h} (the kernel's "
                         f"rows) or None, got {kernel_split!r}")
    return int(kernel_split)


class NotFaster(ValueError):
    """No plan within the temporary-memory bound and without serial slices is faster than
    the ``beat`` a caller asked :func:`plan_direct` to beat."""


def plan_direct(params: ConvParams, machine: MachineSpec, *, bias: bool = False,
                method: str | None = None, kernel_split: int | None = None,
                available_memory_proportion: float | None = None,
                beat: int | None = None) -> ConvPlan:
    """The fastest plan of ``params`` without expandDims whose busiest tile fits
    ``machine``'s per-tile budget and whose temporary memory fits
    ``available_memory_proportion`` of the tile (parameters as
    :func:`ipukern.conv.compile.plan_conv`'s); when no plan meets the proportion, the
    fastest within a relaxed bound (:func:`_plan_relaxed`).

    ``beat``: the caller only wants a plan within the bound, without serial slices and of
    fewer than ``beat`` cycles (it keeps one of ``beat`` cycles otherwise): the search is
    pruned by it from its first candidate (:func:`~.search.search`), and the plan returned
    is the one found without it.

    Raises
    ------
    TileMemoryError
        If no candidate fits even with serial splits.
    NotFaster
        With ``beat``, when no plan that is wanted exists (a ValueError).
    ValueError
        If ``method`` names no valid candidate, no split suits any candidate, or
        ``kernel_split`` or ``available_memory_proportion`` is out of range.
    """
    kernel_split = checked_kernel_split(params, kernel_split)
    bound = temp_bytes_bound(machine, available_memory_proportion)
    if beat is not None:
        plan = _plan_bounded(params, machine, bias, method, bound, kernel_split, beat)
        if plan.serial > 1 or plan.estimated_cycles >= beat:
            raise NotFaster(f"no plan of {params.describe()} beats {beat} cycles")
        return plan
    try:
        return _plan_bounded(params, machine, bias, method, bound, kernel_split)
    except TileMemoryError:
        return _plan_relaxed(params, machine, bias, method, bound, kernel_split)


def _plan_relaxed(p: ConvParams, machine: MachineSpec, bias: bool, method: str | None, bound: int,
                  kernel_split: int | None) -> ConvPlan:
    """No plan meets ``bound``: as PopLibs' ``minimizeMemory`` (lib/poplin/ConvPlan.cpp,
    ``runPlanner``), plan the fastest within the bound doubled, again while it is below twice
    the tile's bytes, then without a bound. The plan says the requested bound was not met
    (``temp_bytes_bound`` 0)."""
    step = max(bound, 1)        # a bound of 0 B (a proportion below one byte) would never grow
    while step < 2 * machine.tile_bytes:
        step *= 2
        try:
            return replace(_plan_bounded(p, machine, bias, method, step, kernel_split),
                           temp_bytes_bound=0)
        except TileMemoryError:
            continue
    return _plan_bounded(p, machine, bias, method, None, kernel_split)


def _plan_bounded(p: ConvParams, machine: MachineSpec, bias: bool, method: str | None,
                  temp_bound: int | None, kernel_split: int | None,
                  beat: int | None = None) -> ConvPlan:
    """:func:`plan_direct` with temporary bytes bounded by ``temp_bound`` (None: only the
    tile budget); with ``beat``, :class:`NotFaster` when the search finds nothing faster."""
    _check_fits_chip(p, machine)
    found = search(p, machine, bias=bias, method=method, temp_bound=temp_bound,
                   kernel_split=kernel_split, beat=beat)
    if found.best is None and beat is not None:
        raise NotFaster(f"no plan of {p.describe()} beats {beat} cycles")
    if found.best is not None:
        b = found.best
        return ConvPlan(params=p, machine=machine, method=found.method, split=b.split,
                        serial=b.serial, bias=bias, estimated_cycles=b.cycles,
                        estimated_bytes_per_tile=b.nbytes, breakdown=b.breakdown,
                        n_candidates=found.n_scored, temp_bytes_bound=temp_bound or 0,
                        temp_bytes=b.temp)
    if found.smallest is None:
        # no candidate got as far as sizing a tile: every split was invalid for the methods
        tried = sorted({c.method for c in found.tried})
        hints = "; ".join(_NO_SPLIT_HINTS.get(m, m) for m in tried)
        raise ValueError(f"no valid split of {p.describe()} over {machine.name}'s "
                         f"{machine.n_tiles} tiles for {'/'.join(tried)}: {hints}")
    need, cand, serial = found.smallest
    raise TileMemoryError(
        f"no plan for {p.describe()} fits {machine.name}'s tiles, even with serial splits: the "
        f"smallest busiest-tile requirement found is {fmt_bytes(need)} "
        f"({cand.label()}, {serial} serial slices) but the budget is "
        f"{_budget(machine)}",
        tile=-1, requested=int(need), used=0, budget=machine.tile_budget_bytes)


def _budget(machine: MachineSpec) -> str:
    return (f"{fmt_bytes(machine.tile_budget_bytes)} per tile ({fmt_bytes(machine.tile_bytes)} minus "
            f"{fmt_bytes(machine.reserved_bytes_per_tile)} reserved)")


#: why a vertex method can have no valid split at all (see search._channel_axes, search._split_vectors)
_NO_SPLIT_HINTS = {
    "SLIC": "SLIC needs stride_w <= 2 and no dilation",
    "VMAC": "VMAC computes one output channel per group per tile, so it needs at least as "
            "many tiles as output channels per group",
    "AMP": "AMP needs the conv's channel grouping on the tiles",
    "HMAC": "HMAC needs the conv's channel grouping on the tiles",
}


def _check_fits_chip(p: ConvParams, machine: MachineSpec) -> None:
    """Reject at once a conv whose input, weights and output alone exceed the whole chip's
    data budget: every element lives on some tile, so no split can fit it (and searching
    splits of astronomically large layers would take long)."""
    need = sum(p.nbytes().values())
    per_tile = ceil_div(need, machine.n_tiles)
    if per_tile > machine.tile_budget_bytes:
        raise TileMemoryError(
            f"no plan for {p.describe()} fits {machine.name}'s tiles: the smallest busiest-tile "
            f"requirement found is {fmt_bytes(per_tile)} (its input, weights and output, "
            f"{fmt_bytes(need)}, spread evenly over {machine.n_tiles:,} tiles) but the budget is "
            f"{_budget(machine)}",
            tile=-1, requested=int(per_tile), used=0, budget=machine.tile_budget_bytes)




def normalize_amp(proportion: Any) -> float | None:
    """``available_memory_proportion`` as the one float the caches key on (None stays None:
    PopLibs' default), so ``1`` and ``1.0`` are one entry and a bad value never shares one.

    Raises
    ------
    ValueError
        A bool, anything but a real number, or a value outside ``0 < proportion <= 1``
        (nan included)."""
    if proportion is None:
        return None
    if isinstance(proportion, (bool, np.bool_)) or not isinstance(
            proportion, (int, float, np.integer, np.floating)):
        raise ValueError(f"available_memory_proportion must be a number in (0, 1], got "
                        f"{proportion!r}")
    value = float(proportion)
    if not 0 < value <= 1:
        raise ValueError(f"available_memory_proportion must be a number in (0, 1], got "
                         f"{proportion!r}")
    return value


def temp_bytes_bound(machine: MachineSpec, proportion: float | None) -> int:
    """The per-tile bound on a plan's temporary bytes: ``proportion`` (None: PopLibs'
    default :data:`AVAILABLE_MEMORY_PROPORTION`) of the tile's bytes, as PopLibs computes
    it (of the whole tile, not of the budget left after the reserve).

    Raises
    ------
    ValueError
        Unless ``0 < proportion <= 1`` (PopLibs' 0, "plan for the least memory", is not
        modelled)."""
    if proportion is None:
        proportion = AVAILABLE_MEMORY_PROPORTION
    return int(machine.tile_bytes * normalize_amp(proportion))




def plan_expanded(p: ConvParams, machine: MachineSpec, dims: str, *, bias: bool = False,
                  method: str | None = None, available_memory_proportion: float | None = None,
                  beat: int | None = None) -> ConvPlan:
    """The plan of ``p`` with expandDims over ``dims``: the expanded conv's own direct plan
    (without the transform) plus the transform's estimate for that split
    (:func:`~.expand.transform_estimate`). ``beat``: as :func:`plan_direct`'s, for the
    expanded conv's own plan (the caller subtracts the transform's lower bound).

    Raises
    ------
    ValueError, TileMemoryError
        As :func:`plan_direct` for the expanded conv; ValueError also when the transform's
        buffers do not fit beside the expanded conv's."""
    inner = plan_direct(expanded_params(p, dims), machine, bias=bias, method=method,
                        available_memory_proportion=available_memory_proportion, beat=beat)
    t = transform_estimate(machine, p, dims, inner.split)
    nbytes = inner.estimated_bytes_per_tile + t["bytes"]
    if nbytes > machine.tile_budget_bytes:
        raise ValueError(f"expandDims {dims} of {p.describe()}: the expanded conv and its "
                         f"transform need {fmt_bytes(nbytes)} on the busiest tile, the budget is "
                         f"{fmt_bytes(machine.tile_budget_bytes)}")
    return replace(inner, params=p, expand_dims=dims,
                   **with_transform(inner.estimated_cycles, nbytes, inner.breakdown, t))


def expanded_candidates(p: ConvParams, machine: MachineSpec, *, bias: bool = False
                        ) -> list[tuple[tuple, PlanCandidate]]:
    """Each expandDims candidate's plan (:func:`plan_expanded`) as a ``(ranking key,
    PlanCandidate)`` pair (see :func:`rank_candidates`)."""
    out = []
    for dims in expand_candidates(p):
        try:
            c = plan_expanded(p, machine, dims, bias=bias)
        except (ValueError, TileMemoryError):
            continue
        out.append(((c.serial > 1, c.estimated_cycles, c.estimated_bytes_per_tile),
                    PlanCandidate(c.method, True, c.estimated_cycles, c.estimated_bytes_per_tile,
                                  c.split, c.serial, c.breakdown, dims)))
    return out


def rank_candidates(params: ConvParams, machine: MachineSpec, *, bias: bool = False,
                    k: int = 5, expand: bool = True) -> list[PlanCandidate]:
    """Score every vertex method without cross-method pruning; the best plan of each,
    ranked as :func:`~ipukern.conv.compile.plan_conv` ranks them (no serial slices first,
    then cycles, then bytes), then the methods that fit nowhere. The first entry is
    ``plan_conv``'s plan. With ``expand``, a method's entry is its best plan with or
    without expandDims.

    Raises
    ------
    ValueError
        ``k`` < 1.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    p = params
    fit, nofit = [], []
    for cand, res in score_each_method(p, machine, bias=bias):
        if res.best is not None:
            b = res.best
            fit.append(((b.serial > 1, b.cycles, b.nbytes),
                        PlanCandidate(cand, True, b.cycles, b.nbytes, b.split, b.serial,
                                      b.breakdown)))
        elif res.smallest is not None:
            nofit.append((res.smallest[0],
                          PlanCandidate(cand, False, None, res.smallest[0], None,
                                        res.smallest[1])))
    if expand:
        best = {c.method: (key, c) for key, c in fit}
        for key, c in expanded_candidates(p, machine, bias=bias):
            if c.method not in best or key < best[c.method][0]:
                best[c.method] = (key, c)
        fit = list(best.values())
        nofit = [e for e in nofit if e[1].method not in best]
    fit.sort(key=lambda e: e[0])
    nofit.sort(key=lambda e: e[0])
    return [c for _, c in fit + nofit][:int(k)]
