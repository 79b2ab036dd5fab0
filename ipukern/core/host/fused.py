"""An exchange and the compute set after it, executed tile by tile on the host.

In BSP order superstep k's exchange completes before superstep k+1's compute set starts.
Executed literally, a program whose exchange writes every tile's input window and weights
(ResNet-50: 7 GB per forward, far more than the host's caches) has its vertices read them
all back from DRAM. When every batch of the compute set after an exchange comes from a
codelet implementing the :class:`FusableCodelet` hook (``fused_vertices(batch)``, which
describes its windowed vertices to the compiled kernel; the conv wing's codelet does),
:class:`FusedStep` runs both in one compiled call (``ipukern._kernels._fused``): for each
tile, the copies into that tile, then that tile's vertices while its bytes are still in the
cache. Nothing here knows which codelet it runs: the hook is the whole interface.

This changes how the host executes the program, never the program: copies, vertices,
cycles, bytes and memory are the same, and so is every byte of the arena afterwards,
provided no copy reads bytes the compute set writes (a vertex writes only its own tile, and
the exchange was checked when built to have no copy writing bytes another copy reads).
:func:`fuse` checks that once per superstep pair and returns None when it does not hold
(or the compute set has vertices the fused call cannot run); the two phases then run one
after the other as before.

Where the exchange is receive-only and nothing else in the program touches the bytes it
receives, the window and weight copies land in a host thread's *shadow row* instead of the
tile's row (:mod:`ipukern.core.host.shadow`); the arena then keeps the receive buffers' old
bytes, and a thread skips the copies its previous tile already made into its row (the tiles
of an output-channel group receive the same window).

``IPUKERN_FUSED_EXCHANGE=0`` in the environment (read at each run; :data:`FUSED_EXCHANGE`)
turns fusion off, for A/B measurements.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ... import _settings
from ..program import ComputeSet, Exchange, ExchangeError, check_arena
from .shadow import ShadowPlan, other_regions, overlapping, repeat_plan, shadow_plan
from ..threads import check_num_threads

__all__ = ["FUSED_EXCHANGE", "FusableCodelet", "FusedStep", "FusedVertices", "ShadowHint", "fuse",
           "fused_enabled", "reads_written"]

#: run an exchange together with the compute set after it when that is valid: True or
#: False forces it (tests do); None follows ``IPUKERN_FUSED_EXCHANGE``, read at each run
FUSED_EXCHANGE: bool | None = None


def fused_enabled() -> bool:
    """Whether the host executor (:func:`ipukern.core.host.run.execute`) fuses eligible
    steps (:data:`FUSED_EXCHANGE`)."""
    return _settings.fused_exchange() if FUSED_EXCHANGE is None else FUSED_EXCHANGE

#: each Python thread's shadow rows (FusedStep._shadow_rows_for)
_SHADOW = threading.local()


def reads_written(read_tile: np.ndarray, read_off: np.ndarray, read_nb: np.ndarray,
                  write_tile: np.ndarray, write_off: np.ndarray, write_nb: np.ndarray) -> bool:
    """True when some read interval ``[off, off + nb)`` on a tile overlaps a write interval
    on the same tile (empty intervals never overlap)."""
    return bool(overlapping(read_tile, read_off, read_nb, write_tile, write_off, write_nb).any())


class FusedVertices(NamedTuple):
    """What a :class:`FusableCodelet`'s ``fused_vertices(batch)`` gives :class:`FusedStep`
    to run ``batch`` in the fused call: per vertex, a window and weights it reads and an
    output it writes, on its own tile, with the dims and parameters the compiled kernel
    takes (``ipukern._kernels._fused``)."""

    tiles: np.ndarray          # (V,) tile of each vertex
    win: np.ndarray            # (V,) byte offsets of the window, weights and output
    w: np.ndarray
    out: np.ndarray
    dims: np.ndarray           # (V, 10) the kernel's vertex dims
    params: tuple              # (kh, kw, sh, sw, dh, dw, in_dt, out_dt)
    scratch_floats: int
    out_nbytes: np.ndarray     # (V,) bytes each vertex writes at ``out`` (all it writes)
    epilogue: tuple | None     # ipukern.core.vertices.bias_epilogue(batch)
    win_nbytes: np.ndarray     # (V,) bytes each vertex reads at ``win`` and at ``w``
    w_nbytes: np.ndarray
    others: list               # [(offsets, nbytes)]: every other region the vertices touch


@runtime_checkable
class FusableCodelet(Protocol):
    """The hook through which a codelet's vertices join the exchange before them.

    A :class:`~ipukern.core.program.Codelet` that also provides these two methods may run
    in a :class:`FusedStep` (:func:`fuse` checks ``hasattr(codelet, "fused_vertices")`` for
    every batch). The codelet's wing implements it (``ipukern.conv.codelet.ConvCodelet``);
    core only calls it.
    """

    name: str

    def fused_vertices(self, batch: Any) -> FusedVertices:
        """``batch``'s vertices as the fused kernel takes them (regions included, so the
        program-wide checks see everything the vertices touch)."""
        ...

    def direct_path(self) -> bool:
        """Which of the kernel's paths to take (read at every run; the same bits either way)."""
        ...


