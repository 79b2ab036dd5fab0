"""Where a conv's weights live between layers (their *home*) and how they reach the tiles.

A conv plan splits the batch x rows x cols of the output over ``M`` tiles that share one
weight block (a *group*: same conv groups, input and output channels). Every member needs
the whole block in its working buffer while the conv runs; between layers the block has
one home copy. PopLibs maps that copy by use (``mapWeights`` -> ``TensorUseTracker::
mapTensorsByUse`` in lib/poplin/Convolution.cpp): each weight element goes to one of the
tiles that read it, the elements spread evenly over those tiles in grains of at least
256 bytes (``minBytesPerTile`` for weights). Homing a whole block on the group's first
tile instead would put every layer's weights on the same few low-numbered tiles (each
plan numbers its tiles from 0), so a 53-layer network piles its parameters there.

Here the block of slice 0 (no serial split) is cut into *pieces* of whole output-channel
rows (``C x kh x kw`` elements, the working buffer's runs), at least
:data:`MIN_HOME_BYTES` each, spread evenly over up to ``M`` members. Each member holds
its piece at the piece's place in its own working buffer, so the first exchange of the
conv broadcasts every piece to the other members (a broadcast is sent once). With a
serial split the store already spreads the slices over the members (slice j on member
j mod M) and is unchanged.

Not modelled: PopLibs' weight tile order (without conv dithering ``calculateActivations
OrWeightsUsage`` numbers the weights' tiles in descending order over the plan's tiles)
only permutes tiles inside the plan's range.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import expand
from ..core import CopyTable

__all__ = ["MIN_HOME_BYTES", "home_pieces", "kernel_block_runs", "spread_weight_copies",
           "spread_weight_runs"]

#: PopLibs mapActivationsOrWeights: ``minBytesPerTile = isActs ? 128 : 256`` (weights)
MIN_HOME_BYTES = 256


def home_pieces(buf: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per tile of the plan: ``(n_runs, run_bytes, pieces)`` of slice 0's weight block.

    The block holds ``n_runs`` output-channel rows of ``run_bytes``; it is cut into
    ``pieces`` near-equal pieces of whole rows (piece m = rows ``[m n / P, (m + 1) n / P)``),
    homed on members ``0 .. pieces - 1`` of the group. Equal for all members of a group.
    """
    geo = buf.geo
    p = buf.plan.params
    n_runs = geo.G * buf.Kj[:, 0]
    run_bytes = geo.C * (geo.KH * p.kernel_w) * buf.isz
    min_runs = np.maximum(1, -(-MIN_HOME_BYTES // np.maximum(run_bytes, 1)))
    pieces = np.minimum(buf.M, -(-n_runs // min_runs))
    return n_runs, run_bytes, pieces


def spread_weight_copies(buf: Any) -> CopyTable:
    """The broadcast of slice 0's pieces: every member receives every piece homed on
    another member, into the same place of its working buffer."""
    n_runs, run_bytes, pieces = home_pieces(buf)
    t, m = expand(pieces)
    src = buf.group_leader[t] + m * buf.Os
    a = (m * n_runs[t] // pieces[t]) * run_bytes[t]
    b = ((m + 1) * n_runs[t] // pieces[t]) * run_bytes[t]
    keep = (src != t) & (b > a)
    t, src, a, b = t[keep], src[keep], a[keep], b[keep]
    return CopyTable(src, buf.w_off[src] + a, t, buf.w_off[t] + a, b - a)


def spread_weight_runs(buf: Any) -> tuple[np.ndarray, ...]:
    """Slice 0's home intervals of the weight tensor (C_out, C/groups, kh, kw):
    ``(tile, start, count, byte_offset)``, one per run of consecutive rows that is
    contiguous in both the tensor and the home tile's buffer."""
    geo = buf.geo
    p = buf.plan.params
    kk = p.kernel_h * p.kernel_w
    n_runs, run_bytes, pieces = home_pieces(buf)
    leaders = np.flatnonzero((buf.group_leader == np.arange(geo.n_tiles)) & (n_runs > 0))
    li, r = expand(n_runs[leaders])
    L = leaders[li]
    K_ = buf.Kj[L, 0]
    g, k = np.divmod(r, K_)
    member = ((r + 1) * pieces[L] - 1) // n_runs[L]
    tile = L + member * buf.Os
    co = (geo.g0[L] + g) * p.out_per_group + geo.k0[L] + buf.ks[L, 0] + k
    start = (co * p.in_per_group + geo.c0[L]) * kk
    count = geo.C[L] * kk
    off = buf.w_off[tile] + r * run_bytes[L]
    return _merge_runs(*kernel_block_runs(geo, L, tile, start, count, off, buf.isz), buf.isz)


def kernel_block_runs(geo: Any, block: np.ndarray, tile: np.ndarray, start: np.ndarray,
                      count: np.ndarray, off: np.ndarray, isz: int) -> tuple[np.ndarray, ...]:
    """Weight intervals of a kernel-split plan. Each given interval covers whole
    (out-chan, in-chan) pairs of the weight tensor (``count`` a multiple of kh x kw from a
    pair's first element ``start``), whose kernel-row block (that of tile ``block``) lies
    in the buffer from byte ``off``, ``KH x kw`` elements per pair. Without a kernel
    split they are returned as they are; with one, cut into one interval per pair, its
    block's rows."""
    p = geo.params
    if geo.split.kernel_rows == 1:
        return tile, start, count, off
    kk = p.kernel_h * p.kernel_w
    i, n = expand(count // kk)
    b = block[i]
    per = geo.KH[b] * p.kernel_w
    return tile[i], start[i] + n * kk + geo.kr0[b] * p.kernel_w, per, off[i] + n * per * isz


def _merge_runs(tile, start, count, off, isz: int) -> tuple[np.ndarray, ...]:
    """Join each interval to the previous one when it continues it on the same tile in
    both the tensor and the tile's bytes."""
    if tile.size < 2:
        return tile, start, count, off
    new = np.ones(tile.size, dtype=bool)
    new[1:] = ((tile[1:] != tile[:-1]) | (start[1:] != start[:-1] + count[:-1])
               | (off[1:] != off[:-1] + count[:-1] * isz))
    first = np.flatnonzero(new)
    return tile[first], start[first], np.add.reduceat(count, first), off[first]
