"""Executable backward passes of the network's vector layers, on the tiles.

Each builder returns the :class:`PassRow` list of one forward step's backward: the rows'
records are what :func:`ipukern.estimate_network` (``training=True``) costs and their
``runs`` are what :func:`ipukern.nn.train_step` executes, so estimate and execution are one
program. Gradients are :class:`~ipukern.nn.layout.Resident` tensors (rows = tiles):

- the output gradient arrives in the layout of the forward op's output;
- the op computes its input gradients in the layouts its forward pass *wanted* (the inputs'
  stashed activations are re-fetched into that layout by the forward's own rearrangement,
  costed again, where the op needs them);
- each input gradient goes back to its producer's layout by the inverse rearrangement
  exchange, and is added to the gradient already there when the producer has several
  consumers (a popops add) - rows ``<layer>.grad_rearrange<k>`` / ``.grad_accumulate<k>``.

Per-channel parameter gradients (batch norm, layer norm, biases, position embeddings) and
batch norm's training statistics are cross-tile reductions
(:class:`~ipukern.nn.tile_reduce.ChannelReduce`). Every tile's elements are one row of a
(n_tiles, elements) array and one NumPy expression updates all tiles at once (no Python
loop over tiles). Cycle models: :mod:`ipukern.nn.grad_cycles` (popnn NonLinearityGrad,
Max/SumPoolingGrad), :mod:`ipukern.nn.cycles` (popops element-wise, reduce, LossTransform).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..core import SuperstepRecord
from . import cycles
from .grad_cycles import nonlinearity_grad_cycles, pool_grad_cycles
from .layout import Layout, Resident, linear_layout
from .ops import SELU_ALPHA, SELU_SCALE, act_fn, compute_record
from .bn_stable import bn_stats_stable_row, finish_statistics
from .tile_reduce import channel_reduce, plane_reduce

__all__ = ["EXECUTABLE", "GradEnv", "PassRow", "accumulate_flags", "bn_stats_row", "deliver_rows",
           "flush_rows", "vector_grad_rows"]

#: ops whose backward :func:`vector_grad_rows` executes
EXECUTABLE = ("activation", "add", "batchnorm", "maxpool", "avgpool", "global_avgpool", "reshape",
              "flatten", "permute", "softmax", "layernorm", "softmax_cross_entropy", "embedding",
              "add_param", "scale_channels", "mul", "exp")


@dataclass
class PassRow:
    """One backward-side pass of one layer (a row of the training profile); ``runs``
    execute it on a :class:`GradEnv` (empty: cost only)."""

    name: str
    op: str
    pass_: str
    method: str
    records: list[SuperstepRecord]
    flops: int
    #: per-tile working bytes while the pass runs (its own buffers)
    total_bytes: np.ndarray
    info: dict = field(default_factory=dict)
    runs: tuple[Callable[[GradEnv], None], ...] = ()

    @property
    def cycles(self) -> int:
        return sum(r.total_cycles for r in self.records)


class GradEnv:
    """Execution state of one training step: forward residents, gradients, parameters."""

    def __init__(self, machine, live: dict, params: dict, feeds: dict, kw: dict):
        self.machine, self.nt = machine, machine.n_tiles
        self.live = live            # node -> Resident (stashed activations) or host array
        self.grads: dict[str, Resident] = {}
        self.tmp: dict[tuple, Resident] = {}
        self.params = params
        self.pgrads: dict[str, np.ndarray] = {}
        self.feeds = feeds
        self.kw = kw
        self.bn: dict[str, tuple] = {}
        #: batch-norm statistics across replicas: ``bn_group`` replicas share them; a
        #: layer's local per-channel sums wait in ``bn_sums`` at the sync point and the
        #: driver (:mod:`ipukern.systems.train_run`) puts the group's sums in ``bn_reduced``
        self.bn_group = 1
        self.bn_sums: dict[str, np.ndarray] = {}
        self.bn_reduced: dict[str, np.ndarray] = {}
        self.running: dict[str, np.ndarray] = {}
        self.bn_affine: list[np.ndarray] | None = None
        self.cycles = 0

    def p(self, step, name: str) -> np.ndarray:
        return np.asarray(self.params[f"{step.node}.{name}"], np.float32)

    def grad(self, step) -> Resident:
        g = self.grads.get(step.node)
        if g is None:       # no gradient reaches this output: it is zero
            g = self.grads[step.node] = Resident(step.plan.output, self.nt)
        return g

    def group_sums(self, node: str, count: int) -> tuple[np.ndarray, np.ndarray, int]:
        """A batch norm's ``(local sums, sums over its replica group, elements per channel
        in the group)`` (the local ones when no group sums were delivered)."""
        local = self.bn_sums.pop(node)
        got = self.bn_reduced.pop(node, None)
        return (local, local, count) if got is None else (local, got, count * self.bn_group)

    def fetch(self, step, k: int) -> Resident:
        """Input k's stashed activation in the layout the forward op wanted."""
        return step.rearrs[k].run(self.live[step.srcs[k]])


