"""Planned network ops: what one layer pass costs, where its tensors live, how it runs.

An :class:`OpPlan` is the unit the network program is made of. It states the layout it
wants for each input (the network inserts a :class:`~ipukern.nn.layout.Rearrangement`
where the producer's layout differs), the layout of its output, its supersteps' cost
records, its FLOPs, its per-tile memory, and a ``run`` that executes it on
:class:`~ipukern.nn.layout.Resident` tensors. Plans are pure functions of shapes, so
layers of equal shape share one plan (the network caches them).

This module holds the vector ops (activations, per-channel affine, residual add,
pooling, softmax, layer norm, gather, loss) computed on the tiles' rows: every tile's
elements are one row of a (n_tiles, elements) array and one NumPy expression updates
all tiles at once. Convolutions and matmuls are in :mod:`ipukern.nn.convops`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import cost
from ..core import SuperstepRecord
from ..dtypes import DTYPES
from ..machine import MachineSpec
from . import cycles
from .tile_reduce import compute_record  # noqa: F401  (defined there: tile_reduce needs it)
from .layout import Layout, Resident, linear_layout

__all__ = [
    "OpPlan",
    "act_fn",
    "activation_plan",
    "add_plan",
    "affine_plan",
    "channel_scale_plan",
    "channel_table",
    "compute_record",
    "fold_weight",
    "gather_plan",
    "layernorm_plan",
    "loss_plan",
    "permute_plan",
    "pool_plan",
    "reduce_pool_plan",
    "reshape_plan",
    "softmax_plan",
]


@dataclass
class OpPlan:
    """One planned pass of one layer.

    Attributes
    ----------
    op, pass_, method : str
        Op name, pass ("fwd", "bwd", "wu") and the vertex/method that does the work.
    inputs : list of Layout
        Wanted layout of each input (None: the input is host data, e.g. token ids).
    output : Layout
        Layout the output is produced in (packed, logical order).
    records : list of SuperstepRecord
        The op's supersteps (its own exchanges included).
    flops : int
    total_bytes : ndarray (n_tiles,)
        Per-tile bytes while the op runs: its wanted-input buffers (unless they alias the
        producer's), working buffers, its parameters and its output.
    weight_bytes : ndarray (n_tiles,)
        Per-tile bytes of the parameters' home copy (resident for the whole program).
    alias_inputs : tuple of bool
        Inputs read in place from the producer's buffer (no memory of their own).
    inplace : bool
        Element-wise in the first input's layout: the output may overwrite the first input's
        buffer when that input dies at this op (the network decides, see
        :class:`~ipukern.nn.program.NetworkProgram`; then ``run(..., inplace=True)``).
    run : callable
        ``run(srcs, rearrangements, params, inplace=False) -> Resident``: executes the op.
        ``srcs`` are the producers' residents (or host arrays), ``rearrangements`` move each
        into the wanted layout (identity ones cost nothing), ``params`` is the layer's
        parameter dict.
    """

    op: str
    pass_: str
    method: str
    inputs: list[Layout | None]
    output: Layout
    records: list[SuperstepRecord]
    flops: int
    total_bytes: np.ndarray
    weight_bytes: np.ndarray
    run: Callable[..., Resident]
    alias_inputs: tuple[bool, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)
    inplace: bool = False

    @property
    def cycles(self) -> int:
        return sum(r.total_cycles for r in self.records)


def linear_param_bytes(machine: MachineSpec, n_elems: int, itemsize: int) -> np.ndarray:
    """Per-tile bytes of a parameter tensor mapped like PopLibs' default
    ``mapTensorLinearly`` (poputil/TileMapping.cpp ``calcLinearTileMapping``): grains of one
    vector, at least 128 bytes per tile, tiles from 0 filled with the same number of grains."""
    nt = machine.n_tiles
    grain = max(1, machine.vector_width_bits // 8 // itemsize)
    n_grains = -(-int(n_elems) // grain)
    min_elems = -(-128 // itemsize)
    min_grains = -(-min_elems // grain)
    per = max(-(-n_grains // nt), min_grains) * grain
    elems = np.clip(int(n_elems) - np.arange(nt, dtype=np.int64) * per, 0, per)
    return elems * itemsize


def param_memory(machine: MachineSpec, layout: Layout, channels: int, inner: int,
                 vectors: int) -> tuple[np.ndarray, np.ndarray]:
    """``(home, copies)`` per tile for ``vectors`` per-channel parameter vectors of
    ``channels`` entries applied to ``layout`` (channel of element e: ``(e // inner) %
    channels``). The home is resident for the whole program, mapped linearly
    (:func:`linear_param_bytes`); while the op runs each tile holding data also holds a
    copy of the entries its elements use (a temporary). Copying the whole vectors to every
    tile and keeping them would hold a 26,560-channel ResNet-50's batch-norm parameters
    (or BERT's position table) once per tile."""
    from ..conv import runs_per_tile
    nt = machine.n_tiles
    m = layout.mapping
    isz = layout.itemsize
    runs = runs_per_tile(m, nt)
    if runs is not None and inner % runs[0] == 0:
        # each interval lies inside one aligned period, so inside one channel's block: it
        # uses one entry (a column-split conv's output, counted without listing it)
        used = runs[1]
    else:
        first = m.start // inner
        last = (m.start + m.count - 1) // inner
        used = np.bincount(m.tile, weights=np.minimum(last - first + 1, channels), minlength=nt)
    copies = vectors * np.minimum(used.astype(np.int64), channels) * isz
    return linear_param_bytes(machine, vectors * channels, isz), copies


def param_broadcast_record(machine: MachineSpec, name: str, home: np.ndarray,
                           copies: np.ndarray) -> SuperstepRecord:
    """The exchange that brings every tile the parameter entries its elements use (the
    ``copies`` of :func:`param_memory`) from their linear home, before the op's compute:
    PopLibs' broadcast operands (popops ``addToChannel``/``channelMul``, layer norm's
    gain and bias) are exchanged from where they are mapped to the tiles using them.
    Costed per tile as every exchange here (:func:`~ipukern.core.cost.tile_exchange_cycles`):
    a tile receives its copies and sends its home once (a broadcast), the slowest tile
    sets the pace. Entries homed on the tile that uses them are counted as received (at
    most a 128 B grain per vector)."""
    from ..core import cost
    recv = np.asarray(copies, np.int64)
    send = np.asarray(home, np.int64)
    per_tile = cost.tile_exchange_cycles(recv, np.zeros_like(recv), send, machine)
    t = int(np.argmax(per_tile))
    over = machine.exchange_overhead_cycles
    return SuperstepRecord(index=0, name=f"{name} parameters", category="exchange",
                           compute_cycles=0, sync_cycles=machine.sync_cycles,
                           exchange_cycles=int(per_tile[t]) + over, exchange_tile=t,
                           bytes_exchanged=int(recv.sum()), n_copies=int((recv > 0).sum()),
                           exchange_why=f"{name}: parameter entries to the tiles using them; tile "
                                        f"{t} receives {int(recv[t])} B, sends {int(send[t])} B",
                           exchange_overhead_cycles=over)


def _zeros(machine: MachineSpec) -> np.ndarray:
    return np.zeros(machine.n_tiles, dtype=np.int64)


# --------------------------------------------------------------------------- math
#: SELU's constants (Klambauer et al. 2017, eq. 2; torch.nn.SELU uses the same digits)
SELU_ALPHA = np.float32(1.6732632423543772848170429916717)
SELU_SCALE = np.float32(1.0507009873554804934193349852946)


def act_fn(kind: str, x: np.ndarray) -> np.ndarray:
    """The non-linearities, computed in float32 (GELU: the tanh form popnn implements)."""
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "relu6":
        return np.clip(x, 0, 6)
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "silu":
        return x / (1.0 + np.exp(-x))
    if kind == "tanh":
        return np.tanh(x)
    if kind == "gelu":
        c = np.float32(np.sqrt(2 / np.pi))
        return 0.5 * x * (1.0 + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))
    if kind == "selu":
        with np.errstate(over="ignore"):
            neg = SELU_ALPHA * np.expm1(np.minimum(x, 0))
        return SELU_SCALE * np.where(x > 0, x, neg)
    raise ValueError(f"unknown activation {kind!r}; choose from {cycles.ACTIVATIONS}")


def _f32(a: np.ndarray) -> np.ndarray:
    return a if a.dtype == np.float32 else a.astype(np.float32)


def _store(out: Resident, values: np.ndarray) -> Resident:
    with np.errstate(all="ignore"):
        out.view()[...] = values
    return out


def _in(srcs, rearrs, k: int) -> Resident:
    return rearrs[k].run(srcs[k])


def _target(out: Layout, nt: int, x: Resident, inplace: bool) -> Resident:
    """The output resident: a new buffer, or (in place) the dying input's own."""
    return Resident(out, nt, x.data) if inplace else Resident(out, nt)


#: activations :func:`_add_act_f32` applies (``_vertices.add_act``'s ``act`` codes)
_KERNEL_ACTS = {None: 0, "relu": 1, "relu6": 2}


def _add_act_f32(a: np.ndarray, b: np.ndarray | None, dst: np.ndarray, act: str | None) -> bool:
    """``dst[...] = act(a + b)`` (``b`` None: ``act(a)``) by the threaded kernel, the bits
    of ``np.add`` then ``np.maximum(v, 0)`` / ``np.clip(v, 0, 6)``, when every operand is a
    float32 (rows, n) array with contiguous rows and ``act`` is one it applies; False (nothing
    done) otherwise. ``dst`` may be ``a`` or ``b``. One pass instead of one per ufunc, on
    every host thread: ResNet-50's 16 residual add + ReLU pairs at batch 8 (0.031 s of
    NumPy on one core) become one pass each."""
    ops = (a, dst) if b is None else (a, b, dst)
    if act not in _KERNEL_ACTS or any(o.dtype != np.float32 or o.ndim != 2 or o.strides[1] != 4
                                      for o in ops):
        return False
    from .._kernels import _vertices
    from ..core import get_num_threads
    _vertices.add_act(a, b, dst, _KERNEL_ACTS[act], get_num_threads())
    return True


def _act_into(kind: str, v: np.ndarray, dst: np.ndarray) -> None:
    """``dst[...] = act_fn(kind, v)``; float32 ReLU/ReLU6 without temporaries (the bits of
    the ufuncs). ``dst`` may be ``v``."""
    if kind in ("relu", "relu6") and _add_act_f32(v, None, dst, kind):
        return
    with np.errstate(all="ignore"):
        if v.dtype == np.float32 and kind == "relu":
            np.maximum(v, 0, out=dst)
        elif v.dtype == np.float32 and kind == "relu6":
            np.clip(v, 0, 6, out=dst)
        else:
            dst[...] = act_fn(kind, _f32(v))


def fold_weight(w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Conv weights scaled per output channel: float32 * float64 computed in float64 and
    rounded once to float32, as ``(w.astype(float64) * s).astype(float32)``. Float32
    weights by the threaded kernel (same bits; 1.8 ms against NumPy's 8.7 ms for a
    2048x4608 weight on one thread of the Zen 5 host), others by NumPy."""
    out = np.empty(w.shape, np.float32)
    if w.dtype == np.float32 and w.ndim >= 1 and w.size and s.shape == w.shape[:1]:
        from .._kernels import _vertices
        from ..core import get_num_threads
        k = w.shape[0]
        _vertices.fold_scale(np.ascontiguousarray(w).reshape(k, -1), np.ascontiguousarray(s),
                             out.reshape(k, -1), get_num_threads())
        return out
    np.multiply(w, s.reshape((-1,) + (1,) * (w.ndim - 1)), out=out, casting="unsafe",
                dtype=np.float64)
    return out


# --------------------------------------------------------------------------- element-wise
def activation_plan(machine: MachineSpec, src: Layout, kind: str) -> OpPlan:
    """Non-linearity in the producer's layout (popnn NonLinearity1D, in place; SELU as
    popops element-wise ops, :func:`~ipukern.nn.cycles.activation_cycles`)."""
    n = src.elems_per_tile(machine.n_tiles)
    cyc = cycles.activation_cycles(machine, n, kind, src.dtype)
    out = Layout(src.shape, src.dtype, src.mapping)

    def run(srcs, rearrs, params, inplace=False):
        x = _in(srcs, rearrs, 0)
        res = _target(out, machine.n_tiles, x, inplace)
        _act_into(kind, x.view(), res.view())
        return res

    method = "popops exp+BinaryOp1D" if kind not in cycles.NONLINEARITIES else "NonLinearity1D"
    rec = compute_record(machine, kind, cyc, f"{method} {kind}<{src.dtype}>: "
                         f"{int(n.max())} elements on the busiest tile")
    return OpPlan(kind, "fwd", method, [src], out, [rec], int(src.n_elems),
                  out.bytes_per_tile(machine.n_tiles), _zeros(machine), run, (True,), inplace=True)


def channel_table(layout: Layout, n_tiles: int, channels: int, inner: int) -> np.ndarray:
    """(n_tiles, slot) int32: the channel ``(flat // inner) % channels`` of each element a
    tile holds (0 in the padding)."""
    m = layout.mapping
    slot = int(layout.elems_per_tile(n_tiles).max())
    table = np.zeros((n_tiles, max(slot, 1)), dtype=np.int32)
    pos0 = layout.packed_offsets // layout.itemsize
    rep = np.repeat(np.arange(m.count.size), m.count)
    k = np.arange(rep.size) - np.repeat(np.cumsum(m.count) - m.count, m.count)
    table[m.tile[rep], pos0[rep] + k] = ((m.start[rep] + k) // inner) % channels
    return table


def affine_plan(machine: MachineSpec, src: Layout, channels: int, inner: int, *,
                scale: bool, shift: bool, name: str, act: str | None = None) -> OpPlan:
    """``y = x * scale[c] + shift[c]`` with ``c = (flat // inner) % channels`` in the
    producer's layout: batch-norm inference (popnn batchNormalise: channelMul then
    addToChannel, two broadcast binary passes), bias add, position-embedding add, SE scale.
    Parameters live linearly over the tiles; each tile holding data holds a copy of the
    entries it uses while the op runs (:func:`param_memory`), brought by an exchange
    (:func:`param_broadcast_record`)."""
    nt = machine.n_tiles
    n = src.elems_per_tile(nt)
    passes = int(scale) + int(shift)
    cyc = passes * cycles.binary_cycles(machine, n, src.dtype, 2)
    if act is not None:
        cyc = cyc + cycles.nonlinearity_cycles(machine, n, act, src.dtype)
    out = Layout(src.shape, src.dtype, src.mapping)
    home, copies = param_memory(machine, src, channels, inner, passes)
    table_cache: list[np.ndarray] = []

    def run(srcs, rearrs, params, inplace=False):
        x = _in(srcs, rearrs, 0)
        if not table_cache:
            table_cache.append(channel_table(src, nt, channels, inner))
        idx = table_cache[0]
        y = _f32(x.view())
        if scale:
            y = y * np.asarray(params["scale"], np.float32).reshape(-1)[idx]
        if shift:
            y = y + np.asarray(params["shift"], np.float32).reshape(-1)[idx]
        res = _target(out, nt, x, inplace)
        if act is not None:
            _act_into(act, y, res.view())
            return res
        return _store(res, y)

    rec = compute_record(machine, name, cyc, f"popops broadcast {'mul+add' if passes == 2 else 'op'} "
                         f"over {int(n.max())} elements per tile ({channels} channels)")
    xrec = param_broadcast_record(machine, name, home, copies)
    return OpPlan(name, "fwd", "BroadcastVectorOuter", [src], out, [xrec, rec], passes * src.n_elems,
                  out.bytes_per_tile(nt) + copies + home, home, run, (True,), inplace=True)


def add_plan(machine: MachineSpec, a: Layout, b_shape: Sequence[int], act: str | None = None,
             alpha: float = 1.0) -> OpPlan:
    """Residual add ``a + alpha * b`` in the first operand's layout; the second is rearranged
    to it. ``alpha`` other than 1 is popops' scaledAdd, costed as the add: the IPU's vector
    unit multiplies and adds in one instruction (f32v2axpy / f16v4mix), so the scale adds no
    pass over the data."""
    nt = machine.n_tiles
    b_want = Layout(tuple(b_shape), a.dtype, a.mapping)
    n = a.elems_per_tile(nt)
    cyc = cycles.binary_cycles(machine, n, a.dtype, 2)
    if act is not None:
        cyc = cyc + cycles.nonlinearity_cycles(machine, n, act, a.dtype)
    out = Layout(a.shape, a.dtype, a.mapping)
    own = act
    fuses = ("relu", "relu6") if act is None and a.dtype == "float32" and alpha == 1.0 else ()
    scale = np.float32(alpha)

    def run(srcs, rearrs, params, inplace=False, act=None):
        """``act`` (when ``info["fuses"]`` lists it): the network's next activation applied
        in the same pass (execute mode's host fusion: same bits, same program)."""
        if act is not None and act not in fuses:
            raise ValueError(f"add: cannot fuse activation {act!r} (float32 without one of "
                             f"its own: {sorted(fuses)})")
        act = own if act is None else act
        x, y = _in(srcs, rearrs, 0), _in(srcs, rearrs, 1)
        res = _target(out, nt, x, inplace)
        xv, yv, rv = x.view(), y.view(), res.view()
        if alpha != 1.0:
            with np.errstate(all="ignore"):
                yv = _f32(yv) * scale          # a new array: the operand is left as it was
            if xv.dtype != np.float32:
                return _store(res, _add_act(_f32(xv) + yv, act))
        if _add_act_f32(xv, yv, rv, act):
            return res
        if xv.dtype == np.float32:
            with np.errstate(all="ignore"):
                np.add(xv, yv, out=rv)
            if act is not None:
                _act_into(act, rv, rv)
            return res
        return _store(res, _add_act(_f32(xv) + _f32(yv), act))

    what = "add" if alpha == 1.0 else f"scaledAdd (alpha {alpha:g})"
    rec = compute_record(machine, "add", cyc, f"popops {what}<{a.dtype}>: {int(n.max())} elements per tile")
    return OpPlan("add", "fwd", "BinaryOp1D" if alpha == 1.0 else "ScaledAdd", [a, b_want], out, [rec],
                  a.n_elems, 2 * out.bytes_per_tile(nt), _zeros(machine), run, (True, False), inplace=True,
                  info={"fuses": fuses})


def _add_act(s: np.ndarray, act: str | None) -> np.ndarray:
    """``act(s)`` in place on a float32 sum (``act`` None: unchanged)."""
    if act is not None:
        _act_into(act, s, s)
    return s


def reshape_plan(machine: MachineSpec, src: Layout, shape: Sequence[int]) -> OpPlan:
    """A view: same elements, same tiles, new logical shape (no cycles, no memory)."""
    out = Layout(tuple(shape), src.dtype, src.mapping)

    def run(srcs, rearrs, params):
        return Resident(out, machine.n_tiles, _in(srcs, rearrs, 0).data)

    return OpPlan("reshape", "fwd", "view", [src], out, [], 0, _zeros(machine), _zeros(machine), run, (True,))


def permute_plan(machine: MachineSpec, src_shape: Sequence[int], dtype: str, perm: Sequence[int]) -> OpPlan:
    """Transpose: the input is rearranged straight into the new order (the exchange is
    the op; a linear mapping over the permuted order)."""
    nt = machine.n_tiles
    out_shape = tuple(src_shape[p] for p in perm)
    want = linear_layout(src_shape, dtype, nt, perm=tuple(perm))
    out = Layout(out_shape, dtype, want.mapping)

    def run(srcs, rearrs, params):
        r = _in(srcs, rearrs, 0)
        return Resident(out, nt, r.data)

    return OpPlan("permute", "fwd", "rearrange", [want], out, [], 0, out.bytes_per_tile(nt),
                  _zeros(machine), run, (False,))


# --------------------------------------------------------------------------- row ops
def _rows(shape: Sequence[int], row: int, dtype: str, nt: int) -> Layout:
    return linear_layout(shape, dtype, nt, grain=row)


def _max_pool(v: np.ndarray, kh: int, kw: int, sh: int, sw: int, ph: int, pw: int, Ho: int,
              Wo: int, used: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Max pooling of planes ``v`` (nt, planes, H, W) by the compiled kernel (all planes in
    one call, no GIL), returned as (nt, planes*Ho*Wo): the bits of taking ``np.maximum``
    tap by tap over the input padded with -inf (tests/nn/test_pool_exec.py). ``used``:
    planes each tile holds (default all); the others (a tile's padding) are zeros. ``out``:
    a C-contiguous float32 (nt, planes*Ho*Wo) array to write (a resident's view), returned."""
    from .._kernels import _vertices
    from ..core import get_num_threads
    nt, npl, H, W = v.shape
    if used is None:
        used = np.full(nt, npl, np.int64)
    acc = np.empty((nt * npl, Ho, Wo), np.float32) if out is None else out.reshape(nt * npl, Ho, Wo)
    _vertices.max_pool_planes(np.ascontiguousarray(v).reshape(nt * npl, H, W), acc,
                              np.ascontiguousarray(used, np.int64), kh, kw, sh, sw, ph, pw,
                              get_num_threads())
    return acc.reshape(nt, -1)


def pool_plan(machine: MachineSpec, shape: Sequence[int], dtype: str, kind: str, kernel, stride,
              padding, src: Layout | None = None) -> OpPlan:
    """Max / average pooling (count_include_pad, as torch) on whole channel planes per tile.

    ``kernel=None`` is global average pooling. A window covering the whole unpadded field
    (global pooling) is planned as popnn plans it, a ``popops::reduce`` on the tiles that
    hold ``src`` (:func:`reduce_pool_plan`; popnn ``Pooling.cpp``,
    ``substPoolingWithReduction``). Other windows use whole channel planes per tile, a
    stated simplification of popnn, which plans pooling like a convolution.
    """
    nt = machine.n_tiles
    N, C, H, W = shape
    if kernel is None:
        kh, kw, sh, sw, ph, pw = H, W, 1, 1, 0, 0
    else:
        (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if src is not None and kind != "max" and (kh, kw, ph, pw) == (H, W, 0, 0):
        # (a whole-field max pool stays on planes: its gradient needs the planes' maxima)
        return reduce_pool_plan(machine, src, global_=kernel is None)
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    want = _rows(shape, H * W, dtype, nt)
    used = want.mapping.tiles_used.size
    out = Layout((N, C, Ho, Wo), dtype, _linear_rows(N * C, Ho * Wo, used))
    planes = want.elems_per_tile(nt) // (H * W)
    cyc = cycles.pool_cycles(machine, planes, Ho, Wo, kh, kw, kind == "max")
    mx = kind == "max"

    def run(srcs, rearrs, params):
        x = _in(srcs, rearrs, 0)
        v = _f32(x.view()).reshape(nt, -1, H, W)
        if mx:
            res = Resident(out, nt)
            rv = res.view()
            if rv.dtype == np.float32 and rv.flags.c_contiguous and rv.shape == (nt, v.shape[1] * Ho * Wo):
                _max_pool(v, kh, kw, sh, sw, ph, pw, Ho, Wo, planes, out=rv)  # straight into it
                return res
            return _store(res, _max_pool(v, kh, kw, sh, sw, ph, pw, Ho, Wo, planes))
        if ph or pw:
            v = np.pad(v, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=0.0)
        acc = None
        for i in range(kh):
            for j in range(kw):
                win = v[:, :, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw]
                if acc is None:
                    acc = win.copy()
                elif mx:
                    np.maximum(acc, win, out=acc)
                else:
                    np.add(acc, win, out=acc)
        if not mx:
            acc *= np.float32(1.0 / (kh * kw))
        return _store(Resident(out, nt), acc.reshape(nt, -1))

    label = "global-avg-pool" if kernel is None else f"{kind}-pool {kh}x{kw}/{sh}"
    rec = compute_record(machine, label, cyc, f"popnn {'Max' if mx else 'Sum'}Pooling: "
                         f"{int(planes.max())} planes of {Ho}x{Wo} outputs, {kh}x{kw} window")
    return OpPlan("maxpool" if mx else "avgpool", "fwd", "MaxPooling" if mx else "SumPooling", [want],
                  out, [rec], int(N * C * Ho * Wo * kh * kw),
                  want.bytes_per_tile(nt) + out.bytes_per_tile(nt),
                  _zeros(machine), run, (False,))


def reduce_pool_plan(machine: MachineSpec, src: Layout, global_: bool = True) -> OpPlan:
    """An average pool whose window is the whole field, (N, C, H, W) -> (N, C, 1, 1),
    planned as popnn plans it: ``popops::reduce`` over H and W (ADD with a 1/(H W) scale) on
    the tiles holding the producer's layout, in the stages of
    :class:`~ipukern.nn.tile_reduce.ChannelReduce` (one "channel" per (n, c) plane):
    a ContinuousReduce of each tile's plane pieces, the float32 partials exchanged to the
    plane's owner tile, the owners' reduce (the scale folded into it: popops' scaled
    reduce vertices cost what the unscaled ones do). The output lives on the owners.

    Execution computes every plane as the planes layout did (taps summed in raster order
    in float32, then the scale), so results are bit-identical to :func:`pool_plan`'s
    planes path; the tiles' staging is what is costed."""
    from .tile_reduce import plane_reduce
    nt = machine.n_tiles
    if len(src.shape) != 4:
        raise ValueError(f"a global pool needs an (N, C, H, W) input, got shape {src.shape}")
    N, C, H, W = (int(d) for d in src.shape)
    NC, HW = N * C, H * W
    label = "global-avg-pool" if global_ else f"avg-pool {H}x{W}"
    cr = plane_reduce(machine, src, NC, HW, name=label)
    out = Layout((N, C, 1, 1), src.dtype, _linear_rows(NC, 1, min(nt, NC)))

    def run(srcs, rearrs, params):
        x = _in(srcs, rearrs, 0)
        v = _f32(x.to_host()).reshape(1, NC, H, W)
        acc = v[:, :, 0:1, 0:1].copy()
        for i in range(H):          # raster order, as the planes path adds the taps
            for j in range(W):
                if i or j:
                    np.add(acc, v[:, :, i:i + 1, j:j + 1], out=acc)
        acc *= np.float32(1.0 / HW)
        with np.errstate(all="ignore"):
            return Resident.from_host(out, nt, acc.reshape(N, C, 1, 1))

    total = cr.total_bytes + out.bytes_per_tile(nt)
    return OpPlan("global_avgpool" if global_ else "avgpool", "fwd",
                  "popops::reduce", [src], out, list(cr.records), int(NC * HW), total,
                  _zeros(machine), run, (True,), info={"reduce": cr})


def channel_scale_plan(machine: MachineSpec, shape: Sequence[int], dtype: str) -> OpPlan:
    """``x * s`` with x (N, C, H, W) and s (N, C, 1, 1) (squeeze-excitation's scaling):
    whole channel planes per tile, ``s`` rearranged to the same tiles (one value per
    plane); popops broadcast multiply."""
    nt = machine.n_tiles
    N, C, H, W = shape
    want = _rows(shape, H * W, dtype, nt)
    used = want.mapping.tiles_used.size
    s_want = Layout((N, C, 1, 1), dtype, _linear_rows(N * C, 1, used))
    n = want.elems_per_tile(nt)
    cyc = cycles.binary_cycles(machine, n, dtype, 2)
    out = Layout(tuple(shape), dtype, want.mapping)

    def run(srcs, rearrs, params):
        x, s = _in(srcs, rearrs, 0), _in(srcs, rearrs, 1)
        v = _f32(x.view()).reshape(nt, -1, H * W)
        sc = _f32(s.view())[:, :v.shape[1], None]
        return _store(Resident(out, nt), (v * sc).reshape(nt, -1))

    rec = compute_record(machine, "scale channels", cyc,
                         f"popops broadcast mul: {int(n.max())} elements per tile")
    total = 2 * want.bytes_per_tile(nt) + s_want.bytes_per_tile(nt)
    return OpPlan("scale_channels", "fwd", "BroadcastVectorOuter", [want, s_want], out, [rec],
                  want.n_elems, total, _zeros(machine), run, (False, False))


def _linear_rows(n_rows: int, row: int, used: int):
    from ..core import TileMapping
    return TileMapping.linear(n_rows * row, used, grain=row)


def _row_op(machine: MachineSpec, shape: Sequence[int], dtype: str):
    """Whole last-axis rows per tile: (n_tiles, row length, wanted layout, elements and
    rows per tile)."""
    nt = machine.n_tiles
    L = int(shape[-1])
    want = _rows(shape, L, dtype, nt)
    n = want.elems_per_tile(nt)
    return nt, L, want, n, n // L


def softmax_plan(machine: MachineSpec, shape: Sequence[int], dtype: str, scale: float = 1.0) -> OpPlan:
    """Softmax over the last axis (of ``scale * x``), whole rows per tile: max-reduce,
    subtract+exp, sum-reduce, reciprocal and multiply (popops/popnn vertices)."""
    nt, L, want, n, rows = _row_op(machine, shape, dtype)
    cyc = (2 * cycles.reduce_rows_cycles(machine, rows, L, dtype)
           + cycles.binary_cycles(machine, n, dtype, 1) + cycles.unary_cycles(machine, n, "exp", dtype)
           + cycles.unary_cycles(machine, rows, "inverse", "float32")
           + cycles.binary_cycles(machine, n, dtype, 2))
    out = Layout(tuple(shape), dtype, want.mapping)

    def run(srcs, rearrs, params):
        x = _in(srcs, rearrs, 0)
        v = _f32(x.view()).reshape(nt, -1, L) * np.float32(scale)
        e = np.exp(v - v.max(axis=-1, keepdims=True))
        s = e.sum(axis=-1, keepdims=True)
        with np.errstate(all="ignore"):
            y = e * (np.float32(1.0) / s)
        return _store(Resident(out, nt), y.reshape(nt, -1))

    rec = compute_record(machine, "softmax", cyc, f"softmax: {int(rows.max())} rows of {L} per tile")
    return OpPlan("softmax", "fwd", "reduce+exp+mul", [want], out, [rec], 5 * want.n_elems,
                  2 * want.bytes_per_tile(nt), _zeros(machine), run, (False,))


def layernorm_plan(machine: MachineSpec, shape: Sequence[int], dtype: str, eps: float) -> OpPlan:
    """Layer norm over the last axis with gain and bias, whole rows per tile: two
    reductions (mean, mean of squares), rsqrt, then scale/shift passes."""
    nt, L, want, n, rows = _row_op(machine, shape, dtype)
    cyc = (2 * cycles.reduce_rows_cycles(machine, rows, L, dtype)
           + cycles.binary_cycles(machine, n, dtype, 1)
           + cycles.unary_cycles(machine, rows, "rsqrt", "float32")
           + 3 * cycles.binary_cycles(machine, n, dtype, 2))
    out = Layout(tuple(shape), dtype, want.mapping)
    home, copies = param_memory(machine, want, L, 1, 2)     # gain and bias

    def run(srcs, rearrs, params):
        x = _in(srcs, rearrs, 0)
        v = _f32(x.view()).reshape(nt, -1, L)
        mu = v.mean(axis=-1, keepdims=True)
        d = v - mu
        var = (d * d).mean(axis=-1, keepdims=True)
        y = d / np.sqrt(var + np.float32(eps))
        y = y * np.asarray(params["weight"], np.float32) + np.asarray(params["bias"], np.float32)
        return _store(Resident(out, nt), y.reshape(nt, -1))

    rec = compute_record(machine, "layernorm", cyc, f"layer norm: {int(rows.max())} rows of {L} per tile")
    xrec = param_broadcast_record(machine, "layernorm", home, copies)
    return OpPlan("layernorm", "fwd", "reduce+rsqrt+mul", [want], out, [xrec, rec], 8 * want.n_elems,
                  2 * want.bytes_per_tile(nt) + copies + home, home, run, (False,))


def gather_plan(machine: MachineSpec, ids_shape: Sequence[int], vocab: int, dim: int, dtype: str) -> OpPlan:
    """Embedding lookup (popops multiSlice). The table's rows are spread over the tiles;
    each output row is copied from the tile holding that table row to the tile holding
    the output row. The cost assumes the rows are spread evenly (the exchange plan does
    not depend on the ids): one exchange of the output bytes and one copy vertex."""
    nt = machine.n_tiles
    out_shape = tuple(ids_shape) + (dim,)
    out = _rows(out_shape, dim, dtype, nt)
    table = _rows((vocab, dim), dim, dtype, nt)
    isz = DTYPES[dtype].itemsize
    n = out.elems_per_tile(nt)
    xcyc = cost.exchange_cycles(int(n.max()) * isz, machine)
    xrec = SuperstepRecord(index=0, name="gather rows", category="exchange", compute_cycles=0,
                           sync_cycles=machine.sync_cycles,
                           exchange_cycles=xcyc + machine.exchange_overhead_cycles,
                           bytes_exchanged=int(out.n_elems * isz),
                           exchange_why=f"multiSlice: {int(n.max()) * isz} B of table rows per tile")
    crec = compute_record(machine, "gather copy", cycles.copy_cycles(machine, n, dtype),
                          "multiSlice copy vertex")
    tpos = table.packed_offsets
    tstart = table.mapping.start

    def run(srcs, rearrs, params):
        ids = np.asarray(srcs[0])
        tab = Resident.from_host(table, nt, np.asarray(params["weight"], dtype=DTYPES[dtype]))
        flat = ids.reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= vocab):
            raise ValueError(f"embedding ids must lie in [0, {vocab}), "
                             f"got {int(flat.min())}..{int(flat.max())}")
        res = Resident(out, nt)
        i = np.searchsorted(tstart, flat * dim, side="right") - 1
        src_off = tpos[i] + (flat * dim - tstart[i]) * isz
        o0, _, ot, oo = out.pieces()     # one piece per output row (grain = dim)
        j = np.searchsorted(o0, np.arange(flat.size) * dim, side="right") - 1
        from ..core import copy_runs
        copy_runs(res.data, tab.data, table.mapping.tile[i], src_off, ot[j],
              oo[j] + (np.arange(flat.size) * dim - o0[j]) * isz, np.full(flat.size, dim * isz))
        return res

    wb = table.bytes_per_tile(nt)
    return OpPlan("embedding", "fwd", "multiSlice", [None], out, [xrec, crec], 0,
                  out.bytes_per_tile(nt) + wb, wb, run, (True,))


def loss_plan(machine: MachineSpec, shape: Sequence[int], dtype: str) -> OpPlan:
    """Mean softmax cross-entropy of logits (N, classes) against integer labels (host
    input). Rows on tiles: the popnn loss transform, a per-tile sum of the row losses,
    then the partial sums gathered to tile 0 and reduced."""
    nt = machine.n_tiles
    N, K = int(shape[0]), int(shape[1])
    want = _rows(shape, K, dtype, nt)
    rows = want.elems_per_tile(nt) // K
    used = int((rows > 0).sum())
    cyc = (cycles.loss_cycles(machine, rows, K, dtype)
           + cycles.reduce_rows_cycles(machine, rows, K, dtype))
    out = Layout((), "float32", _linear_rows(1, 1, 1))
    xcyc = cost.exchange_cycles(used * 4, machine)
    recs = [compute_record(machine, "loss transform", cyc, f"popnn LossTransform: {int(rows.max())} "
                           f"rows of {K} per tile"),
            SuperstepRecord(index=0, name="loss partials", category="exchange", compute_cycles=0,
                            sync_cycles=machine.sync_cycles,
                            exchange_cycles=int(xcyc) + machine.exchange_overhead_cycles,
                            exchange_tile=0, bytes_exchanged=4 * used,
                            exchange_why=f"{used} per-tile partial losses to tile 0"),
            compute_record(machine, "loss reduce",
                           np.r_[cycles.reduce_rows_cycles(machine, 1, max(used, 1), "float32"),
                                 np.zeros(nt - 1, np.int64)], f"sum {used} partial losses")]

    def run(srcs, rearrs, params):
        x = _in(srcs, rearrs, 0)
        labels = np.asarray(srcs[1]).reshape(-1).astype(np.int64)
        if labels.shape != (N,) or (labels.size and (labels.min() < 0 or labels.max() >= K)):
            raise ValueError(f"labels must be {N} integers in [0, {K}), got shape {np.shape(srcs[1])}")
        v = _f32(x.view()).reshape(nt, -1, K)
        m = v.max(axis=-1, keepdims=True)
        lse = (np.log(np.exp(v - m).sum(axis=-1)) + m[..., 0])
        # each tile's rows are consecutive rows of the logits
        first = np.zeros(nt, np.int64)
        first[want.mapping.tile] = want.mapping.start // K
        r = first[:, None] + np.arange(v.shape[1])[None, :]
        valid = np.arange(v.shape[1])[None, :] < rows[:, None]
        lab = labels[np.minimum(r, N - 1)]
        picked = np.take_along_axis(v, lab[..., None], axis=-1)[..., 0]
        per_tile = np.where(valid, lse - picked, 0.0).sum(axis=1)
        res = Resident(out, nt)
        res.view()[0, 0] = np.float32(per_tile.sum(dtype=np.float64) / N)
        return res

    return OpPlan("softmax_cross_entropy", "fwd", "LossTransform+reduce", [want, None], out, recs,
                  4 * want.n_elems, want.bytes_per_tile(nt) + np.r_[4, np.zeros(nt - 1, np.int64)],
                  _zeros(machine), run, (False, True))
