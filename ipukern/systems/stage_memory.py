"""Per-tile memory with liveness of a pipeline stage: the one-chip training model applied
to the stage's own rows, with the micro-batches in flight stashed.

A stage runs, per micro-batch, its layers' forward rows, then (with stage recomputation)
the same forward rows again, then its backward rows in reverse layer order (with
checkpoint recomputation rows where :func:`ipukern.nn.training.training_schedule` puts
them): the rows of the one-chip training schedule whose layer is in the stage, in the
same order. At every row the bytes live on each tile follow the one-chip rules of
:mod:`ipukern.nn.training`, restricted to the stage:

- the stage's weights; their gradients from the weight-update row to the end (with
  gradient accumulation over M > 1 micro-batches the accumulators, all rows); the
  optimizer state (``state_bytes`` per parameter: float32 or float16 slots, 1/R with
  replicated sharding) unless it is streamed;
- an activation produced in the stage from the row after its forward row to its last use
  in the stage: its last forward reader, the last backward row reading it
  (:func:`ipukern.nn.backward.backward_reads`) and the last recomputed row reading it (one
  sent to a later stage: at least to the end of the forward, when the pipeline cycle's link
  exchange sends it); an activation received from an earlier stage or a network input from
  the start to its last use in the stage; with stage recomputation the stage's own
  activations are freed after the forward and live again from the row after their
  recomputed row; checkpoint recomputation as on one chip;
- activation gradients from the backward row that produces them (the start of the
  backward when a later stage sends them) to the backward of their producer (the end,
  for those sent to an earlier stage);
- the row's own buffers (the per-row working bytes of the planned passes);
- the stash of the other micro-batches in flight: the activations live across this
  micro-batch's forward -> backward boundary, times ``in_flight - 1``. In the grouped
  schedule :func:`~ipukern.run_training_step` executes, stage s of S holds
  ``2 (S - 1 - s) + 1`` micro-batches' stashes at its backward (:func:`in_flight`).

With the whole network as one stage, one micro-batch and no optimizer state this is
exactly the one-chip liveness (tested).
"""
from __future__ import annotations

import numpy as np

from .. import _memo
from ..nn.backward import backward_reads
from ..nn.training import read_until, tile_breakdown

__all__ = ["TileMemory", "in_flight", "stage_liveness", "tile_memory"]

#: TileMemory objects kept (LRU): repeated estimates of one configuration reuse their stages
_CACHE = _memo.register(_memo.LruCache("systems.tile_memory", maxsize=16))


def in_flight(stage: int, n_stages: int) -> int:
    """Micro-batches whose activations stage ``stage`` holds at once in the grouped
    schedule (forward of micro-batch ``t - s`` and backward of ``t - 2 (S - 1) + s`` in
    pipeline cycle t)."""
    return 2 * (n_stages - 1 - stage) + 1


class _Seq:
    """A stage's row sequence and where each of its steps' rows are."""

    def __init__(self, rows, steps: set[int], recompute: bool):
        n_fwd = next((k for k, r in enumerate(rows) if r.pass_ != "fwd"), len(rows))
        fwd = [k for k in range(n_fwd) if rows[k].fwd_step in steps]
        bwd = [k for k in range(n_fwd, len(rows)) if rows[k].fwd_step in steps]
        self.rows = fwd + (fwd if recompute else []) + bwd
        self.n_fwd = len(fwd)
        self.bwd0 = self.n_fwd * (2 if recompute else 1)
        self.fwd_row: dict[int, int] = {}
        for pos, k in enumerate(fwd):
            self.fwd_row[rows[k].fwd_step] = pos           # the last forward row of the step
        self.bwd_first: dict[int, int] = {}
        self.bwd_last: dict[int, int] = {}
        self.wu_row: dict[int, int] = {}
        self.rec_first: dict[int, int] = {}                # step -> first checkpoint-recompute row
        self.recompute = recompute
        for pos, k in enumerate(bwd, self.bwd0):
            r, i = rows[k], rows[k].fwd_step
            if r.pass_ == "fwd":
                self.rec_first.setdefault(i, pos)
                continue
            self.bwd_first.setdefault(i, pos)
            self.bwd_last[i] = pos
            if r.pass_ == "wu":
                self.wu_row[i] = pos

    def rerun(self, i: int) -> int | None:
        """The row recomputing step ``i``'s output (None: not recomputed)."""
        if self.recompute:
            return self.fwd_row[i] + self.n_fwd
        return self.rec_first.get(i)