def _f(r: Resident) -> np.ndarray:
    return r.view()


def _new(layout: Layout, nt: int, values: np.ndarray) -> Resident:
    r = Resident(layout, nt)
    with np.errstate(all="ignore"):
        r.view()[...] = values
    return r


#: activations whose popnn input gradient is computed from the *output*
#: (popnn/NonLinearity.hpp, ``nonLinearityInputGradient``: "act: the output activations
#: from the non-linearity. For the GELU and SWISH non-linearity only this is the input")
#: SELU's derivative is a function of its output too (``lambda`` where y > 0, else
#: ``y + lambda * alpha``), as TensorFlow's SeluGrad computes it from the activations
FROM_OUTPUT = ("relu", "relu6", "sigmoid", "tanh", "selu")


def act_grad(kind: str, x: np.ndarray) -> np.ndarray:
    """d act(x) / dx from the input (float32; GELU: the tanh form)."""
    with np.errstate(all="ignore"):
        if kind == "relu":
            return (x > 0).astype(np.float32)
        if kind == "relu6":
            return ((x > 0) & (x < 6)).astype(np.float32)
        if kind in ("sigmoid", "silu"):
            s = act_fn("sigmoid", x)
            return s * (1 - s) if kind == "sigmoid" else s * (1 + x * (1 - s))
        if kind == "tanh":
            t = np.tanh(x)
            return 1 - t * t
        if kind == "gelu":
            c = np.float32(np.sqrt(2 / np.pi))
            k = np.float32(0.044715)
            t = np.tanh(c * (x + k * x * x * x))
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x)
    raise ValueError(f"no derivative for activation {kind!r}")


def _out_grad(kind: str, y: np.ndarray) -> np.ndarray:
    """The derivative from the output, for the activations popnn differentiates that way."""
    if kind == "relu":
        return (y > 0).astype(np.float32)
    if kind == "relu6":
        return ((y > 0) & (y < 6)).astype(np.float32)
    if kind == "sigmoid":
        return y * (1 - y)
    if kind == "selu":
        return np.where(y > 0, SELU_SCALE, y + SELU_SCALE * SELU_ALPHA).astype(np.float32)
    return 1 - y * y          # tanh


def _fetch_records(step, k: int) -> list[SuperstepRecord]:
    r = step.rearrs[k]
    return [] if r is None or r.identity else [r.record()]


def accumulate_flags(steps) -> list[list[bool]]:
    """Per step and input: whether the input's gradient is added to one already delivered
    (the backward runs steps in reverse; the first delivery of a tensor writes it)."""
    last_use: dict[str, int] = {}
    for i, s in enumerate(steps):
        for src in s.srcs:
            last_use[src] = i
    return [[last_use[src] > i or src in s.srcs[:k] for k, src in enumerate(s.srcs)]
            for i, s in enumerate(steps)]