class ShadowHint(NamedTuple):
    """A fused step's shadow receive as an earlier build of the same program made it
    (:meth:`FusedStep.hint`; a process reads it from the disk cache,
    :mod:`ipukern.nn.host.table_cache`): the plan, and per thread count the kernel's
    shadow arguments (``repeat_plan``'s reordered table, ``sh_lo``, ``sh_mid``).
    :func:`fuse` uses it instead of planning again only where it fits the step
    (:func:`hint_fits`)."""

    plan: ShadowPlan
    args: dict[int, tuple[np.ndarray, ...]]


_TABLE_TYPES = (np.int32, np.int64, np.int64, np.int64, np.int64)


def _table_fits(table: tuple, rows: int, row: int) -> bool:
    """A shadow table's five columns: the kernel's types, one length, every copy reading
    inside the arena's ``rows`` x ``row`` bytes and writing inside a shadow row."""
    if len(table) != 5 or any(np.asarray(c).dtype != t or np.ndim(c) != 1
                              for c, t in zip(table, _TABLE_TYPES)):
        return False
    src_row, src_off, dst_off, nb, tile = table
    n = src_row.size
    if any(c.size != n for c in table):
        return False
    if n == 0:
        return True
    return bool((src_row >= 0).all() and (src_row < rows).all() and (tile >= 0).all()
                and (tile < rows).all() and (nb >= 0).all() and (src_off >= 0).all()
                and (dst_off >= 0).all() and (src_off <= row - nb).all()
                and (dst_off <= row - nb).all())


def hint_fits(hint: ShadowHint, exchange: Exchange, compute: ComputeSet, n_pieces: int,
              n_vertices: int) -> bool:
    """Whether ``hint`` has the shape of this step's shadow receive and stays inside the
    arena (a cache entry is trusted for its content, by its key, never for its bounds)."""
    pl = hint.plan
    rows = max(exchange.rows_needed, compute.rows_needed)
    row = max(exchange.row_needed, compute.row_needed)
    if not (exchange.receive_only and pl.shadowed.dtype == bool and pl.shadowed.shape == (n_pieces,)
            and pl.vflags.dtype == np.uint8 and pl.vflags.shape == (n_vertices,)
            and _table_fits(pl.table, rows, row)):
        return False
    for n, (*table, lo, mid) in hint.args.items():
        k = table[0].size
        if not (isinstance(n, int) and n >= 1 and k == pl.table[0].size
                and _table_fits(tuple(table), rows, row)
                and lo.dtype == np.int64 and mid.dtype == np.int64 and lo.size == mid.size + 1
                and lo.size and lo[0] == 0 and lo[-1] == k and (np.diff(lo) >= 0).all()
                and (mid >= lo[:-1]).all() and (mid <= lo[1:]).all()):
            return False
    return True