def stage_liveness(prog, rows, steps: list[int], *, seg: list[int] | None, checkpoints: set[str],
                   recompute: bool, accumulate: bool, state_bytes: int, shard: int, n_in_flight: int,
                   outputs: list[str]) -> dict:
    """Per-tile live bytes of one stage (module docstring).

    Parameters
    ----------
    prog : NetworkProgram
        The network compiled for training (``fold_bn=False``), as the schedule's.
    rows : list
        The one-chip training schedule's rows (``optimizer=None``).
    steps : list of int
        The stage's step indices.
    seg : list of int or None
        Checkpoint segment of every step (None: no checkpoints); ``checkpoints`` the nodes
        whose outputs are checkpoints.
    recompute : bool
        Stage recomputation (stash only the stage's inputs).
    accumulate : bool
        Gradient accumulators live for the whole step (M > 1 micro-batches).
    state_bytes : int
        Optimizer state bytes per parameter kept on chip (0 when streamed; e.g. 4 for
        float32 momentum, 2 for float16, 6 for LAMB's float16 m and float32 v).
    shard : int
        Replicas sharing the optimizer state (replicated sharding).
    n_in_flight : int
        Micro-batches whose stash the stage holds at once.
    outputs : list of str
        The network's outputs.

    Returns
    -------
    dict
        ``live`` (rows x tiles, reserve excluded), ``row_names``, ``stash`` (per tile, one
        micro-batch), ``weights`` (per tile).
    """
    nt = prog.machine.n_tiles
    psteps = prog.steps
    stage = set(steps)
    sq = _Seq(rows, stage, recompute)
    R = len(sq.rows)
    last = R - 1
    fwd_end_pos = sq.n_fwd - 1
    diff = np.zeros((R + 1, nt), np.int64)
    stash = np.zeros(nt, np.int64)
    parts: list[tuple[int, int, np.ndarray, str]] = []

    def live(lo: int, hi: int, b, act: bool = True, kind: str = "activations") -> None:
        nonlocal stash
        if hi >= lo:
            diff[lo] += b
            diff[hi + 1] -= b
            parts.append((lo, hi, b, kind))
            if act and lo <= sq.n_fwd <= hi:     # live across the forward -> backward boundary
                stash = stash + b

    weights = np.zeros(nt, np.int64)
    for i in steps:
        w = psteps[i].plan.weight_bytes
        weights += w
        if i in sq.wu_row:
            live(0 if accumulate else sq.wu_row[i], last, w, act=False, kind="weight gradients")
    isz = np.dtype(prog.ctx.dtype).itemsize
    state = (weights * state_bytes) // isz // shard
    produced = {s.node: i for i, s in enumerate(psteps)}
    consumers: dict[str, list[int]] = {}
    for i, s in enumerate(psteps):
        for src in s.srcs:
            consumers.setdefault(src, []).append(i)
    last_seg = seg[-1] if seg else 0
    lo_step = min(steps)
    reads = {i: backward_reads(psteps[i]) for i in steps}
    for name, lay in prog.layouts.items():
        if lay is None:
            continue
        p = produced.get(name, -1)
        cons = consumers.get(name, [])
        cin = [c for c in cons if c in stage]
        mine = p in stage
        if not mine and not cin:
            continue
        b = lay.bytes_per_tile(nt)
        has_grad = p >= 0
        need = read_until(name, p, cin, psteps, reads, sq.bwd_last)
        again = [r for r in (sq.rerun(c) for c in cin) if r is not None]
        if not mine:                       # a stage input (received, or a network input)
            live(0, max([sq.fwd_row[c] for c in cin] + [need] + again), b)
            if has_grad and p < lo_step:   # its gradient, sent back at the end
                live(sq.bwd_first[max(cin)], last, b, act=False, kind="activation gradients")
            continue
        sent = name in outputs or any(c not in stage for c in cons)
        start = sq.fwd_row[p] + 1          # the producing row's own bytes hold it
        fwd_end = max([sq.fwd_row[c] for c in cin] + [start - 1] + ([fwd_end_pos] if sent else []))
        rerun = sq.rerun(p)
        if rerun is not None and (recompute or (
                cin and seg is not None and seg[p] != last_seg and name not in checkpoints
                and all(seg[c] == seg[p] for c in cons))):
            live(start, fwd_end, b)
            live(rerun + 1, max(again + [need]), b)
        else:
            live(start, max([fwd_end, need] + again), b)
        if cons:                           # its gradient
            g0 = sq.bwd0 if any(c not in stage for c in cons) else sq.bwd_first[max(cin)]
            live(g0, sq.bwd_last[p], b, act=False, kind="activation gradients")
    acts = np.cumsum(diff, axis=0)[:R]
    own = np.stack([rows[k].own for k in sq.rows]) if R else np.zeros((0, nt), np.int64)
    total = acts + own + (weights + state + (n_in_flight - 1) * stash)[None, :]
    names = [rows[k].name + (" (stage recompute)" if sq.n_fwd <= pos < sq.bwd0 else "")
             for pos, k in enumerate(sq.rows)]
    fixed = {"weights": weights, "optimizer state": state, "in-flight stashes": (n_in_flight - 1) * stash}
    return {"live": total, "row_names": names, "stash": stash, "weights": weights, "parts": parts,
            "fixed": fixed, "own": own}


