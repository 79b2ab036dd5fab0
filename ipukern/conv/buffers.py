"""The per-tile buffers of a planned conv on a device: offsets and slice sizes.

Buffers per tile (one allocation each, offsets in the tile):
``window [B][WR][G*C][WC]``, ``weights [G][K_j][C][kh][kw]`` (one slice), a weight store
when serial (the slices this tile owns), partials ``[2][B][G][K_j][OR][OC]`` (double
buffered when serial), outputs (every slice, or every slice's chunk when reduced), a
receive buffer for partial chunks (shared by the reduction stages), one buffer per
intermediate stage's sums, and the bias ``[G][K]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import Device
from ..dtypes import DTYPES
from .layout import TileGeometry
from .planner import ConvPlan
from .reduce import reduce_stages, stage_range

__all__ = ["ConvBuffers", "allocate_buffers"]


@dataclass(frozen=True, eq=False)
class ConvBuffers:
    """A planned conv laid out on a device: every per-tile buffer offset and slice size.

    Arrays indexed ``[t]`` cover the T tiles the plan uses, ``[t, j]`` also the serial
    slice j. Offsets are arrays over every
    machine tile (unused tiles hold 0 bytes). Buffers a plan does not need are ``None``:
    the weight store without serial slices, partials when the conv vertex writes the output
    type, the receive buffer without an input-channel split, the bias without one.
    """

    plan: ConvPlan
    geo: TileGeometry
    isz: int                    # input / output element bytes
    psz: int                    # partials element bytes
    M: int                      # tiles sharing one weight block (batch x rows x cols split)
    Os: int                     # out-chan split: tiles sharing one input window
    reduce_needed: bool         # R > 1: partials are reduce-scattered
    cast_needed: bool           # no reduction but partials differ from the output type
    ks: np.ndarray              # [t, j] first out-chan of slice j on tile t (S + 1 columns)
    Kj: np.ndarray              # [t, j] out-chans of slice j
    out_j: np.ndarray           # [t, j] outputs of slice j
    wj_elems: np.ndarray        # [t, j] weight elements of slice j
    stages: tuple               # partials summed per output at each reduction stage
    chunk_stride: np.ndarray    # [t] largest final chunk of a slice (output stride)
    stage_stride: list          # [s][t] largest range held after stage s (slot stride)
    group_leader: np.ndarray    # [t] first tile of t's weight-sharing group
    win_off: np.ndarray
    w_off: np.ndarray
    out_off: np.ndarray
    store_off: np.ndarray | None = None
    part_off: np.ndarray | None = None
    part_stride: np.ndarray | None = None
    out_starts: np.ndarray | None = None   # [t, j] (not reduced) slice j's first output
    recv_off: np.ndarray | None = None
    mid_off: list | None = None                # [s - 1][t] stage s's sums (0 < s < n)
    bias_off: np.ndarray | None = None

    @property
    def S(self) -> int:
        return self.plan.serial

    @property
    def R(self) -> int:
        return self.plan.split.reduction

    @property
    def need_partials(self) -> bool:
        return self.reduce_needed or self.cast_needed

    @property
    def conv_out_dtype(self) -> str:
        p = self.plan.params
        return p.partials if self.need_partials else p.dtype

    def part_buf(self, j: int, t: np.ndarray) -> np.ndarray:
        """Partials buffer of slice j on tiles t (double-buffered when serial)."""
        buf = (j % 2) if self.S > 1 else 0
        return self.part_off[t] + buf * self.part_stride[t] * self.psz

    def stage_range(self, j: int, t: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
        """Outputs [lo, hi) of slice j's block that tiles t hold after reduction stage s."""
        return stage_range(self.out_j[t, j], self.geo.ii[t], self.stages, s)

    def stage_buf(self, j: int, t: np.ndarray, s: int) -> np.ndarray:
        """Where tiles t hold slice j's sums after stage s (0: the conv partials); the
        buffer's first element is the tile's range start."""
        if s == 0:
            return self.part_buf(j, t)
        if s == len(self.stages):
            return self.out_off[t] + j * self.chunk_stride[t] * self.isz
        return self.mid_off[s - 1][t]


