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
the assembly kernels as PopLibs' estimator models them) are the module-level names below.

Fidelity policy
---------------
The estimators reproduce PopLibs' planner numbers exactly, with two exceptions where the
PopLibs arithmetic contradicts its own comments and yields rates above what the unit can do:

1. SLIC with more than 4 conv groups per group: PopLibs repeats the non-zeroing worker pass
   once per 4-group stride but runs the zeroing (first sub-kernel) pass only once. Here both
   passes repeat per stride, so SLIC 16x1 never beats the 16 MACs/cycle of the 4-chain unit.
2. HMAC with half partials: PopLibs halves the output-channel count once *per work-list
   segment* instead of once, so every segment after the first costs no dot product at all.
   Here it is halved once (the loop handles 2 output channels).

``poplibs_literal=True`` on :func:`slic_cycles`, :func:`hmac_cycles` and
:func:`conv_vertex_cycles` restores PopLibs' literal arithmetic for comparisons.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache, reduce
from types import MappingProxyType
from typing import Any, Mapping, NamedTuple

import numpy as np

from ..dtypes import DTYPES, canonical_dtype
from ..core.cost import cast_cycles, ceil_div, reduce_cycles  # shared with the built-in vertices
from ..machine import MachineSpec

__all__ = [
    "METHODS", "VertexMethod", "TileConv", "VertexCost",
    "candidate_methods", "combine_group_factors", "worker_segments", "useful_macs",
    "amp_uses_1x1", "amp_nx1_cycles", "amp_1x1_cycles", "slic_cycles", "vmac_cycles",
    "hmac_cycles", "zeroing_cycles", "cast_cycles", "reduce_cycles",
    "conv_vertex_cycles", "conv_vertex_cycles_array",
]

#: vertex methods modelled here (PopLibs' OuterProduct is not: ipukern never plans it)
METHODS = ("AMP", "SLIC", "VMAC", "HMAC")

_HALF, _FLOAT = "float16", "float32"

# --------------------------------------------------------------------------- vertex constants
# All from lib/poplin/PerformanceEstimation.hpp unless noted. "Worker" constants are in worker
# instruction cycles; a tile runs its slowest worker n_workers times over (barrel scheduling).

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

#: supervisor brnzdec loop: a 6-cycle stall on every iteration but the last
BRNZDEC_STALL_CYCLES = 6

#: zeroing partials: per-worker state set-up that retention saves, float / half partials
ZERO_RETENTION_CYCLES = {_FLOAT: 9, _HALF: 10}
#: zero-supervisor vertex: per-worker overhead ((14 or 15) minus retention savings)
ZERO_WORKER_CYCLES = 5

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

# ---- SLIC (ConvPartial1xNSLIC): getConvPartialSlic*
SLIC_WINDOW_WIDTH = 4
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

# ---- VMAC (ConvPartialVerticalMac): getConvPartialVerticalMac*; work list from ConvModel.cpp
VMAC_SUPERVISOR_CYCLES = 61
VMAC_CORE_INIT_CYCLES = 14
#: PopLibs writes ``25 + floatPartials ? 1 : 0``, which C++ parses as ``(25 + fp) ? 1 : 0``
#: and so always evaluates to 1. We keep PopLibs' value (the intent was 25 + fp).
VMAC_RETENTION_INIT_CYCLES = 1
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



# --------------------------------------------------------------------------- data types
def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


