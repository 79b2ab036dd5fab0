"""Vertex types and tile records: the bottom of :mod:`ipukern.conv.estimators`.

:class:`VertexMethod` (a PopLibs ``ConvVertexType``), :class:`TileConv` (one tile's share
of a conv), :class:`VertexCost` (an estimator's answer) and :func:`useful_macs`. Every
other estimator module imports from here; this module imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ...dtypes import canonical_dtype
from ...machine import MachineSpec

__all__ = ["METHODS", "VertexMethod", "TileConv", "VertexCost", "useful_macs",
           "SLIC_WINDOW_WIDTH"]

#: vertex methods modelled here (PopLibs' OuterProduct is not: ipukern never plans it)
METHODS = ("AMP", "SLIC", "VMAC", "HMAC")

_HALF, _FLOAT = "float16", "float32"

#: SLIC's sliding window: 4 kernel taps per sub-kernel (ConvPartial1xNSLIC); the peak-rate
#: bound below needs it, so it lives at the bottom of the package
SLIC_WINDOW_WIDTH = 4


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
