"""Copy runs between two tile layouts of one tensor, and the stable tile order of a table.

:func:`layout_copies` walks both layouts' runs in logical element order (one cursor per
layout, advanced by whole runs, never by element) and emits one copy per run contiguous
in both: the table :func:`ipukern.nn.layout.copy_table` defines, in linear time instead of
a sort of every piece start. :func:`tile_order` is a stable counting sort by row (tile),
which is the stable sort by ``(row, offset)`` whenever the offsets already rise within each
row (tables read from packed layouts).

Inputs are validated by the Python layer (``ipukern.nn.layout``, ``ipukern.core.copies``).
Kernels never raise: a walk that finds its mappings inconsistent returns -1.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t

cdef enum:
    MAX_AXES = 16
#: most axes a layout may have here (the Python layer falls back beyond)
MAX_LAYOUT_AXES = MAX_AXES


cdef struct Cursor:
    const int64_t* start
    const int64_t* count
    const int32_t* tile
    const int64_t* off
    int64_t n_int        # intervals of the mapping
    int64_t itemsize
    int64_t row          # elements of a stored row (contiguous in both orders)
    int64_t n_lead       # logical axes before the row (the permuted ones)
    int64_t size[MAX_AXES]
    int64_t stride[MAX_AXES]   # stored rows one step of each lead logical axis moves
    int64_t idx[MAX_AXES]
    int64_t srow         # stored row of the current logical row
    int64_t p            # stored position
    int64_t row_end      # stored end of the current row
    int64_t j            # interval holding p


cdef inline void _seek(Cursor* c) noexcept nogil:
    """Point ``j`` at the interval holding ``p`` (the next one, or a binary search)."""
    cdef int64_t lo, hi, mid, j = c.j
    if 0 <= j < c.n_int and c.start[j] <= c.p < c.start[j] + c.count[j]:
        return
    if 0 <= j + 1 < c.n_int and c.start[j + 1] <= c.p < c.start[j + 1] + c.count[j + 1]:
        c.j = j + 1
        return
    lo, hi = 0, c.n_int - 1            # largest interval starting at or before p
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if c.start[mid] <= c.p:
            lo = mid
        else:
            hi = mid - 1
    c.j = lo


cdef inline void _start_row(Cursor* c) noexcept nogil:
    c.p = c.srow * c.row
    c.row_end = c.p + c.row
    _seek(c)


cdef inline int64_t _avail(Cursor* c) noexcept nogil:
    """Elements from ``p`` to the cursor's next run boundary (0: inconsistent mapping)."""
    cdef int64_t end = c.start[c.j] + c.count[c.j]
    if c.p < c.start[c.j] or c.p >= end:
        return 0
    return (end if end < c.row_end else c.row_end) - c.p


cdef inline void _advance(Cursor* c, int64_t m) noexcept nogil:
    """Move ``m`` elements on in logical order (an odometer over the lead axes picks the
    stored row of the next logical row)."""
    cdef int64_t a
    c.p += m
    if c.p < c.row_end:
        if c.p >= c.start[c.j] + c.count[c.j]:
            _seek(c)
        return
    if c.n_lead == 0:
        return                          # the one row is done: the walk ends
    a = c.n_lead - 1
    c.idx[a] += 1
    c.srow += c.stride[a]
    while a > 0 and c.idx[a] == c.size[a]:
        c.srow -= c.size[a] * c.stride[a]
        c.idx[a] = 0
        a -= 1
        c.idx[a] += 1
        c.srow += c.stride[a]
    if c.idx[0] < c.size[0]:
        _start_row(c)


