"""Build the BSP program of a planned convolution on a simulated device.

Supersteps (S = serial out-chan slices, R = input-channel split = reduction depth):

0. exchange: input windows (shares of the core + halos), weights of slice 0, bias;
1..S. compute: conv vertex of slice j-1 on every tile, plus finishing slice j-2
   (the last reduce stage / cast / bias); exchange: weights of slice j, partials of slice
   j-1 to their first-stage reducing tiles (reduce-scatter);
   with a multi-stage reduction (``conv.reduce``: R >= 16), after each conv superstep one
   superstep per intermediate stage: compute that stage's sums, exchange its results to
   the next stage's reducers;
S+1. compute: finishing of the last slice (when any finishing is needed).

The per-tile buffers are :mod:`.buffers`'s (:class:`~.buffers.ConvBuffers`).
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..core.cost import elementwise_cycles_array
from ..core import Device, get_num_threads
from ..core.copies import CopyTable, balanced_bounds
from ..core.program import ArgViews, Program, Superstep, VertexBatch
from ..core.tensor import LazyTileMapping, TileMapping, TileTensor, expand
from ..core.vertices import sum_rows
from ..dtypes import DTYPE_CODE, DTYPES
from . import estimators
from .buffers import ConvBuffers, allocate_buffers
from .codelet import ConvCodelet
from .homes import kernel_block_runs, spread_weight_copies, spread_weight_runs
from .estimators import TileConv, vertex_field
from .layout import (MAX_INPUT_OWNERS, StridedCopies, TileGeometry, geometry,
                     owned_input_intervals, window_copies)
from .mapping import (ColumnSplitMapping, column_split_input, column_split_output, input_summary,
                      output_summary, record_summary)
from .planner import ConvPlan
from .reduce import stage_range

__all__ = ["ConvProgram", "build_direct_program", "conv_program", "bias_codelets", "fuse_bias"]


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
        #: the conv's per-tile buffers (set by the builder)
        self.buffers: Any = None
        # threads sharing a cached program must build each tensor once (a second build
        # would register the same tensor name on the device again)
        self._lock = threading.Lock()

    def _get(self, name: str) -> Any:
        if name not in self._built:
            with self._lock:
                if name not in self._built:
                    builder = self._builders.get(name)
                    self._built[name] = builder() if builder is not None else None
        return self._built[name]

    @property
    def x(self) -> TileTensor:
        return self._get("x")[0]

    def input_mapping(self) -> TileMapping:
        """``x``'s mapping; for a column-split plan a
        :class:`~ipukern.core.tensor.LazyTileMapping` that knows its per-tile counts and
        periodic starts (:func:`ipukern.conv.mapping.input_summary`) and builds ``x`` only
        when its intervals are read (estimates never do)."""
        if self.plan.expand_dims:          # x is the original input, not this geometry's
            return self.x.mapping
        return self._lazy("x", lambda: input_summary(self.geometry))

    def output_mapping(self) -> TileMapping:
        """``y``'s mapping, lazy like :meth:`input_mapping` for a column-split plan without
        an input-channel split (:func:`ipukern.conv.mapping.output_summary`)."""
        return self._lazy("y", lambda: output_summary(self.geometry, self.device.machine.n_tiles))

    def _lazy(self, name: str, summarise) -> TileMapping:
        if name not in self._built:
            with self._lock:
                lazy = self._built.get(f"{name}_lazy")
                if lazy is None:
                    summary = summarise()
                    lazy = False
                    if summary is not None:
                        shape = self.plan.params.input_shape if name == "x" else self.plan.params.output_shape
                        lazy = LazyTileMapping(int(np.prod(shape)), summary.per_tile,
                                               lambda: (self.x if name == "x" else self.y).mapping)
                        record_summary(lazy, summary, shape, self.device.machine.n_tiles)
                    self._built[f"{name}_lazy"] = lazy
            if lazy is not False:
                return lazy
        return self.x.mapping if name == "x" else self.y.mapping

    @property
    def x_scatter(self) -> StridedCopies:
        """The input's placement as strided copies straight from an NCHW array."""
        scatter = self._get("x")[1]
        return scatter if scatter is not None else self._get("x_scatter")

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


