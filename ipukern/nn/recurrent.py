"""Recurrent layers: ``torch.nn.LSTM`` and ``torch.nn.GRU`` (one layer, ``batch_first``,
zero initial state), planned as popnn plans its recurrent layers.

The input projection of every time step is one matmul before the loop (popnn's
``lstmFwd``/``gruFwd`` with the input weights pre-calculated); the recurrence is then a loop
of T identical bodies (popnn's ``Repeat`` program), each:

1. the previous hidden state rearranged into the recurrent matmul's operand layout and
   ``h @ W_hh^T`` planned as every ipukern matmul (:func:`~ipukern.nn.convops.matmul_plan`);
2. that product and step t's slice of the input projection rearranged into the *gate
   layout*: the G gates of a (sample, unit) pair side by side on one tile, so the cell's
   element-wise work needs no further exchange;
3. the cell's element-wise ops in one compute set (popops BinaryOp1D, popnn
   NonLinearity1D sigmoid/tanh; :mod:`ipukern.nn.cycles`), writing h_t straight into its
   slice of the output sequence.

Gate order and equations are torch's: LSTM (i, f, g, o), ``c' = f c + i g``,
``h' = o tanh(c')``, one bias ``b_ih + b_hh`` added by the input projection (popnn's
single bias); GRU (r, z, n), ``n = tanh(x_n + r (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``,
the recurrent bias added in the gate layout (its entries brought to the tiles once, before
the loop). Stated simplifications: the cell's element-wise ops are costed as one compute
set (one sync) per step; the layers are inference-only (no backward pass: a training
estimate of a network holding one raises ``NotImplementedError`` naming the layer).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core import TileMapping
from .convops import matmul_plan
from .layers import Layer, PlanContext
from .layout import Layout, Rearrangement, Resident, linear_layout
from .ops import (OpPlan, _f32, _store, act_fn, channel_table, compute_record, linear_param_bytes,
                  param_broadcast_record)
from . import cycles

__all__ = ["GRU", "LSTM", "recurrent_plan"]


class _Recurrent(Layer):
    op = "recurrent"
    cell = ""
    gates = 1

    def __init__(self, input_size: int, hidden_size: int):
        for what, v in (("input_size", input_size), ("hidden_size", hidden_size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{type(self).__name__}: {what} must be a positive int, got {v!r}")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)

    def out_shape(self, shapes):
        s = tuple(shapes[0])
        if len(s) != 3 or s[2] != self.input_size:
            raise ValueError(f"{self.describe()} expects (batch, time, {self.input_size}), got {s}")
        return (s[0], s[1], self.hidden_size)

    def param_shapes(self, shapes):
        g, h = self.gates * self.hidden_size, self.hidden_size
        return {"weight_ih_l0": (g, self.input_size), "weight_hh_l0": (g, h),
                "bias_ih_l0": (g,), "bias_hh_l0": (g,)}

    def init_params(self, shapes, rng):
        """torch's initialisation: every parameter uniform in +-1/sqrt(hidden_size)."""
        b = 1.0 / np.sqrt(self.hidden_size)
        return {k: rng.uniform(-b, b, s).astype(np.float32) for k, s in self.param_shapes(shapes).items()}

    def forward(self, ctx, layouts, shapes):
        return recurrent_plan(ctx, shapes[0], self.hidden_size, self.cell)


class LSTM(_Recurrent):
    """``torch.nn.LSTM(input_size, hidden_size, batch_first=True)``: (N, T, I) -> the hidden
    states (N, T, H); params ``weight_ih_l0`` (4H, I), ``weight_hh_l0`` (4H, H),
    ``bias_ih_l0``, ``bias_hh_l0`` (4H,) as torch names them."""

    op = "lstm"
    cell = "lstm"
    gates = 4

    def op_params(self, params):
        b = np.asarray(params["bias_ih_l0"], np.float32) + np.asarray(params["bias_hh_l0"], np.float32)
        return {"weight_ih": params["weight_ih_l0"], "weight_hh": params["weight_hh_l0"], "bias_x": b}


class GRU(_Recurrent):
    """``torch.nn.GRU(input_size, hidden_size, batch_first=True)``: (N, T, I) -> (N, T, H);
    params as torch names them (3H rows: r, z, n)."""

    op = "gru"
    cell = "gru"
    gates = 3

    def op_params(self, params):
        return {"weight_ih": params["weight_ih_l0"], "weight_hh": params["weight_hh_l0"],
                "bias_x": params["bias_ih_l0"], "bias_h": params["bias_hh_l0"]}