def deliver_rows(step, k: int, ctx, accumulate: bool, *, rearrange: bool = True) -> list[PassRow]:
    """Rows that bring input k's gradient (``env.tmp[(node, k)]``, in the wanted layout, or
    in the producer's layout when ``rearrange`` is False) to the producer, adding it to a
    gradient already there."""
    from .program import _rearrangement
    m, nt = ctx.machine, ctx.machine.n_tiles
    r = step.rearrs[k]
    src_lay, key, src = r.src, (step.node, k), step.srcs[k]
    rows = []
    if rearrange and not r.identity:
        inv = _rearrangement(m, r.dst, src_lay, f"{step.name}: grad -> {src}")

        def move(env):
            env.tmp[key] = inv.run(env.tmp[key])
        rows.append(PassRow(f"{step.name}.grad_rearrange{k}", step.op, "bwd", "rearrange", [inv.record()],
                            0, src_lay.bytes_per_tile(nt), runs=(move,)))

    def place(env):
        g = env.tmp.pop(key)
        cur = env.grads.get(src)
        if cur is None:
            env.grads[src] = Resident(src_lay, nt, g.data.copy())
        else:
            _f(cur)[...] += _f(g)[:, :cur.slot_elems]

    if accumulate:
        n = src_lay.elems_per_tile(nt)
        rec = compute_record(m, f"{step.name}.grad_accumulate{k}", cycles.binary_cycles(m, n, ctx.dtype, 2),
                             f"popops add: {int(n.max())} gradient elements per tile")
        return rows + [PassRow(f"{step.name}.grad_accumulate{k}", step.op, "bwd", "BinaryOp1D", [rec],
                               int(src_lay.n_elems), src_lay.bytes_per_tile(nt), runs=(place,))]
    return rows + [PassRow("", step.op, "bwd", "place", [], 0, np.zeros(nt, np.int64), runs=(place,))]


def _row(ctx, step, method, records, runs, flops=0, nbytes=None, suffix="grad", pass_="bwd",
         info=None) -> PassRow:
    nt = ctx.machine.n_tiles
    return PassRow(f"{step.name}.{suffix}", step.op, pass_, method, records, int(flops),
                   np.zeros(nt, np.int64) if nbytes is None else nbytes, info=dict(info or {}),
                   runs=tuple(runs))


def _rec(ctx, step, cyc, why, suffix="grad") -> SuperstepRecord:
    return compute_record(ctx.machine, f"{step.name}.{suffix}", cyc, why)


def _to_input(step, k, nt):
    """Store a (n_tiles, slot) gradient for input k in the wanted layout."""
    lay = step.rearrs[k].dst if step.rearrs[k] is not None else step.plan.inputs[k]

    def put(env, values):
        env.tmp[(step.node, k)] = _new(lay, nt, values)
    return put


# --------------------------------------------------------------------------- builders
def _activation(step, ctx):
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    kind = step.layer.kind
    n = step.plan.output.elems_per_tile(nt)
    put = _to_input(step, 0, nt)

    def run(env):      # from the output where popnn does (FROM_OUTPUT): the input may be freed
        d = (_out_grad(kind, _f(env.live[step.node])) if kind in FROM_OUTPUT
             else act_grad(kind, _f(env.fetch(step, 0))))
        put(env, _f(env.grad(step)) * d)
    rec = _rec(ctx, step, nonlinearity_grad_cycles(m, n, kind, dt),
               f"popnn NonLinearityGrad {kind}<{dt}>: {int(n.max())} elements per tile")
    return [_row(ctx, step, "NonLinearityGrad", [rec], [run], 2 * step.plan.output.n_elems,
                 step.plan.output.bytes_per_tile(nt))]


def _add(step, ctx):
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    act, alpha = step.layer.act, step.layer.alpha
    n = step.plan.output.elems_per_tile(nt)
    lays = [step.rearrs[k].dst for k in range(2)]
    from_out = act is None or act in FROM_OUTPUT
    recs = []
    if act is not None:
        recs = ([] if from_out else _fetch_records(step, 1)
                + [_rec(ctx, step, cycles.binary_cycles(m, n, dt, 2), "recompute the pre-activation sum")])
        recs.append(_rec(ctx, step, nonlinearity_grad_cycles(m, n, act, dt),
                         f"popnn NonLinearityGrad {act} (fused): {int(n.max())} elements per tile"))

    def run(env):
        g = env.grad(step)
        if act is not None:
            if from_out:
                d = _out_grad(act, _f(env.live[step.node]))
            else:
                d = act_grad(act, _f(env.fetch(step, 0)) + _f(env.fetch(step, 1)) * np.float32(alpha))
            g = _new(step.plan.output, nt, _f(g) * d)
        env.tmp[(step.node, 0)] = Resident(lays[0], nt, g.data)
        env.tmp[(step.node, 1)] = Resident(lays[1], nt, g.data) if alpha == 1.0 else \
            _new(lays[1], nt, _f(g) * np.float32(alpha))
    if alpha != 1.0:                    # d(a + alpha b)/db: the gradient scaled, one more pass
        recs.append(_rec(ctx, step, cycles.binary_cycles(m, n, dt, 1),
                         f"popops mul: the second operand's gradient times alpha {alpha:g}"))
    return [_row(ctx, step, "NonLinearityGrad" if act else "fan-out", recs, [run])]


