"""Build the BSP program of a planned convolution on a simulated device.

Supersteps (S = serial out-chan slices, R = input-channel split = reduction depth):

0. exchange: input windows (shares of the core + halos), weights of slice 0, bias;
1..S. compute: conv vertex of slice j-1 on every tile, plus finishing slice j-2
   (reduce / cast / bias); exchange: weights of slice j, partials of slice j-1 to their
   reducing tiles (reduce-scatter);
S+1. compute: finishing of the last slice (when any finishing is needed).

Buffers per tile (one allocation each, offsets in the tile):
``window [B][WR][G*C][WC]``, ``weights [G][K_j][C][kh][kw]`` (one slice), a weight store
when serial (the slices this tile owns), partials ``[2][B][G][K_j][OR][OC]`` (double
buffered when serial), outputs (every slice, or every slice's chunk when reduced), a
receive buffer for partial chunks, and the bias ``[G][K]``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import estimators
from .estimators import TileConv
from .codelet import ConvCodelet
from .layout import (CopyTable, StridedCopies, TileGeometry, geometry, owned_input_intervals,
                         window_copies)
from ..dtypes import DTYPES
from ..core.engine import Device, get_num_threads
from .planner import ConvPlan
from ..core.program import Program, Superstep, VertexBatch, balanced_bounds
from ..core.tensor import TileTensor
from ..core.vertices import DTYPE_CODE, sum_rows

__all__ = ["ConvProgram", "build_conv_program"]


class ConvProgram:
    """A planned conv laid out on a device: the program and its tensors.

    ``x`` is the input in NHCW order (the order a window row holds its channels), ``w``
    the weights (C_out, C/groups, kh, kw), ``y`` the output NCHW, ``b`` the bias. The
    tensors' host mappings are only needed to place and fetch data, so they are built on
    first use: estimate mode never pays for them.
    """

    def __init__(self, plan: ConvPlan, device: Device, program: Program, geometry: TileGeometry,
                 tensor_builders: dict[str, Any]):
        self.plan = plan
        self.device = device
        self.program = program
        self.geometry = geometry
        self._builders = tensor_builders
        self._built: dict[str, Any] = {}

    def _get(self, name: str) -> Any:
        if name not in self._built:
            builder = self._builders.get(name)
            self._built[name] = builder() if builder is not None else None
        return self._built[name]

    @property
    def x(self) -> TileTensor:
        return self._get("x")[0]

    @property
    def x_scatter(self) -> StridedCopies:
        """The input's placement as strided copies straight from an NCHW array."""
        return self._get("x")[1]

    @property
    def w(self) -> TileTensor:
        return self._get("w")

    @property
    def y(self) -> TileTensor:
        return self._get("y")

    @property
    def b(self) -> TileTensor | None:
        return self._get("b")

    def write_inputs(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> None:
        """Place NCHW input, weights (and bias) on their initial tile mappings."""
        dev = self.device
        if x.shape != self.plan.params.input_shape or x.dtype != DTYPES[self.plan.params.dtype]:
            raise ValueError(f"input must be {self.plan.params.dtype}{list(self.plan.params.input_shape)}, "
                             f"got {x.dtype}{list(x.shape)}")
        s = self.x_scatter
        from .._kernels import _exchange
        host = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
        _exchange.copy_strided(dev.arena.data, host, s.tile, s.dst_off, s.dst_stride, s.src_off,
                               s.src_stride, s.run_bytes, s.n_runs,
                               balanced_bounds(s.run_bytes * s.n_runs, get_num_threads()))
        dev.write(self.w, w)
        if bias is not None:
            self.device.write(self.b, bias)


def _rep(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner index, position within owner) for expanding rows by ``counts``."""
    owner = np.repeat(np.arange(counts.size), counts)
    pos = np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, pos


class _BiasCodelet:
    """out[e] += bias[channel of e] over a run of a tile's [B][G][K_j][OR][OC] block."""

    name = "add_bias"

    def __init__(self, dtype: str):
        self.dt = DTYPE_CODE[dtype]

    def run(self, data, batch, n_threads):
        from .._kernels import _vertices
        a = batch.args
        _vertices.add_bias(data, batch.tiles, a["out"], a["bias"], a["params"], self.dt, n_threads)


def build_conv_program(plan: ConvPlan, device: Device | None = None, *,
                       vertex: Any = None) -> ConvProgram:
    """Lay out ``plan`` on a fresh device (or the given empty one) and build its program.

    ``vertex`` (a :class:`~ipukern.tilefn.TileFunction` ``f(a, b, c)``) replaces the built-in
    conv vertex for 1x1, stride-1, single-row convs with one conv group per tile (matmuls):
    per tile ``a`` is the weights (K_j, C), ``b`` the window (C, columns) and ``c`` the
    fp32 partials (K_j, columns), overwritten. Plan, exchanges and reductions are unchanged.
    """
    p = plan.params
    m = plan.machine
    dev = device if device is not None else Device(m)
    geo = geometry(p, plan.split)
    T = geo.n_tiles
    NT = m.n_tiles
    S = plan.serial
    R = plan.split.in_chans
    og = plan.split.out_grain
    isz = DTYPES[p.dtype].itemsize
    psz = DTYPES[p.partials].itemsize
    osz = isz
    kk = p.kernel_h * p.kernel_w
    reduce_needed = R > 1
    cast_needed = (not reduce_needed) and p.partials != p.dtype
    need_partials = reduce_needed or cast_needed
    finishing = need_partials or plan.bias

    # ---- serial slices of each tile's out-chans: ks[t, j] .. ks[t, j+1]
    n_grains = -(-geo.K // og)
    ks = np.minimum((np.arange(S + 1)[None, :] * n_grains[:, None]) // S * og, geo.K[:, None])
    Kj = np.diff(ks, axis=1)                                    # (T, S)
    plane = geo.B * geo.G                                       # per tile
    out_j = plane[:, None] * Kj * (geo.OR * geo.OC)[:, None]    # (T, S) outputs per slice
    wj_elems = geo.G[:, None] * Kj * (geo.C * kk)[:, None]      # (T, S) weights per slice
    chunk_lo = (np.arange(R)[None, None, :] * out_j[:, :, None]) // R   # (T, S, R)
    chunk_hi = ((np.arange(R) + 1)[None, None, :] * out_j[:, :, None]) // R
    chunk_stride = (-(-out_j.max(axis=1) // R)) if T else np.zeros(0, np.int64)  # per tile

    # ---- allocations (arrays over all machine tiles; unused tiles get 0 bytes)
    def per_tile(v: np.ndarray) -> np.ndarray:
        full = np.zeros(NT, dtype=np.int64)
        full[:T] = v
        return full

    win_off = dev.alloc("conv.window", per_tile(geo.window_elems() * isz), "inputs")
    w_off = dev.alloc("conv.weights", per_tile(wj_elems.max(axis=1) * isz), "weights")
    M = plan.split.batch * plan.split.rows * plan.split.cols
    Os = plan.split.out_chans
    group_leader = np.arange(T) - (((geo.bi * plan.split.rows + geo.hi) * plan.split.cols + geo.wi) * Os)
    member = (np.arange(T) - group_leader) // Os                # (b,h,w) index within its group
    if S > 1:
        n_store = np.array([len(range(int(mm), S, M)) for mm in range(M)], dtype=np.int64)[member]
        store_off = dev.alloc("conv.weight_store", per_tile(n_store * wj_elems.max(axis=1) * isz), "weights")
    if need_partials:
        n_bufs = 2 if S > 1 else 1
        part_stride = out_j.max(axis=1)
        part_off = dev.alloc("conv.partials", per_tile(n_bufs * part_stride * psz), "partials")
    if reduce_needed:
        out_stride = chunk_stride
        out_bytes = S * chunk_stride * osz
    else:
        out_starts = np.concatenate([np.zeros((T, 1), np.int64), np.cumsum(out_j, axis=1)], axis=1)
        out_bytes = out_starts[:, -1] * osz
    out_off = dev.alloc("conv.output", per_tile(out_bytes), "outputs")
    if reduce_needed:
        recv_off = dev.alloc("conv.partials_in", per_tile((R - 1) * chunk_stride * psz), "exchange")
    if plan.bias:
        bias_off = dev.alloc("conv.bias", per_tile(geo.G * geo.K * osz), "weights")

    # ---- tensors: input (in the windows), weights (owners), output, bias
    def input_tensor():
        it, istart, icount, ioff, scatter = owned_input_intervals(geo, win_off, isz)
        n_, c_, h_, w_ = p.input_shape
        return dev.add_tensor_view("x", (n_, h_, c_, w_), p.dtype, it, istart, icount, ioff), scatter

    builders = {
        "x": input_tensor,
        "w": lambda: _weight_tensor(dev, plan, geo, ks, Kj, w_off, store_off if S > 1 else None,
                                    group_leader, M, Os, isz),
        "y": lambda: _output_tensor(dev, plan, geo, ks, Kj, out_j, chunk_lo, chunk_hi, out_off,
                                    out_stride if reduce_needed else None,
                                    out_starts if not reduce_needed else None, osz),
    }
    if plan.bias:
        builders["b"] = lambda: _bias_tensor(dev, plan, geo, bias_off, osz)
        bias_copies = _bias_copies(plan, geo, bias_off, osz)

    # ---- exchanges
    win_table = window_copies(geo, win_off, isz)

    def weight_copies(j: int) -> CopyTable:
        st = group_leader + (j % M) * Os                      # tile storing slice j
        src = (store_off[st] + (j // M) * wj_elems.max(axis=1)[st] * isz) if S > 1 else w_off[st]
        nb = wj_elems[:, j] * isz
        keep = (nb > 0) & ((np.arange(T) != st) | (S > 1))
        t = np.flatnonzero(keep)
        return CopyTable(st[t], src[t], t, w_off[t], nb[t])

    i_stride = M * Os                                          # tile-index distance between in-chan blocks

    def partial_copies(j: int) -> CopyTable:
        buf = (j % 2) if S > 1 else 0
        tabs = []
        for r in range(R):
            src_r = geo.ii                                     # source's in-chan index
            send = (src_r != r) & (chunk_hi[:, j, r] > chunk_lo[:, j, r])
            t = np.flatnonzero(send)
            dst = t + (r - src_r[t]) * i_stride
            slot = np.where(src_r[t] < r, src_r[t], src_r[t] - 1)
            tabs.append(CopyTable(
                t, part_off[t] + (buf * part_stride[t] + chunk_lo[t, j, r]) * psz,
                dst, recv_off[dst] + slot * chunk_stride[dst] * psz,
                (chunk_hi[t, j, r] - chunk_lo[t, j, r]) * psz))
        return CopyTable.concat(tabs)

    # ---- compute sets
    conv_out_dtype = p.partials if need_partials else p.dtype
    conv_codelet = ConvCodelet((p.kernel_h, p.kernel_w), p.stride, p.dilation, p.dtype,
                               conv_out_dtype, name=f"conv<{p.dtype}->{conv_out_dtype}>")
    if vertex is not None:
        _check_custom_vertex(plan, geo, conv_out_dtype)

    def conv_batch(j: int) -> VertexBatch:
        t = np.flatnonzero(Kj[:, j] > 0)
        if need_partials:
            dst = part_off[t] + ((j % 2) if S > 1 else 0) * part_stride[t] * psz
        else:
            dst = out_off[t] + out_starts[t, j] * osz
        dims = np.stack([geo.B[t], geo.G[t], geo.C[t], Kj[t, j], geo.WR[t], geo.WC[t],
                         geo.OR[t], geo.OC[t], geo.row_org[t], geo.col_org[t]], axis=1)
        if vertex is not None:
            from ..graph.tilefn import ArgViews
            views = [ArgViews("a", "float32", w_off[t], np.stack([Kj[t, j], geo.C[t]], axis=1)),
                     ArgViews("b", "float32", win_off[t], np.stack([geo.C[t], geo.WC[t]], axis=1)),
                     ArgViews("c", "float32", dst, np.stack([Kj[t, j], geo.OC[t]], axis=1))]
            return vertex.vertex_batch(m, t, views, name=f"{vertex.name} (user vertex)")
        cycles, why = _conv_cycles(plan, geo, t, Kj[t, j])
        return VertexBatch(conv_codelet, t,
                           {"win": win_off[t], "w": w_off[t], "out": dst,
                            "dims": np.ascontiguousarray(dims, dtype=np.int64)},
                           cycles,
                           regions=[(win_off[t], geo.window_elems()[t] * isz),
                                    (w_off[t], wj_elems[t, j] * isz),
                                    (dst, out_j[t, j] * DTYPES[conv_out_dtype].itemsize)],
                           why=why)

    def finish_batches(j: int) -> list[VertexBatch]:
        out = []
        if reduce_needed:
            buf = (j % 2) if S > 1 else 0
            t = np.flatnonzero(chunk_hi[np.arange(T), j, geo.ii] > chunk_lo[np.arange(T), j, geo.ii])
            r = geo.ii[t]
            lo, hi = chunk_lo[t, j, r], chunk_hi[t, j, r]
            srcs = []
            for i2 in range(R):
                own = part_off[t] + (buf * part_stride[t] + lo) * psz
                slot = np.where(i2 < r, i2, i2 - 1)
                srcs.append(np.where(i2 == r, own, recv_off[t] + slot * chunk_stride[t] * psz))
            dst = out_off[t] + j * out_stride[t] * osz
            out.append(sum_rows(m, t, dst, srcs, hi - lo, p.partials, p.dtype,
                                why=f"reduce {R} partials of {int((hi - lo).max())} outputs "
                                    f"{p.partials}->{p.dtype}"))
            e0, n_el = lo, hi - lo
        elif cast_needed:
            t = np.flatnonzero(out_j[:, j] > 0)
            src = part_off[t] + ((j % 2) if S > 1 else 0) * part_stride[t] * psz
            dst = out_off[t] + out_starts[t, j] * osz
            out.append(sum_rows(m, t, dst, [src], out_j[t, j], p.partials, p.dtype,
                                why=f"cast {int(out_j[t, j].max())} partials {p.partials}->{p.dtype}"))
            e0, n_el = np.zeros(t.size, np.int64), out_j[t, j]
        else:
            t = np.flatnonzero(out_j[:, j] > 0)
            dst = out_off[t] + out_starts[t, j] * osz
            e0, n_el = np.zeros(t.size, np.int64), out_j[t, j]
        if plan.bias:
            params = np.stack([e0, n_el, geo.OR[t] * geo.OC[t], Kj[t, j], geo.G[t], geo.K[t],
                               ks[t, j]], axis=1).astype(np.int64)
            from ..core.cost import elementwise_cycles_array
            out.append(VertexBatch(_BiasCodelet(p.dtype), t,
                                   {"out": dst, "bias": bias_off[t], "params": params},
                                   elementwise_cycles_array(m, n_el, p.dtype, 2),
                                   regions=[(dst, n_el * osz), (bias_off[t], geo.G[t] * geo.K[t] * osz)],
                                   why=f"add bias to {int(n_el.max())} outputs"))
        return out

    steps = []
    first = [win_table, weight_copies(0)]
    if plan.bias:
        first.append(bias_copies)
    steps.append(Superstep("exchange inputs and weights",
                           exchange=_exchange(dev, CopyTable.concat(first), "inputs+weights"),
                           category="exchange"))
    for j in range(S):
        batches = [conv_batch(j)]
        if j >= 1 and finishing:
            batches += finish_batches(j - 1)
        tabs = []
        if j + 1 < S:
            tabs.append(weight_copies(j + 1))
        if reduce_needed:
            tabs.append(partial_copies(j))
        xch = _exchange(dev, CopyTable.concat(tabs), "weights+partials" if S > 1 else "partials") if tabs else None
        name = f"conv slice {j}" if S > 1 else "conv"
        steps.append(Superstep(name, compute=dev.compute_set(batches, name=name), exchange=xch,
                               category="compute"))
    if finishing:
        name = "reduce" if reduce_needed else ("cast" if cast_needed else "bias")
        steps.append(Superstep(name, compute=dev.compute_set(finish_batches(S - 1), name=name),
                               category="reduction" if reduce_needed else "cast"))
    program = dev.program(steps, label=p.describe())
    return ConvProgram(plan, dev, program, geo, builders)


def _check_custom_vertex(plan: ConvPlan, geo: TileGeometry, out_dtype: str) -> None:
    p = plan.params
    if p.dtype != "float32" or out_dtype != "float32":
        raise ValueError("a custom vertex runs in float32 (Numba has no float16 arithmetic); "
                         f"this op is {p.dtype} with {out_dtype} partials")
    if (p.kernel_h, p.kernel_w, p.in_h) != (1, 1, 1) or p.stride != (1, 1) or p.padding != (0, 0):
        raise ValueError("a custom vertex replaces the matmul vertex: it needs a 1x1, stride-1, "
                         f"unpadded single-row conv (a matmul), got {p.describe()}")
    if geo.G.size and (geo.G.max() > 1 or geo.B.max() > 1):
        raise ValueError(f"a custom vertex needs one conv group per tile, but the plan puts up to "
                         f"{int(geo.G.max())} groups on a tile ({plan.describe()})")


def _exchange(dev: Device, table: CopyTable, name: str):
    return dev.exchange(table.src_tile, table.src_off, table.dst_tile, table.dst_off,
                        table.nbytes, name=name)


def _conv_cycles(plan: ConvPlan, geo: TileGeometry, t: np.ndarray, K: np.ndarray):
    """Per-vertex cycles (vectorised) and the explanation for the busiest vertex."""
    p = plan.params
    m = plan.machine
    kk = p.kernel_h * p.kernel_w
    flat = kk == 1 and p.stride == (1, 1) and p.padding == (0, 0)
    B, OR, OC = geo.B[t], geo.OR[t], geo.OC[t]
    vb, vh, vw = (np.ones_like(B), np.ones_like(OR), B * OR * OC) if flat else (B, OR, OC)
    cyc = estimators.conv_vertex_cycles_array(m, plan.method, conv_groups=geo.G[t],
                                            in_chans=geo.C[t], out_chans=K, batch=vb,
                                            out_h=vh, out_w=vw, kernel_h=p.kernel_h,
                                            kernel_w=p.kernel_w, stride=p.stride)
    i = int(np.argmax(cyc))
    tile = TileConv(conv_groups=int(geo.G[t][i]), in_chans=int(geo.C[t][i]), out_chans=int(K[i]),
                    batch=int(vb[i]), out_h=int(vh[i]), out_w=int(vw[i]), kernel_h=p.kernel_h,
                    kernel_w=p.kernel_w, stride=p.stride)
    vc = estimators.conv_vertex_cycles(m, plan.method, tile)
    return cyc, f"{plan.method.label()}: {vc.why}"


def _weight_tensor(dev, plan, geo, ks, Kj, w_off, store_off, group_leader, M, Os, isz):
    """The weight tensor's mapping: slice j of each group lives on member j % M (in the
    store when serial, else in the leader's working buffer)."""
    p = plan.params
    S = plan.serial
    kk = p.kernel_h * p.kernel_w
    leaders = np.flatnonzero(group_leader == np.arange(geo.n_tiles))
    tiles, starts, counts, offs = [], [], [], []
    slice_stride = (geo.G[:, None] * Kj * (geo.C * kk)[:, None]).max(axis=1) * isz
    for j in range(S):
        st = leaders + (j % M) * Os
        base = store_off[st] + (j // M) * slice_stride[st] if S > 1 else w_off[st]
        # one run per (group, out-chan); when the tile holds every input channel of a
        # group, a group's out-chans are contiguous in both layouts: one run per group
        whole = geo.C[leaders] == p.in_per_group
        per_g = np.where(whole, 1, Kj[leaders, j])
        li, pos = _rep(geo.G[leaders] * per_g)
        L = leaders[li]
        K_ = np.maximum(Kj[L, j], 1)
        g_l = pos // per_g[li]
        k_l = np.where(whole[li], 0, pos - g_l * per_g[li])
        co = (geo.g0[L] + g_l) * p.out_per_group + geo.k0[L] + ks[L, j] + k_l
        run = geo.C[L] * kk
        tiles.append(st[li])
        starts.append((co * p.in_per_group + geo.c0[L]) * kk)
        counts.append(np.where(whole[li], K_ * run, run))
        offs.append(base[li] + (g_l * K_ + k_l) * run * isz)
    cat = lambda v: np.concatenate(v) if v else np.zeros(0, np.int64)
    return dev.add_tensor_view("w", p.weight_shape, p.dtype, cat(tiles), cat(starts), cat(counts),
                               cat(offs))


def _output_tensor(dev, plan, geo, ks, Kj, out_j, chunk_lo, chunk_hi, out_off, out_stride,
                   out_starts, osz):
    """The output tensor's mapping: every slice's [B][G][K_j][OR][OC] block, by rows (or
    whole channel planes when a tile holds full-width rows), cut into chunks when reduced."""
    p = plan.params
    T = geo.n_tiles
    R = plan.split.in_chans
    full_rows = geo.OC == p.out_w
    tiles, starts, counts, offs = [], [], [], []
    # with R > 1 all in-chan tiles of a block describe the same outputs: use in-chan 0's
    describe = (geo.ii == 0) if R > 1 else np.ones(T, dtype=bool)
    # a tile holding whole output planes has each (image, group)'s K_j channels contiguous
    full_planes = full_rows & (geo.OR == p.out_h)
    for j in range(plan.serial):
        # runs: one per (b, g) if whole planes, per (b, g, k) if full rows, else per
        # (b, g, k, row)
        runs_per_plane = np.where(full_rows, 1, geo.OR)
        k_runs = np.where(full_planes, 1, Kj[:, j])             # runs per (b, g) over k
        n_runs = np.where(describe, geo.B * geo.G * k_runs * runs_per_plane, 0)
        ti, pos = _rep(n_runs)
        rpp = runs_per_plane[ti]
        y = np.where(full_rows[ti], 0, pos % rpp)
        q = pos // rpp
        kr = k_runs[ti]
        k = q % kr
        q //= kr
        G_ = geo.G[ti]
        g = q % G_
        b = q // G_
        ch = (geo.g0[ti] + g) * p.out_per_group + geo.k0[ti] + ks[ti, j] + k
        start = (((geo.n0[ti] + b) * p.out_channels + ch) * p.out_h + geo.y0[ti] + y) * p.out_w + geo.x0[ti]
        plane_elems = geo.OR[ti] * geo.OC[ti]
        count = np.where(full_planes[ti], Kj[ti, j] * plane_elems,
                         np.where(full_rows[ti], plane_elems, geo.OC[ti]))
        e0 = pos * count                                       # element position in the block
        if R == 1:
            tiles.append(ti)
            starts.append(start)
            counts.append(count)
            offs.append(out_off[ti] + (out_starts[ti, j] + e0) * osz)
            continue
        # cut each run at the R chunk boundaries; chunk r lives on the in-chan-r tile
        lo = np.maximum(e0[:, None], chunk_lo[ti, j, :])
        hi = np.minimum((e0 + count)[:, None], chunk_hi[ti, j, :])
        rr, cc = np.nonzero(lo < hi)
        lo, hi = lo[rr, cc], hi[rr, cc]
        src_tile = ti[rr]
        red_tile = src_tile + (cc - geo.ii[src_tile]) * (plan.split.batch * plan.split.rows
                                                         * plan.split.cols * plan.split.out_chans)
        tiles.append(red_tile)
        starts.append(start[rr] + (lo - e0[rr]))
        counts.append(hi - lo)
        offs.append(out_off[red_tile] + (j * out_stride[red_tile] + lo - chunk_lo[src_tile, j, cc]) * osz)
    cat = lambda v: np.concatenate(v) if v else np.zeros(0, np.int64)
    return dev.add_tensor_view("y", p.output_shape, p.dtype, cat(tiles), cat(starts), cat(counts),
                               cat(offs))


def _bias_owner(plan, geo):
    # the (in-chan 0, first batch/row/col) tile of each (group, out-chan) block
    s = plan.split
    return ((geo.gi * s.in_chans) * s.batch * s.rows * s.cols) * s.out_chans + geo.oi


def _bias_tensor(dev, plan, geo, bias_off, osz):
    """Bias [G][K] per tile, owned by one tile of each (group, out-chan) block."""
    p = plan.params
    owner = _bias_owner(plan, geo)
    own = np.flatnonzero(owner == np.arange(geo.n_tiles))
    li, g_l = _rep(geo.G[own])
    L = own[li]
    start = (geo.g0[L] + g_l) * p.out_per_group + geo.k0[L]
    off = bias_off[L] + g_l * geo.K[L] * osz
    return dev.add_tensor_view("bias", (p.out_channels,), p.dtype, L, start, geo.K[L], off)


def _bias_copies(plan, geo, bias_off, osz) -> CopyTable:
    """The owner's bias block copied to every other tile of its (group, out-chan) block."""
    owner = _bias_owner(plan, geo)
    t = np.flatnonzero(owner != np.arange(geo.n_tiles))
    return CopyTable(owner[t], bias_off[owner[t]], t, bias_off[t], geo.G[t] * geo.K[t] * osz)
