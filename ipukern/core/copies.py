"""Copy tables: the one representation of "move these byte runs from rows to rows".

A :class:`CopyTable` is five columns, one copy per entry: ``src_tile``, ``src_off``,
``dst_tile``, ``dst_off`` and ``nbytes`` (byte offsets within a row; a row is a tile's
memory, or the one row of a host array). Every copy in ipukern is one:

- an :class:`~ipukern.core.program.Exchange` (the fabric's copies, validated and costed when
  built: :func:`check_exchange_table`), run on one arena;
- a network's rearrangements and output reads (``ipukern.nn.layout``), run between two
  arrays, coalesced (:func:`coalesce_runs`) and in source order (:func:`source_order`);
- a conv program's window, weight and partials copies (``ipukern.conv.layout``), built
  piece by piece and joined with :meth:`CopyTable.concat`;
- a system's link exchanges (``ipukern.systems``), between two devices' arenas;
- a device's host I/O (:meth:`ipukern.Device.write` / :meth:`~ipukern.Device.read`).

Building a table is cheap (the columns are kept as given); the kernel's column types, the
coalesced order and the per-thread byte ranges (:func:`balanced_bounds`) are made on the
first :meth:`CopyTable.run` and kept. The order of a table's copies never changes its
result when they write disjoint bytes of an array they do not read, which is what allows
the host reorderings; the simulated cycles are costed from the table as built.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .threads import check_num_threads, get_num_threads

__all__ = ["CopyTable", "balanced_bounds", "check_exchange_bounds", "check_exchange_table",
           "coalesce_runs", "copy_runs", "destination_order", "source_order"]

COLUMNS = ("src_tile", "src_off", "dst_tile", "dst_off", "nbytes")
#: tables of less host work (:attr:`CopyTable.work`) run on the calling thread when the
#: thread count is left to the table
PARALLEL_MIN_WORK = 1 << 18


# --------------------------------------------------------------------------- columns
def as_int_array(name: str, values: Any, dtype: type, error: type = ValueError) -> np.ndarray:
    """``values`` as a 1-D contiguous array of ``dtype``; never a silent wrap-around."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise error(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not arr.size:
        return np.zeros(0, dtype=dtype)
    if not np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_:
        raise error(f"{name} must hold integers, got dtype {arr.dtype}")
    info = np.iinfo(dtype)
    lo, hi = arr.min(), arr.max()
    if lo < info.min or hi > info.max:   # numpy compares mixed signed/unsigned exactly
        bad = lo if lo < info.min else hi
        raise error(f"{name} holds {int(bad)}, outside the {np.dtype(dtype).name} range")
    return np.ascontiguousarray(arr, dtype=dtype)


def outside(off: np.ndarray, nb: np.ndarray, row: int) -> np.ndarray:
    """Where ``[off, off + nb)`` is not inside ``[0, row)``, for ``nb >= 0``. Written without
    ``off + nb``, which wraps around int64 for huge offsets."""
    return (off < 0) | (nb > row) | (off > row - nb)


def balanced_bounds(nbytes: np.ndarray, n_threads: int) -> np.ndarray:
    """Split copy indices into ``n_threads`` ranges of about equal byte counts."""
    n_threads = max(1, min(n_threads, nbytes.size))
    if nbytes.size < 64 or int(nbytes.sum()) < (1 << 16):
        n_threads = 1  # starting threads would cost more than the copies
    cum = np.cumsum(nbytes)
    # integer targets (the ceilings of the float ones: the same first index at or above
    # each), so the search does not convert the whole running sum to float64
    targets = np.ceil(cum[-1] * np.arange(1, n_threads) / n_threads).astype(cum.dtype) \
        if cum.size else np.zeros(0, np.int64)
    inner = np.searchsorted(cum, targets, side="left") + 1
    return np.concatenate([[0], inner, [nbytes.size]]).astype(np.int64)


# --------------------------------------------------------------------------- validation
def _first_overlap(tile: np.ndarray, start: np.ndarray, end: np.ndarray, row: int) -> int:
    """Index (in sorted order) of an interval overlapping an earlier one on its tile, or -1."""
    if tile.size < 2:
        return -1
    key_end = tile * row + end
    running_end = np.maximum.accumulate(key_end)
    clash = (tile[1:] * row + start[1:]) < running_end[:-1]
    return int(np.argmax(clash)) + 1 if clash.any() else -1