def _slices(plan: ConvPlan, geo: TileGeometry) -> dict[str, np.ndarray]:
    """Serial slices of each tile's out-chans (ks[t, j] .. ks[t, j + 1]) and reduction chunks."""
    p = plan.params
    S, R, og = plan.serial, plan.split.reduction, plan.split.out_grain
    n_grains = -(-geo.K // og)
    ks = np.minimum((np.arange(S + 1)[None, :] * n_grains[:, None]) // S * og, geo.K[:, None])
    Kj = np.diff(ks, axis=1)
    out_j = (geo.B * geo.G)[:, None] * Kj * (geo.OR * geo.OC)[:, None]
    wj_elems = geo.G[:, None] * Kj * (geo.C * geo.KH * p.kernel_w)[:, None]
    stages = reduce_stages(R) if R > 1 else ()
    # the range each tile holds after each stage, largest over the slices
    stage_stride = [np.zeros(geo.n_tiles, np.int64)]
    for s_ in range(1, len(stages) + 1):
        lo, hi = stage_range(out_j, geo.ii[:, None], stages, s_)
        stage_stride.append((hi - lo).max(axis=1) if geo.n_tiles else np.zeros(0, np.int64))
    chunk_stride = stage_stride[-1] if stages else np.zeros(geo.n_tiles, np.int64)
    return dict(ks=ks, Kj=Kj, out_j=out_j, wj_elems=wj_elems, stages=stages,
                chunk_stride=chunk_stride, stage_stride=stage_stride)


def allocate_buffers(dev: Device, plan: ConvPlan, geo: TileGeometry) -> ConvBuffers:
    """Allocate every conv buffer on ``dev`` (one allocation each, see the module docstring)."""
    p = plan.params
    s = plan.split
    T, S, R = geo.n_tiles, plan.serial, s.reduction
    isz, psz = DTYPES[p.dtype].itemsize, DTYPES[p.partials].itemsize
    sl = _slices(plan, geo)
    reduce_needed = R > 1
    cast_needed = (not reduce_needed) and plan.conv_output_dtype != p.dtype

    def alloc(name: str, nbytes: np.ndarray, category: str) -> np.ndarray:
        full = np.zeros(dev.machine.n_tiles, dtype=np.int64)
        full[:T] = nbytes
        return dev.alloc(name, full, category)

    M = s.batch * s.rows * s.cols
    group_leader = np.arange(T) - (((geo.bi * s.rows + geo.hi) * s.cols + geo.wi) * s.out_chans)
    w_max = sl["wj_elems"].max(axis=1) * isz
    extra: dict[str, Any] = {}
    win_off = alloc("conv.window", geo.window_elems() * isz, "inputs")
    w_off = alloc("conv.weights", w_max, "weights")
    if S > 1:
        member = (np.arange(T) - group_leader) // s.out_chans  # (b,h,w) index within its group
        n_store = np.array([len(range(mm, S, M)) for mm in range(M)], dtype=np.int64)[member]
        extra["store_off"] = alloc("conv.weight_store", n_store * w_max, "weights")
    if reduce_needed or cast_needed:
        extra["part_stride"] = sl["out_j"].max(axis=1)
        n_bufs = 2 if S > 1 else 1
        extra["part_off"] = alloc("conv.partials", n_bufs * extra["part_stride"] * psz, "partials")
    if reduce_needed:
        out_bytes = S * sl["chunk_stride"] * isz
    else:
        extra["out_starts"] = np.concatenate([np.zeros((T, 1), np.int64),
                                              np.cumsum(sl["out_j"], axis=1)], axis=1)
        out_bytes = extra["out_starts"][:, -1] * isz
    out_off = alloc("conv.output", out_bytes, "outputs")
    if reduce_needed:
        st, stride = sl["stages"], sl["stage_stride"]
        recv = np.max([(f - 1) * stride[s_] for s_, f in enumerate(st, start=1)], axis=0)
        extra["recv_off"] = alloc("conv.partials_in", recv * psz, "exchange")
        extra["mid_off"] = [alloc(f"conv.reduce_stage{s_}", stride[s_] * psz, "partials")
                            for s_ in range(1, len(st))]
    if plan.bias:
        extra["bias_off"] = alloc("conv.bias", geo.G * geo.K * isz, "weights")
    return ConvBuffers(plan=plan, geo=geo, isz=isz, psz=psz, M=M, Os=s.out_chans,
                        reduce_needed=reduce_needed, cast_needed=cast_needed,
                        group_leader=group_leader, win_off=win_off, w_off=w_off,
                        out_off=out_off, **sl, **extra)