def _views(step, ctx):
    nt = ctx.machine.n_tiles
    lay = step.rearrs[0].dst

    def run(env):
        env.tmp[(step.node, 0)] = Resident(lay, nt, env.grad(step).data)
    return [_row(ctx, step, "view", [], [run])]


def _reduce_pool(step, ctx):
    """Gradient of a whole-field average pool planned as a reduce: as popnn
    ``poolInputGradient`` does it (``substPoolingGradientWithBroadcast``), a popops mul of
    the (N, C) gradient by 1/(H W) where it lives (the reduce's owner tiles), then a copy
    of its broadcast into the input's layout: each (tile, plane) pair receives its plane's
    value once (the broadcast stage of the forward's ChannelReduce, the same exchange
    model) and an on-tile copy fills the tile's elements."""
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    N, C, H, W = step.in_shapes[0]
    lay = step.rearrs[0].dst if step.rearrs[0] is not None else step.plan.inputs[0]
    out = step.plan.output
    cr = plane_reduce(m, lay, N * C, H * W, broadcast=1, name=f"{step.name}.grad broadcast")
    n_in = lay.elems_per_tile(nt)
    n_out = out.elems_per_tile(nt)
    recs = [_rec(ctx, step, cycles.binary_cycles(m, n_out, dt, 2),
                 f"popops mul<{dt}>: {int(n_out.max())} pooled gradients x 1/{H * W} per owner tile",
                 suffix="grad scale"),
            cr.records[-1],
            _rec(ctx, step, cycles.copy_cycles(m, n_in, dt),
                 f"broadcast copy: {int(n_in.max())} input-gradient elements per tile")]
    s = np.float32(1.0 / (H * W))

    def run(env):
        g = env.grad(step).to_host().reshape(N * C, 1, 1)
        gx = np.zeros((N * C, 1, 1), np.float32)
        gx += g * s                 # the planes path's arithmetic (0 + g s), bit for bit
        full = np.broadcast_to(gx, (N * C, H, W)).reshape(N, C, H, W)
        with np.errstate(all="ignore"):
            env.tmp[(step.node, 0)] = Resident.from_host(lay, nt, full)
    return [_row(ctx, step, "mul+broadcast copy", recs, [run], step.plan.flops,
                 lay.bytes_per_tile(nt) + cr.total_bytes)]


def _pool(step, ctx):
    if step.plan.method == "popops::reduce":
        return _reduce_pool(step, ctx)
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    L = step.layer
    N, C, H, W = step.in_shapes[0]
    Ho, Wo = step.out_shape[2:]
    if step.op == "global_avgpool":
        (kh, kw), (sh, sw), (ph, pw), mx = (H, W), (1, 1), (0, 0), False
        cyc_k = (1, 1, 1, 1)
    else:
        (kh, kw), (sh, sw), (ph, pw), mx = L.kernel_size, L.stride, L.padding, L.kind == "max"
        cyc_k = (kh, kw, sh, sw)
    want = step.rearrs[0].dst
    planes = want.elems_per_tile(nt) // (H * W)
    cyc = pool_grad_cycles(m, planes, H, W, *cyc_k, mx, dt)
    recs = (_fetch_records(step, 0) if mx else []) + [
        _rec(ctx, step, cyc, f"popnn {'Max' if mx else 'Sum'}PoolingGrad: {int(planes.max())} planes "
             f"of {H}x{W} per tile")]
    put = _to_input(step, 0, nt)

    def run(env):
        g = _f(env.grad(step)).reshape(nt, -1, Ho, Wo)
        p = g.shape[1]
        gx = np.zeros((nt, p, H + 2 * ph, W + 2 * pw), np.float32)
        if mx:
            x = _f(env.fetch(step, 0)).reshape(nt, -1, H, W)[:, :p]
            xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
            y = _f(env.live[step.node]).reshape(nt, -1, Ho, Wo)
            taken = np.zeros(g.shape, bool)
        for i in range(kh):
            for j in range(kw):
                sl = (slice(None), slice(None), slice(i, i + sh * (Ho - 1) + 1, sh),
                      slice(j, j + sw * (Wo - 1) + 1, sw))
                if mx:          # the first maximum in scan order takes the gradient (as torch)
                    hit = (xp[sl] == y) & ~taken
                    taken |= hit
                    gx[sl] += g * hit
                else:
                    gx[sl] += g * np.float32(1.0 / (kh * kw))
        put(env, gx[:, :, ph:ph + H, pw:pw + W].reshape(nt, -1))
    return [_row(ctx, step, f"{'Max' if mx else 'Sum'}PoolingGrad", recs, [run], step.plan.flops,
                 want.bytes_per_tile(nt))]