cdef int _init(Cursor* c, tuple shape, tuple perm, const int64_t[::1] start,
               const int64_t[::1] count, const int32_t[::1] tile, const int64_t[::1] off,
               int64_t itemsize) except -1:
    cdef Py_ssize_t nd = len(shape), k = 0, q, a
    cdef int64_t s
    while k < nd and perm[nd - 1 - k] == nd - 1 - k:
        k += 1
    c.n_lead = nd - k
    c.row = 1
    for q in range(nd - k, nd):
        c.row *= <int64_t>shape[q]
    # stored-row stride of each lead logical axis: the stored lead order is perm[:nd - k]
    s = 1
    for q in range(nd - k - 1, -1, -1):
        a = perm[q]
        c.size[a] = shape[a]
        c.stride[a] = s
        c.idx[a] = 0
        s *= <int64_t>shape[a]
    c.start, c.count, c.tile, c.off = &start[0], &count[0], &tile[0], &off[0]
    c.n_int = start.shape[0]
    c.itemsize = itemsize
    c.srow = 0
    c.j = -1
    _start_row(c)
    return 0


cdef int64_t _walk(Cursor* a, Cursor* b, int64_t n, int64_t* st, int64_t* so, int64_t* dt,
                   int64_t* do, int64_t* nb) noexcept nogil:
    """Copies of the walk (written when ``st`` is not NULL); -1 on an inconsistent mapping."""
    cdef int64_t pos = 0, m, mb, k = 0
    while pos < n:
        m = _avail(a)
        mb = _avail(b)
        if mb < m:
            m = mb
        if m <= 0:
            return -1
        if st != NULL:
            st[k] = a.tile[a.j]
            so[k] = a.off[a.j] + (a.p - a.start[a.j]) * a.itemsize
            dt[k] = b.tile[b.j]
            do[k] = b.off[b.j] + (b.p - b.start[b.j]) * b.itemsize
            nb[k] = m * a.itemsize
        k += 1
        pos += m
        if pos < n:
            _advance(a, m)
            _advance(b, m)
    return k


def layout_copies(int64_t n, int64_t itemsize, tuple src_shape, tuple src_perm,
                  const int64_t[::1] src_start, const int64_t[::1] src_count,
                  const int32_t[::1] src_tile, const int64_t[::1] src_off,
                  tuple dst_shape, tuple dst_perm,
                  const int64_t[::1] dst_start, const int64_t[::1] dst_count,
                  const int32_t[::1] dst_tile, const int64_t[::1] dst_off):
    """``(src_tile, src_off, dst_tile, dst_off, nbytes)`` int64 columns, one copy per run
    contiguous in both layouts, in logical order; None if a mapping does not cover
    [0, n) in sorted intervals.

    Each layout: its logical ``shape`` (at most :data:`MAX_LAYOUT_AXES` axes), ``perm``
    (stored order = ``logical.transpose(perm)``), its mapping's intervals of the stored
    order (``start`` sorted, ``count`` > 0, ``tile``) and each interval's byte offset.
    Validated by the caller: n > 0, both mappings hold n elements."""
    cdef Cursor a, b
    cdef int64_t k
    if len(src_shape) > MAX_AXES or len(dst_shape) > MAX_AXES:
        return None
    _init(&a, src_shape, src_perm, src_start, src_count, src_tile, src_off, itemsize)
    _init(&b, dst_shape, dst_perm, dst_start, dst_count, dst_tile, dst_off, itemsize)
    with nogil:                         # first walk: count the copies
        k = _walk(&a, &b, n, NULL, NULL, NULL, NULL, NULL)
    if k < 0:
        return None
    cols = np.empty((5, k), dtype=np.int64)
    _init(&a, src_shape, src_perm, src_start, src_count, src_tile, src_off, itemsize)
    _init(&b, dst_shape, dst_perm, dst_start, dst_count, dst_tile, dst_off, itemsize)
    _fill(&a, &b, n, cols)
    return tuple(cols)


cdef int _fill(Cursor* a, Cursor* b, int64_t n, int64_t[:, ::1] cols) except -1:
    cdef int64_t k = cols.shape[1]
    if k == 0:
        return 0
    with nogil:
        _walk(a, b, n, &cols[0, 0], &cols[1, 0], &cols[2, 0], &cols[3, 0], &cols[4, 0])
    return 0