class _BiasCodelet:
    """out[e] += bias[channel of e] over a run of a tile's [B][G][K_j][OR][OC] block.

    ``act`` (0, or 1 ReLU / 2 ReLU6 for float32): execute mode's host fusion of the
    network's next activation into this pass (:func:`ipukern.nn.convops.conv_plan`); the
    simulated program and its cycles are unchanged."""

    name = "add_bias"

    def __init__(self, dtype: str):
        self.dt = DTYPE_CODE[dtype]
        self.act = 0
        #: the conv vertices writing these outputs add the bias themselves (:func:`fuse_bias`)
        self.fused = False

    def run(self, data, batch, n_threads):
        if self.fused:
            return
        from .._kernels import _vertices
        a = batch.args
        _vertices.add_bias(data, batch.tiles, a["out"], a["bias"], a["params"], self.dt, n_threads,
                           self.act)


def bias_codelets(program) -> list:
    """The bias codelets of a built conv program (those a host activation fuses into)."""
    return [b.codelet for st in program.steps if st.compute is not None
            for b in st.compute.batches if isinstance(b.codelet, _BiasCodelet)]



def build_direct_program(plan: ConvPlan, device: Device | None = None, *,
                         vertex: Any = None, input_owners: int = MAX_INPUT_OWNERS) -> ConvProgram:
    """Lay out ``plan`` (no expandDims: :func:`ipukern.conv.build_conv_program` builds
    every plan) on a fresh device (or the given empty one) and build its program.

    ``vertex`` (a :class:`~ipukern.graph.tilefn.TileFunction` ``f(a, b, c)``) replaces the
    built-in conv vertex for 1x1, stride-1, single-row convs with one conv group per tile
    (matmuls): per tile ``a`` is the weights (K_j, C), ``b`` the window (C, columns) and
    ``c`` the fp32 partials (K_j, columns), overwritten. Plan, exchanges and reductions are
    unchanged.

    The schedule is the module docstring's: one exchange of the inputs, then one superstep
    per serial slice (conv of slice j, finishing of slice j - 1, exchange of the next
    weights and of slice j's partials), then the last slice's finishing.
    """
    if plan.expand_dims:
        raise ValueError("an expandDims plan is built by ipukern.conv.build_conv_program")
    p = plan.params
    if plan.split.n_tiles > plan.machine.n_tiles:   # a hand-made plan; the planner never does this
        raise ValueError(f"plan split {plan.split.shape} needs {plan.split.n_tiles} tiles; "
                         f"{plan.machine.name} has {plan.machine.n_tiles}")
    dev = device if device is not None else Device(plan.machine)
    geo = geometry(p, plan.split, input_owners)
    buf = allocate_buffers(dev, plan, geo)
    S = plan.serial
    finishing = buf.need_partials or plan.bias
    if vertex is not None:
        _check_custom_vertex(plan, geo, buf.conv_out_dtype)
    # one codelet per kernel-block height (a kernel split into uneven blocks has two)
    codelets = {int(kh): ConvCodelet((int(kh), p.kernel_w), p.stride, p.dilation, p.dtype,
                                     buf.conv_out_dtype, name=f"conv<{p.dtype}->{buf.conv_out_dtype}>"
                                     + (f" {kh}x{p.kernel_w} kernel block" if kh != p.kernel_h else ""))
                for kh in np.unique(geo.KH)}

    first = [window_copies(geo, buf.win_off, buf.isz), _weight_copies(buf, 0)]
    if plan.bias:
        first.append(_bias_copies(buf))
    # PopLibs' accounting (ExchangeEstimator.hpp): the shared-bus 2x rate is for inputs only,
    # and only when the out-channel split is even (bus partners then hold the same inputs)
    bus = plan.machine.tiles_per_exchange_bus
    bus_ok = bus > 1 and plan.split.out_chans % bus == 0
    shared_bus = np.concatenate([np.full(t.nbytes.size, bus_ok and i == 0) for i, t in enumerate(first)])
    # every destination is a window, weight or bias receive buffer (each tensor's home
    # bytes are sources): receive-only
    steps = [Superstep("exchange inputs and weights", category="exchange",
                       exchange=_receive_only(_exchange(dev, CopyTable.concat(first),
                                                        "inputs+weights", shared_bus)))]
    n_st = len(buf.stages)
    bias_passes = [_BiasCodelet(p.dtype) for _ in range(S)] if plan.bias else None
    for j in range(S):
        batches = _conv_batches(buf, j, codelets, vertex)
        if bias_passes is not None and vertex is None and not buf.need_partials:
            fuse_bias(buf, j, batches, bias_passes[j])
        if j >= 1 and finishing:
            batches += _finish_batches(buf, j - 1, bias_passes)
        tabs = ([_weight_copies(buf, j + 1)] if j + 1 < S else []) + (
            [_stage_copies(buf, j, 1)] if buf.reduce_needed else [])
        xch = (_exchange(dev, CopyTable.concat(tabs), "weights+partials" if S > 1 else "partials",
                         False) if tabs else None)
        if xch is not None and j + 1 == S and buf.reduce_needed:
            xch.receive_only = True     # partials only, into the receive buffer

        name = f"conv slice {j}" if S > 1 else "conv"
        steps.append(Superstep(name, compute=dev.compute_set(batches, name=name), exchange=xch,
                               category="compute"))
        # intermediate reduction stages of this slice: sum, then send to the next stage
        for s_ in range(1, n_st):
            name = f"reduce stage {s_}" + (f" slice {j}" if S > 1 else "")
            steps.append(Superstep(
                name, compute=dev.compute_set([_stage_sum(buf, j, s_)], name=name),
                exchange=_receive_only(_exchange(dev, _stage_copies(buf, j, s_ + 1),
                                                 f"partials stage {s_ + 1}", False)),
                category="reduction"))
    if finishing:
        name = "reduce" if buf.reduce_needed else ("cast" if buf.cast_needed else "bias")
        steps.append(Superstep(name, compute=dev.compute_set(_finish_batches(buf, S - 1, bias_passes),
                                                             name=name),
                               category="reduction" if buf.reduce_needed else "cast"))
    return conv_program(plan, dev, dev.program(steps, label=p.describe()), buf,
                         lambda: _input_tensor(dev, buf))