def _softmax(step, ctx):
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    Lr = step.out_shape[-1]
    n = step.plan.output.elems_per_tile(nt)
    rows = n // max(Lr, 1)
    cyc = cycles.reduce_rows_cycles(m, rows, Lr, dt) + 3 * cycles.binary_cycles(m, n, dt, 2)
    scale = np.float32(step.layer.scale)
    put = _to_input(step, 0, nt)

    def run(env):
        g = _f(env.grad(step)).reshape(nt, -1, Lr)
        y = _f(env.live[step.node]).reshape(nt, -1, Lr)
        gy = g * y
        put(env, (scale * (gy - y * gy.sum(axis=-1, keepdims=True))).reshape(nt, -1))
    rec = _rec(ctx, step, cyc, f"softmax grad: {int(rows.max())} rows of {Lr} (reduce g*y, 3 passes)")
    return [_row(ctx, step, "reduce+mul", [rec], [run], 4 * step.plan.output.n_elems)]


def _layernorm(step, ctx):
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    D, eps = step.layer.dim, np.float32(step.layer.eps)
    out = step.plan.output
    n = out.elems_per_tile(nt)
    rows = n // D
    cr = channel_reduce(m, out, D, 1, quantities=2, pre_ops=1, name="layer-norm gain/bias gradient")
    cyc = (4 * cycles.reduce_rows_cycles(m, rows, D, dt) + cycles.unary_cycles(m, rows, "rsqrt", "float32")
           + 7 * cycles.binary_cycles(m, n, dt, 2))
    recs = _fetch_records(step, 0) + [_rec(ctx, step, cyc, f"layer-norm grad: {int(rows.max())} rows of "
                                           f"{D}: statistics again, 2 row reductions, 7 passes")]
    put = _to_input(step, 0, nt)

    def run(env):
        x = _f(env.fetch(step, 0)).reshape(nt, -1, D)
        g = _f(env.grad(step)).reshape(nt, -1, D)
        mu = x.mean(axis=-1, keepdims=True)
        d = x - mu
        rstd = np.float32(1) / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps)
        xh = d * rstd
        gg = g * env.p(step, "weight")
        dx = rstd * (gg - gg.mean(axis=-1, keepdims=True) - xh * (gg * xh).mean(axis=-1, keepdims=True))
        put(env, dx.reshape(nt, -1))
        sums = cr.reduce([g.reshape(nt, -1), (g * xh).reshape(nt, -1)])
        env.pgrads[f"{step.node}.bias"], env.pgrads[f"{step.node}.weight"] = sums[:, 0], sums[:, 1]
    return [_row(ctx, step, "reduce+mul", recs + cr.records, [run], 10 * out.n_elems,
                 out.bytes_per_tile(nt) + cr.total_bytes)]


