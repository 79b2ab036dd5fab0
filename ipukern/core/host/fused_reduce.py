"""A partials exchange and the reduction after it, executed as one pass on the host.

A conv split over its input channels sends each tile's partial sums to the tiles that
reduce them: the exchange copies every piece into the reducer's receive buffer, then the
reduce vertices (``sum_rows``) add the receive buffer's pieces to the reducer's own. On the
host that is two passes over every partial (ResNet-50 batch 8: 0.7 GB per forward copied,
then read back). :class:`ReduceStep` runs the pair as one: each reduce vertex reads the
pieces where the exchange would have copied them from
(``ipukern._kernels._vertices.sum_rows_from``), in the same order and with the same
arithmetic, so every output is the same bits; the exchange's copies are not made.

The program is unchanged (copies, vertices, cycles, bytes, memory); only the receive
buffer's bytes differ: they are never written. :func:`fuse_reduce` allows that only when
nothing can see it:

- the exchange is marked :attr:`~ipukern.core.program.Exchange.receive_only` by the
  program's builder (the conv builder marks its single-stage partials exchanges: the
  receive buffer is scratch, no tensor, no host read);
- every copy lands exactly on one source vector of a reduce vertex of the next compute
  set, and no other source vector, vertex of another batch, or any other step of the
  program (compute regions, exchange sources; the program runs again from its first
  step) touches the copies' destination bytes;
- no reduce vertex writes bytes a redirected source reads (the exchange would have read
  them before any vertex ran);
- the reduce batches come first in the compute set (the others then run after them, as
  before).

``IPUKERN_FUSED_EXCHANGE=0`` (:data:`ipukern.core.host.fused.FUSED_EXCHANGE`) turns this off too.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .fused import reads_written
from .shadow import batch_regions, other_regions
from ..program import ComputeSet, Exchange, ExchangeError, check_arena
from ..threads import check_num_threads
from ..vertices import bias_epilogue_kwargs

__all__ = ["ReduceStep", "fuse_reduce"]


def _is_sum(batch: Any) -> bool:
    return getattr(batch.codelet, "fn", None) == "sum_rows" and batch.tiles.size > 0


class ReduceStep:
    """The receive-only ``exchange`` and the reduce batches of ``compute`` as one kernel call
    per reduce batch (sources redirected: ``src_row``, ``src_off`` per batch), then the
    compute set's other batches. Built by :func:`fuse_reduce`."""

    def __init__(self, exchange: Exchange, compute: ComputeSet, sums: list[tuple[Any, Any, Any]],
                 rest: list[Any]):
        self.exchange, self.compute = exchange, compute
        self.sums, self.rest = sums, rest

    @property
    def unwritten(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tile, offset, nbytes) of the receive buffer bytes left unwritten."""
        x = self.exchange
        return x.dst_tile, x.dst_offset, x.nbytes

    def run(self, data: np.ndarray, n_threads: int) -> None:
        """Execute the exchange and then the compute set on the arena ``data`` (same errors
        and the same bytes, except the receive buffer, left unwritten)."""
        x, c = self.exchange, self.compute
        check_arena(data, x.rows_needed, x.row_needed, x.name, ExchangeError)
        check_arena(data, c.rows_needed, c.row_needed, c.name)
        n_threads = check_num_threads(n_threads)
        from ..._kernels import _vertices
        for b, src_row, src_off in self.sums:
            a = b.args
            in_dt, out_dt = b.codelet.consts
            _vertices.sum_rows_from(data, b.tiles, a["out"], a["src_ptr"], src_row, src_off, a["n"],
                                    in_dt, out_dt, n_threads, **bias_epilogue_kwargs(b))
        for b in self.rest:
            b.codelet.run(data, b, n_threads)


def _touches(regions: list[tuple[np.ndarray, np.ndarray, np.ndarray]], xt: np.ndarray,
             xo: np.ndarray, xn: np.ndarray) -> bool:
    """Whether any (tile, offset, nbytes) region overlaps a copy destination."""
    if not regions:
        return False
    t, o, n = (np.concatenate([r[k] for r in regions]) for k in range(3))
    return reads_written(t, o, n, xt, xo, xn)


def _redirect(b: Any, x: Exchange, row: int, used: np.ndarray):
    """Batch ``b``'s sources as ``(src_row, src_off, redirected reads)``: a source equal to a
    copy's destination becomes that copy's source (``used`` marks the copy); None when a
    source overlaps a copy's destination without being one."""
    a = b.args
    isz = 4 if b.codelet.consts[0] == _f32_code() else 2
    ptr, off = np.asarray(a["src_ptr"], np.int64), np.asarray(a["src_off"], np.int64)
    counts = np.diff(ptr)
    tile = np.repeat(b.tiles.astype(np.int64), counts)
    nb = np.repeat(np.asarray(a["n"], np.int64), counts) * isz
    off = off[ptr[0]:ptr[-1]]
    dkey = x.dst_tile.astype(np.int64) * row + x.dst_offset      # ascending (destination order)
    skey = tile * row + off
    j = np.searchsorted(dkey, skey, side="right") - 1
    jj = np.maximum(j, 0)
    hit = (j >= 0) & (dkey[jj] == skey) & (x.nbytes[jj] == nb) & (nb > 0)
    miss = ~hit
    if reads_written(tile[miss], off[miss], nb[miss], x.dst_tile, x.dst_offset, x.nbytes):
        return None
    used[jj[hit]] = True
    # the kernel indexes sources from src_ptr[0]: keep the batch's own numbering
    src_row = np.zeros(ptr[-1], np.int32)
    src_off = np.zeros(ptr[-1], np.int64)
    src_row[ptr[0]:] = np.where(hit, x.src_tile[jj], tile)
    src_off[ptr[0]:] = np.where(hit, x.src_offset[jj], off)
    reads = (x.src_tile[jj[hit]].astype(np.int64), x.src_offset[jj[hit]], nb[hit])
    return src_row, src_off, reads