def destination_order(dt: np.ndarray, do: np.ndarray, nb: np.ndarray,
                      row: int) -> np.ndarray | None:
    """The order :func:`check_exchange_table` returns (copies of positive size by destination
    tile, then offset), for a table known to be valid; None when the copies of positive size
    are in that order already (half the copies of a ResNet-50 training estimate are, in a
    few large tables: reordering them would only copy them)."""
    keep = nb > 0
    if not keep.any():
        return np.zeros(0, np.int64)
    if not keep.all():
        dt, do = dt[keep], do[keep]
    key = dt * row + do
    if (key[1:] >= key[:-1]).all():     # a stable sort would keep this order
        return None
    return np.argsort(key, kind="stable")


def check_exchange_bounds(st: np.ndarray, so: np.ndarray, dt: np.ndarray, do: np.ndarray,
                          nb: np.ndarray, n_tiles: int, row: int, name: str,
                          error: type = ValueError) -> None:
    """Raise ``error`` unless every copy of the table (int64 columns of equal length) has a
    size >= 0 and lies inside an arena of ``n_tiles`` rows of ``row`` bytes: what the
    host kernels need to stay inside their arrays (O(n), no sort; every exchange runs it,
    whether or not its overlaps are checked)."""
    if (nb < 0).any():
        i = int(np.argmax(nb < 0))
        raise error(f"{name}: copy {i} has negative size {int(nb[i])}")
    for label, tiles in (("source", st), ("destination", dt)):
        bad = (tiles < 0) | (tiles >= n_tiles)
        if bad.any():
            i = int(np.argmax(bad))
            raise error(f"{name}: copy {i} has {label} tile {int(tiles[i])}, "
                        f"outside 0..{n_tiles - 1}")
    for label, off in (("source", so), ("destination", do)):
        bad = outside(off, nb, row)
        if bad.any():
            i = int(np.argmax(bad))
            raise error(f"{name}: copy {i} {label} bytes [{int(off[i])}, "
                        f"{int(off[i]) + int(nb[i])}) fall outside the tile's {row} B")


def check_exchange_table(st: np.ndarray, so: np.ndarray, dt: np.ndarray, do: np.ndarray,
                         nb: np.ndarray, n_tiles: int, row: int, name: str,
                         error: type = ValueError) -> np.ndarray:
    """Check a table whose copies run within one arena of ``n_tiles`` rows of ``row`` bytes
    (int64 columns of equal length); return the destination order (by tile, then offset)
    of its copies of positive size.

    Raises ``error`` for negative sizes, tiles out of range, copies past the end of a row,
    two copies writing overlapping bytes, or a destination overlapping a source (the
    result would depend on copy order). The bounds are checked first, so
    ``tile * row + offset`` orders them (one stable sort, not a two-key lexsort).
    """
    check_exchange_bounds(st, so, dt, do, nb, n_tiles, row, name, error)
    keep = nb > 0
    if not keep.any():
        return np.zeros(0, np.int64)
    if not keep.all():
        st, so, dt, do, nb = st[keep], so[keep], dt[keep], do[keep], nb[keep]
    idx_all = np.flatnonzero(keep)
    # two copies writing the same bytes: the fabric has no defined winner
    d_start = dt * row + do
    o = np.argsort(d_start, kind="stable")
    j = _first_overlap(dt[o], do[o], do[o] + nb[o], row)
    if j >= 0:
        a, b = idx_all[o[j - 1]], idx_all[o[j]]
        raise error(f"{name}: overlapping writes on tile {int(dt[o[j]])}: copy {b} "
                    f"writes [{int(do[o[j]])}, {int(do[o[j]] + nb[o[j]])}) which another "
                    f"copy (e.g. {a}) also writes")
    # a destination overlapping a source: result would depend on the copy order
    s_key = st * row + so
    so_sorted = np.argsort(s_key, kind="stable")
    s_key_start = s_key[so_sorted]
    s_run_end = np.maximum.accumulate(s_key_start + nb[so_sorted])
    d_end = d_start + nb
    pos = np.searchsorted(s_key_start, d_end, side="left") - 1
    hit = (pos >= 0) & (s_run_end[np.maximum(pos, 0)] > d_start)
    if hit.any():
        i = int(np.argmax(hit))
        raise error(f"{name}: copy {idx_all[i]} writes tile {int(dt[i])} bytes "
                    f"[{int(do[i])}, {int(do[i] + nb[i])}) that this exchange also "
                    f"reads; split it into two exchanges")
    return o