class TileMemory:
    """Per-tile memory with liveness of a stage (:mod:`.stage_memory`) from the network's
    one-chip training schedule (the one the per-layer costs came from), cached per stage."""

    def __init__(self, net, mb, chip, dtype, partials, checkpoints, recompute, m, state_bytes,
                 shard, n_stages, amp=None):
        from ..nn import plan_context
        from ..nn import compile_network
        from ..nn.training import checkpoint_segments, training_schedule
        ctx = plan_context(dtype, partials, chip, amp)
        self.rows = training_schedule(net, mb, ctx, recompute=checkpoints, optimizer=None)[0]
        self.prog = compile_network(net, mb, ctx, fold_bn=False)
        self.seg, self.ckpt = checkpoint_segments(self.prog, checkpoints)
        layer_at = {n: k for k, (n, _) in enumerate(net.layers)}
        self.step_layer = [layer_at[st.node] for st in self.prog.steps]
        self.chip, self.outputs = chip, list(net.outputs)
        self.kw = dict(recompute=recompute, accumulate=m > 1, state_bytes=state_bytes, shard=shard)
        self.n_stages, self.m = n_stages, m
        self.cache: dict[tuple[int, int, int], dict] = {}

    def __call__(self, s: int, i: int, j: int) -> dict:
        hit = self.cache.get((s, i, j))
        if hit is None:
            hit = self.cache[(s, i, j)] = self._stage(s, i, j)
        return hit

    def _stage(self, s: int, i: int, j: int) -> dict:
        steps = [k for k, lay in enumerate(self.step_layer) if i <= lay < j]
        chip = self.chip
        k = min(in_flight(s, self.n_stages), self.m)     # no more than the step's micro-batches
        if not steps:
            live, names = np.zeros((1, chip.n_tiles), np.int64), [""]
        else:
            got = stage_liveness(self.prog, self.rows, steps, seg=self.seg, checkpoints=self.ckpt,
                                 n_in_flight=k, outputs=self.outputs, **self.kw)
            live, names = got["live"], got["row_names"]
        per_row = live.max(axis=1)
        r = int(np.argmax(per_row))
        t = int(np.argmax(live[r]))
        peak = int(per_row[r]) + chip.reserved_bytes_per_tile
        kinds = tile_breakdown(got, r, t, chip.reserved_bytes_per_tile) if steps else {}
        return {"memory_bytes": int(live[r].sum()), "budget_bytes": chip.n_tiles * chip.tile_budget_bytes,
                "fits": peak <= chip.tile_bytes, "peak_tile_bytes": peak, "tile_bytes": chip.tile_bytes,
                "reserve_bytes": chip.reserved_bytes_per_tile, "busiest_tile": t, "busiest_step": names[r],
                "in_flight": k, "tile_bytes_by_kind": kinds}


def tile_memory(net, mb, chip, dtype, partials, checkpoints, recompute, m, state_bytes, shard,
                n_stages, amp=None) -> TileMemory:
    """A :class:`TileMemory`, shared by calls with the same arguments while the network's
    one-chip training schedule is the same cached object (``clear_network_caches`` drops it)."""
    from ..nn import plan_context
    from ..nn.training import training_schedule
    rows = training_schedule(net, mb, plan_context(dtype, partials, chip, amp), recompute=checkpoints,
                             optimizer=None)[0]
    key = (id(rows), recompute, m, state_bytes, shard, n_stages)
    hit = _CACHE.get(key)
    if hit is not None and hit.rows is rows:
        return hit
    tm = TileMemory(net, mb, chip, dtype, partials, checkpoints, recompute, m, state_bytes, shard, n_stages,
                    amp)
    return _CACHE.put(key, tm)
