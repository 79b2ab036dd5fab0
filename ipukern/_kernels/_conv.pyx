"""Per-tile convolution partials: every vertex of a conv compute set in one call, no GIL.

Vertex v runs on tile ``tiles[v]`` and reads/writes only that tile's row of the arena, at
byte offsets ``win_off[v]`` (input window [B][WR][G*C][WC], rows outermost), ``w_off[v]`` (weights
[G][K][C][kh][kw]) and ``out_off[v]`` (output [B][G][K][OR][OC]). ``dims[v]`` is
(B, G, C, K, WR, WC, OR, OC, row_org, col_org); see ``ipk_conv.h`` for the method and
``ipukern.conv.codelet`` for the validating wrapper and the full semantics.

Every vertex is computed by one thread, each output element by one FMA chain in a fixed tap
order, so results do not depend on the thread count. Before anything is written the call
checks every vertex (tile, byte ranges, alignment, scratch size) and returns a non-zero
status code instead of raising; nothing is written then. ``direct=False`` keeps every vertex
on the packing (GEMM) path: the direct path gives the same bits, and the tests check that.
"""
from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t

from ipukern._kernels.ipk cimport (
    IPK_CONV_EALIGN, IPK_CONV_EDIMS, IPK_CONV_EPARAM, IPK_CONV_ERANGE, IPK_CONV_ESCRATCH,
    IPK_CONV_DIRECT, IPK_CONV_ETHREADS, IPK_CONV_ETILE, IPK_CONV_MAX_K, IPK_CONV_OK, IPK_F16, IPK_F32,
    ipk_conv_best_isa, ipk_conv_check, ipk_conv_isa_supported, ipk_conv_one, ipk_conv_pick,
    ipk_conv_vertex_fn, ipk_epi_check, ipk_geom, ipk_geom_init, ipk_team_size)

# status codes (the wrapper turns them into exceptions)
STATUS_OK = IPK_CONV_OK
STATUS_PARAM = IPK_CONV_EPARAM
STATUS_DIMS = IPK_CONV_EDIMS
STATUS_TILE = IPK_CONV_ETILE
STATUS_RANGE = IPK_CONV_ERANGE
STATUS_ALIGN = IPK_CONV_EALIGN
STATUS_SCRATCH = IPK_CONV_ESCRATCH
STATUS_THREADS = IPK_CONV_ETHREADS
MAX_PARAM = IPK_CONV_MAX_K   # kh, kw, sh, sw, dh, dw are at most this

ISA_NAMES = ("baseline", "avx2", "avx512")


def available_isas():
    """Names of the compiled ISA variants this CPU can run, best last."""
    return [ISA_NAMES[i] for i in range(3) if ipk_conv_isa_supported(i)]


def best_isa():
    """Name of the variant ``conv_tiles`` uses by default on this CPU."""
    return ISA_NAMES[ipk_conv_best_isa()]


def conv_scratch_floats(const int64_t[:, ::1] dims,                       # IN: (V, 10) as below
                        int kh, int kw, int sh, int sw, int dh, int dw):   # IN
    """Scratch floats one thread needs for any of these vertices (max over rows of ``dims``).

    Returns a negative status code when a row or the kernel parameters are invalid.
    """
    cdef ipk_geom g
    cdef Py_ssize_t v
    cdef int st
    cdef int64_t s = 16
    if dims.shape[0] and dims.shape[1] != 10:
        return -IPK_CONV_EDIMS
    for v in range(dims.shape[0]):
        st = ipk_geom_init(&g, &dims[v, 0], kh, kw, sh, sw, dh, dw)
        if st != IPK_CONV_OK:
            return -st
        if g.need > s:
            s = g.need
    return s