@dataclass(frozen=True)
class VertexMethod:
    """A vertex type: method plus channel grouping (PopLibs ``ConvVertexType``).

    Parameters
    ----------
    method : {"AMP", "SLIC", "VMAC", "HMAC"}
    in_dtype, partials_dtype : str
        Input and accumulation dtypes (any spelling :func:`~ipukern.dtypes.canonical_dtype`
        accepts).
    conv_groups_per_group, in_chans_per_group, out_chans_per_group : int
        The innermost layout blocks (cgpg, icpg, pcpg). One vertex pass handles whole blocks;
        tile sizes are padded up to them.
    conv_units : int
        AMP only: conv units used (outputs per AMP pass). 0 for other methods.
    slic_chains : int
        SLIC only: conv-unit chains (2 or 4). 0 for other methods.
    combine_groups : int
        combineConvGroups factor F: G groups of Ci channels become ceil(G/F) groups of F*Ci
        with block-diagonal weights. Executed MACs grow by F; useful MACs do not.
    """

    method: str
    in_dtype: str
    partials_dtype: str
    conv_groups_per_group: int
    in_chans_per_group: int
    out_chans_per_group: int
    conv_units: int = 0
    slic_chains: int = 0
    combine_groups: int = 1

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        object.__setattr__(self, "in_dtype", canonical_dtype(self.in_dtype))
        object.__setattr__(self, "partials_dtype", canonical_dtype(self.partials_dtype))
        if self.in_dtype == _FLOAT and self.partials_dtype == _HALF:
            raise ValueError("float32 inputs accumulate in float32; half partials are invalid")
        cgpg = _positive_int("conv_groups_per_group", self.conv_groups_per_group)
        icpg = _positive_int("in_chans_per_group", self.in_chans_per_group)
        pcpg = _positive_int("out_chans_per_group", self.out_chans_per_group)
        _positive_int("combine_groups", self.combine_groups)
        half_in = self.in_dtype == _HALF
        half_partials = self.partials_dtype == _HALF
        if self.method != "AMP" and self.conv_units:
            raise ValueError("conv_units applies to AMP only")
        if self.method != "SLIC" and self.slic_chains:
            raise ValueError("slic_chains applies to SLIC only")
        if self.method == "AMP":
            units = _positive_int("conv_units", self.conv_units)
            if cgpg != 1:
                raise ValueError("AMP supports conv_groups_per_group = 1 only")
            if pcpg % units:
                raise ValueError(f"AMP out_chans_per_group ({pcpg}) must be a multiple of "
                                 f"conv_units ({units})")
        elif self.method == "SLIC":
            if not half_in:
                raise ValueError("SLIC needs float16 inputs")
            if self.slic_chains not in (2, 4):
                raise ValueError(f"slic_chains must be 2 or 4, got {self.slic_chains!r}")
            if icpg != pcpg or (cgpg, icpg) not in ((1, 4), (2, 2), (4, 1), (8, 1), (16, 1)):
                raise ValueError(f"SLIC grouping (cgpg, chans) must be (1,4), (2,2), (4,1), "
                                 f"(8,1) or (16,1) with equal in/out chans, got "
                                 f"({cgpg}, {icpg}, {pcpg})")
            if cgpg > 4 and not half_partials:
                raise ValueError("SLIC with conv_groups_per_group > 4 needs half partials")
        elif self.method == "VMAC":
            if not half_in:
                raise ValueError("VMAC needs float16 inputs")
            if icpg != 1 or pcpg != 1:
                raise ValueError("VMAC uses in_chans_per_group = out_chans_per_group = 1")
            if cgpg not in (4, 8, 16) or (cgpg > 4 and not half_partials):
                raise ValueError("VMAC conv_groups_per_group is 4, or 8/16 with half partials, "
                                 f"got {cgpg}")
        else:  # HMAC
            if cgpg != 1:
                raise ValueError("HMAC supports conv_groups_per_group = 1 only")
            if pcpg != (2 if half_partials else 1):
                raise ValueError("HMAC out_chans_per_group is 1 (float partials) or 2 (half "
                                 f"partials), got {pcpg}")

    @property
    def amp_weight_height(self) -> int:
        """Kernel rows one AMP weight load covers: weights per conv unit / icpg (1, 2 or 4)."""
        if self.method != "AMP":
            raise ValueError("amp_weight_height applies to AMP only")
        return MachineSpec.amp_in_chans(self.in_dtype) // self.in_chans_per_group

    def label(self) -> str:
        """Short name, e.g. ``AMP 16u 16x16 half->half``, ``SLIC 16x1 4ch half->half``,
        ``AMP 8u 16x8 half->float F4`` (icpg x pcpg, conv units, combine factor)."""
        if self.method == "AMP":
            s = f"AMP {self.conv_units}u {self.in_chans_per_group}x{self.out_chans_per_group}"
        elif self.method == "SLIC":
            s = (f"SLIC {self.conv_groups_per_group}x{self.in_chans_per_group} "
                 f"{self.slic_chains}ch")
        elif self.method == "VMAC":
            s = f"VMAC {self.conv_groups_per_group}g"
        else:
            s = f"HMAC {self.in_chans_per_group}x{self.out_chans_per_group}"
        s += f" {_short(self.in_dtype)}->{_short(self.partials_dtype)}"
        return s + (f" F{self.combine_groups}" if self.combine_groups > 1 else "")

    def macs_per_cycle_bound(self, machine: MachineSpec) -> float:
        """Upper bound on *useful* MACs per tile cycle of this vertex (§3.9 limits).

        It bounds the default estimators for any tile, so the planner may prune a candidate
        whose ``useful_macs / bound`` already exceeds the best plan's cycles. Executed MACs
        are divided by the combine factor (block-diagonal zeros are not useful).

        AMP: conv_units x weights per unit / core cycles per position (Mk2: 64 half->half,
        32 half->float, 16 float). SLIC: min(cgpg, 4) x chans^2 x window / input passes.
        VMAC: 2 (cgpg 4) or 8/3 (cgpg 8, 16). HMAC: vector width (x2 for half->half, which
        accumulates 2 output channels per loop). PopLibs' own pruning bound
        (getMaxMACsPerCyclePerTile) is looser for AMP float and too tight for 4-chain SLIC.

        Parameters
        ----------
        machine : MachineSpec

        Returns
        -------
        float
            MACs per tile cycle.
        """
        if self.method == "AMP":
            rate = (self.conv_units * machine.amp_in_chans(self.in_dtype)
                    / machine.amp_cycles_per_position(self.in_dtype))
        elif self.method == "SLIC":
            passes = 1 if self.slic_chains == 4 else 2
            rate = (min(self.conv_groups_per_group, 4) * self.in_chans_per_group ** 2
                    * SLIC_WINDOW_WIDTH / passes)
        elif self.method == "VMAC":
            rate = 2.0 if self.conv_groups_per_group == 4 else 8.0 / 3.0
        else:
            hh = self.in_dtype == _HALF and self.partials_dtype == _HALF
            rate = machine.vector_elems(self.in_dtype) * (2 if hh else 1)
        return rate / self.combine_groups