class FusedStep:
    """``exchange`` followed by the compute set ``compute`` of :class:`FusableCodelet`
    batches, one compiled call per run.

    Built by :func:`fuse`, which has checked that the fused order gives the same bytes.
    """

    #: tests: fill the shadow rows with 0xFF before every run, so a vertex reading a byte
    #: that no copy put there gets NaN and changes the result
    poison_shadow = False

    def __init__(self, exchange: Exchange, compute: ComputeSet, vertices: list[FusedVertices],
                 fixed: list | None = None, hint: ShadowHint | None = None):
        """``fixed``: the regions whose bytes must stay in the arena besides the compute
        set's own (:func:`~ipukern.core.host.shadow.other_regions`); None: no shadow receive.
        ``hint``: the shadow receive already planned (checked by :func:`fuse`), used
        instead of ``fixed``."""
        self.exchange, self.compute = exchange, compute
        self.codelets = [b.codelet for b in compute.batches if b.tiles.size]
        tiles = np.concatenate([v.tiles for v in vertices]).astype(np.int32)
        # stable: on each tile the vertices keep the compute set's order
        order = np.argsort(tiles, kind="stable")

        def column(name: str) -> np.ndarray:   # a per-vertex field of every batch, in run order
            vals = [np.asarray(getattr(v, name), np.int64) for v in vertices]
            return np.ascontiguousarray(np.concatenate(vals)[order])

        self.tiles = np.ascontiguousarray(tiles[order])
        self.win, self.w, self.out, self.dims = (column(k) for k in ("win", "w", "out", "dims"))
        self.vbatch = np.repeat(np.arange(len(vertices), dtype=np.int32),
                                [v.tiles.size for v in vertices])[order]
        self.bparams = np.array([v.params for v in vertices], dtype=np.int32).reshape(-1, 8)
        # the bias epilogues (ipukern.core.vertices.bias_epilogue) of the batches that have one
        epis = [v.epilogue for v in vertices]
        self.bias_passes = [e[2] if e else None for e in epis]
        self.bias = None
        if any(e is not None for e in epis):
            off = [np.asarray(e[0], np.int64) if e else np.full(v.tiles.size, -1, np.int64)
                   for e, v in zip(epis, vertices)]
            prm = [np.asarray(e[1], np.int64).reshape(-1, 2) if e
                   else np.zeros((v.tiles.size, 2), np.int64) for e, v in zip(epis, vertices)]
            self.bias = (np.ascontiguousarray(np.concatenate(off)[order]),
                         np.ascontiguousarray(np.concatenate(prm)[order]))
        self.scratch_floats = max(16, *(v.scratch_floats for v in vertices))
        pieces = exchange._pieces()   # destination order, big copies in pieces
        self.shadow: ShadowPlan | None = None
        if hint is not None:
            self.shadow = hint.plan
        elif fixed is not None and exchange.receive_only:
            own = [(v.tiles.astype(np.int64), np.asarray(off, np.int64), np.asarray(nb, np.int64))
                   for v in vertices for off, nb in v.others]
            self.shadow = shadow_plan(pieces, self.tiles, self.win, column("win_nbytes"), self.w,
                                      column("w_nbytes"), own, list(fixed))
        if self.shadow is not None:
            pieces = tuple(np.ascontiguousarray(c[~self.shadow.shadowed]) for c in pieces)
        self.copies = pieces
        dt = pieces[2]
        sh_tile = self.shadow.table[4] if self.shadow is not None else dt[:0]
        # every tile written or computed on, ascending
        items = np.union1d(np.union1d(dt, self.tiles), sh_tile)
        self.copy_lo = np.append(np.searchsorted(dt, items, side="left"), dt.size).astype(np.int64)
        self.vert_lo = np.append(np.searchsorted(self.tiles, items, side="left"),
                                 self.tiles.size).astype(np.int64)
        self.items = items
        self._vertices = vertices
        self._plain: FusedStep | None = None
        self._shadow_args: dict[int, dict] = {}
        self._scratch: dict[int, np.ndarray] = {}
        for n, (*table, lo, mid) in (hint.args.items() if hint is not None else ()):
            self._shadow_args[n] = self._shadow_arg_dict(table, lo, mid, n)

    def hint(self) -> ShadowHint | None:
        """This step's shadow receive as a :class:`ShadowHint` (None without one), for a
        later build of the same program."""
        if self.shadow is None:
            return None
        args = {n: tuple(a[k] for k in ("sh_src_row", "sh_src_off", "sh_dst_off", "sh_nbytes",
                                        "sh_tile", "sh_lo", "sh_mid"))
                for n, a in self._shadow_args.items()}
        return ShadowHint(self.shadow, args)

    def _shadow_arg_dict(self, table, lo, mid, n_threads: int) -> dict:
        """``exchange_conv``'s shadow arguments for ``n_threads`` (and the table's tiles)."""
        return dict(sh_src_row=table[0], sh_src_off=table[1], sh_dst_off=table[2],
                    sh_nbytes=table[3], sh_tile=table[4], sh_lo=lo, vflags=self.shadow.vflags,
                    sh_mid=mid, repeat_stride=n_threads)

    @property
    def unwritten(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(tile, offset, nbytes) of the exchange's bytes received into the shadow row
        instead of the arena (the arena keeps their old contents)."""
        sh = self.shadow
        if sh is None:
            return tuple(np.zeros(0, np.int64) for _ in range(3))
        st, so, dt, do, nb = self.exchange._pieces()
        return dt[sh.shadowed], do[sh.shadowed], nb[sh.shadowed]

    def _shadow_kwargs(self, data: np.ndarray, n_threads: int) -> dict:
        """``exchange_conv``'s shadow arguments for ``n_threads`` (built once per count:
        which copies repeat depends on which items a thread runs one after the other)."""
        if self.shadow is None:
            return {}
        a = self._shadow_args.get(n_threads)
        if a is None:
            table, mid = repeat_plan(self.shadow.table, self.items, n_threads)
            sh_tile = table[4]
            sh_lo = np.append(np.searchsorted(sh_tile, self.items, side="left"),
                              sh_tile.size).astype(np.int64)
            a = self._shadow_args[n_threads] = self._shadow_arg_dict(table, sh_lo, mid, n_threads)
        rows = self._shadow_rows_for(data, n_threads)
        if self.poison_shadow:
            rows.fill(0xFF)
        a = dict(a, shadow=rows)
        del a["sh_tile"]              # kept for hint(), not a kernel argument
        return a

    @staticmethod
    def _shadow_rows_for(data: np.ndarray, n_threads: int) -> np.ndarray:
        """(n_threads, row) shadow rows aligned like ``data``'s rows modulo 64 bytes.

        Shared by every fused step that this Python thread runs (one runs at a time; a
        kernel call never relies on what an earlier call left in them), so they stay in the
        cache from step to step; another Python thread, which may run another device's
        program at the same time, has its own."""
        row = data.shape[1]
        key = (n_threads, row, data.ctypes.data % 64)
        rows = getattr(_SHADOW, "rows", None)
        if rows is None:
            rows = _SHADOW.rows = {}
        buf = rows.get(key)
        if buf is None:
            raw = np.zeros(n_threads * row + 128, np.uint8)
            shift = (data.ctypes.data - raw.ctypes.data) % 64
            buf = rows[key] = raw[shift:shift + n_threads * row].reshape(n_threads, row)
        return buf

    def run(self, data: np.ndarray, n_threads: int) -> None:
        """Execute the exchange and then the compute set on the arena ``data``, as
        ``exchange.run`` followed by ``compute.run`` would (same errors, same bytes, except
        the receive bytes a shadow receive leaves as they were: :attr:`unwritten`)."""
        x, c = self.exchange, self.compute
        check_arena(data, x.rows_needed, x.row_needed, x.name, ExchangeError)
        check_arena(data, c.rows_needed, c.row_needed, c.name)
        n_threads = check_num_threads(n_threads)
        if self.shadow is not None and data.shape[1] % 64:
            # a shadow row must sit like every tile row modulo 64 bytes (device arenas have
            # whole lines; a hand-made array may not): every copy into the arena instead
            if self._plain is None:
                self._plain = FusedStep(x, c, self._vertices)
            self._plain.run(data, n_threads)
            return
        scratch = self._scratch.get(n_threads)
        if scratch is None:
            scratch = self._scratch[n_threads] = np.zeros((n_threads, self.scratch_floats),
                                                          np.float32)
        from ..._kernels import _fused
        bias = ()
        on = np.array([bp is not None and bp.fused for bp in self.bias_passes])
        if self.bias is not None and on.any():   # each bias pass's activation, as set for this run
            off = self.bias[0] if on.all() else np.where(on[self.vbatch], self.bias[0], -1)
            bias = (off, self.bias[1], np.array([bp.act if bp is not None else 0
                                                 for bp in self.bias_passes], np.int32))
        shadow = self._shadow_kwargs(data, n_threads)
        if not bias:
            bias = (None, None, None)
        st = _fused.exchange_conv(data, *self.copies, self.copy_lo, self.vert_lo, self.tiles,
                                  self.win, self.w, self.out, self.dims, self.vbatch,
                                  self.bparams, scratch, n_threads,
                                  all(cd.direct_path() for cd in self.codelets), *bias, **shadow)
        if st != 0:
            raise ValueError(f"{c.name}: the fused exchange+vertices kernel refused the step "
                             f"(status {st}); run with IPUKERN_FUSED_EXCHANGE=0 to see which "
                             "vertex its codelet rejects")


def fuse(exchange: Exchange | None, compute: ComputeSet | None, steps: Any = None,
         i: int | None = None, hint: ShadowHint | None = None) -> FusedStep | None:
    """A :class:`FusedStep` for ``exchange`` followed by ``compute``, or None when they must
    run one after the other: no copies or no vertices, a vertex the fused call cannot run,
    or a copy reading bytes the compute set writes (the fused order would let it read them
    after a vertex on an earlier tile wrote them).

    With the program's ``steps`` (``exchange`` is step ``i``'s, ``compute`` step
    ``i + 1``'s), a receive-only exchange may receive into the shadow row
    (:mod:`ipukern.core.host.shadow`); ``hint``: that receive as an earlier build of the
    same program planned it (:class:`ShadowHint`), used when it fits the step, else
    planned again."""
    if steps is not None and not (isinstance(i, (int, np.integer)) and 0 <= i < len(steps) - 1
                                  and steps[i].exchange is exchange
                                  and steps[i + 1].compute is compute):
        raise ValueError("fuse: steps[i] must hold the exchange and steps[i + 1] the compute set")
    if exchange is None or compute is None or exchange.n_copies == 0:
        return None
    batches = [b for b in compute.batches if b.tiles.size]
    if not batches or not all(hasattr(b.codelet, "fused_vertices") for b in batches):
        return None
    vertices: list[FusedVertices] = [b.codelet.fused_vertices(b) for b in batches]
    w_tile = np.concatenate([v.tiles for v in vertices])
    w_off = np.concatenate([np.asarray(v.out, np.int64) for v in vertices])
    w_nb = np.concatenate([np.asarray(v.out_nbytes, np.int64) for v in vertices])
    if reads_written(exchange.src_tile, exchange.src_offset, exchange.nbytes, w_tile, w_off, w_nb):
        return None
    if exchange.dst_tile.size > 1 and (np.diff(exchange.dst_tile) < 0).any():
        return None   # pragma: no cover - Exchange keeps its copies in destination order
    if hint is not None and not hint_fits(hint, exchange, compute, exchange._pieces()[0].size,
                                          sum(v.tiles.size for v in vertices)):
        hint = None
    if hint is not None:
        return FusedStep(exchange, compute, vertices, hint=hint)
    fixed = other_regions(steps, i) if steps is not None and exchange.receive_only else None
    return FusedStep(exchange, compute, vertices, fixed)