def _loss(step, ctx):
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    N, K = step.in_shapes[0]
    want = step.rearrs[0].dst
    n = want.elems_per_tile(nt)
    rows = n // K
    cyc = cycles.loss_cycles(m, rows, K, dt) + cycles.binary_cycles(m, n, dt, 1)
    why = (f"popnn LossTransform (softmax - one-hot) and scale by dL/dloss / {N}: {int(rows.max())} "
           f"rows of {K} per tile")
    recs = _fetch_records(step, 0) + [_rec(ctx, step, cyc, why)]
    first = np.zeros(nt, np.int64)
    first[want.mapping.tile] = want.mapping.start // K
    put = _to_input(step, 0, nt)

    def run(env):
        v = _f(env.fetch(step, 0)).reshape(nt, -1, K)
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        r = first[:, None] + np.arange(v.shape[1])[None, :]
        valid = np.arange(v.shape[1])[None, :] < rows[:, None]
        lab = np.asarray(env.feeds[step.srcs[1]]).reshape(-1).astype(np.int64)[np.minimum(r, N - 1)]
        p[np.arange(nt)[:, None], np.arange(v.shape[1])[None, :], lab] -= 1
        seed = _f(env.grad(step))[0, 0]      # dL/dloss (1 in a training step), on tile 0
        put(env, (np.where(valid[..., None], p, 0) * np.float32(seed / N)).reshape(nt, -1))
    return [_row(ctx, step, "LossTransform", recs, [run], 4 * want.n_elems, want.bytes_per_tile(nt))]