@dataclass(frozen=True)
class TileConv:
    """One tile's share of a grouped 2-D convolution, in the conv's own (untransformed) units.

    Parameters
    ----------
    conv_groups : int
        Conv groups on the tile (G_t). With ``combine_groups = F`` the vertex sees
        ceil(G_t / F) groups of F times the channels.
    in_chans, out_chans : int
        Input / output channels per group on the tile (Ci_t, Co_t), before padding to the
        method's grouping.
    batch, out_h, out_w : int
        Batch images and output rows / columns (after stride) computed on the tile.
    kernel_h, kernel_w : int
        Kernel taps on the tile (a kernel split gives each tile a slice).
    stride : tuple of int
        Conv stride (h, w). The AMP 1x1 and HMAC 1x1 vertices need (1, 1); SLIC needs
        stride_w <= 2 (its stride-2 row loop costs 2 cycles per output position).
    """

    conv_groups: int
    in_chans: int
    out_chans: int
    batch: int = 1
    out_h: int = 1
    out_w: int = 1
    kernel_h: int = 1
    kernel_w: int = 1
    stride: tuple[int, int] = (1, 1)

    def __post_init__(self) -> None:
        for name in ("conv_groups", "in_chans", "out_chans", "batch", "out_h", "out_w",
                     "kernel_h", "kernel_w"):
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        s = self.stride
        if not (isinstance(s, tuple) and len(s) == 2):
            raise ValueError(f"stride must be a (h, w) tuple, got {s!r}")
        object.__setattr__(self, "stride", (_positive_int("stride_h", s[0]),
                                            _positive_int("stride_w", s[1])))

    @property
    def n_positions(self) -> int:
        """Output positions per channel on the tile: batch x out_h x out_w."""
        return self.batch * self.out_h * self.out_w