def conv_program(plan: ConvPlan, dev: Device, program: Any, buf: ConvBuffers, x_builder: Any,
                  weight_shape: tuple | None = None) -> ConvProgram:
    """The ConvProgram of ``program`` over ``buf``: the input built by ``x_builder``, the
    weights (registered as ``weight_shape``), output and bias from the conv's buffers."""
    builders = {"x": x_builder, "w": lambda: _weight_tensor(dev, buf, shape=weight_shape),
                "y": lambda: _output_tensor(dev, buf),
                # the host scatter when x came from the column-split builder (which has none)
                "x_scatter": lambda: owned_input_intervals(buf.geo, buf.win_off, buf.isz)[4]}
    if plan.bias:
        builders["b"] = lambda: _bias_tensor(dev, buf)
    out = ConvProgram(plan, dev, program, buf.geo, builders)
    out.buffers = buf
    return out


# --------------------------------------------------------------------------- exchanges
def _weight_copies(buf: ConvBuffers, j: int) -> CopyTable:
    """Slice j's weights from the tile(s) storing them to every tile of its group
    (without a serial split the block's pieces are homed on several members: see
    :mod:`ipukern.conv.homes`)."""
    T, S = buf.geo.n_tiles, buf.S
    if S == 1:
        return spread_weight_copies(buf)
    st = buf.group_leader + (j % buf.M) * buf.Os               # tile storing slice j
    if S > 1:
        src = buf.store_off[st] + (j // buf.M) * buf.wj_elems.max(axis=1)[st] * buf.isz
    else:
        src = buf.w_off[st]
    nb = buf.wj_elems[:, j] * buf.isz
    keep = (nb > 0) & ((np.arange(T) != st) | (S > 1))
    t = np.flatnonzero(keep)
    return CopyTable(st[t], src[t], t, buf.w_off[t], nb[t])


def _stage_peers(buf: ConvBuffers, s: int, t: np.ndarray):
    """Tiles t's stage-s digit m, and a function giving the group member with digit k
    (stage s groups the in-chan tiles that differ only in digit s; see conv.reduce)."""
    stride = int(np.prod(buf.stages[:s - 1], dtype=np.int64))   # in-chan distance of digit s
    m = (buf.geo.ii[t] // stride) % buf.stages[s - 1]
    i_stride = buf.M * buf.Os            # tile-index distance between in-chan blocks
    return m, lambda k: t + (k - m) * stride * i_stride


def _stage_copies(buf: ConvBuffers, j: int, s: int) -> CopyTable:
    """Stage s of slice j's reduce-scatter: every tile receives, from each other member of
    its stage-s group, that member's stage s-1 sums over the tile's stage-s range, into
    receive slot k (k = the sender's digit, less one past the receiver's own)."""
    psz, f = buf.psz, buf.stages[s - 1]
    t = np.arange(buf.geo.n_tiles)
    lo, hi = buf.stage_range(j, t, s)
    prev_lo, _ = buf.stage_range(j, t, s - 1)
    m, peer = _stage_peers(buf, s, t)
    tabs = []
    for k in range(f):
        send = (m != k) & (hi > lo)
        d = t[send]
        src = peer(k)[send]
        slot = np.where(k < m[send], k, k - 1)
        tabs.append(CopyTable(
            src, buf.stage_buf(j, src, s - 1) + (lo[send] - prev_lo[send]) * psz,
            d, buf.recv_off[d] + slot * buf.stage_stride[s][d] * psz, (hi - lo)[send] * psz))
    return CopyTable.concat(tabs)


def _stage_sum(buf: ConvBuffers, j: int, s: int) -> VertexBatch:
    """Stage s of slice j on every tile with outputs: sum its own stage s-1 piece (in place)
    and the f - 1 received ones, in digit order (deterministic), into its stage-s buffer;
    the last stage writes the output type, the others the partials type."""
    p, f = buf.plan.params, buf.stages[s - 1]
    T = buf.geo.n_tiles
    lo, hi = buf.stage_range(j, np.arange(T), s)
    t = np.flatnonzero(hi > lo)
    lo, hi = lo[t], hi[t]
    prev_lo, _ = buf.stage_range(j, t, s - 1)
    m, _ = _stage_peers(buf, s, t)
    own = buf.stage_buf(j, t, s - 1) + (lo - prev_lo) * buf.psz
    srcs = [np.where(k == m, own, buf.recv_off[t]
                     + np.where(k < m, k, k - 1) * buf.stage_stride[s][t] * buf.psz)
            for k in range(f)]
    last = s == len(buf.stages)
    out_dt = p.dtype if last else p.partials
    stage = f" (stage {s} of {len(buf.stages)})" if len(buf.stages) > 1 else ""
    return sum_rows(buf.plan.machine, t, buf.stage_buf(j, t, s), srcs, hi - lo, p.partials,
                    out_dt, why=f"reduce {f} partials of {int((hi - lo).max())} outputs "
                                f"{p.partials}->{out_dt}{stage}")


def _bias_owner(buf: ConvBuffers) -> np.ndarray:
    """The (in-chan 0, first batch/row/col) tile of each (group, out-chan) block."""
    s, geo = buf.plan.split, buf.geo
    return ((geo.gi * s.reduction) * s.batch * s.rows * s.cols) * s.out_chans + geo.oi


def _bias_copies(buf: ConvBuffers) -> CopyTable:
    """The owner's bias block copied to every other tile of its (group, out-chan) block."""
    geo = buf.geo
    owner = _bias_owner(buf)
    t = np.flatnonzero(owner != np.arange(geo.n_tiles))
    return CopyTable(owner[t], buf.bias_off[owner[t]], t, buf.bias_off[t],
                     geo.G[t] * geo.K[t] * buf.isz)


def _exchange(dev: Device, table: CopyTable, name: str, shared_bus: Any):
    # the builder's own tables (tiles, offsets of its allocations): not re-validated
    return dev.exchange(table.src_tile, table.src_off, table.dst_tile, table.dst_off,
                        table.nbytes, name=name, shared_bus=shared_bus, validate=False)


def _receive_only(xch):
    xch.receive_only = True
    return xch


# --------------------------------------------------------------------------- vertices
def _conv_dst(buf: ConvBuffers, j: int, t: np.ndarray) -> np.ndarray:
    """Where slice j's conv vertex writes: the partials buffer, or the output itself."""
    if buf.need_partials:
        return buf.part_buf(j, t)
    return buf.out_off[t] + buf.out_starts[t, j] * buf.isz


def _conv_batches(buf: ConvBuffers, j: int, codelets: dict[int, ConvCodelet],
                  vertex: Any) -> list[VertexBatch]:
    """Slice j's conv vertex on every tile with out-chans in it (or the user's vertex):
    one batch per kernel-block height."""
    geo = buf.geo
    has = buf.Kj[:, j] > 0
    return [_conv_batch(buf, j, np.flatnonzero(has & (geo.KH == kh)), codelet, vertex)
            for kh, codelet in codelets.items()]


def _conv_batch(buf: ConvBuffers, j: int, t: np.ndarray, codelet: ConvCodelet,
                vertex: Any) -> VertexBatch:
    """Slice j's conv vertex on tiles ``t`` (one kernel-block height)."""
    geo, m = buf.geo, buf.plan.machine
    Kj = buf.Kj[:, j]
    dst = _conv_dst(buf, j, t)
    if vertex is not None:
        views = [ArgViews("a", "float32", buf.w_off[t], np.stack([Kj[t], geo.C[t]], axis=1)),
                 ArgViews("b", "float32", buf.win_off[t], np.stack([geo.C[t], geo.WC[t]], axis=1)),
                 ArgViews("c", "float32", dst, np.stack([Kj[t], geo.OC[t]], axis=1))]
        return vertex.vertex_batch(m, t, views, name=f"{vertex.name} (user vertex)")
    dims = np.stack([geo.B[t], geo.G[t], geo.C[t], Kj[t], geo.WR[t], geo.WC[t],
                     geo.OR[t], geo.OC[t], geo.row_org[t], geo.col_org[t]], axis=1)
    cycles, why = _conv_cycles(buf.plan, geo, t, Kj[t])
    out_sz = DTYPES[buf.conv_out_dtype].itemsize
    return VertexBatch(codelet, t,
                       {"win": buf.win_off[t], "w": buf.w_off[t], "out": dst,
                        "dims": np.ascontiguousarray(dims, dtype=np.int64)},
                       cycles,
                       regions=[(buf.win_off[t], geo.window_elems()[t] * buf.isz),
                                (buf.w_off[t], buf.wj_elems[t, j] * buf.isz),
                                (dst, buf.out_j[t, j] * out_sz)],
                       why=why)


def fuse_bias(buf: ConvBuffers, j: int, batches: list[VertexBatch], bias_pass: _BiasCodelet) -> None:
    """Let slice j's conv vertices (``batches``) add the bias as they write the output.

    Host execution only: the bias pass (and the activation ``bias_pass.act``) is done by
    the vertices that write the outputs it reads, right after computing them, while they
    are in the cache, with the add_bias vertex's arithmetic, so the bits are the same;
    ``bias_pass`` itself then runs as a no-op and the simulated program, its compute sets
    and cycles are unchanged. (ResNet-50 fp32 batch 8, one thread: the separate pass was 4%
    of a forward's host time, most of it re-reading outputs from memory.)

    Here the conv vertex writes the final output (no partials: no reduction, no cast), and
    slice j's bias batch covers exactly the conv vertices' outputs (tiles with out_j > 0, at
    the same offset, out_j = B*G*Kj*OR*OC elements, e0 = 0): ipk_epi in ipk_conv.h. With
    partials, :func:`_finish_batches` gives the pass to the sum (reduction or cast) batch
    writing the outputs instead (the ``bias_off``/``bias_prm`` epilogue of ``sum_rows``)."""
    geo = buf.geo
    for b in batches:
        t = b.tiles.astype(np.int64)
        b.args["bias_off"] = np.ascontiguousarray(buf.bias_off[t], dtype=np.int64)
        b.args["bias_prm"] = np.ascontiguousarray(np.stack([geo.K[t], buf.ks[t, j]], axis=1),
                                                  dtype=np.int64)
        b.args["bias_pass"] = bias_pass
        # the vertices now read the bias too: declared with everything else they touch
        b.regions = [*b.regions, (buf.bias_off[t], geo.G[t] * geo.K[t] * buf.isz)]
    bias_pass.fused = True


def _finish_batches(buf: ConvBuffers, j: int, bias_passes: list | None) -> list[VertexBatch]:
    """Slice j's finishing: reduce (or cast) its partials into the output, then the bias
    (codelet ``bias_passes[j]``)."""
    p, m = buf.plan.params, buf.plan.machine
    out = []
    if buf.reduce_needed:
        n_st = len(buf.stages)
        batch = _stage_sum(buf, j, n_st)
        out.append(batch)
        t = batch.tiles.astype(np.int64)
        dst = buf.stage_buf(j, t, n_st)
        e0, hi = buf.stage_range(j, t, n_st)
        n_el = hi - e0
    else:
        t = np.flatnonzero(buf.out_j[:, j] > 0)
        dst = buf.out_off[t] + buf.out_starts[t, j] * buf.isz
        e0, n_el = np.zeros(t.size, np.int64), buf.out_j[t, j]
        if buf.cast_needed:
            out.append(sum_rows(m, t, dst, [buf.part_buf(j, t)], n_el, p.partials, p.dtype,
                                why=f"cast {int(n_el.max())} partials {p.partials}->{p.dtype}"))
    if buf.plan.bias:
        bias = _bias_batch(buf, j, t, dst, e0, n_el, bias_passes[j])
        if out:     # the sum (reduction or cast) writing exactly these outputs does the pass
            out[-1].args.update(bias_off=np.ascontiguousarray(bias.args["bias"], np.int64),
                                bias_prm=bias.args["params"], bias_pass=bias.codelet)
            bias.codelet.fused = True
        out.append(bias)
    return out


def _bias_batch(buf: ConvBuffers, j: int, t: np.ndarray, dst: np.ndarray, e0: np.ndarray,
                n_el: np.ndarray, codelet: _BiasCodelet) -> VertexBatch:
    """Add the bias to outputs [e0, e0 + n_el) of slice j's block on tiles t (at dst)."""
    p, geo = buf.plan.params, buf.geo
    params = np.stack([e0, n_el, geo.OR[t] * geo.OC[t], buf.Kj[t, j], geo.G[t], geo.K[t],
                       buf.ks[t, j]], axis=1).astype(np.int64)
    return VertexBatch(codelet, t,
                       {"out": dst, "bias": buf.bias_off[t], "params": params},
                       elementwise_cycles_array(buf.plan.machine, n_el, p.dtype, 2),
                       regions=[(dst, n_el * buf.isz),
                                (buf.bias_off[t], geo.G[t] * geo.K[t] * buf.isz)],
                       why=f"add bias to {int(n_el.max())} outputs")


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


def _conv_cycles(plan: ConvPlan, geo: TileGeometry, t: np.ndarray, K: np.ndarray):
    """Per-vertex cycles (vectorised) and the explanation for the busiest vertex."""
    p = plan.params
    m = plan.machine
    vb, vh, vw = vertex_field(p, geo.B[t], geo.OR[t], geo.OC[t])
    cyc = estimators.conv_vertex_cycles_array(m, plan.method, conv_groups=geo.G[t],
                                            in_chans=geo.C[t], out_chans=K, batch=vb,
                                            out_h=vh, out_w=vw, kernel_h=geo.KH[t],
                                            kernel_w=p.kernel_w, stride=p.stride)
    i = int(np.argmax(cyc))
    tile = TileConv(conv_groups=int(geo.G[t][i]), in_chans=int(geo.C[t][i]), out_chans=int(K[i]),
                    batch=int(vb[i]), out_h=int(vh[i]), out_w=int(vw[i]),
                    kernel_h=int(geo.KH[t][i]),
                    kernel_w=p.kernel_w, stride=p.stride)
    vc = estimators.conv_vertex_cycles(m, plan.method, tile)
    return cyc, f"{plan.method.label()}: {vc.why}"


# --------------------------------------------------------------------------- tensors
def _input_tensor(dev: Device, buf: ConvBuffers) -> tuple[TileTensor, StridedCopies]:
    """The input (NHCW) as the windows' owned cores hold it, and its strided host scatter
    (None when the mapping came from the column-split builder: built on first use)."""
    p = buf.plan.params
    n_, c_, h_, w_ = p.input_shape
    shape = (n_, h_, c_, w_)
    cols = column_split_input(buf.geo, buf.win_off, buf.isz)
    if cols is not None:
        return _unchecked_view(dev, "x", shape, p.dtype, cols), None
    *cols, scatter = owned_input_intervals(buf.geo, buf.win_off, buf.isz)
    return dev.add_tensor_view("x", shape, p.dtype, *cols), scatter


def _unchecked_view(dev: Device, name: str, shape, dtype: str, cols: ColumnSplitMapping) -> TileTensor:
    """A view from the column-split builders (``conv.mapping``): sorted, covering and in
    bounds by construction (tests/conv/test_mapping.py compares them with the checked
    general builders), so registering it skips add_tensor_view's O(n) checks."""
    n = int(np.prod(shape, dtype=np.int64))
    mapping = TileMapping._unchecked(n, cols.tile, cols.start, cols.count)
    record_summary(mapping, cols.summary, shape, dev.machine.n_tiles)
    return dev._register_view(name, shape, dtype, mapping, cols.offset)


def _weight_tensor(dev: Device, buf: ConvBuffers, shape: tuple | None = None) -> TileTensor:
    """The weight tensor's mapping: slice j of each group lives on member j % M (in the
    store when serial), else pieces of the block in the working buffers of several
    members (:func:`ipukern.conv.homes.spread_weight_runs`). ``shape``: a reshape of the
    conv's weights to register instead (an expandDims plan's original weights)."""
    plan, geo, isz = buf.plan, buf.geo, buf.isz
    if plan.serial == 1:
        return dev.add_tensor_view("w", shape or plan.params.weight_shape, plan.params.dtype,
                                   *spread_weight_runs(buf))
    ks, Kj, M, Os = buf.ks, buf.Kj, buf.M, buf.Os
    p = plan.params
    S = plan.serial
    kk = p.kernel_h * p.kernel_w
    leaders = np.flatnonzero(buf.group_leader == np.arange(geo.n_tiles))
    tiles, starts, counts, offs, leads = [], [], [], [], []
    slice_stride = buf.wj_elems.max(axis=1) * isz
    for j in range(S):
        st = leaders + (j % M) * Os
        base = buf.store_off[st] + (j // M) * slice_stride[st] if S > 1 else buf.w_off[st]
        # one run per (group, out-chan); when the tile holds every input channel of a
        # group, a group's out-chans are contiguous in both layouts: one run per group
        # (a tile with fewer out-chan grains than serial slices has empty slices: no runs)
        whole = geo.C[leaders] == p.in_per_group
        per_g = np.where(whole, Kj[leaders, j] > 0, Kj[leaders, j])
        li, pos = expand(geo.G[leaders] * per_g)
        L = leaders[li]
        K_ = Kj[L, j]
        g_l = pos // per_g[li]
        k_l = np.where(whole[li], 0, pos - g_l * per_g[li])
        co = (geo.g0[L] + g_l) * p.out_per_group + geo.k0[L] + ks[L, j] + k_l
        run = geo.C[L] * kk
        tiles.append(st[li])
        starts.append((co * p.in_per_group + geo.c0[L]) * kk)
        counts.append(np.where(whole[li], K_ * run, run))
        offs.append(base[li] + (g_l * K_ + k_l) * (geo.C[L] * geo.KH[L] * p.kernel_w) * isz)
        leads.append(L)
    runs = kernel_block_runs(geo, _cat(leads), _cat(tiles), _cat(starts), _cat(counts),
                             _cat(offs), isz)
    return dev.add_tensor_view("w", shape or p.weight_shape, p.dtype, *runs)


def _output_tensor(dev: Device, buf: ConvBuffers) -> TileTensor:
    """The output tensor's mapping: every slice's [B][G][K_j][OR][OC] block, by rows (or
    whole channel planes when a tile holds full-width rows), cut into chunks when reduced."""
    plan, geo, osz = buf.plan, buf.geo, buf.isz
    ks, Kj, out_off = buf.ks, buf.Kj, buf.out_off
    p = plan.params
    cols = column_split_output(geo, out_off, ks, osz, dev.machine.n_tiles)
    if cols is not None:
        return _unchecked_view(dev, "y", p.output_shape, p.dtype, cols)
    T = geo.n_tiles
    R = plan.split.reduction
    full_rows = geo.OC == p.out_w
    tiles, starts, counts, offs = [], [], [], []
    # with R > 1 all in-chan tiles of a block describe the same outputs: use in-chan 0's
    describe = (geo.ii == 0) if R > 1 else np.ones(T, dtype=bool)
    # a tile holding whole output planes has each (image, group)'s K_j channels contiguous
    full_planes = full_rows & (geo.OR == p.out_h)
    runs_per_plane = np.where(full_rows, 1, geo.OR)
    plane_elems = geo.OR * geo.OC
    for j in range(plan.serial):
        # runs: one per (b, g) if whole planes, per (b, g, k) if full rows, else per
        # (b, g, k, row); found per plane (b, g, k-run) first, then per row of the plane
        # (a plane's runs differ only in their row: up to 400k runs, few planes)
        k_runs = np.where(full_planes, 1, Kj[:, j])             # runs per (b, g) over k
        pt, pq = expand(np.where(describe, geo.B * geo.G * k_runs, 0))
        q, k = np.divmod(pq, k_runs[pt])
        b, g = np.divmod(q, geo.G[pt])
        ch = (geo.g0[pt] + g) * p.out_per_group + geo.k0[pt] + ks[pt, j] + k
        p_start = (((geo.n0[pt] + b) * p.out_channels + ch) * p.out_h + geo.y0[pt]) * p.out_w + geo.x0[pt]
        count_t = np.where(full_planes, Kj[:, j] * plane_elems,
                           np.where(full_rows, plane_elems, geo.OC))
        rpp = runs_per_plane[pt]
        ri, y = expand(rpp)
        ti = pt[ri]
        start = p_start[ri] + y * p.out_w
        count = count_t[ti]
        e0 = ((pq * rpp)[ri] + y) * count                      # element position in the block
        if R == 1:
            tiles.append(ti)
            starts.append(start)
            counts.append(count)
            offs.append(out_off[ti] + (buf.out_starts[ti, j] + e0) * osz)
            continue
        # cut each run at the final ranges of the block's R in-chan tiles (conv.reduce)
        rr, cc, lo, hi, r_lo = _cut_at_final_ranges(buf, buf.out_j[ti, j], e0, e0 + count)
        src_tile = ti[rr]
        red_tile = src_tile + (cc - geo.ii[src_tile]) * (buf.M * buf.Os)
        tiles.append(red_tile)
        starts.append(start[rr] + (lo - e0[rr]))
        counts.append(hi - lo)
        offs.append(out_off[red_tile] + (j * buf.chunk_stride[red_tile] + lo - r_lo) * osz)
    return dev.add_tensor_view("y", p.output_shape, p.dtype, _cat(tiles), _cat(starts),
                               _cat(counts), _cat(offs))


def _cut_at_final_ranges(buf: ConvBuffers, P: np.ndarray, a: np.ndarray, b: np.ndarray):
    """Cut runs [a, b) of blocks of P outputs at the final reduction ranges of the block's
    in-chan tiles. Returns (run index, in-chan index, piece lo, piece hi, that tile's range
    start) per non-empty piece, by run. The ranges partition [0, P) in digit-reversed order,
    so each run finds its first and last range by binary search over the sorted starts: of
    all the block sizes at once, each size's sorted starts shifted past the previous
    size's (a run's search stays within its own size's)."""
    R, n_st = buf.R, len(buf.stages)
    sizes, u = np.unique(P, return_inverse=True)
    u = u.reshape(-1)
    r_lo, r_hi = stage_range(sizes[:, None], np.arange(R)[None, :], buf.stages, n_st)
    order = np.lexsort((r_hi, r_lo), axis=-1)                  # empty ranges first on ties
    shift = (np.arange(sizes.size) * (int(sizes.max()) + 1))[:, None]
    starts = (np.take_along_axis(r_lo, order, axis=1) + shift).reshape(-1)
    base = u * R
    first = np.searchsorted(starts, a + shift[u, 0], side="right") - 1
    last = np.searchsorted(starts, b + shift[u, 0], side="left") - 1
    run, k = expand(np.maximum(last - first + 1, 0))
    flat = first[run] + k                                      # (size, sorted position)
    c = order.reshape(-1)[flat]
    cs = base[run] + c                                         # (size, in-chan tile)
    lo = np.maximum(a[run], r_lo.reshape(-1)[cs])
    hi = np.minimum(b[run], r_hi.reshape(-1)[cs])
    keep = lo < hi
    out = (run, c, lo, hi, r_lo.reshape(-1)[cs])
    return out if keep.all() else tuple(x[keep] for x in out)


def _bias_tensor(dev: Device, buf: ConvBuffers) -> TileTensor:
    """Bias [G][K] per tile, owned by one tile of each (group, out-chan) block."""
    p, geo = buf.plan.params, buf.geo
    owner = _bias_owner(buf)
    own = np.flatnonzero(owner == np.arange(geo.n_tiles))
    li, g_l = expand(geo.G[own])
    L = own[li]
    start = (geo.g0[L] + g_l) * p.out_per_group + geo.k0[L]
    off = buf.bias_off[L] + g_l * geo.K[L] * buf.isz
    return dev.add_tensor_view("bias", (p.out_channels,), p.dtype, L, start, geo.K[L], off)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