def _embedding(step, ctx):
    from ..core import copy_runs
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    V, D = step.layer.num_embeddings, step.layer.dim
    out = step.plan.output
    table = linear_layout((V, D), dt, nt, grain=D)
    n = out.elems_per_tile(nt)
    xrec = next(r for r in step.plan.records if r.category == "exchange")
    recs = [replace(xrec, name=f"{step.name}.grad rows", exchange_why="multiUpdateAdd: " + xrec.exchange_why),
            _rec(ctx, step, cycles.copy_cycles(m, table.elems_per_tile(nt), dt)
                 + cycles.binary_cycles(m, n, dt, 2),
                 "zero the table gradient, multiUpdateAdd the received rows")]
    o0, _, ot, oo = out.pieces()
    tpos, tstart = table.packed_offsets, table.mapping.start

    def run(env):
        ids = np.asarray(env.feeds[step.srcs[0]]).reshape(-1).astype(np.int64)
        g = env.grad(step)
        R = ids.size
        j = np.searchsorted(o0, np.arange(R) * D, side="right") - 1
        i = np.searchsorted(tstart, ids * D, side="right") - 1
        own = table.mapping.tile[i].astype(np.int64)
        order = np.argsort(own, kind="stable")
        slot = np.empty(R, np.int64)
        slot[order] = np.arange(R) - np.searchsorted(own[order], own[order])
        recv = np.zeros((nt, max(1, int(np.bincount(own, minlength=nt).max())) * D), np.float32)
        copy_runs(recv.view(np.uint8), g.data, ot[j], oo[j] + (np.arange(R) * D - o0[j]) * 4, own,
              slot * D * 4, np.full(R, D * 4, np.int64))
        tab = Resident(table, nt)
        col = (tpos[i] // 4 + ids * D - tstart[i])[:, None] + np.arange(D)
        np.add.at(_f(tab), (own[:, None], col), recv[own[:, None], slot[:, None] * D + np.arange(D)])
        env.pgrads[f"{step.node}.weight"] = tab.to_host()
    return [_row(ctx, step, "multiUpdateAdd", recs, [run], out.n_elems, table.bytes_per_tile(nt),
                 pass_="wu")]


def _add_param(step, ctx):
    nt = ctx.machine.n_tiles
    shape = step.layer.shape
    out = step.plan.output
    cr = channel_reduce(ctx.machine, out, int(np.prod(shape)), 1, quantities=1,
                        name="parameter gradient")
    lay = step.rearrs[0].dst

    def run(env):
        g = env.grad(step)
        env.pgrads[f"{step.node}.weight"] = cr.reduce([_f(g)])[:, 0].reshape(shape)
        env.tmp[(step.node, 0)] = Resident(lay, nt, g.data)
    return [_row(ctx, step, "reduce", cr.records, [run], out.n_elems, cr.total_bytes, pass_="wu")]


def _batchnorm(step, ctx):
    nt = ctx.machine.n_tiles
    C, inner = _bn_dims(step)
    out = step.plan.output
    n = out.elems_per_tile(nt)
    cr = channel_reduce(ctx.machine, out, C, inner, quantities=2, broadcast=3, pre_ops=1, post_ops=6,
                        name="batch-norm gradient")
    apply = _rec(ctx, step, 3 * cycles.binary_cycles(ctx.machine, n, ctx.dtype, 2),
                 "dx = s*g + p*x + q per channel: 3 broadcast passes")
    count = out.n_elems // C
    put = _to_input(step, 0, nt)

    def sums(env):
        g, x = _f(env.grad(step)), _f(env.fetch(step, 0))
        env.bn_sums[step.node] = cr.reduce([g, g * x])
        env.tmp[(step.node, "gx")] = (g, x)

    def run(env):
        g, x = env.tmp.pop((step.node, "gx"))
        local, group, n = env.group_sums(step.node, count)
        mean, rstd, gamma = env.bn[step.node]
        # parameter gradients from this replica's samples (all-reduced with the others);
        # the input gradient from the group's sums (popnn normStatisticsGradients)
        sm = local.astype(np.float64)
        env.pgrads[f"{step.node}.weight"] = (rstd * (sm[:, 1] - mean * sm[:, 0])).astype(np.float32)
        env.pgrads[f"{step.node}.bias"] = sm[:, 0].astype(np.float32)
        sm = group.astype(np.float64)
        dbeta = sm[:, 0]
        dgamma = rstd * (sm[:, 1] - mean * dbeta)
        s = gamma * rstd
        p = -s * rstd * dgamma / n
        q = -s * dbeta / n - p * mean
        S, Pp, Q = cr.broadcast(np.stack([s, p, q], axis=1))
        put(env, S * g + Pp * x + Q)
    return [_row(ctx, step, "reduce+broadcast", cr.records + [apply], [sums, run], 6 * out.n_elems,
                 out.bytes_per_tile(nt) + cr.total_bytes, info={"group_sync": 1})]


def _bn_dims(step) -> tuple[int, int]:
    s = step.in_shapes[0]
    return step.layer.num_features, int(np.prod(s[2:], dtype=np.int64)) if len(s) > 2 else 1


def bn_stats_row(step, ctx) -> PassRow:
    """Training batch norm's forward statistics: per-channel sum and sum of squares as a
    cross-tile reduction, mean/variance/rsqrt and the running-statistics update on the
    channel owners, scale and shift broadcast back (the apply is the forward step). A batch
    norm with ``stable=True`` gets PopLibs' two-pass variant (:mod:`ipukern.nn.bn_stable`)."""
    if getattr(step.layer, "stable", False):
        return bn_stats_stable_row(step, ctx, PassRow, _rec, _bn_dims, _f)
    C, inner = _bn_dims(step)
    out = step.plan.output
    cr = channel_reduce(ctx.machine, out, C, inner, quantities=2, broadcast=2, pre_ops=1, post_ops=9,
                        rsqrt=True, name="batch-norm statistics")
    count = out.n_elems // C

    def sums(env):
        x = _f(env.live[step.srcs[0]])
        env.bn_sums[step.node] = cr.reduce([x, x * x])

    def run(env):
        _, group, n = env.group_sums(step.node, count)
        sums = group.astype(np.float64)
        mean = sums[:, 0] / n
        var = np.maximum(sums[:, 1] / n - mean * mean, 0.0)
        finish_statistics(env, step, mean, var, n, cr)
    return PassRow(f"{step.name}.stats", "batchnorm", "fwd", "reduce(sum, sum of squares)", cr.records,
                   3 * out.n_elems, cr.total_bytes, info={"group_sync": 1}, runs=(sums, run))


def _scale_channels(step, ctx):
    """Squeeze-excitation's ``x * s``: whole planes and their scale on the same tile, so
    ``dx = g * s`` (broadcast multiply) and ``ds = sum(g * x)`` per plane (multiply and
    plane reduction) need no cross-tile traffic besides re-fetching x and s."""
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    N, C, H, W = step.in_shapes[0]
    n = step.rearrs[0].dst.elems_per_tile(nt)
    cyc = 2 * cycles.binary_cycles(m, n, dt, 2) + cycles.binary_cycles(m, n, dt, 1)
    recs = _fetch_records(step, 0) + _fetch_records(step, 1) + [
        _rec(ctx, step, cyc, f"grad x: broadcast mul; grad s: mul + plane sums over {int(n.max())} elements")]
    put_x, put_s = _to_input(step, 0, nt), _to_input(step, 1, nt)

    def run(env):
        g = _f(env.grad(step)).reshape(nt, -1, H * W)
        x = _f(env.fetch(step, 0)).reshape(nt, -1, H * W)
        sc = _f(env.fetch(step, 1))
        p = g.shape[1]
        put_x(env, (g * sc[:, :p, None]).reshape(nt, -1))
        gs = np.zeros((nt, sc.shape[1]), np.float32)
        gs[:, :p] = (g * x[:, :p]).sum(axis=-1)
        put_s(env, gs)
    return [_row(ctx, step, "mul+reduce", recs, [run], 3 * step.plan.output.n_elems)]


def _mul(step, ctx):
    """``a * b``: ``da = g * b`` and ``db = g * a`` (two popops multiplies in the layout the
    forward wanted; both operands re-fetched)."""
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    n = step.plan.output.elems_per_tile(nt)
    recs = _fetch_records(step, 0) + _fetch_records(step, 1) + [
        _rec(ctx, step, 2 * cycles.binary_cycles(m, n, dt, 2),
             f"popops mul x2 (grad a, grad b): {int(n.max())} elements per tile")]
    put_a, put_b = _to_input(step, 0, nt), _to_input(step, 1, nt)

    def run(env):
        g = _f(env.grad(step))
        a, b = _f(env.fetch(step, 0)), _f(env.fetch(step, 1))
        put_a(env, g * b[:, :g.shape[1]])
        put_b(env, g * a[:, :g.shape[1]])
    return [_row(ctx, step, "BinaryOp1D", recs, [run], 2 * step.plan.output.n_elems)]


def _exp(step, ctx):
    """``y = exp(s x)``: ``dx = g * y * s`` from the output (a multiply, and a scale when
    ``s`` is not 1)."""
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    scale = np.float32(step.layer.scale)
    n = step.plan.output.elems_per_tile(nt)
    cyc = cycles.binary_cycles(m, n, dt, 2)
    if scale != 1:
        cyc = cyc + cycles.binary_cycles(m, n, dt, 1)
    put = _to_input(step, 0, nt)

    def run(env):
        y = _f(env.live[step.node])
        put(env, _f(env.grad(step)) * y * scale)
    return [_row(ctx, step, "BinaryOp1D", [_rec(ctx, step, cyc, f"popops mul: {int(n.max())} "
                                                 "elements per tile")], [run], 2 * step.plan.output.n_elems)]


_BUILDERS = {"activation": _activation, "add": _add, "batchnorm": _batchnorm, "maxpool": _pool,
             "avgpool": _pool, "global_avgpool": _pool, "reshape": _views, "flatten": _views,
             "permute": _views, "softmax": _softmax, "layernorm": _layernorm,
             "softmax_cross_entropy": _loss, "embedding": _embedding, "add_param": _add_param,
             "scale_channels": _scale_channels, "mul": _mul, "exp": _exp}


def vector_grad_rows(step, ctx, needs: list[bool], accumulate: list[bool]) -> list[PassRow]:
    """The executable backward rows of one vector-op step (op row(s), then per input
    needing a gradient the rows delivering it to its producer)."""
    rows = _BUILDERS[step.op](step, ctx)
    for k, need in enumerate(needs):
        if step.rearrs[k] is None:
            continue
        if need:
            rows += deliver_rows(step, k, ctx, accumulate[k])
        else:
            rows[-1].runs += (lambda env, key=(step.node, k): env.tmp.pop(key, None),)
    return rows


def flush_rows(rows: list[PassRow]) -> list[PassRow]:
    """Fold the zero-cost placement rows into the row before them (the profile shows
    only costed passes)."""
    out: list[PassRow] = []
    for r in rows:
        if r.name == "" and out:
            out[-1].runs += r.runs
        else:
            out.append(r)
    return out