@dataclass(frozen=True)
class VertexCost:
    """Cycles of one tile's conv vertex (plus the zeroing vertex it needs).

    Attributes
    ----------
    cycles : int
        Total tile cycles.
    breakdown : Mapping[str, int]
        ``weight_load``, ``workers``, ``zeroing``, ``reduction`` (VMAC's cross-worker sum)
        and ``supervisor`` (everything else); the values sum to ``cycles``.
    why : str
        One line for profiles, e.g. "AMP nx1 16 units: 9 kernel positions x ...".
    vertex : str
        The vertex PopLibs would instantiate: "AMP nx1", "AMP 1x1", "SLIC", "VMAC", "HMAC".
    """

    cycles: int
    breakdown: Mapping[str, int] = field(default_factory=dict)
    why: str = ""
    vertex: str = ""


def _short(dtype: str) -> str:
    return "half" if dtype == _HALF else "float"


# --------------------------------------------------------------------------- scalar/array shim
# Each formula is written once and evaluated either on Python ints (one tile, exact and fast)
# or on int64 NumPy arrays (many candidate tiles at once). These helpers pick the backend.
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
    total = n_rows * width
    pieces = []
    for i in range(n_workers):
        begin = i * total // n_workers
        end = (i + 1) * total // n_workers
        busy = end > begin
        end_m1 = _max2(end - 1, 0)
        row_b, row_l = begin // width, end_m1 // width
        one = row_b == row_l
        first = _where(busy, _where(one, end - begin, width - begin % width), 0)
        n_full = _where(busy, _max2(row_l - row_b - 1, 0), 0)
        last = _where(busy, _where(one, 0, end_m1 % width + 1), 0)
        pieces.append((first, n_full, last))
    return pieces


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
    scalar tiles, whose workers mostly share one of two or three patterns."""
    if isinstance(n_rows, int) and isinstance(width, int):
        return _distinct_pieces_int(n_rows, width, n_workers)
    return _worker_pieces(n_rows, width, n_workers)


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


def _amp_weight_load_cycles(machine: MachineSpec, method: VertexMethod, height: int) -> int:
    """Supervisor cycles to load one set of AMP weights: units x bytes per unit / rate.

    The rate is the target's coefficient load rate, halved for 64-bit loads (PopLibs'
    default) and halved again for weight height 4, whose data shuffle cannot use ld128
    (getConvPartialAmpSupervisorWeightLoadCycleEstimate).
    """
    unit_bytes = machine.amp_in_chans(method.in_dtype) * DTYPES[method.in_dtype].itemsize
    rate = machine.coeff_load_bytes_per_cycle
    if not AMP_128BIT_WEIGHT_LOAD:
        rate //= 2
    if height == 4 and rate > machine.vector_width_bits // 8:
        rate //= 2
    return method.conv_units * unit_bytes // rate


def _zero_cycles(machine: MachineSpec, n_elems_per_group: Any, n_groups: Any,
                 dtype: str) -> Any:
    per_worker = ceil_div(n_elems_per_group, machine.n_workers)
    vectors = ceil_div(per_worker, machine.vector_elems(dtype))
    return (vectors + ZERO_WORKER_CYCLES) * machine.n_workers * n_groups


def _int(x: Any) -> Any:
    return int(x) if isinstance(x, (np.integer, np.bool_)) else x


# --------------------------------------------------------------------------- AMP
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
    width = d.out_w
    workers = [start + _sum_over_segments(entry, p, width)
               for p in _distinct_pieces(d.batch * d.out_h, width, nw)]
    per_pass = _max2(nw * reduce(_max2, workers),
                     nw * reduce(_min2, workers) + NX1_MIN_WORKER_TAG_CYCLES)

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

    # one entry per worker: the tile is a single row of positions
    pieces = _distinct_pieces(1, d.batch * d.out_h * d.out_w, nw)

    def inner(zeroing: bool) -> Any:
        ws = [worker(p[0], zeroing) for p in pieces]
        return _max2(nw * reduce(_max2, ws), nw * reduce(_min2, ws) + X1_MIN_WORKER_TAG_CYCLES)

    inner_zero, inner_acc = inner(True), inner(False)
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


def _check_kind(method: VertexMethod, *kinds: str) -> None:
    if method.method not in kinds:
        raise ValueError(f"expected a {'/'.join(kinds)} method, got {method.method}")


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


def _total(parts: Mapping[str, Any]) -> Any:
    return _int(sum(v for k, v in parts.items() if not k.startswith("_")))


# --------------------------------------------------------------------------- SLIC
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
    pieces = _distinct_pieces(d.batch * d.out_h, d.out_w, nw)

    def inner(zeroing: bool) -> Any:
        cost = segment(zeroing)
        ws = [preamble + _sum_over_segments(cost, p, d.out_w)
              + (SLIC_MERGE_DECISION_CYCLES if half8 else 0) for p in pieces]
        merge = (SLIC_MERGE_FIXED_CYCLES
                 + SLIC_MERGE_CYCLES_PER_POSITION * d.batch * d.out_h * d.out_w
                 if (half8 and zeroing) else 0)
        return nw * reduce(_max2, ws) + merge

    if chans == 4:
        wl = SLIC_WEIGHT_LOAD_4CHANS
    else:
        per_worker = SLIC_WEIGHT_LOAD_WORKER[2 if cgpg == 2 else 4] + (1 if cgpg > 4 else 0)
        wl = SLIC_WEIGHT_LOAD_FIXED + nw * per_worker

    def brnzdec(n: Any) -> Any:
        return BRNZDEC_STALL_CYCLES * (n - 1) + 1

    n_cgg = ceil_div(d.groups, cgpg)
    n_sub = ceil_div(d.kernel_w, SLIC_WINDOW_WIDTH) * d.kernel_h
    inner_zero, inner_acc = inner(True), inner(False)
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
    total = (SLIC_SUPERVISOR_PREAMBLE[half8] + cgg_body * n_cgg + brnzdec(n_cgg)
             + sub_body * n_sub + brnzdec(n_sub) + work)
    # as in PopLibs, the sub-kernel loop (with its weight loads) is charged once, not per
    # conv-group group
    weight_load = n_sub * strides * wl
    return {"weight_load": weight_load, "workers": work, "zeroing": 0,
            "supervisor": total - weight_load - work, "_groups": (n_cgg, 1, 1),
            "_kernel": n_sub, "_passes": passes}


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
        Reproduce PopLibs exactly: with cgpg > 4 the zeroing pass is not repeated per
        4-group stride (see the module docstring).

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


# --------------------------------------------------------------------------- VMAC
def _notional_worker(n_rows: Any, n_workers: int) -> tuple[Any, Any, Any]:
    """PopLibs' VMAC/HMAC planner work list for the busiest worker: rows are cut into
    ``n_workers / gcd(n_workers, rows)`` parts so they share out evenly; the busiest worker
    gets ``whole`` full rows and ``part`` part-rows (ConvModel / PerformanceEstimation)."""
    split = n_workers // _gcd(n_workers, n_rows)
    max_part_rows = ceil_div(n_rows * split, n_workers)
    return split, max_part_rows // split, max_part_rows % split


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
    total = (VMAC_SUPERVISOR_CYCLES + VMAC_CORE_INIT_CYCLES + VMAC_RETENTION_INIT_CYCLES
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


# --------------------------------------------------------------------------- HMAC
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


# --------------------------------------------------------------------------- candidates
def combine_group_factors(machine: MachineSpec, in_dtype: str, in_per_group: int,
                          n_groups: int) -> list[int]:
    """combineConvGroups factors F > 1 worth trying (§2.2 item 7, ConvPlan.cpp).

    Only for several groups of 1 input channel (float) or 1-2 (half): powers of two from
    (AMP input elements per load) / Ci up to (weights per conv unit) / Ci, e.g. half Ci=1:
    [4, 8, 16]; half Ci=2: [2, 4, 8]; float Ci=1: [2, 4, 8].

    Parameters
    ----------
    machine : MachineSpec
    in_dtype : str
    in_per_group : int
        Input channels per group of the conv.
    n_groups : int
        Conv groups.

    Returns
    -------
    list of int
        Factors F > 1 (empty when the transform does not apply).
    """
    dt = canonical_dtype(in_dtype)
    ci = _positive_int("in_per_group", in_per_group)
    g = _positive_int("n_groups", n_groups)
    small = ci == 1 or (dt == _HALF and ci == 2)
    if g < 2 or not small:
        return []
    f = max(1, machine.vector_elems(dt) // ci)
    top = machine.amp_in_chans(dt) // ci
    out = []
    while f <= top:
        out.append(f)
        f *= 2
    return out


def _amp_candidates(machine: MachineSpec, in_dtype: str, partials_dtype: str,
                    combine: int) -> list[VertexMethod]:
    pt = partials_dtype
    on_chip = machine.amp_units(in_dtype, pt)
    if on_chip == 0 and pt == _HALF:
        # no half-partials AMP mode: PopLibs falls back to float partials
        pt = _FLOAT
        on_chip = machine.amp_units(in_dtype, pt)
    if on_chip == 0:
        return []
    wpu = machine.amp_in_chans(in_dtype)
    vw = machine.vector_elems(in_dtype)
    unit_modes = [on_chip] + ([8] if on_chip > 8 else [])
    pcpg_modes = sorted({on_chip, wpu} | ({8} if on_chip > 8 else set()), reverse=True)
    out = []
    for units in unit_modes:
        used_weights = wpu * units // on_chip
        for icpg in range(wpu, 0, -1):
            if wpu % icpg or icpg % vw:
                continue
            for pcpg in pcpg_modes:
                if pcpg not in (units, used_weights) or pcpg % units:
                    continue
                out.append(VertexMethod("AMP", in_dtype, pt, 1, icpg, pcpg,
                                        conv_units=units, combine_groups=combine))
    return out


def candidate_methods(machine: MachineSpec, in_dtype: str, partials_dtype: str,
                      in_per_group: int, out_per_group: int, kernel_w: int, stride_w: int,
                      *, n_groups: int = 1) -> list[VertexMethod]:
    """All vertex candidates for a conv, best first (§2.3, ConvVertexType.cpp).

    - AMP: icpg dividing the weights per conv unit in whole 64-bit loads ({16, 8, 4} half,
      {8, 4, 2} float); pcpg = conv units or weights per unit; on a 16-unit AMP also the
      8-unit mode with pcpg 8.
    - SLIC (half inputs, stride_w <= 2): (cgpg, chans) (1,4), (2,2), (4,1), plus (8,1),
      (16,1) with half partials on a 16-unit half->half AMP; 4 chains with half partials on
      such an AMP, 2 chains always.
    - HMAC: icpg from the grain (2 half, 1 float) up to Ci, skipping sizes that do not
      reduce the number of in-groups; pcpg 1 (float partials) or 2 (half).
    - VMAC (half inputs): cgpg 4, plus 8 and 16 with half partials.
    - AMP on combined groups (``combine_groups`` F > 1, see :func:`combine_group_factors`)
      when ``n_groups`` > 1 and Ci is 1 (or 2 for half).

    Candidates are sorted like PopLibs: by useful-MAC bound times (1 - channel padding
    ratio), then less padding, then smaller partials.

    Parameters
    ----------
    machine : MachineSpec
    in_dtype, partials_dtype : str
        Conv input and requested partials types. AMP and SLIC fall back to float partials
        on a machine without a half-partials AMP mode, as PopLibs does.
    in_per_group, out_per_group : int
        Channels per group of the conv.
    kernel_w : int
        Kernel width. It restricts no method (SLIC pads it to a multiple of 4); it is
        validated and kept in the signature for the planner's convenience.
    stride_w : int
        Stride along the width (SLIC needs <= 2).
    n_groups : int
        Conv groups, for the combineConvGroups candidates.

    Returns
    -------
    list of VertexMethod
        Most promising first. Candidates may still be invalid for a particular tile split
        (SLIC: one channel group per tile; VMAC: one output channel per tile).
    """
    dt, pt = canonical_dtype(in_dtype), canonical_dtype(partials_dtype)
    if dt == _FLOAT and pt == _HALF:
        raise ValueError("float32 inputs accumulate in float32; half partials are invalid")
    ci = _positive_int("in_per_group", in_per_group)
    co = _positive_int("out_per_group", out_per_group)
    _positive_int("kernel_w", kernel_w)
    sw = _positive_int("stride_w", stride_w)
    _positive_int("n_groups", n_groups)
    half_in = dt == _HALF
    found: list[VertexMethod] = list(_amp_candidates(machine, dt, pt, 1))
    if half_in and sw <= 2:
        slic_pt = pt if machine.amp_units(_HALF, pt) else _FLOAT
        hh16 = machine.amp_units(_HALF, _HALF) >= 16
        chains = [2] if slic_pt == _FLOAT else ([4] if hh16 else []) + [2]
        groupings = [(1, 4), (2, 2), (4, 1)] + ([(8, 1), (16, 1)]
                                                if slic_pt == _HALF and hh16 else [])
        for ch in chains:
            for cg, c in groupings:
                found.append(VertexMethod("SLIC", dt, slic_pt, cg, c, c, slic_chains=ch))
    grain = 2 if half_in else 1
    rounded = ceil_div(ci, grain) * grain
    previous = 0
    for icpg in range(grain, rounded + 1, grain):
        n_in = ceil_div(rounded, icpg)
        if n_in == previous:
            continue
        previous = n_in
        found.append(VertexMethod("HMAC", dt, pt, 1, icpg, 2 if pt == _HALF else 1))
    if half_in:
        for cg in [machine.vector_elems(dt)] + ([8, 16] if pt == _HALF else []):
            found.append(VertexMethod("VMAC", dt, pt, cg, 1, 1))
    for f in combine_group_factors(machine, dt, ci, n_groups):
        found.extend(_amp_candidates(machine, dt, pt, f))

    unique = list(dict.fromkeys(found))

    def rank(m: VertexMethod) -> tuple[float, float, int]:
        cin, cout = ci * m.combine_groups, co * m.combine_groups
        padded = (ceil_div(cin, m.in_chans_per_group) * m.in_chans_per_group
                  * ceil_div(cout, m.out_chans_per_group) * m.out_chans_per_group)
        padding = (padded - cin * cout) / padded
        return (-m.macs_per_cycle_bound(machine) * (1 - padding), padding,
                DTYPES[m.partials_dtype].itemsize)

    return sorted(unique, key=rank)


# --------------------------------------------------------------------------- entry points
def useful_macs(tile: TileConv) -> int:
    """Useful multiply-accumulates of a tile: G x Ci x Co x batch x out_h x out_w x kh x kw.

    Parameters
    ----------
    tile : TileConv

    Returns
    -------
    int
        MACs, without channel-grouping padding or combineConvGroups zeros.
    """
    return (tile.conv_groups * tile.in_chans * tile.out_chans * tile.n_positions
            * tile.kernel_h * tile.kernel_w)


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