def tile_order(const int64_t[::1] row, const int64_t[::1] off, int64_t n_rows):
    """The stable order of the copies by ``row`` (each in [0, n_rows)), and whether
    ``off`` rises (non-strictly) within each row in the given order: then that order is
    also the stable sort by ``(row, offset)``."""
    cdef Py_ssize_t n = row.shape[0], i
    cdef int64_t r
    cdef bint rising = True
    cdef int64_t[::1] first = np.zeros(n_rows + 1, dtype=np.int64)
    cdef int64_t[::1] last = np.full(n_rows, np.iinfo(np.int64).min, dtype=np.int64)
    order_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] order = order_arr
    with nogil:
        for i in range(n):
            r = row[i]
            first[r + 1] += 1
            if off[i] < last[r]:
                rising = False
            last[r] = off[i]
        for i in range(n_rows):
            first[i + 1] += first[i]
        for i in range(n):
            r = row[i]
            order[first[r]] = i
            first[r] += 1
    return order_arr, bool(rising)


def packed_offsets(const int32_t[::1] tile, const int64_t[::1] count, int64_t itemsize,
                   int64_t n_tiles):
    """Byte offset of each interval (in the given order) when each tile's intervals are
    stored back to back in that order: a running sum per tile (tiles in [0, n_tiles))."""
    cdef Py_ssize_t n = tile.shape[0], i
    cdef int64_t[::1] used = np.zeros(max(n_tiles, 1), dtype=np.int64)
    out_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = out_arr
    with nogil:
        for i in range(n):
            out[i] = used[tile[i]]
            used[tile[i]] += count[i] * itemsize
    return out_arr


def given_joins(const int64_t[::1] sr, const int64_t[::1] so, const int64_t[::1] dr,
                const int64_t[::1] do, const int64_t[::1] nb):
    """How many copies are contiguous on both sides with the one before them, in the given
    order (the count :func:`ipukern.core.copies.coalesce_runs` decides by, without its
    full-length masks)."""
    cdef Py_ssize_t n = sr.shape[0], i
    cdef int64_t joins = 0
    with nogil:
        for i in range(1, n):
            if (sr[i] == sr[i - 1] and dr[i] == dr[i - 1] and so[i] == so[i - 1] + nb[i - 1]
                    and do[i] == do[i - 1] + nb[i - 1]):
                joins += 1
    return int(joins)


def ordered_joins(const int64_t[::1] order, const int64_t[::1] sr, const int64_t[::1] so,
                  const int64_t[::1] dr, const int64_t[::1] do, const int64_t[::1] nb):
    """``(joins, overlap)`` of the copies taken in ``order`` (a permutation): how many are
    contiguous on both sides with the one before, and whether two neighbours on one source
    row overlap (what :func:`ipukern.core.copies.coalesce_runs` bounds its attempt by),
    without gathering the columns."""
    cdef Py_ssize_t n = order.shape[0], i
    cdef int64_t a, b, joins = 0
    cdef bint overlap = False
    with nogil:
        for i in range(1, n):
            a, b = order[i - 1], order[i]
            if sr[a] == sr[b]:
                if so[b] < so[a] + nb[a]:
                    overlap = True
                    break
                if so[b] == so[a] + nb[a] and dr[a] == dr[b] and do[b] == do[a] + nb[a]:
                    joins += 1
    return int(joins), bool(overlap)


def gather_columns(order, const int64_t[::1] sr, const int64_t[::1] so, const int64_t[::1] dr,
                   const int64_t[::1] do, const int64_t[::1] nb):
    """The five columns taken in ``order`` (None: as given) with the copy kernel's types:
    int32 rows, int64 offsets and sizes (one pass; rows are validated in range by the
    caller)."""
    cdef Py_ssize_t n = sr.shape[0], i
    cdef int64_t k
    cdef const int64_t[::1] o
    cdef bint given = order is None
    if not given:
        o = order
    out = (np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int32),
           np.empty(n, np.int64), np.empty(n, np.int64))
    cdef int32_t[::1] osr = out[0], odr = out[2]
    cdef int64_t[::1] oso = out[1], odo = out[3], onb = out[4]
    with nogil:
        for i in range(n):
            k = i if given else o[i]
            osr[i] = <int32_t>sr[k]
            oso[i] = so[k]
            odr[i] = <int32_t>dr[k]
            odo[i] = do[k]
            onb[i] = nb[k]
    return out