def _f32_code() -> int:
    from ...dtypes import DTYPE_CODE
    return DTYPE_CODE["float32"]


def fuse_reduce(steps: Sequence[Any], i: int) -> ReduceStep | None:
    """A :class:`ReduceStep` for step ``i``'s exchange and step ``i + 1``'s compute set of
    the program ``steps``, or None when the conditions of the module docstring do not hold."""
    if i + 1 >= len(steps):
        return None
    x, c = steps[i].exchange, steps[i + 1].compute
    if x is None or c is None or not getattr(x, "receive_only", False) or x.n_copies == 0:
        return None
    batches = [b for b in c.batches if b.tiles.size]
    n_sum = 0
    while n_sum < len(batches) and _is_sum(batches[n_sum]):
        n_sum += 1
    if n_sum == 0 or any(_is_sum(b) for b in batches[n_sum:]):
        return None
    row = int(max(x.row_needed, c.row_needed)) + 1
    used = np.zeros(x.n_copies, bool)
    sums, reads, writes = [], [], []
    for b in batches[:n_sum]:
        red = _redirect(b, x, row, used)
        if red is None:
            return None
        sums.append((b, red[0], red[1]))
        reads.append(red[2])
        osz = 4 if b.codelet.consts[1] == _f32_code() else 2
        writes.append((b.tiles.astype(np.int64), np.asarray(b.args["out"], np.int64),
                       np.asarray(b.args["n"], np.int64) * osz))
    if not used.all():
        return None
    # the exchange read every redirected source before any reduce vertex wrote
    rt, ro, rn = (np.concatenate([r[k] for r in reads]) for k in range(3))
    if _touches(writes, rt, ro, rn):
        return None
    # nothing else may see the receive buffer: other batches, other steps' vertices and
    # exchange sources (later in this run, or earlier in the next)
    regions = [r for b in batches[n_sum:] for r in batch_regions(b)] + other_regions(steps, i)
    if _touches(regions, x.dst_tile, x.dst_offset, x.nbytes):
        return None
    return ReduceStep(x, c, sums, batches[n_sum:])