def conv_tiles(unsigned char[:, ::1] data,      # IN/OUT: arena, row t = tile t's memory
               const int32_t[::1] tiles,         # IN: tile of vertex v
               const int64_t[::1] win_off,       # IN: byte offset of the input window
               const int64_t[::1] w_off,         # IN: byte offset of the weights
               const int64_t[::1] out_off,       # IN: byte offset of the output
               const int64_t[:, ::1] dims,       # IN: (V, 10) B,G,C,K,WR,WC,OR,OC,row_org,col_org
               int kh, int kw, int sh, int sw, int dh, int dw,   # IN: kernel, stride, dilation
               int in_dt, int out_dt,            # IN: dtype codes (IPK_F32 / IPK_F16)
               float[:, ::1] scratch,            # OUT: scratch (n_threads, S) floats, clobbered
               int n_threads,                    # IN
               int isa=-1,                       # IN: -1 best for this CPU; 0/1/2: force a variant
               bint direct=True,                 # IN: False: never the direct path (tests)
               const int64_t[::1] bias_off=None,     # IN: (V,) byte offset of the bias, -1: none
               const int64_t[:, ::1] bias_prm=None,  # IN: (V, 2) (Kb, ks0) of the bias
               int act=0):                       # IN: after the bias: 0, 1 ReLU, 2 ReLU6
    """Compute every vertex's convolution output. Returns 0, or a status code (nothing written).

    With ``bias_off``, vertex v (bias_off[v] >= 0) then adds the bias of its output channels
    and applies ``act`` as the add_bias vertex would (ipk_epi in ``ipk_conv.h``): output
    channel k of group g gets bias[g * Kb + ks0 + k], the vector of Kb-strided groups at byte
    bias_off[v] of the tile.

    Checked here, before anything is written: kernel parameters and dtype codes, array
    lengths, dims (non-negative, small enough), tiles, that every operand lies inside its
    tile's row and is aligned to its element size, the scratch size and thread count. Not
    checked: overlaps (an output over an input or over another vertex's output gives results
    that depend on the order vertices run in); ``ipukern.convkernel.conv_tiles_checked``
    checks those too, once, when a plan is built.
    """
    cdef Py_ssize_t V = tiles.shape[0], v
    cdef int64_t n_rows = data.shape[0], row_bytes = data.shape[1]
    cdef int64_t S = scratch.shape[1]
    cdef int st, tid, nt
    cdef int flags = IPK_CONV_DIRECT if direct else 0
    cdef Py_ssize_t nxt
    cdef ipk_geom g
    cdef ipk_conv_vertex_fn fn
    cdef unsigned char* base
    cdef float* sbase
    cdef const int64_t* pb
    cdef const int64_t* pp
    if V == 0:
        return IPK_CONV_OK
    if (win_off.shape[0] != V or w_off.shape[0] != V or out_off.shape[0] != V
            or dims.shape[0] != V or dims.shape[1] != 10):
        return IPK_CONV_EDIMS
    if (in_dt != IPK_F32 and in_dt != IPK_F16) or (out_dt != IPK_F32 and out_dt != IPK_F16):
        return IPK_CONV_EPARAM
    if n_threads < 1 or scratch.shape[0] < n_threads:
        return IPK_CONV_ETHREADS
    if isa < 0:
        isa = ipk_conv_best_isa()
    if isa > 2 or not ipk_conv_isa_supported(isa):
        return IPK_CONV_EPARAM
    if n_rows == 0 or row_bytes == 0:
        return IPK_CONV_ETILE
    if (bias_off is None) != (bias_prm is None) or (bias_off is not None and (
            bias_off.shape[0] != V or bias_prm.shape[0] != V or bias_prm.shape[1] != 2)):
        return IPK_CONV_EDIMS
    if act < 0 or act > 2 or (act and bias_off is None):
        return IPK_CONV_EPARAM
    base = &data[0, 0]
    sbase = &scratch[0, 0]
    pb = &bias_off[0] if bias_off is not None else NULL
    pp = &bias_prm[0, 0] if bias_off is not None else NULL
    # check every vertex first: a bad one means nothing is written
    with nogil:
        for v in range(V):
            st = ipk_geom_init(&g, &dims[v, 0], kh, kw, sh, sw, dh, dw)
            if st == IPK_CONV_OK:
                st = ipk_conv_check(&g, n_rows, row_bytes, base, tiles[v], win_off[v], w_off[v],
                                    out_off[v], in_dt, out_dt, S)
            if st == IPK_CONV_OK and pb != NULL and pb[v] >= 0:
                st = ipk_epi_check(&g, row_bytes, base, tiles[v], pb[v], pp[2 * v],
                                   pp[2 * v + 1], out_dt, act)
            if st != IPK_CONV_OK:
                break
    if st != IPK_CONV_OK:
        return st
    fn = ipk_conv_pick(isa)
    # static round-robin: thread t runs v = t, t + nt, ... so it knows its next vertex and
    # prefetches that one's operands while computing. Each vertex is computed start to
    # finish by one thread, so the result is the same for any thread count or schedule.
    for v in prange(V, nogil=True, schedule="static", chunksize=1, num_threads=n_threads):
        tid = threadid()
        nt = ipk_team_size()
        nxt = v + nt
        if nxt >= V:
            nxt = -1
        ipk_conv_one(fn, &dims[0, 0], v, nxt, kh, kw, sh, sw, dh, dw, base, row_bytes,
                     &tiles[0], &win_off[0], &w_off[0], &out_off[0], in_dt, out_dt,
                     sbase + tid * S, flags, pb, pp, act, NULL, NULL)
    return IPK_CONV_OK