# --------------------------------------------------------------------------- host order
def coalesce_runs(src_row, src_off, dst_row, dst_off, nbytes) -> tuple[np.ndarray, ...]:
    """The same copies with runs contiguous in both source and destination merged into one.

    A table's copies write disjoint bytes of an array other than the one they read, so
    their order does not change the result; they are put in destination order when that
    lets more runs merge (reading a conv's output: hundreds of thousands of runs of a few
    elements become about one per tile). Host execution only: the simulated copies and
    their cycles are counted from the table as built, not from this one.
    """
    cols = [np.asarray(c) for c in (src_row, src_off, dst_row, dst_off, nbytes)]
    if cols[4].size < 2:
        return tuple(cols)

    def joins(sr, so, dr, do, nb):
        return ((sr[1:] == sr[:-1]) & (dr[1:] == dr[:-1]) & (so[:-1] + nb[:-1] == so[1:])
                & (do[:-1] + nb[:-1] == do[1:]))

    n_join = _given_joins(cols)
    join = joins(*cols) if n_join is None or n_join else None
    if join is not None:
        n_join = int(join.sum())
    if 2 * n_join < cols[4].size - 1 and _dest_may_merge(cols, joins, n_join):
        span = int(cols[3].max()) + 1
        if int(cols[2].max()) < np.iinfo(np.int64).max // max(span, 1):
            order = _row_order(cols[2], cols[3], span)
            moved = [c[order] for c in cols]
            j2 = joins(*moved)
            if int(j2.sum()) > n_join + (cols[4].size - 1) // 10:
                cols, join = moved, j2
    if join is None or not join.any():
        return tuple(cols)
    start = np.flatnonzero(np.concatenate([[True], ~join]))
    return (cols[0][start], cols[1][start], cols[2][start], cols[3][start],
            np.add.reduceat(cols[4], start))


def _given_joins(cols: list[np.ndarray]) -> int | None:
    """The joins of ``cols`` in their order, counted in compiled code when every column is
    int64 already (a rearrangement's table: no conversion copies); None otherwise."""
    if not all(c.dtype == np.int64 and c.ndim == 1 and c.flags.c_contiguous for c in cols):
        return None
    from .._kernels import _runs
    return _runs.given_joins(*cols)


def _row_order(rows: np.ndarray, off: np.ndarray, span: int) -> np.ndarray:
    """``np.argsort(rows * span + off, kind="stable")``, by a counting sort on the rows when
    the offsets already rise within each row (a table read from a packed layout): linear
    instead of a sort of millions of keys."""
    if rows.size and int(rows.min()) >= 0 and int(rows.max()) < (1 << 24):
        from .._kernels import _runs
        order, rising = _runs.tile_order(np.ascontiguousarray(rows, np.int64),
                                         np.ascontiguousarray(off, np.int64), int(rows.max()) + 1)
        if rising:
            return order
    return np.argsort(rows.astype(np.int64) * span + off, kind="stable")


def _dest_may_merge(cols: list[np.ndarray], joins, given: int) -> bool:
    """False when destination order provably cannot merge the ``given`` joins plus a tenth
    of the copies more (what :func:`coalesce_runs` asks of it), found without sorting by
    destination: with positive sizes and disjoint sources, two copies contiguous on both
    sides are neighbours in source order too, so the joins counted there bound those of
    any order."""
    sr, so, _, _, nb = cols
    if not (nb > 0).all():
        return True
    span = int(so.max()) + 1
    if int(sr.max()) >= np.iinfo(np.int64).max // max(span, 1):
        return True
    from .._kernels import _runs
    got, overlap = _runs.ordered_joins(_row_order(sr, so, span),
                                       *(np.ascontiguousarray(c, np.int64) for c in cols))
    return overlap or got > given + nb.size // 10   # overlapping sources: no bound


def source_order(src_row, src_off, dst_row, dst_off, nbytes) -> tuple[np.ndarray, ...]:
    """The same copies ordered by where they read (source row, then offset).

    The order of a table's copies does not change its result (they write disjoint bytes of
    an array other than the one they read). Read in source order, each source row is
    walked forwards by one thread while the writes scatter; in logical-element order
    consecutive copies of a few bytes each jump between rows of the arena on both sides.
    ResNet-50 batch 8 forward, its 110 rearrangement tables (18 M copies, 9-32 B on
    average): one thread 0.136 -> 0.099 s, two threads 0.074 -> 0.059 s (destination
    order: 0.116 / 0.067 s).
    """
    cols = [np.asarray(c) for c in (src_row, src_off, dst_row, dst_off, nbytes)]
    order = _source_index(cols)
    return tuple(cols) if order is None else tuple(c[order] for c in cols)


def _source_index(cols: Sequence[np.ndarray]) -> np.ndarray | None:
    """The permutation :func:`source_order` applies (None: none needed)."""
    if cols[4].size < 2:
        return None
    span = int(cols[1].max()) + 1
    if int(cols[0].max()) >= np.iinfo(np.int64).max // max(span, 1):
        return None  # pragma: no cover - no arena has rows and offsets this large
    key = cols[0].astype(np.int64) * span + cols[1]
    if (key[1:] >= key[:-1]).all():
        return None
    return _row_order(cols[0], cols[1], span)


