"""The program of an expandDims plan: build the expanded input on chip, then run the
expanded conv's program (see :mod:`.expand` for the transform and its cost).

Layout and supersteps:

- the original input (NHCW, like every conv input here) lives spread linearly over the
  plan's tiles in whole rows (``split_bounds``, PopLibs' ``mapTensorLinearly``);
- superstep "expandDims exchange": every tile owning a segment of the expanded input's
  cores (the expanded conv's own input mapping, :func:`~.layout.owned_input_segments`)
  receives the box of original rows, channels and columns its segments read;
- superstep "expandDims copy": an on-tile copy vertex writes each owned segment of the
  expanded input from that box, tap by tap (zeros where a tap reads padding), costed by
  PopLibs' rearrangement copy estimate (:func:`~.expand.transform_copy_cycles`); its
  exchange phase is the expanded conv's first exchange (windows and weights);
- then the expanded conv's supersteps, unchanged.

The expanded weights are the original ones reshaped (:mod:`.expand`), so the weight tensor
keeps its mapping and only its shape is the original one.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import Device
from ..core import Superstep, VertexBatch
from ..core import expand, split_bounds
from .build import ConvProgram, build_direct_program, conv_program
from .expand import box_row_step, source_boxes, transform_copy_cycles
from ..core import CopyTable
from .layout import StridedCopies, owned_input_segments

__all__ = ["build_expanded_program"]


class _CopyBlocksCodelet:
    """dst[a, b, c, d] = src[a, b, c, d] over 4-D strided blocks of one tile (zeros where
    the source offset is negative): the im2col of the expandDims transform."""

    name = "expandDims copy"

    def __init__(self, itemsize: int):
        self.itemsize = itemsize
        # the batches (by id and arena shape) whose blocks the kernel has checked: their
        # tables are fixed once built, so later runs on an arena of that shape skip it
        self._checked: dict[tuple[int, tuple[int, ...]], object] = {}

    def run(self, data, batch, n_threads):
        from .._kernels import _vertices
        a = batch.args
        key = (id(batch), data.shape)
        check = self._checked.get(key) is not batch
        _vertices.copy_blocks(data, batch.tiles, a["src"], a["dst"], a["shape"], a["src_stride"],
                              a["dst_stride"], self.itemsize, n_threads, check)
        if check:   # reached only when every block was inside the arena
            self._checked[key] = batch


def build_expanded_program(plan, device: Device | None, vertex=None) -> ConvProgram:
    """Lay out an expandDims ``plan`` (``plan.expand_dims`` set) on a fresh or given empty
    device: the expanded conv's program, preceded by the on-chip transform."""
    p, e = plan.params, plan.conv_params
    # every tile sharing a window owns (and builds) a share of its core: the copy's work is
    # spread over the used tiles, as PopLibs' estimate assumes
    inner = build_direct_program(dataclasses.replace(plan, params=e, expand_dims=""), device,
                                 vertex=vertex, input_owners=plan.split.out_chans)
    dev, buf, geo = inner.device, inner.buffers, inner.geometry
    isz = p.itemsize
    nt = dev.machine.n_tiles
    # the original input, NHCW, linear over the plan's tiles in whole rows
    bounds = split_bounds(p.batch * p.in_h * p.in_channels * p.in_w, geo.n_tiles, p.in_w)
    home = np.zeros(nt, np.int64)
    home[:geo.n_tiles] = np.diff(bounds) * isz
    home_off = dev.alloc("conv.expand_input", home, "inputs")
    seg = owned_input_segments(geo, buf.win_off, isz, planes=True)
    box = source_boxes(p, e, plan.expand_dims, seg, nt)
    recv_off = dev.alloc("conv.expand_recv", box["elems"] * isz, "inputs")
    table = _recv_copies(p, box, bounds, home_off, recv_off, isz)
    im2col = _im2col_batch(p, e, plan, seg, box, recv_off, isz)
    first = inner.program.steps[0]
    steps = [Superstep(f"expandDims {plan.expand_dims} exchange", category="exchange",
                       exchange=dev.exchange(table.src_tile, table.src_off, table.dst_tile,
                                             table.dst_off, table.nbytes,
                                             name="expandDims: original input rows",
                                             shared_bus=False, validate=False)),
             Superstep(f"expandDims {plan.expand_dims} copy; {first.name}", category="transform",
                       compute=dev.compute_set([im2col], name="expandDims copy"),
                       exchange=first.exchange)]
    program = dev.program(steps + inner.program.steps[1:], label=p.describe())
    return conv_program(plan, dev, program, buf, lambda: _home_tensor(dev, p, bounds, home_off),
                         weight_shape=p.weight_shape)


