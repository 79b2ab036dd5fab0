"""An exchange and the compute set after it, executed tile by tile on the host.

In BSP order superstep k's exchange completes before superstep k+1's compute set starts.
Executed literally, a conv program's first exchange writes every tile's input window and
weights (ResNet-50: 7 GB per forward, far more than the host's caches), and the conv
vertices then read them all back from DRAM. When the compute set after an exchange is made
of conv vertices (codelets providing ``fused_vertices``, see
:class:`ipukern.conv.codelet.ConvCodelet`), :class:`FusedStep` runs both in one compiled
call (``ipukern._kernels._fused``): for each tile, the copies into that tile, then that
tile's vertices while its bytes are still in the cache.

This changes how the host executes the program, never the program: copies, vertices,
cycles, bytes and memory are the same, and so is every byte of the arena afterwards,
provided no copy reads bytes the compute set writes (a vertex writes only its own tile, and
the exchange was checked when built to have no copy writing bytes another copy reads).
:func:`fuse` checks that once per superstep pair and returns None when it does not hold
(or the compute set has vertices the fused call cannot run); the two phases then run one
after the other as before.

``IPUKERN_FUSED_EXCHANGE=0`` in the environment (read at import; :data:`FUSED_EXCHANGE`)
turns fusion off, for A/B measurements.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .program import ComputeSet, Exchange, ExchangeError, check_arena
from .threads import check_num_threads

__all__ = ["FUSED_EXCHANGE", "FusedStep", "fuse", "reads_written"]

#: run an exchange together with the conv compute set after it when that is valid
FUSED_EXCHANGE = os.environ.get("IPUKERN_FUSED_EXCHANGE", "1") != "0"


def reads_written(read_tile: np.ndarray, read_off: np.ndarray, read_nb: np.ndarray,
                  write_tile: np.ndarray, write_off: np.ndarray, write_nb: np.ndarray) -> bool:
    """True when some read interval ``[off, off + nb)`` on a tile overlaps a write interval
    on the same tile (empty intervals never overlap)."""
    r, w = read_nb > 0, write_nb > 0
    if not r.any() or not w.any():
        return False
    rt, ro, rn = read_tile[r].astype(np.int64), read_off[r], read_nb[r]
    wt, wo, wn = write_tile[w].astype(np.int64), write_off[w], write_nb[w]
    row = int(max((ro + rn).max(), (wo + wn).max())) + 1   # one line of addresses for all tiles
    ws = wt * row + wo
    o = np.argsort(ws, kind="stable")
    ws = ws[o]
    we = np.maximum.accumulate(ws + wn[o])
    rs = rt * row + ro
    j = np.searchsorted(ws, rs + rn, side="left") - 1   # last write starting before the read ends
    return bool(((j >= 0) & (we[np.maximum(j, 0)] > rs)).any())


class FusedStep:
    """``exchange`` followed by the conv compute set ``compute``, one compiled call per run.

    Built by :func:`fuse`, which has checked that the fused order gives the same bytes.
    """

    def __init__(self, exchange: Exchange, compute: ComputeSet, vertices: list[tuple]):
        self.exchange, self.compute = exchange, compute
        self.codelets = [b.codelet for b in compute.batches if b.tiles.size]
        st, so, dt, do, nb = exchange._pieces()   # destination order, big copies in pieces
        self.copies = (st, so, dt, do, nb)
        cols = list(zip(*vertices))
        tiles = np.concatenate(cols[0]).astype(np.int32)
        # stable: on each tile the vertices keep the compute set's order
        order = np.argsort(tiles, kind="stable")
        self.tiles = np.ascontiguousarray(tiles[order])
        self.win, self.w, self.out = (np.ascontiguousarray(np.concatenate(c).astype(np.int64)[order])
                                      for c in cols[1:4])
        self.dims = np.ascontiguousarray(np.concatenate(cols[4]).astype(np.int64)[order])
        self.vbatch = np.repeat(np.arange(len(vertices), dtype=np.int32),
                                [t.size for t in cols[0]])[order]
        self.bparams = np.array(cols[5], dtype=np.int32).reshape(-1, 8)
        # the bias epilogues (ipukern.core.vertices.bias_epilogue) of the batches that have one
        epis = cols[8] if len(cols) > 8 else [None] * len(vertices)
        self.bias_passes = [e[2] if e else None for e in epis]
        self.bias = None
        if any(e is not None for e in epis):
            off = [np.asarray(e[0], np.int64) if e else np.full(t.size, -1, np.int64)
                   for e, t in zip(epis, cols[0])]
            prm = [np.asarray(e[1], np.int64).reshape(-1, 2) if e else np.zeros((t.size, 2), np.int64)
                   for e, t in zip(epis, cols[0])]
            self.bias = (np.ascontiguousarray(np.concatenate(off)[order]),
                         np.ascontiguousarray(np.concatenate(prm)[order]))
        self.scratch_floats = max(16, *cols[6])
        items = np.union1d(dt, self.tiles)   # every tile written or computed on, ascending
        self.copy_lo = np.append(np.searchsorted(dt, items, side="left"), dt.size).astype(np.int64)
        self.vert_lo = np.append(np.searchsorted(self.tiles, items, side="left"),
                                 self.tiles.size).astype(np.int64)
        self._scratch: dict[int, np.ndarray] = {}

    def run(self, data: np.ndarray, n_threads: int) -> None:
        """Execute the exchange and then the compute set on the arena ``data``, as
        ``exchange.run`` followed by ``compute.run`` would (same errors, same bytes)."""
        x, c = self.exchange, self.compute
        check_arena(data, x.rows_needed, x.row_needed, x.name, ExchangeError)
        check_arena(data, c.rows_needed, c.row_needed, c.name)
        n_threads = check_num_threads(n_threads)
        scratch = self._scratch.get(n_threads)
        if scratch is None:
            scratch = self._scratch[n_threads] = np.zeros((n_threads, self.scratch_floats),
                                                          np.float32)
        from .._kernels import _fused
        bias = ()
        on = np.array([bp is not None and bp.fused for bp in self.bias_passes])
        if self.bias is not None and on.any():   # each bias pass's activation, as set for this run
            off = self.bias[0] if on.all() else np.where(on[self.vbatch], self.bias[0], -1)
            bias = (off, self.bias[1], np.array([bp.act if bp is not None else 0
                                                 for bp in self.bias_passes], np.int32))
        st = _fused.exchange_conv(data, *self.copies, self.copy_lo, self.vert_lo, self.tiles,
                                  self.win, self.w, self.out, self.dims, self.vbatch,
                                  self.bparams, scratch, n_threads,
                                  all(cd.direct_path() for cd in self.codelets), *bias)
        if st != 0:
            raise ValueError(f"{c.name}: the fused exchange+conv kernel refused the step "
                             f"(status {st}); run with IPUKERN_FUSED_EXCHANGE=0 to see which "
                             "vertex the conv kernel rejects")


def fuse(exchange: Exchange | None, compute: ComputeSet | None) -> FusedStep | None:
    """A :class:`FusedStep` for ``exchange`` followed by ``compute``, or None when they must
    run one after the other: no copies or no vertices, a vertex the fused call cannot run,
    or a copy reading bytes the compute set writes (the fused order would let it read them
    after a vertex on an earlier tile wrote them)."""
    if exchange is None or compute is None or exchange.n_copies == 0:
        return None
    batches = [b for b in compute.batches if b.tiles.size]
    if not batches or not all(hasattr(b.codelet, "fused_vertices") for b in batches):
        return None
    vertices: list[Any] = [b.codelet.fused_vertices(b) for b in batches]
    w_tile = np.concatenate([v[0] for v in vertices])
    w_off = np.concatenate([np.asarray(v[3], np.int64) for v in vertices])
    w_nb = np.concatenate([np.asarray(v[7], np.int64) for v in vertices])
    if reads_written(exchange.src_tile, exchange.src_offset, exchange.nbytes, w_tile, w_off, w_nb):
        return None
    if exchange.dst_tile.size > 1 and (np.diff(exchange.dst_tile) < 0).any():
        return None   # pragma: no cover - Exchange keeps its copies in destination order
    return FusedStep(exchange, compute, vertices)