def split_pieces(cols: Sequence[np.ndarray], piece_bytes: int) -> tuple[np.ndarray, ...]:
    """The same copies with every copy longer than ``piece_bytes`` cut into pieces of that
    size (so host threads share the work of a few large copies evenly)."""
    st, so, dt, do, nb = cols
    n_pieces = np.maximum(1, -(-nb // piece_bytes))
    if (n_pieces == 1).all():
        return tuple(cols)
    rep = np.repeat(np.arange(nb.size), n_pieces)
    first = np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
    k = np.arange(rep.size) - first
    start = k * piece_bytes
    size = np.minimum(nb[rep] - start, piece_bytes)
    return st[rep], so[rep] + start, dt[rep], do[rep] + start, size


# --------------------------------------------------------------------------- the table
class CopyTable:
    """Byte copies ``(src_tile, src_off, dst_tile, dst_off, nbytes)``, one per entry.

    Parameters
    ----------
    src_tile, src_off, dst_tile, dst_off, nbytes : array-like of int
        The columns (kept as given; the kernel's types are made on the first run).
    host_order : {"source", "given"}
        How :meth:`run` orders the copies on the host. ``"source"`` (default) coalesces
        runs contiguous on both sides (:func:`coalesce_runs`) and reads in source order
        (:func:`source_order`); valid only between two distinct arrays, which :meth:`run`
        then checks. ``"given"`` runs the copies as they are (an exchange, which copies
        within one arena in its validated order).
    piece_bytes : int, optional
        Cut longer copies into pieces of this size for the host threads.
    """

    def __init__(self, src_tile: Any, src_off: Any, dst_tile: Any, dst_off: Any, nbytes: Any, *,
                 host_order: str = "source", piece_bytes: int | None = None):
        if host_order not in ("source", "given"):
            raise ValueError(f"host_order must be 'source' or 'given', got {host_order!r}")
        self.src_tile, self.src_off, self.dst_tile, self.dst_off, self.nbytes = (
            np.asarray(c) for c in (src_tile, src_off, dst_tile, dst_off, nbytes))
        self.host_order = host_order
        self.piece_bytes = piece_bytes
        self._cols: tuple[np.ndarray, ...] | None = None
        self._work = 0
        self._bounds: dict[int, np.ndarray] = {}
        # (dst, src) array shapes the kernel has range-checked every copy against: the
        # table is fixed, so later runs between arrays of those shapes skip the pass
        # (ResNet-50: 18 M copies per forward, ~2% of a one-thread run)
        self._checked: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()

    @staticmethod
    def concat(tables: Sequence["CopyTable"]) -> "CopyTable":
        """One table holding every copy of ``tables``, in order (``host_order`` "source")."""
        tables = [t for t in tables if t.nbytes.size]
        if not tables:
            z = np.zeros(0, dtype=np.int64)
            return CopyTable(z, z, z, z, z)
        return CopyTable(*(np.concatenate([getattr(t, f) for t in tables]) for f in COLUMNS))

    @classmethod
    def from_host_columns(cls, cols: Sequence[np.ndarray]) -> "CopyTable":
        """A table whose host form (:attr:`kernel_columns`: int32 rows, int64 offsets and
        sizes, already in host order) is given, such as one read back from
        :mod:`ipukern.nn.host.table_cache`; its columns as built are those same copies.
        Runs between distinct arrays (``host_order`` "source")."""
        tab = cls(*cols)
        tab._cols = tuple(cols)
        tab._work = int(np.asarray(cols[4]).sum()) + 32 * int(cols[4].size)
        return tab

    def __len__(self) -> int:
        return int(self.nbytes.size)

    @property
    def columns(self) -> tuple[np.ndarray, ...]:
        """The five columns as built."""
        return (self.src_tile, self.src_off, self.dst_tile, self.dst_off, self.nbytes)

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())

    def validate(self, src_shape: tuple[int, int], dst_shape: tuple[int, int], *,
                 name: str = "copy table", error: type = ValueError) -> None:
        """Raise ``error`` unless every column holds integers, the columns are equally long
        and every copy lies inside the rows of arrays of these (rows, row bytes) shapes."""
        st, so, dt, do, nb = (as_int_array(f"{name}: {label}", c, np.int64, error)
                              for label, c in zip(COLUMNS, self.columns))
        if not (st.size == so.size == dt.size == do.size == nb.size):
            raise error(f"{name}: copy table columns differ in length "
                        f"({st.size}, {so.size}, {dt.size}, {do.size}, {nb.size})")
        if (nb < 0).any():
            i = int(np.argmax(nb < 0))
            raise error(f"{name}: copy {i} has negative size {int(nb[i])}")
        for label, rows, off, (n_rows, row) in (("source", st, so, src_shape),
                                                ("destination", dt, do, dst_shape)):
            bad = (rows < 0) | (rows >= n_rows)
            if bad.any():
                i = int(np.argmax(bad))
                raise error(f"{name}: copy {i} has {label} row {int(rows[i])}, outside "
                            f"0..{n_rows - 1}")
            bad = outside(off, nb, row)
            if bad.any():
                i = int(np.argmax(bad))
                raise error(f"{name}: copy {i} {label} bytes [{int(off[i])}, "
                            f"{int(off[i]) + int(nb[i])}) fall outside the row's {row} B")

    # ------------------------------------------------------------------ host execution
    @property
    def kernel_columns(self) -> tuple[np.ndarray, ...]:
        """The columns as the copy kernel takes them (int32 rows, int64 offsets and sizes),
        in host order (made once)."""
        cols = self._cols
        if cols is None:
            cols, order = self.columns, None
            if self.host_order == "source":
                cols = coalesce_runs(*cols)
                order = _source_index(cols)
            from .._kernels import _runs        # source order and the kernel's types, one pass
            cols = _runs.gather_columns(order, *(np.ascontiguousarray(c, np.int64) for c in cols))
            if self.piece_bytes:
                cols = split_pieces(cols, self.piece_bytes)
            # host work in byte-equivalents (a run costs about what copying 32 bytes does)
            self._work = int(cols[4].sum()) + 32 * int(cols[4].size)
            self._cols = cols
        return cols

    @property
    def work(self) -> int:
        """Host work in byte-equivalents (a run costs about what copying 32 bytes does)."""
        self.kernel_columns  # noqa: B018 - made with the kernel columns
        return self._work

    def thread_bounds(self, n_threads: int) -> np.ndarray:
        """Copy index ranges giving each thread an equal share of bytes (cached)."""
        b = self._bounds.get(n_threads)
        if b is None:
            b = self._bounds[n_threads] = balanced_bounds(self.kernel_columns[4], n_threads)
        return b

    def run(self, dst: np.ndarray, src: np.ndarray, n_threads: int | None = None, *,
            check: bool | None = None, stream: bool = False) -> None:
        """Copy on the host from the rows of ``src`` to the rows of ``dst`` (2-D C-contiguous
        uint8 arrays, ``dst`` writeable).

        ``n_threads``: None uses :func:`~ipukern.get_num_threads` (one thread for a table of
        less work than :data:`PARALLEL_MIN_WORK`). ``check``: True range-checks every copy
        against both arrays before any byte moves, False skips that (the caller proved it),
        None checks once per pair of array shapes. ``stream``: long runs bypass the caches
        (same bytes).

        Raises
        ------
        ValueError
            If a copy leaves an array (nothing is written), or, for a table in source order,
            if ``dst`` and ``src`` may share memory (its copies were reordered and merged on
            the premise that they do not).
        TypeError
            If an array is not a 2-D C-contiguous uint8 array.
        """
        cols = self.kernel_columns
        if cols[4].size == 0:
            return
        from .._kernels import _exchange
        if self.host_order == "source" and np.may_share_memory(dst, src):
            raise ValueError("a copy table's source and destination must be distinct arrays")
        if n_threads is None:
            # a small table is not worth waking threads for (a busy host may not run them soon)
            n_threads = get_num_threads() if self._work >= PARALLEL_MIN_WORK else 1
        else:
            n_threads = check_num_threads(n_threads)
        key = (dst.shape, src.shape) if check is None else None
        do_check = check if check is not None else key not in self._checked
        _exchange.copy_runs(dst, src, *cols, self.thread_bounds(n_threads), do_check, stream)
        if key is not None and do_check:   # reached only when every copy was inside both arrays
            self._checked.add(key)


def copy_runs(dst: np.ndarray, src: np.ndarray, src_tile: Any, src_off: Any, dst_tile: Any,
              dst_off: Any, nbytes: Any, n_threads: int | None = None) -> None:
    """Run a one-off table as given (range-checked by the kernel; no reordering, so ``dst``
    may be ``src`` if no copy writes bytes another reads)."""
    CopyTable(src_tile, src_off, dst_tile, dst_off, nbytes, host_order="given").run(
        dst, src, get_num_threads() if n_threads is None else n_threads, check=True)