# --------------------------------------------------------------------------- layouts
def slice_layout(lay: Layout, lo: int, hi: int, shape: Sequence[int]) -> Layout:
    """Elements [lo, hi) of ``lay``'s stored order, in place: a tensor of ``shape`` whose
    intervals sit at their byte offsets inside a resident of ``lay`` (a view, no copy)."""
    m = lay.mapping
    keep = (m.start < hi) & (m.start + m.count > lo)
    s, c = m.start[keep], m.count[keep]
    st, en = np.maximum(s, lo), np.minimum(s + c, hi)
    off = lay.byte_offsets[keep] + (st - s) * lay.itemsize
    return Layout(tuple(shape), lay.dtype, TileMapping(hi - lo, m.tile[keep], st - lo, en - st),
                  offsets=off)


def _layouts(n: int, t: int, h: int, g: int, dtype: str, nt: int) -> tuple[Layout, Layout, Layout]:
    """``(gate, cell, sequence)``: the (N, G, H) gates stored (sample, unit, gate) in whole
    groups of G per tile; the (N, H) cell state on the same tiles, unit for unit; the
    (N, T, H) output stored time-major, each step's block mapped like the cell state."""
    gate = linear_layout((n, g, h), dtype, nt, grain=g, perm=(0, 2, 1))
    m = gate.mapping
    cell = Layout((n, h), dtype, TileMapping(n * h, m.tile, m.start // g, m.count // g))
    k = cell.mapping
    steps = np.arange(t, dtype=np.int64)
    seq_map = TileMapping(t * n * h, np.tile(k.tile, t), (steps[:, None] * n * h + k.start).ravel(),
                          np.tile(k.count, t))
    return gate, cell, Layout((n, t, h), dtype, seq_map, perm=(1, 0, 2))


# --------------------------------------------------------------------------- cost
def _cell_cycles(machine, cells: np.ndarray, kind: str, dtype: str) -> np.ndarray:
    """One step's element-wise work on a tile holding ``cells`` (sample, unit) pairs."""
    def b(n, k=2):
        return cycles.binary_cycles(machine, n, dtype, k)

    def nl(n, f):
        return cycles.nonlinearity_cycles(machine, n, f, dtype)
    m = cells
    if kind == "lstm":     # gates add; i, f, o sigmoid, g tanh; c' = f c + i g; h' = o tanh(c')
        return b(4 * m) + nl(3 * m, "sigmoid") + nl(m, "tanh") + 3 * b(m) + nl(m, "tanh") + b(m)
    # GRU: recurrent bias; r, z add + sigmoid; n = tanh(x_n + r h_n); h' = (1 - z) n + z h
    return (b(3 * m) + b(2 * m) + nl(2 * m, "sigmoid") + 2 * b(m) + nl(m, "tanh") + b(m, 1)
            + 3 * b(m))


def _cell_math(kind: str, gx: np.ndarray, gh: np.ndarray, c: np.ndarray, h: np.ndarray,
               bias_h: np.ndarray | None) -> np.ndarray:
    """The new hidden state from the gate pre-activations (…, G) in torch's order and
    equations (updates the LSTM's cell state ``c`` in place)."""
    if kind == "lstm":
        pre = gx + gh
        i, f, o = (act_fn("sigmoid", pre[..., k]) for k in (0, 1, 3))
        c[...] = f * c + i * np.tanh(pre[..., 2])
        return o * np.tanh(c)
    gh = gh + bias_h
    r = act_fn("sigmoid", gx[..., 0] + gh[..., 0])
    z = act_fn("sigmoid", gx[..., 1] + gh[..., 1])
    n = np.tanh(gx[..., 2] + r * gh[..., 2])
    return (1 - z) * n + z * h


# --------------------------------------------------------------------------- plan
def recurrent_plan(ctx: PlanContext, in_shape: Sequence[int], hidden: int, kind: str) -> OpPlan:
    """The planned LSTM / GRU layer over an (N, T, I) input (see the module doc)."""
    m, nt, dt = ctx.machine, ctx.machine.n_tiles, ctx.dtype
    n, t, i = (int(s) for s in in_shape)
    g = 4 if kind == "lstm" else 3
    mm = dict(dtype=dt, partials=ctx.partials, b_param=True, amp=ctx.amp)
    xp = matmul_plan(m, (t * n, i), (i, g * hidden), bias=True, **mm)
    hh = matmul_plan(m, (n, hidden), (hidden, g * hidden), **mm)
    gate, cell, seq = _layouts(n, t, hidden, g, dt, nt)
    a = xp.inputs[0]
    want = Layout((n, t, i), dt, a.mapping, perm=(1, 0, 2), offsets=a.offsets)
    blk = n * g * hidden
    x_in = [Rearrangement(m, slice_layout(xp.output, s * blk, (s + 1) * blk, (n, g, hidden)), gate,
                          name=f"{kind} x[{s}] -> gates") for s in range(t)]
    h_in = Rearrangement(m, cell, hh.inputs[0], name=f"{kind} h -> matmul")
    hh_src = Layout((n, g, hidden), dt, hh.output.mapping)
    h_out = Rearrangement(m, hh_src, gate, name=f"{kind} W_hh h -> gates")
    h_seq = [Rearrangement(m, cell, slice_layout(seq, s * n * hidden, (s + 1) * n * hidden, (n, hidden)))
             for s in range(t)]
    cells = cell.elems_per_tile(nt)
    body = compute_record(m, f"{kind} cell", _cell_cycles(m, cells, kind, dt),
                          f"{kind} cell: popops element-wise + NonLinearity1D over {int(cells.max())} "
                          f"units per tile, {g} gates each")
    isz = gate.itemsize
    home = linear_param_bytes(m, g * hidden, isz) if kind == "gru" else np.zeros(nt, np.int64)
    recs = list(xp.records)
    if kind == "gru":
        recs.append(param_broadcast_record(m, "gru recurrent bias", home, g * cells * isz))
    for s in range(t):
        recs += [r for r in (h_in.record(), x_in[s].record(), h_out.record()) if r is not None]
        recs += hh.records + [body]
    loop = (xp.output.bytes_per_tile(nt) + hh.total_bytes + 2 * gate.bytes_per_tile(nt)
            + 2 * cell.bytes_per_tile(nt) + (g * cells * isz if kind == "gru" else 0))
    total = np.maximum(xp.total_bytes, loop) + seq.bytes_per_tile(nt)
    flops = xp.flops + t * (hh.flops + 10 * n * hidden)
    run = _runner(kind, (xp, hh), (x_in, h_in, h_out, h_seq), (gate, cell, seq), hidden, nt)
    return OpPlan(kind, "fwd", f"{kind}: matmul + {t} x (matmul + cell)", [want], seq, recs, flops,
                  total, xp.weight_bytes + hh.weight_bytes + home, run, (False,),
                  info={"plan": xp.info.get("plan"), "steps": t})


def _runner(kind: str, plans, rearrs_, lays, hidden: int, nt: int):
    """The execute-mode ``run`` of :func:`recurrent_plan`: the planned matmul programs and
    rearrangements on the tiles, the cell's element-wise math on every tile's rows."""
    xp, hh = plans
    x_in, h_in, h_out, h_seq = rearrs_
    _, cell, seq = lays
    g = 4 if kind == "lstm" else 3
    units: list[np.ndarray] = []

    def run(srcs, rearrs, params):
        xr = xp.run(srcs, rearrs, {"weight": params["weight_ih"], "bias": params["bias_x"]})
        out = Resident(seq, nt)
        h = Resident(cell, nt)
        h.view()[...] = 0                     # torch's zero initial state
        c = np.zeros(h.view().shape, np.float32)
        bias_h = None
        if kind == "gru":
            if not units:
                units.append(channel_table(cell, nt, hidden, 1))
            b = np.asarray(params["bias_h"], np.float32).reshape(g, hidden)
            bias_h = np.moveaxis(b[:, units[0]], 0, -1)          # (nt, cells, gates)
        for s, x_step in enumerate(x_in):
            hr = hh.run([h], [h_in], {"weight": params["weight_hh"]})
            gx = _f32(x_step.run(Resident(x_step.src, nt, xr.data)).view()).reshape(nt, -1, g)
            gh = _f32(h_out.run(hr.relabel(h_out.src)).view()).reshape(nt, -1, g)
            new = _cell_math(kind, gx, gh, c, _f32(h.view()), bias_h)
            h = _store(Resident(cell, nt), new)
            h_seq[s].run(h, out.data)
        return out
    return run
