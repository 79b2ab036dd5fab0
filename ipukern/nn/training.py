"""Training steps of a network: forward, backward, optimizer update; memory with liveness.

Program order (one row per layer pass, as PopLibs/PopART schedule a training step):

1. the forward pass (batch norms compute batch statistics: one extra "fwd" row each);
2. the backward pass in reverse layer order: per layer its backward-data ("bwd") and
   weight-update ("wu") rows (:mod:`ipukern.nn.backward`); with ``recompute=`` the
   forward of each recomputed segment runs again (rows ``<layer> (recompute)``) just before
   that segment's backward;
3. the optimizer update over every parameter (:func:`ipukern.estimate_optimizer_step`).

Memory at every row is what is live then, per tile: every layer's weights; their
gradients from their weight-update row to the optimizer; the optimizer state (the whole
program when on chip, only the optimizer row when streamed from the host); activations
from the row after the one producing them (that row's own buffers hold its output) to
their last use, where a *stashed* activation stays live until the last backward row that
reads it (:func:`~ipukern.nn.backward.backward_reads`: a batch norm's output feeding a
ReLU is not stashed, popnn differentiates the ReLU from its output); activation gradients
from the backward row that produces them to the one that consumes them; and the row's own
buffers.

Recomputation: ``recompute`` lists checkpoint layers, or is "auto": checkpoints at about
sqrt(n) of the network's n block boundaries (:mod:`ipukern.nn.checkpoints`). Activations produced by a
checkpoint (and network inputs) are stashed; every other activation of a segment
(the layers after one checkpoint up to the next) is freed after its forward use and
recomputed (live again from its own recomputed row) before the segment's backward; what a
recomputed step reads stays live until that recomputation. The last segment (ending at the loss) is not
recomputed. An activation used outside its own segment stays stashed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _memo
from ..core import TileMemoryError
from ..ops.optim import estimate_optimizer_step, get_optimizer, state_bytes_per_param, state_dtypes
from .backward import PassRow, backward_reads, backward_rows, bn_stats_row
from .grad_ops import accumulate_flags
from .compile import compile_network
from .layers import PlanContext
from .network import Network
from .plan_keys import prefetch_network_plans
from .profile import NetworkProfile

__all__ = ["checkpoint_segments", "estimate_training", "training_schedule"]

#: training schedules kept (LRU), by network version, batch, context and options: the
#: max-batch search and repeated estimates reuse them
SCHEDULE_CACHE_SIZE = 16
_SCHEDULES = _memo.register(_memo.LruCache("nn.training_schedules", maxsize=SCHEDULE_CACHE_SIZE),
                            per_batch=True)
#: optimizer step profiles (they do not depend on the batch)
_OPTIMIZER = _memo.register(_memo.LruCache("nn.optimizer_steps", maxsize=256))


def _optimizer_profile(shapes: tuple, opt, dtype: str, machine, state_location: str,
                       state_dtype: tuple = ()):
    """The optimizer step's profile; it does not depend on the batch, so the max-batch
    search and other batches reuse it."""
    key = (shapes, opt, dtype, machine, state_location, state_dtype)
    hit = _OPTIMIZER.get(key)
    if hit is None:
        hit = estimate_optimizer_step(list(shapes), optimizer=opt, dtype=dtype, machine=machine,
                                      state_location=state_location, state_dtype=state_dtype)
        hit = _OPTIMIZER.setdefault(key, hit)
    return hit


@dataclass
class _Row:
    name: str
    op: str
    pass_: str
    method: str
    records: list
    flops: int
    own: np.ndarray
    in_shapes: tuple = ()
    out_shape: tuple = ()
    rearrange: int = 0
    fwd_step: int = -1        # forward step index this row belongs to

    @property
    def cycles(self) -> int:
        return sum(r.total_cycles for r in self.records) + self.rearrange


def checkpoint_names(prog, recompute) -> list[str]:
    """The checkpoint layers ``recompute`` names: a layer, a list of layers, or "auto"
    (:func:`ipukern.nn.checkpoints.auto_checkpoints`). ``True`` (stage recomputation) is
    :func:`ipukern.estimate_training`'s, not a one-chip schedule's: ValueError."""
    if recompute is None:
        return []
    if isinstance(recompute, str) and recompute == "auto":
        from .checkpoints import auto_checkpoints
        return auto_checkpoints(prog)
    if isinstance(recompute, str):
        return [recompute]
    if isinstance(recompute, bool) or not isinstance(recompute, (list, tuple)):
        raise ValueError(f"recompute must be None, 'auto' or a list of checkpoint layer names, got "
                         f"{recompute!r} (recompute=True, stage recomputation, is ik.estimate_training's)")
    return list(recompute)


def _segments(prog, recompute) -> list[int] | None:
    """Segment index of each forward step (None: no recomputation)."""
    if recompute is None:
        return None
    names = checkpoint_names(prog, recompute)
    nodes = {s.node: i for i, s in enumerate(prog.steps)}
    layer_names = {n for s in prog.steps for n in s.layers}
    for n in names:
        if n not in layer_names:
            raise ValueError(f"recompute checkpoint {n!r} is not a layer of network "
                             f"{prog.net.name!r}")
    cut = sorted({nodes[n] if n in nodes else next(i for i, s in enumerate(prog.steps) if n in s.layers)
                  for n in names})
    seg = np.zeros(len(prog.steps), dtype=np.int64)
    for c in cut:
        seg[c + 1:] += 1
    return seg.tolist()


def training_schedule(net: Network, batch: int, ctx: PlanContext, *, recompute: Any = None,
                      optimizer: Any = "sgd_momentum", state_location: str = "chip",
                      state_dtype: Any = "float32"):
    """The rows of a training step and their per-tile live bytes (reserve excluded).

    Returns (rows, live (n_rows, n_tiles), weights (n_tiles,), flops, optimizer profile).
    ``optimizer=None``: no optimizer row (a caller that costs the update itself, such as a
    pipeline stage of :func:`ipukern.estimate_training`, whose parameters need not fit one chip).
    Cached: a repeated call returns the same (read-only) objects.
    """
    opt = None if optimizer is None else get_optimizer(optimizer)
    sdt = state_dtypes(opt, state_dtype) if opt is not None else ()
    return _cached(net, batch, ctx, recompute, opt, state_location, sdt)[0]


def _cached(net, batch, ctx, recompute, opt, state_location, sdt: tuple = ()) -> tuple[tuple, dict]:
    """The cached ``(schedule, intervals)`` of :func:`training_schedule` (``sdt``: the state
    slots' types, :func:`ipukern.ops.optim.state_dtypes`)."""
    rkey = tuple(recompute) if isinstance(recompute, (list, tuple)) else (recompute,)
    key = (id(net), net.version, batch, ctx, rkey, opt, state_location, sdt)
    hit = _SCHEDULES.get(key)
    if hit is not None and hit[0] is net:
        return hit[1], hit[2]
    with prefetch_network_plans(net, batch, ctx, fold_bn=False, backward=True):
        *res, parts = _schedule(net, batch, ctx, recompute, opt, state_location, sdt)
    res = tuple(res)
    for a in (res[1], res[2]):
        a.flags.writeable = False
    _SCHEDULES.put(key, (net, res, parts))
    return res, parts


#: what a tile's bytes are made of (:func:`tile_breakdown`)
KINDS = ("weights", "optimizer state", "weight gradients", "activations", "activation gradients",
         "in-flight stashes", "working buffers", "reserve")


def tile_breakdown(got: dict, row: int, tile: int, reserve: int) -> dict[str, int]:
    """The bytes of ``tile`` at ``row`` by kind (:data:`KINDS`): resident weights; optimizer
    state; weight gradients; activations; activation gradients; other micro-batches' stashes
    (pipeline stages); the row's working buffers (its planned passes' windows, weight copies,
    partials, receive buffers and outputs); the reserve. They sum to the tile's bytes.
    ``got``: ``parts`` (intervals ``(lo, hi, bytes per tile, kind)``), ``fixed`` (kind ->
    bytes per tile on every row) and ``own`` (per row, per tile working buffers)."""
    out = dict.fromkeys(KINDS, 0)
    for k, v in got["fixed"].items():
        out[k] += int(v[tile])
    for lo, hi, b, kind in got["parts"]:
        if lo <= row <= hi:
            out[kind] += int(b[tile])
    out["working buffers"] = int(got["own"][row][tile])
    out["reserve"] = int(reserve)
    return out


def _schedule(net: Network, batch: int, ctx: PlanContext, recompute: Any, opt: Any,
              state_location: str, sdt: tuple = ()):
    """:func:`training_schedule` without the cache."""
    prog = compile_network(net, batch, ctx, fold_bn=False)
    nt = ctx.machine.n_tiles
    steps = prog.steps
    F = len(steps)
    seg = _segments(prog, recompute)
    last_seg = seg[-1] if seg else 0
    produced = {s.node: i for i, s in enumerate(steps)}
    consumers: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        for src in s.srcs:
            consumers.setdefault(src, []).append(i)

    def has_grad(src: str) -> bool:
        return src in produced and prog.layouts.get(src) is not None

    # ---- forward rows
    rows: list[_Row] = []
    fwd_row = {}
    for i, s in enumerate(steps):
        if s.op == "batchnorm":
            r = bn_stats_row(s, ctx)
            rows.append(_Row(r.name, r.op, "fwd", r.method, r.records, r.flops, r.total_bytes, s.in_shapes,
                             s.out_shape, 0, i))
        own = s.plan.total_bytes - s.plan.weight_bytes
        recs = s.records()
        fwd_row[i] = len(rows)
        rows.append(_Row(s.name, s.op, "fwd", s.plan.method, recs, s.plan.flops, own, s.in_shapes,
                         s.out_shape, 0, i))
    # ---- backward rows, reverse order, with recomputation before each segment
    acc = accumulate_flags(steps)
    bwd_first: dict[int, int] = {}    # step -> first backward row index
    bwd_last: dict[int, int] = {}
    recompute_row: dict[int, int] = {}  # segment -> first recompute row
    rec_row: dict[int, int] = {}        # step -> its recompute row
    wu_row: dict[int, int] = {}
    seg_done: set[int] = set()
    for i in range(F - 1, -1, -1):
        s = steps[i]
        if seg is not None and seg[i] != last_seg and seg[i] not in seg_done:
            seg_done.add(seg[i])
            members = [j for j in range(F) if seg[j] == seg[i]]
            recompute_row[seg[i]] = len(rows)
            for j in members:
                sj = steps[j]
                rec_row[j] = len(rows)
                rows.append(_Row(f"{sj.name} (recompute)", sj.op, "fwd", sj.plan.method, sj.records(),
                                 sj.plan.flops, sj.plan.total_bytes - sj.plan.weight_bytes,
                                 sj.in_shapes, sj.out_shape, 0, j))
        prs: list[PassRow] = backward_rows(s, ctx, [has_grad(src) for src in s.srcs], acc[i])
        bwd_first[i] = len(rows)
        for r in prs:
            if r.pass_ == "wu":
                wu_row[i] = len(rows)
            rows.append(_Row(r.name, r.op, r.pass_, r.method, r.records, r.flops, r.total_bytes,
                             s.in_shapes, s.out_shape, 0, i))
        if not prs:   # a view: keep the row index well defined, no cost
            rows.append(_Row(f"{s.name}.grad", s.op, "bwd", "view", [], 0, np.zeros(nt, np.int64),
                             s.in_shapes, s.out_shape, 0, i))
        bwd_last[i] = len(rows) - 1
    # ---- optimizer
    trainable = [s for k, s in net.param_shapes().items()
                 if not k.endswith(("running_mean", "running_var"))]
    oprof = None
    if trainable and opt is not None:
        oprof = _optimizer_profile(tuple(tuple(x) for x in trainable), opt, ctx.dtype, ctx.machine,
                                   state_location, sdt)
        opt_row = len(rows)
        rows.append(_Row(f"optimizer ({opt.name})", "optimizer", "update", opt.name, list(oprof.supersteps),
                         0, np.zeros(nt, np.int64), (), (), 0, -1))
    else:
        opt_row = len(rows) - 1
    R = len(rows)
    # ---- liveness
    diff = np.zeros((R + 1, nt), dtype=np.int64)
    parts: list[tuple[int, int, np.ndarray, str]] = []

    def live(lo: int, hi: int, b: np.ndarray, kind: str = "activations") -> None:
        if hi >= lo:
            diff[lo] += b
            diff[hi + 1] -= b
            parts.append((lo, hi, b, kind))

    weights = np.zeros(nt, dtype=np.int64)
    for i, s in enumerate(steps):
        weights += s.plan.weight_bytes
        if i in wu_row:
            live(wu_row[i], opt_row, s.plan.weight_bytes, "weight gradients")
    isz = np.dtype(ctx.dtype).itemsize
    # weights are stored and updated in ctx.dtype (no float32 master copy); the state holds
    # state_bytes_per_param bytes per parameter (its slots' types)
    state = (weights * (state_bytes_per_param(opt, sdt) if opt is not None else 0)) // isz
    if state_location == "chip":
        live(0, R - 1, state, "optimizer state")
    else:
        live(opt_row, opt_row, state, "optimizer state")
    reads = [backward_reads(s) for s in steps]
    ckpt = _checkpoint_nodes(prog, recompute)
    for name, lay in prog.layouts.items():
        if lay is None:
            continue
        b = lay.bytes_per_tile(nt)
        p = produced.get(name, -1)
        start = fwd_row[p] + 1 if p >= 0 else 0   # the producing row's own bytes hold it
        cons = consumers.get(name, [])
        out = name in net.outputs
        fwd_end = max([fwd_row[c] for c in cons] + ([fwd_row[F - 1]] if out else []) + [start - 1])
        need_until = read_until(name, p, cons, steps, reads, bwd_last)
        again = [rec_row[c] for c in cons if c in rec_row]      # recomputed readers
        recomputed = (seg is not None and p >= 0 and seg[p] != last_seg and name not in ckpt
                      and all(seg[c] == seg[p] for c in cons))
        if recomputed:
            live(start, fwd_end, b)
            live(rec_row[p] + 1, max(again + [need_until]), b)
        else:
            live(start, max([fwd_end, need_until] + again), b)
        if p >= 0 and has_grad(name) and cons:
            live(bwd_first[max(cons)], bwd_last[p], b, "activation gradients")
    acts = np.cumsum(diff, axis=0)[:R]
    own = np.stack([r.own for r in rows]) if rows else np.zeros((0, nt), np.int64)
    total = acts + own + weights[None, :]
    flops = sum(r.flops for r in rows)
    return rows, total, weights, flops, oprof, {"parts": parts, "fixed": {"weights": weights},
                                               "own": [r.own for r in rows]}


def read_until(name: str, p: int, cons: list[int], steps, reads, bwd_last: dict[int, int]) -> int:
    """The last backward row reading activation ``name`` (produced by step ``p``, -1 for a
    network input; read by steps ``cons``): its consumers' backward rows that read their
    input, its producer's that reads its output (:func:`backward_reads`); -1 if none."""
    ends = [bwd_last[c] for c in cons if c in bwd_last
            and any(r for src, r in zip(steps[c].srcs, reads[c][0]) if src == name)]
    if p in bwd_last and reads[p][1]:
        ends.append(bwd_last[p])
    return max(ends, default=-1)


def _checkpoint_nodes(prog, recompute) -> set[str]:
    names = checkpoint_names(prog, recompute)
    out = set()
    for s in prog.steps:
        if any(n in s.layers for n in names):
            out.add(s.node)
    return out


def checkpoint_segments(prog, recompute) -> tuple[list[int] | None, set[str]]:
    """The recomputation segments of a training program: the segment index of each forward
    step (None without recomputation) and the nodes of the checkpoint layers (the seam the
    multi-IPU stage model and executor use)."""
    return _segments(prog, recompute), _checkpoint_nodes(prog, recompute)


def estimate_training(net: Network, batch: int, ctx: PlanContext, *, recompute: Any = None,
                      optimizer: Any = "sgd_momentum", allow_overflow: bool = False,
                      state_location: str = "chip",
                      optimizer_state_dtype: Any = "float32") -> NetworkProfile:
    """The profile of one training step (see the module docstring); called by
    :func:`ipukern.estimate_network` with ``training=True``. ``optimizer_state_dtype``: the
    optimizer state's storage type, "float32", "float16" or one per state slot
    (:func:`ipukern.ops.optim.state_dtypes`); weights are stored and updated in ``ctx.dtype``
    (no float32 master copy is modelled)."""
    if state_location not in ("chip", "host"):
        raise ValueError(f"state_location must be 'chip' or 'host', got {state_location!r}")
    opt = None if optimizer is None else get_optimizer(optimizer)
    sdt = state_dtypes(opt, optimizer_state_dtype) if opt is not None else ()
    rows, live, weights, flops, oprof = _cached(net, batch, ctx, recompute, opt, state_location, sdt)[0]
    steps = []
    records = []
    for r in rows:
        x = sum(rec.exchange_cycles for rec in r.records)
        steps.append({"name": r.name, "op": r.op, "in_shapes": r.in_shapes, "out_shape": r.out_shape,
                      "pass": r.pass_, "method": r.method, "cycles": r.cycles, "exchange": x,
                      "rearrange": 0, "flops": r.flops})
        records += r.records
    prof = NetworkProfile(machine=ctx.machine, batch=batch, dtype=ctx.dtype, partials=ctx.partials,
                          steps=steps, records=records, live=live, weights=weights, flops=flops,
                          label=f"{net.name} training step", training=True,
                          max_batch_fn=lambda: _max_batch(net, ctx, recompute, opt, state_location, batch,
                                                          sdt),
                          info={"optimizer": None if opt is None else opt.name,
                                "state_location": state_location,
                                "optimizer_state_dtype": list(sdt),
                                "weights": f"{ctx.dtype}, updated in place (no float32 master copy)",
                                "recompute": recompute,
                                "recompute_checkpoints": _checkpoints_of(net, batch, ctx, recompute)})
    mem = prof._memory
    got = _cached(net, batch, ctx, recompute, opt, state_location, sdt)[1]
    mem["tile_bytes_by_kind"] = tile_breakdown(got, mem["busiest_step"], mem["busiest_tile"],
                                               mem["reserve_bytes"])
    if not mem["fits"] and not allow_overflow:
        raise TileMemoryError(
            f"network {net.name!r} training step (batch {batch}) does not fit: at "
            f"{mem['busiest_layer']!r} (row {mem['busiest_step']}) tile {mem['busiest_tile']} needs "
            f"{mem['peak_bytes']:,} B > budget {mem['budget_bytes']:,} B (incl. "
            f"{mem['reserve_bytes']:,} B reserved); pass allow_overflow=True to get the report",
            tile=mem["busiest_tile"], requested=mem["peak_bytes"], used=mem["peak_bytes"],
            budget=mem["budget_bytes"])
    return prof


def _checkpoints_of(net, batch, ctx, recompute) -> list[str]:
    """The checkpoint layers of a training estimate (resolved for "auto")."""
    if recompute is None:
        return []
    return checkpoint_names(compile_network(net, batch, ctx, fold_bn=False), recompute)


def _spare(net, batch, ctx, recompute, opt, state_location, sdt=()) -> float:
    """Bytes left on the fullest tile of the training step at ``batch`` (negative: over
    budget; -inf: a layer fits no plan)."""
    try:
        _, live, _, _, _ = training_schedule(net, batch, ctx, recompute=recompute, optimizer=opt,
                                             state_location=state_location,
                                             state_dtype=sdt or "float32")
    except TileMemoryError:      # a layer fits no plan; a host MemoryError is not an answer
        return -math.inf
    m = ctx.machine
    return m.tile_bytes - m.reserved_bytes_per_tile - int(live.max())


def _fits(net, batch, ctx, recompute, opt, state_location, sdt=()) -> bool:
    return _spare(net, batch, ctx, recompute, opt, state_location, sdt) >= 0


def _max_batch(net, ctx, recompute, opt, state_location, start: int, sdt=()) -> int:
    """Largest batch whose training step fits (0 if batch 1 does not): from the estimated
    batch (its schedule is cached), guided by the bytes left, with the real planner and
    liveness (:func:`ipukern.nn.max_batch.search_max_batch`)."""
    from .max_batch import search_max_batch
    from .host.host_memory import HostMemoryGuard
    return search_max_batch(None, start, spare=HostMemoryGuard(
        lambda b: _spare(net, b, ctx, recompute, opt, state_location, sdt)))