def _recv_copies(p, box, bounds, home_off, recv_off, isz) -> CopyTable:
    """Every tile's box from the linear home of the original input (only every
    :func:`~.expand.box_row_step`-th row): one run per (image, row) when the box has whole
    rows (channels x width are contiguous in NHCW), else one per (image, row, channel);
    runs are cut where the home changes tile.

    Built per (tile, image, row) first, then per run (up to a million runs for a strided
    1x1 conv at batch 16, where each full-length temporary costs page faults): the home's
    bounds are whole rows of ``in_w`` (``split_bounds`` grain), so a run's home tile is a
    lookup by its first element's row, and a run shorter than a row never crosses one."""
    W = p.in_w
    t = np.flatnonzero(box["elems"] > 0)
    NB, RR = (box["n1"] - box["n0"])[t], box["nr"][t]
    CH, RC = (box["ch1"] - box["ch0"])[t], (box["c1"] - box["c0"])[t]
    full = RC == W
    # rows: one per (tile, image, box row), in table order
    ri, nr = expand(NB * RR)
    n, r = np.divmod(nr, RR[ri])
    tr = t[ri]
    row_q = (((box["n0"][tr] + n) * p.in_h + box["r0"][tr] + r * box_row_step(p)) * p.in_channels
             + box["ch0"][tr])                     # the row's first home row (of W elements)
    row_dst = recv_off[tr] + nr * (CH * RC * isz)[ri]
    home_of_row = np.repeat(np.arange(bounds.size - 1), np.diff(bounds) // W)
    if CH.size and not full.any() and (CH == CH[0]).all():
        # every row holds the same channels' runs (a strided 1x1 conv's boxes): a (row,
        # channel) grid by broadcasting, no expansion of the rows
        k = np.arange(int(CH[0]))
        q = (row_q[:, None] + k).reshape(-1)
        rb = (RC * isz)[ri]
        first = home_of_row[q]
        start = q * W + np.repeat(box["c0"][tr], k.size)
        return CopyTable(first, home_off[first] + (start - bounds[first]) * isz,
                         np.repeat(tr, k.size), (row_dst[:, None] + rb[:, None] * k).reshape(-1),
                         np.repeat(rb, k.size))
    # runs: one per channel of a row (or one per row when it is whole)
    j, k = expand(np.where(full, 1, CH)[ri])
    tt = tr[j]
    q = row_q[j] + k
    start = q * W + box["c0"][tt]
    count = np.where(full, CH * W, RC)[ri][j]
    dst = row_dst[j] + k * (RC * isz)[ri][j]
    first = home_of_row[q]
    src = home_off[first] + (start - bounds[first]) * isz
    if not full.any():
        return CopyTable(first, src, tt, dst, count * isz)
    last = home_of_row[(start + count - 1) // W]
    if (last == first).all():       # no run crosses a home boundary (the usual case)
        return CopyTable(first, src, tt, dst, count * isz)
    j, m = expand(last - first + 1)
    o = first[j] + m
    lo = np.maximum(start[j], bounds[o])
    hi = np.minimum(start[j] + count[j], bounds[o + 1])
    return CopyTable(o, home_off[o] + (lo - bounds[o]) * isz, tt[j], dst[j] + (lo - start[j]) * isz,
                     (hi - lo) * isz)


def _im2col_batch(p, e, plan, seg, box, recv_off, isz) -> VertexBatch:
    """The copy vertex: per owned segment and kernel tap, one block copying the tap's
    channels of the segment from the tile's box (stride kk planes apart in the segment,
    kk = taps folded), and zero blocks where the tap reads padding. Blocks in tile order,
    then kind (copy, padding row, left, right padding), then segment and tap: built by
    :func:`ipukern._kernels._im2col.im2col_blocks` (the same blocks as
    :func:`_im2col_blocks_numpy`, which a checkout without built extensions uses)."""
    try:
        from .._kernels import _im2col
    except ImportError:
        _im2col = None
    if _im2col is None:
        tile, src, dst, shape, src_stride, dst_stride, reach, s_reach = _im2col_blocks_numpy(
            p, e, plan, seg, box, recv_off, isz)
    else:
        tile, src, dst, shape, src_stride, dst_stride, reach, s_reach = _im2col.im2col_blocks(
            *_im2col_args(p, e, plan, seg, box, recv_off, isz))
    # the tile's cost: PopLibs' rearrangement copy estimate on the bytes it writes
    written = np.bincount(seg.tile, weights=seg.n_planes * seg.width * isz,
                          minlength=plan.machine.n_tiles).astype(np.int64)
    head = np.flatnonzero(np.r_[True, tile[1:] != tile[:-1]]) if tile.size else tile[:0]
    cycles = np.zeros(tile.size, np.int64)
    cycles[head] = transform_copy_cycles(plan.machine, written[tile[head]], e)
    busiest = int(written.max()) if written.size else 0
    return VertexBatch(_CopyBlocksCodelet(isz), tile,
                       {"src": src, "dst": dst, "shape": shape, "src_stride": src_stride,
                        "dst_stride": dst_stride},
                       cycles, regions=[(dst, reach), (np.maximum(src, 0), s_reach)],
                       why=f"expandDims {plan.expand_dims} copy of {busiest} B (im2col of "
                           f"{e.in_per_group // p.in_per_group} taps) at PopLibs' "
                           "rearrangement rate")


def _im2col_args(p, e, plan, seg, box, recv_off, isz) -> tuple[np.ndarray, ...]:
    """The per-segment columns, scalars and segment order
    :func:`~ipukern._kernels._im2col.im2col_blocks` takes."""
    t = seg.tile
    g = seg.channel // e.in_per_group
    cols = {"tile": t, "row": seg.row, "cl": seg.channel - g * e.in_per_group,
            "n_planes": seg.n_planes, "plane_bytes": seg.plane_bytes, "off": seg.off,
            "col": seg.col, "width": seg.width, "base": recv_off[t],
            "img_rows": (seg.image - box["n0"][t]) * box["nr"][t], "r0": box["r0"][t],
            "ch": (box["ch1"] - box["ch0"])[t], "gch": g * p.in_per_group - box["ch0"][t],
            "rc": (box["c1"] - box["c0"])[t], "c0": box["c0"][t]}
    from .._kernels import _im2col
    segs = np.ascontiguousarray(np.stack([np.asarray(cols[k], np.int64)
                                          for k in _im2col.SEG_COLUMNS], axis=1).reshape(-1, 15))
    (sh, sw), (ph, pw), (dh, dw) = p.stride, p.padding, p.dilation
    wexp = "w" in plan.expand_dims
    par = {"kk": e.in_per_group // p.in_per_group, "kw_e": p.kernel_w if wexp else 1,
           "wexp": int(wexp), "sh": sh, "sw": sw, "ph": ph, "pw": pw, "dh": dh, "dw": dw,
           "in_h": p.in_h, "in_w": p.in_w, "step": box_row_step(p), "isz": isz}
    order = np.argsort(t, kind="stable").astype(np.int64)
    return segs, np.array([par[k] for k in _im2col.PARAMS], np.int64), order


def _im2col_blocks_numpy(p, e, plan, seg, box, recv_off, isz) -> tuple[np.ndarray, ...]:
    """The blocks of :func:`_im2col_batch` as NumPy columns ``(tile, src, dst, shape,
    src_stride, dst_stride, reach, s_reach)``, in its order."""
    wexp = "w" in plan.expand_dims
    kk = e.in_per_group // p.in_per_group
    kw_e = p.kernel_w if wexp else 1
    s, tap = expand(np.full(seg.tile.size, kk, np.int64))
    i, j = np.divmod(tap, kw_e)
    t = seg.tile[s]
    g = seg.channel[s] // e.in_per_group
    cl = seg.channel[s] - g * e.in_per_group
    c_first = -(-(cl - tap) // kk)
    ncs = (cl + seg.n_planes[s] - 1 - tap) // kk - c_first + 1
    plane0 = c_first * kk + tap - cl
    pb = seg.plane_bytes[s]
    dst0 = seg.off[s] + plane0 * pb
    x0, width = seg.col[s], seg.width[s]
    (sh, sw), (ph, pw), (dh, dw) = p.stride, p.padding, p.dilation
    r = seg.row[s] * sh - ph + i * dh
    valid_r = (r >= 0) & (r < p.in_h) & (ncs > 0)
    if wexp:
        xv0 = np.clip(-(-(pw - j * dw) // sw), x0, x0 + width)
        xv1 = np.clip((p.in_w - 1 + pw - j * dw) // sw + 1, xv0, x0 + width)
        src_col, col_stride = xv0 * sw - pw + j * dw, sw
    else:
        xv0, xv1, src_col, col_stride = x0, x0 + width, x0, 1
    RR = box["nr"][t]
    CH, RC = ((box[k + "1"] - box[k + "0"])[t] for k in ("ch", "c"))
    img = seg.image[s] - box["n0"][t]
    src = recv_off[t] + (((img * RR + (r - box["r0"][t]) // box_row_step(p)) * CH
                          + g * p.in_per_group + c_first - box["ch0"][t]) * RC
                         + src_col - box["c0"][t]) * isz
    # blocks: the copy, then zeros (whole segment row if the tap's row is padding; else the
    # columns left and right of the valid ones)
    kinds = [(valid_r & (xv1 > xv0), src, dst0 + (xv0 - x0) * isz, xv1 - xv0),
             ((~valid_r) & (ncs > 0), -1, dst0, width),
             (valid_r & (xv0 > x0), -1, dst0, xv0 - x0),
             (valid_r & (x0 + width > xv1), -1, dst0 + (xv1 - x0) * isz, x0 + width - xv1)]
    cols = {"tile": [], "src": [], "dst": [], "n": [], "w": [], "sstride": [], "dstride": []}
    for sel, so, do, w in kinds:
        k = np.flatnonzero(sel)
        cols["tile"].append(t[k])
        cols["src"].append(np.broadcast_to(so, t.shape)[k])
        cols["dst"].append(do[k])
        cols["n"].append(ncs[k])
        cols["w"].append(np.broadcast_to(w, t.shape)[k])
        cols["sstride"].append(RC[k] * isz)
        cols["dstride"].append(kk * pb[k])
    tile, src, dst, n, w, ss, ds = (np.concatenate(cols[k]) for k in cols)
    one = np.ones_like(n)
    zero = np.zeros_like(n)
    shape = np.stack([one, one, n, w], axis=1)
    src_stride = np.stack([zero, zero, ss, np.where(src >= 0, col_stride * isz, 0)], axis=1)
    dst_stride = np.stack([zero, zero, ds, np.full_like(n, isz)], axis=1)
    order = np.argsort(tile, kind="stable")
    tile, src, dst, shape, src_stride, dst_stride = (a[order] for a in (tile, src, dst, shape,
                                                                        src_stride, dst_stride))
    reach = isz + ((shape - 1) * dst_stride).sum(axis=1)
    s_reach = np.where(src >= 0, isz + ((shape - 1) * src_stride).sum(axis=1), 0)
    return (tile, src, dst, np.ascontiguousarray(shape), np.ascontiguousarray(src_stride),
            np.ascontiguousarray(dst_stride), reach, s_reach)


def _home_tensor(dev: Device, p, bounds: np.ndarray, home_off: np.ndarray):
    """The original input (NHCW) in its linear home, and its strided scatter from NCHW."""
    T = bounds.size - 1
    tiles = np.arange(T)
    x = dev.add_tensor_view("x", (p.batch, p.in_h, p.in_channels, p.in_w), p.dtype, tiles,
                            bounds[:-1], np.diff(bounds), home_off[:T])
    # home rows q = (image, row, channel) of W elements; one strided copy per (tile, image, row)
    C, W, isz = p.in_channels, p.in_w, p.itemsize
    qa, qb = bounds[:-1] // W, -(-bounds[1:] // W)
    nh0 = qa // C
    nh1 = np.where(qb > qa, (qb - 1) // C + 1, nh0)
    ti, k = expand(nh1 - nh0)
    nh = nh0[ti] + k
    c0 = np.maximum(qa[ti], nh * C) - nh * C
    c1 = np.minimum(qb[ti], (nh + 1) * C) - nh * C
    n, h = np.divmod(nh, p.in_h)
    scatter = StridedCopies(tile=ti.astype(np.int32),
                            dst_off=home_off[ti] + (nh * C + c0 - qa[ti]) * W * isz,
                            dst_stride=np.full(ti.size, W * isz, np.int64),
                            src_off=((n * C + c0) * p.in_h + h) * W * isz,
                            src_stride=np.full(ti.size, p.in_h * W * isz, np.int64),
                            run_bytes=np.full(ti.size, W * isz, np.int64), n_runs=c1 - c0)
    return x, scatter
