"""An exchange and the conv compute set after it, executed tile by tile in one call (no GIL).

For each work item w (one tile t; thread k takes items k, k + n_threads, ...) a thread
first does the copies ``[copy_lo[w], copy_lo[w+1])`` of the exchange table (all of them
write tile t, in the table's destination order, regular stores) and then runs the conv
vertices ``[vert_lo[w], vert_lo[w+1])`` (all on tile t, in compute-set order) while tile
t's window and weights are still in the cache. The simulated program is unchanged: the
caller (``ipukern.core.host.fused``) only builds this call when it gives the same bytes as the
exchange followed by the compute set, i.e. no copy reads bytes the compute set writes
(and, as for any exchange, no copy writes bytes another copy reads). Each vertex runs start
to finish on one thread and each copy is independent, so results do not depend on the
thread count or the schedule.

Vertex v uses the kernel parameters of its batch: ``bparams[vbatch[v]] = (kh, kw, sh, sw,
dh, dw, in_dt, out_dt)``; operands as in ``_conv.conv_tiles``. Checked here before anything
is written (a non-zero status otherwise, as ``conv_tiles``): the work-item ranges, every
vertex's parameters, dims, tile, byte ranges and alignment, the scratch size. The copy
table is trusted, as ``_exchange.copy_runs(check=False)``: ``Exchange`` validated it when
built and compares its extent with the arena before every run.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t, uintptr_t
from libc.stdlib cimport free, malloc

from ipukern._kernels.ipk cimport (
    IPK_CONV_DIRECT, IPK_CONV_EALIGN, IPK_CONV_EDIMS, IPK_CONV_EPARAM, IPK_CONV_ETHREADS, IPK_CONV_ETILE,
    IPK_CONV_ERANGE, IPK_CONV_MAX_K, IPK_CONV_OK, IPK_F16, IPK_F32, ipk_conv_best_isa, ipk_conv_check,
    ipk_conv_one, ipk_conv_pick, ipk_conv_vertex_fn, ipk_epi_check, ipk_geom, ipk_geom_init,
    ipk_copy_table, ipk_team_size)


cdef bint _bad_ranges(const int64_t[::1] lo, int64_t n) noexcept nogil:
    """``lo`` is not a non-decreasing sequence from 0 to ``n``."""
    cdef Py_ssize_t w
    if lo.shape[0] < 1 or lo[0] != 0 or lo[lo.shape[0] - 1] != n:
        return True
    for w in range(lo.shape[0] - 1):
        if lo[w + 1] < lo[w]:
            return True
    return False


cdef int _check_vertices(const int32_t[::1] vbatch, const int32_t[:, ::1] bparams,
                         const int64_t[:, ::1] dims, const int32_t[::1] tiles,
                         const int64_t[::1] win_off, const int64_t[::1] w_off,
                         const int64_t[::1] out_off, unsigned char* base, int64_t n_rows,
                         int64_t row_bytes, int64_t S, const int64_t* pb, const int64_t* pp,
                         const int32_t* bact) noexcept nogil:
    """Status of the first bad vertex (kernel parameters, dims, tile, ranges, bias), or OK."""
    cdef Py_ssize_t v, k
    cdef const int32_t* p
    cdef ipk_geom g
    cdef int st = IPK_CONV_OK
    for v in range(vbatch.shape[0]):
        if vbatch[v] < 0 or vbatch[v] >= bparams.shape[0]:
            return IPK_CONV_EPARAM
        p = &bparams[vbatch[v], 0]
        for k in range(6):
            if p[k] < 1 or p[k] > IPK_CONV_MAX_K:
                return IPK_CONV_EPARAM
        if (p[6] != IPK_F32 and p[6] != IPK_F16) or (p[7] != IPK_F32 and p[7] != IPK_F16):
            return IPK_CONV_EPARAM
        st = ipk_geom_init(&g, &dims[v, 0], p[0], p[1], p[2], p[3], p[4], p[5])
        if st == IPK_CONV_OK:
            st = ipk_conv_check(&g, n_rows, row_bytes, base, tiles[v], win_off[v], w_off[v],
                                out_off[v], p[6], p[7], S)
        if st == IPK_CONV_OK and pb != NULL and pb[v] >= 0:
            st = ipk_epi_check(&g, row_bytes, base, tiles[v], pb[v], pp[2 * v], pp[2 * v + 1],
                               p[7], bact[vbatch[v]])
        if st != IPK_CONV_OK:
            return st
    return IPK_CONV_OK


cdef int _check_shadow(unsigned char[:, ::1] data, unsigned char[:, ::1] shadow,
                       const int32_t[::1] src_row, const int64_t[::1] src_off,
                       const int64_t[::1] dst_off, const int64_t[::1] nbytes,
                       const int64_t[::1] lo, const unsigned char[::1] vflags,
                       const int64_t[::1] mid, Py_ssize_t stride, Py_ssize_t W, Py_ssize_t V,
                       int n_threads):
    """Status of the shadow arguments of ``exchange_conv`` (all or none, ``mid`` optional;
    sizes, ranges, alignment; every copy inside the arena and the shadow row)."""
    cdef Py_ssize_t n, i
    cdef int64_t rows = data.shape[0], row = data.shape[1], srow
    cdef int given = ((shadow is not None) + (src_row is not None) + (src_off is not None)
                      + (dst_off is not None) + (nbytes is not None) + (lo is not None)
                      + (vflags is not None))
    if given == 0:
        return IPK_CONV_OK if mid is None else IPK_CONV_EDIMS
    if given != 7:
        return IPK_CONV_EDIMS
    n = nbytes.shape[0]
    if (src_row.shape[0] != n or src_off.shape[0] != n or dst_off.shape[0] != n
            or lo.shape[0] != W + 1 or vflags.shape[0] != V or _bad_ranges(lo, n)):
        return IPK_CONV_EDIMS
    srow = shadow.shape[1]
    if shadow.shape[0] < n_threads or srow < row:
        return IPK_CONV_ETHREADS
    if row % 64 or srow % 64 or srow == 0 or rows == 0 or (
            (<uintptr_t>&shadow[0, 0] - <uintptr_t>&data[0, 0]) % 64):
        return IPK_CONV_EALIGN
    for i in range(V):
        if vflags[i] > 3:
            return IPK_CONV_EPARAM
    for i in range(n):
        if (src_row[i] < 0 or src_row[i] >= rows or nbytes[i] < 0 or src_off[i] < 0
                or dst_off[i] < 0 or src_off[i] > row - nbytes[i] or dst_off[i] > srow - nbytes[i]):
            return IPK_CONV_ERANGE
    if mid is not None:
        if stride < 1 or mid.shape[0] != W:
            return IPK_CONV_EDIMS
        for i in range(W):
            if mid[i] < lo[i] or mid[i] > lo[i + 1]:
                return IPK_CONV_EDIMS
    return IPK_CONV_OK


def exchange_conv(unsigned char[:, ::1] data,      # IN/OUT: arena, row t = tile t's memory
                  const int32_t[::1] src_row,       # IN: exchange copies, destination order
                  const int64_t[::1] src_off,       # IN
                  const int32_t[::1] dst_row,       # IN
                  const int64_t[::1] dst_off,       # IN
                  const int64_t[::1] nbytes,        # IN
                  const int64_t[::1] copy_lo,       # IN: (W+1,) item w copies [copy_lo[w], copy_lo[w+1])
                  const int64_t[::1] vert_lo,       # IN: (W+1,) item w runs [vert_lo[w], vert_lo[w+1])
                  const int32_t[::1] tiles,         # IN: vertices in run order: tile
                  const int64_t[::1] win_off,       # IN: byte offset of the input window
                  const int64_t[::1] w_off,         # IN: byte offset of the weights
                  const int64_t[::1] out_off,       # IN: byte offset of the output
                  const int64_t[:, ::1] dims,       # IN: (V, 10) as conv_tiles
                  const int32_t[::1] vbatch,        # IN: (V,) row of bparams
                  const int32_t[:, ::1] bparams,    # IN: (n_batches, 8) kh kw sh sw dh dw in_dt out_dt
                  float[:, ::1] scratch,            # OUT: (n_threads, S) floats, clobbered
                  int n_threads,                    # IN
                  bint direct=True,                 # IN: as conv_tiles
                  const int64_t[::1] bias_off=None,     # IN: (V,) as conv_tiles, -1: none
                  const int64_t[:, ::1] bias_prm=None,  # IN: (V, 2) as conv_tiles
                  const int32_t[::1] bact=None,     # IN: (n_batches,) act of each batch's bias
                  unsigned char[:, ::1] shadow=None,      # OUT: (n_threads, >= row) shadow rows
                  const int32_t[::1] sh_src_row=None,     # IN: copies into the shadow row
                  const int64_t[::1] sh_src_off=None,     # IN
                  const int64_t[::1] sh_dst_off=None,     # IN: offset in the shadow row
                  const int64_t[::1] sh_nbytes=None,      # IN
                  const int64_t[::1] sh_lo=None,          # IN: (W+1,) item w's [sh_lo[w], sh_lo[w+1])
                  const unsigned char[::1] vflags=None,   # IN: (V,) bit 0 window, 1 weights in shadow
                  const int64_t[::1] sh_mid=None,         # IN: (W,) item w's repeated copies from here
                  Py_ssize_t repeat_stride=0):            # IN: ... repeat those of item w - stride
    """Run the copies and vertices of every work item. Returns 0 or a status code (nothing
    written then). ``bias_off``, ``bias_prm`` and ``bact`` (all or none): the bias epilogue
    of ``conv_tiles``, its ``act`` per batch.

    ``shadow`` and the ``sh_*`` and ``vflags`` columns (all or none): receive into a
    thread's shadow row instead of the tile's (:mod:`ipukern.core.host.fused`). Item w then also
    copies ``[sh_lo[w], sh_lo[w+1])`` from the arena (any row) into the shadow row of the
    thread running it, after its copies into the tile; vertex v reads its window (bit 0 of
    ``vflags[v]``) or weights (bit 1) from there. Each shadow row must be at least a tile
    row long, 64-byte aligned like the arena's rows (status IPK_CONV_EALIGN otherwise).

    ``sh_mid`` and ``repeat_stride`` > 0: item w's shadow copies ``[sh_mid[w], sh_lo[w+1])``
    repeat bytes item w - repeat_stride copied (``ipukern.core.host.shadow.repeat_plan``); a
    thread whose previous item was that one skips them (its shadow row holds them)."""
    cdef Py_ssize_t W = copy_lo.shape[0] - 1, V = tiles.shape[0], n = nbytes.shape[0]
    cdef Py_ssize_t w, v, nxt
    cdef int64_t n_rows = data.shape[0], row_bytes = data.shape[1], S = scratch.shape[1]
    cdef int st, tid, nt
    cdef int flags = IPK_CONV_DIRECT if direct else 0
    cdef const int32_t* p
    cdef ipk_conv_vertex_fn fn
    cdef unsigned char* base
    cdef float* sbase
    cdef const int64_t* pb
    cdef const int64_t* pp
    cdef const int32_t* pa
    cdef const unsigned char* vf
    cdef unsigned char* shb
    cdef int64_t sh_stride, hi
    cdef const int64_t* pmid
    cdef int64_t* last
    cdef Py_ssize_t k
    if (src_row.shape[0] != n or src_off.shape[0] != n or dst_row.shape[0] != n
            or dst_off.shape[0] != n or vert_lo.shape[0] != W + 1 or win_off.shape[0] != V
            or w_off.shape[0] != V or out_off.shape[0] != V or vbatch.shape[0] != V
            or dims.shape[0] != V or (V and dims.shape[1] != 10) or bparams.shape[1] != 8):
        return IPK_CONV_EDIMS
    if W < 0 or _bad_ranges(copy_lo, n) or _bad_ranges(vert_lo, V):
        return IPK_CONV_EDIMS
    if n_threads < 1 or scratch.shape[0] < n_threads:
        return IPK_CONV_ETHREADS
    if n_rows == 0 or row_bytes == 0:
        return IPK_CONV_ETILE
    if (bias_off is None) != (bias_prm is None) or (bias_off is None) != (bact is None) or (
            bias_off is not None and (bias_off.shape[0] != V or bias_prm.shape[0] != V
                                      or bias_prm.shape[1] != 2
                                      or bact.shape[0] != bparams.shape[0])):
        return IPK_CONV_EDIMS
    st = _check_shadow(data, shadow, sh_src_row, sh_src_off, sh_dst_off, sh_nbytes, sh_lo,
                       vflags, sh_mid, repeat_stride, W, V, n_threads)
    if st != IPK_CONV_OK:
        return st
    if W == 0:
        return IPK_CONV_OK
    base = &data[0, 0]
    sbase = &scratch[0, 0]
    pb = &bias_off[0] if bias_off is not None and V else NULL
    pp = &bias_prm[0, 0] if bias_off is not None and V else NULL
    pa = &bact[0] if bias_off is not None and V else NULL
    with nogil:
        st = _check_vertices(vbatch, bparams, dims, tiles, win_off, w_off, out_off, base, n_rows,
                             row_bytes, S, pb, pp, pa)
    if st != IPK_CONV_OK:
        return st
    fn = ipk_conv_pick(ipk_conv_best_isa())
    vf = &vflags[0] if vflags is not None and V else NULL
    shb = &shadow[0, 0] if vflags is not None else NULL
    sh_stride = shadow.shape[1] if vflags is not None else 0
    pmid = &sh_mid[0] if sh_mid is not None and W else NULL
    last = <int64_t*>malloc(n_threads * sizeof(int64_t))   # each thread's previous item
    if last == NULL:
        raise MemoryError()
    for k in range(n_threads):
        last[k] = -1
    # static round-robin as in conv_tiles: thread t takes items t, t + nt, ... so while it
    # computes its last vertex of an item it prefetches the first one of its next item (the
    # output, and the window and weight lines its copies are about to overwrite)
    for w in prange(W, nogil=True, schedule="static", chunksize=1, num_threads=n_threads):
        tid = threadid()
        nt = ipk_team_size()
        if copy_lo[w + 1] > copy_lo[w]:
            ipk_copy_table(base, row_bytes, base, row_bytes, &src_row[0], &src_off[0],
                           &dst_row[0], &dst_off[0], &nbytes[0], copy_lo[w], copy_lo[w + 1], 0)
        if vf != NULL and sh_lo[w + 1] > sh_lo[w]:
            hi = sh_lo[w + 1]
            if pmid != NULL and last[tid] == w - repeat_stride:
                hi = pmid[w]
            # destination row stride 0: every copy lands in this thread's shadow row (the
            # source rows stand in for the destination rows, multiplied by 0)
            ipk_copy_table(shb + tid * sh_stride, 0, base, row_bytes, &sh_src_row[0],
                           &sh_src_off[0], &sh_src_row[0], &sh_dst_off[0], &sh_nbytes[0],
                           sh_lo[w], hi, 0)
        last[tid] = w
        for v in range(vert_lo[w], vert_lo[w + 1]):
            nxt = v + 1
            if nxt == vert_lo[w + 1]:
                nxt = vert_lo[w + nt] if w + nt < W else V
            if nxt >= V or vbatch[nxt] != vbatch[v]:
                nxt = -1    # the next vertex's prefetch uses this vertex's kernel size
            p = &bparams[vbatch[v], 0]
            ipk_conv_one(fn, &dims[0, 0], v, nxt, p[0], p[1], p[2], p[3], p[4], p[5], base,
                         row_bytes, &tiles[0], &win_off[0], &w_off[0], &out_off[0], p[6], p[7],
                         sbase + tid * S, flags, pb, pp, pa[vbatch[v]] if pa != NULL else 0,
                         vf, shb + tid * sh_stride if vf != NULL else NULL)
    free(last)
    return IPK_CONV_OK
