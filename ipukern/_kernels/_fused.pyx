"""An exchange and the conv compute set after it, executed tile by tile in one call (no GIL).

For each work item w (one tile t; thread k takes items k, k + n_threads, ...) a thread
first does the copies ``[copy_lo[w], copy_lo[w+1])`` of the exchange table (all of them
write tile t, in the table's destination order, regular stores) and then runs the conv
vertices ``[vert_lo[w], vert_lo[w+1])`` (all on tile t, in compute-set order) while tile
t's window and weights are still in the cache. The simulated program is unchanged: the
caller (``ipukern.core.fused``) only builds this call when it gives the same bytes as the
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
from libc.stdint cimport int32_t, int64_t

from ipukern._kernels.ipk cimport (
    IPK_CONV_DIRECT, IPK_CONV_EDIMS, IPK_CONV_EPARAM, IPK_CONV_ETHREADS, IPK_CONV_ETILE,
    IPK_CONV_MAX_K, IPK_CONV_OK, IPK_F16, IPK_F32, ipk_conv_best_isa, ipk_conv_check,
    ipk_conv_one, ipk_conv_pick, ipk_conv_vertex_fn, ipk_epi_check, ipk_geom, ipk_geom_init,
    ipk_team_size)


cdef extern from "ipk_copy.h" nogil:
    void ipk_copy_table(unsigned char* dbase, int64_t dst_stride, const unsigned char* sbase,
                        int64_t src_stride, const int32_t* src_row, const int64_t* src_off,
                        const int32_t* dst_row, const int64_t* dst_off, const int64_t* nbytes,
                        int64_t lo, int64_t hi, int stream) noexcept


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
                  const int32_t[::1] bact=None):    # IN: (n_batches,) act of each batch's bias
    """Run the copies and vertices of every work item. Returns 0 or a status code (nothing
    written then). ``bias_off``, ``bias_prm`` and ``bact`` (all or none): the bias epilogue
    of ``conv_tiles``, its ``act`` per batch."""
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
    # static round-robin as in conv_tiles: thread t takes items t, t + nt, ... so while it
    # computes its last vertex of an item it prefetches the first one of its next item (the
    # output, and the window and weight lines its copies are about to overwrite)
    for w in prange(W, nogil=True, schedule="static", chunksize=1, num_threads=n_threads):
        tid = threadid()
        nt = ipk_team_size()
        if copy_lo[w + 1] > copy_lo[w]:
            ipk_copy_table(base, row_bytes, base, row_bytes, &src_row[0], &src_off[0],
                           &dst_row[0], &dst_off[0], &nbytes[0], copy_lo[w], copy_lo[w + 1], 0)
        for v in range(vert_lo[w], vert_lo[w + 1]):
            nxt = v + 1
            if nxt == vert_lo[w + 1]:
                nxt = vert_lo[w + nt] if w + nt < W else V
            if nxt >= V or vbatch[nxt] != vbatch[v]:
                nxt = -1    # the next vertex's prefetch uses this vertex's kernel size
            p = &bparams[vbatch[v], 0]
            ipk_conv_one(fn, &dims[0, 0], v, nxt, p[0], p[1], p[2], p[3], p[4], p[5], base,
                         row_bytes, &tiles[0], &win_off[0], &w_off[0], &out_off[0], p[6], p[7],
                         sbase + tid * S, flags, pb, pp, pa[vbatch[v]] if pa != NULL else 0)
    return IPK_CONV_OK
