"""Built-in vertices: element-wise ops, fills, partial-sum reduction and bias adds.

Every function runs a whole batch of vertices (one per tile, or several) in one call,
``prange`` over vertices, without the GIL. Operands are byte offsets within the vertex's
own tile, so ``base + tile * stride + offset`` is the only address form used: a vertex
cannot reach another tile. fp16 data is computed in fp32 and rounded once on store.
Batches are built and validated by ipukern.core.vertices; each call also checks that
every operand lies inside its tile's row of ``data`` (see "checks" below).
"""
from cython.parallel cimport prange
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t
from libc.string cimport memcpy, memset

from ipukern._kernels.ipk cimport (IPK_F16, IPK_F32, ipk_copy_run, ipk_dt_size, ipk_f2h,
                                   ipk_gather_even4, ipk_h2f)

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define ipk_pf_write(p) __builtin_prefetch((const void*)(p), 1, 2)
    #else
    #define ipk_pf_write(p) ((void)(p))
    #endif
    """
    void ipk_pf_write(const void* p) noexcept nogil

cdef unsigned char _ZEROS[64]   # static storage: zero-initialised
cdef enum:
    _COPY_AHEAD = 4     # copy_blocks: blocks between a prefetch and its block (measured, below)


# dtype codes, declared once in ipk_dtype.h (ipukern.core.vertices.DTYPE_CODE must agree)
DTYPE_CODES = {"float32": IPK_F32, "float16": IPK_F16}


cdef inline float _ld(const unsigned char* p, Py_ssize_t i, int dt) noexcept nogil:
    if dt == IPK_F32:
        return (<const float*>p)[i]
    return ipk_h2f((<const uint16_t*>p)[i])


cdef inline void _st(unsigned char* p, Py_ssize_t i, float v, int dt) noexcept nogil:
    if dt == IPK_F32:
        (<float*>p)[i] = v
    else:
        (<uint16_t*>p)[i] = ipk_f2h(v)


cdef inline float _op(float a, float b, int op) noexcept nogil:
    if op == 0:
        return a + b
    if op == 1:
        return a - b
    if op == 2:
        return a * b
    if op == 3:
        return a if a >= b or a != a else b   # NaN propagates like np.maximum
    return a if a <= b or a != a else b


# ---------------------------------------------------------------- checks
# The Python layer validates batches against the simulated tile; checked here, before
# anything runs, is what would corrupt the host: every operand inside its tile's row of
# ``data``, array lengths, codes and the thread count (ValueError otherwise). O(vertices).

cdef inline bint _outside(int64_t off, int64_t n, int64_t size, int64_t row) noexcept nogil:
    """n elements of ``size`` bytes at byte ``off`` not inside [0, row) (nothing can wrap)."""
    return off < 0 or n < 0 or n > row // size or off > row - n * size


cdef int _check_common(str fn, const int32_t[::1] tiles, Py_ssize_t n_rows, int dt,
                       int n_threads) except -1:
    cdef Py_ssize_t v
    if dt != IPK_F32 and dt != IPK_F16:
        raise ValueError(f"{fn}: dtype code {dt} is neither IPK_F32 nor IPK_F16")
    if n_threads < 1:
        raise ValueError(f"{fn}: n_threads must be >= 1, got {n_threads}")
    for v in range(tiles.shape[0]):
        if tiles[v] < 0 or tiles[v] >= n_rows:
            raise ValueError(f"{fn}: vertex {v} on tile {tiles[v]}, outside the arena's {n_rows} rows")
    return 0


cdef int _check_runs(str fn, str what, const int32_t[::1] tiles, const int64_t[::1] off,
                     const int64_t[::1] n, int64_t size, int64_t row, bint single=False) except -1:
    """Operand ``what`` of vertex v: n[v] elements (1 if ``single``) of ``size`` bytes at off[v]."""
    cdef Py_ssize_t v
    if off.shape[0] != tiles.shape[0] or n.shape[0] != tiles.shape[0]:
        raise ValueError(f"{fn}: {what} offsets / sizes do not match the {tiles.shape[0]} vertices")
    for v in range(tiles.shape[0]):
        if _outside(off[v], 1 if single else n[v], size, row):
            raise ValueError(f"{fn}: vertex {v} (tile {tiles[v]}): {what} at byte {off[v]} "
                             f"({n[v]} elements) reaches outside the arena row of {row} B")
    return 0


def binary(unsigned char[:, ::1] data,      # IN/OUT: arena, row t = tile t's memory
           const int32_t[::1] tiles,         # IN: tile of vertex v
           const int64_t[::1] out_off,       # IN: byte offset of the output
           const int64_t[::1] a_off,         # IN: byte offset of operand a
           const int64_t[::1] b_off,         # IN: byte offset of operand b
           const int64_t[::1] n,             # IN: elements of vertex v
           int op, int dt, int n_threads):   # IN: BINARY_OPS code, dtype code, threads
    """out = a (op) b element-wise, per vertex: n[v] elements."""
    cdef Py_ssize_t v, i, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef unsigned char* po
    cdef const unsigned char* pa
    cdef const unsigned char* pb
    cdef float* fo
    cdef const float* fa
    cdef const float* fb
    _check_common("binary", tiles, data.shape[0], dt, n_threads)
    if op < 0 or op > 4:
        raise ValueError(f"binary: op code {op} outside 0..4")
    _check_runs("binary", "out", tiles, out_off, n, ipk_dt_size(dt), stride)
    _check_runs("binary", "a", tiles, a_off, n, ipk_dt_size(dt), stride)
    _check_runs("binary", "b", tiles, b_off, n, ipk_dt_size(dt), stride)
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        po = base + tiles[v] * stride + out_off[v]
        pa = base + tiles[v] * stride + a_off[v]
        pb = base + tiles[v] * stride + b_off[v]
        if dt == IPK_F32 and op == 0:   # the hot case (partial sums): let the compiler vectorise
            fo = <float*>po
            fa = <const float*>pa
            fb = <const float*>pb
            for i in range(n[v]):
                fo[i] = fa[i] + fb[i]
        else:
            for i in range(n[v]):
                _st(po, i, _op(_ld(pa, i, dt), _ld(pb, i, dt), op), dt)


def scale(unsigned char[:, ::1] data,       # IN/OUT: arena
          const int32_t[::1] tiles,          # IN: tile of vertex v
          const int64_t[::1] out_off,        # IN: byte offset of the output
          const int64_t[::1] a_off,          # IN: byte offset of the input
          const int64_t[::1] n,              # IN: elements of vertex v
          float alpha, int dt, int n_threads):   # IN
    """out = alpha * a element-wise."""
    cdef Py_ssize_t v, i, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef unsigned char* po
    cdef const unsigned char* pa
    _check_common("scale", tiles, data.shape[0], dt, n_threads)
    _check_runs("scale", "out", tiles, out_off, n, ipk_dt_size(dt), stride)
    _check_runs("scale", "a", tiles, a_off, n, ipk_dt_size(dt), stride)
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        po = base + tiles[v] * stride + out_off[v]
        pa = base + tiles[v] * stride + a_off[v]
        for i in range(n[v]):
            _st(po, i, alpha * _ld(pa, i, dt), dt)


def fill(unsigned char[:, ::1] data,        # OUT: arena
         const int32_t[::1] tiles,           # IN: tile of vertex v
         const int64_t[::1] off,             # IN: byte offset of the run
         const int64_t[::1] n,               # IN: elements of vertex v
         float value, int dt, int n_threads):   # IN
    """Set n[v] elements to ``value``."""
    cdef Py_ssize_t v, i, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef unsigned char* p
    cdef uint16_t hv = ipk_f2h(value)
    _check_common("fill", tiles, data.shape[0], dt, n_threads)
    _check_runs("fill", "out", tiles, off, n, ipk_dt_size(dt), stride)
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        p = base + tiles[v] * stride + off[v]
        if value == 0.0 and not (value != value):
            memset(p, 0, <size_t>(n[v] * ipk_dt_size(dt)))
        elif dt == IPK_F32:
            for i in range(n[v]):
                (<float*>p)[i] = value
        else:
            for i in range(n[v]):
                (<uint16_t*>p)[i] = hv


cdef inline const float* _src_f32(unsigned char* base, int64_t stride, const int32_t* src_row,
                                  int64_t tile, const int64_t* src_off, Py_ssize_t k) noexcept nogil:
    return <const float*>(base + (src_row[k] if src_row != NULL else tile) * stride + src_off[k])


cdef inline void _sum_vertex(unsigned char* po, unsigned char* base, int64_t stride,
                             const int32_t* src_row, int64_t tile, const int64_t* src_off,
                             Py_ssize_t k0, Py_ssize_t k1, int64_t n, int in_dt,
                             int out_dt) noexcept nogil:
    """One sum_rows vertex: out (at ``po``) = sum of sources k0..k1-1, source k at byte
    src_off[k] of row src_row[k] (of ``tile`` when src_row is NULL), in that order."""
    cdef Py_ssize_t i, k, m
    cdef const float* a
    cdef const float* s1
    cdef const float* s2
    cdef const float* s3
    cdef const float* s4
    cdef const float* s5
    cdef const float* s6
    cdef const float* s7
    cdef const float* p[7]
    cdef int j
    cdef float* fo
    cdef float acc
    if in_dt == IPK_F32 and out_dt == IPK_F32:
        # element-wise loops over contiguous rows vectorise; each pass adds up to 7 sources to
        # the running sum a (source k0, or out itself after the first pass), so the order
        # of additions per element is still k0, k0+1, ... with an fp32 round per step, as the
        # real vertex, while 8 input streams are in flight at once (the sources are short
        # runs on other tiles, mostly cache misses) and out is written once per 7 sources.
        # ResNet-50 batch 8 (3-13 sources of 143-1195 floats per vertex), its sum_rows_from
        # calls replayed in one process, one thread, best of 8: up to 3 per pass 0.0718 s,
        # 4: 0.0666, 5: 0.0658, 6: 0.0618, 7: 0.0614
        fo = <float*>po
        a = _src_f32(base, stride, src_row, tile, src_off, k0)
        if k1 - k0 == 1:
            if <const unsigned char*>a != po:
                memcpy(po, a, <size_t>(n * 4))
            return
        k = k0 + 1
        while k < k1:
            m = k1 - k if k1 - k < 7 else 7
            for j in range(7):     # this pass's sources (a where there are fewer than 7)
                p[j] = _src_f32(base, stride, src_row, tile, src_off, k + j) if j < m else a
            s1, s2, s3, s4, s5, s6, s7 = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
            if m == 7:
                for i in range(n):
                    fo[i] = ((((((a[i] + s1[i]) + s2[i]) + s3[i]) + s4[i]) + s5[i]) + s6[i]) + s7[i]
            elif m == 6:
                for i in range(n):
                    fo[i] = (((((a[i] + s1[i]) + s2[i]) + s3[i]) + s4[i]) + s5[i]) + s6[i]
            elif m == 5:
                for i in range(n):
                    fo[i] = ((((a[i] + s1[i]) + s2[i]) + s3[i]) + s4[i]) + s5[i]
            elif m == 4:
                for i in range(n):
                    fo[i] = (((a[i] + s1[i]) + s2[i]) + s3[i]) + s4[i]
            elif m == 3:
                for i in range(n):
                    fo[i] = ((a[i] + s1[i]) + s2[i]) + s3[i]
            elif m == 2:
                for i in range(n):
                    fo[i] = (a[i] + s1[i]) + s2[i]
            else:
                for i in range(n):
                    fo[i] = a[i] + s1[i]
            k = k + m
            a = fo
    else:
        for i in range(n):
            acc = 0.0
            for k in range(k0, k1):
                acc = acc + _ld(base + (src_row[k] if src_row != NULL else tile) * stride
                                + src_off[k], i, in_dt)
            _st(po, i, acc, out_dt)


def sum_rows(unsigned char[:, ::1] data,    # IN/OUT: arena
             const int32_t[::1] tiles,       # IN: tile of vertex v
             const int64_t[::1] out_off,     # IN: byte offset of the output
             const int64_t[::1] src_ptr,     # IN: (V + 1,) vertex v sums src_off[src_ptr[v]:src_ptr[v+1]]
             const int64_t[::1] src_off,     # IN: byte offsets of the source vectors
             const int64_t[::1] n,           # IN: elements per vector of vertex v
             int in_dt, int out_dt, int n_threads,   # IN
             const int64_t[::1] bias_off=None,       # IN: then add_bias(bias_off, bias_prm, act)
             const int64_t[:, ::1] bias_prm=None,    # IN  on each vertex's output
             int act=0):                             # IN
    """out = sum_k src_k (k = src_ptr[v] .. src_ptr[v+1]-1, in that fixed order).

    Accumulates in fp32 and rounds once to the output dtype, so the result does not depend
    on threads. ``out`` may alias the first source (in-place accumulation). With
    ``bias_off``, each vertex then does the ``add_bias`` vertex (``bias_prm[v]`` its params,
    ``act``) on its output while it is in the cache: execute mode's host fusion of a conv's
    bias pass into its reduction (ipukern.conv.build.fuse_bias), the same bits.
    """
    cdef Py_ssize_t v, k, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef bint has_bias
    _check_common("sum_rows", tiles, data.shape[0], in_dt, n_threads)
    _check_common("sum_rows", tiles, data.shape[0], out_dt, n_threads)
    _check_runs("sum_rows", "out", tiles, out_off, n, ipk_dt_size(out_dt), stride)
    if src_ptr.shape[0] != tiles.shape[0] + 1 or src_ptr[0] < 0:
        raise ValueError("sum_rows: src_ptr must hold n_vertices + 1 start indices from >= 0")
    for v in range(tiles.shape[0]):
        if src_ptr[v + 1] <= src_ptr[v] or src_ptr[v + 1] > src_off.shape[0]:
            raise ValueError(f"sum_rows: vertex {v} has source range [{src_ptr[v]}, {src_ptr[v + 1]}) "
                             f"(needs >= 1 of the {src_off.shape[0]} sources)")
        for k in range(src_ptr[v], src_ptr[v + 1]):
            if _outside(src_off[k], n[v], ipk_dt_size(in_dt), stride):
                raise ValueError(f"sum_rows: vertex {v} (tile {tiles[v]}): source {k} at byte "
                                 f"{src_off[k]} reaches outside the arena row of {stride} B")
    _check_bias_epilogue("sum_rows", tiles, out_off, n, bias_off, bias_prm, out_dt, stride, act)
    has_bias = bias_off is not None
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        _sum_vertex(base + tiles[v] * stride + out_off[v], base, stride, NULL, tiles[v],
                    &src_off[0], src_ptr[v], src_ptr[v + 1], n[v], in_dt, out_dt)
        if has_bias:
            _bias_run(base + tiles[v] * stride + out_off[v], base + tiles[v] * stride + bias_off[v],
                      &bias_prm[v, 0], out_dt, act)


cdef int _check_bias_epilogue(str fn, const int32_t[::1] tiles, const int64_t[::1] out_off,
                              const int64_t[::1] n, const int64_t[::1] bias_off,
                              const int64_t[:, ::1] bias_prm, int dt, int64_t stride,
                              int act) except -1:
    """A sum's bias epilogue: none (and act 0), or add_bias operands over exactly each
    vertex's output (params e0 >= 0, n = the vertex's n)."""
    cdef Py_ssize_t v
    if (bias_off is None) != (bias_prm is None):
        raise ValueError(f"{fn}: bias_off and bias_prm go together")
    if bias_off is None:
        if act:
            raise ValueError(f"{fn}: an activation needs the bias epilogue")
        return 0
    _check_bias(fn, tiles, out_off, bias_off, bias_prm, dt, stride, act)
    for v in range(tiles.shape[0]):
        if bias_prm[v, 1] != n[v]:
            raise ValueError(f"{fn}: vertex {v}: the bias run has {bias_prm[v, 1]} elements, "
                             f"the output {n[v]}")
    return 0


# ---------------------------------------------------------------- fused partials exchange + reduce
# ``sum_rows_from`` is ``sum_rows`` with a source row per source vector (source k: n[v]
# elements at byte src_off[k] of tile src_row[k]). ipukern.core.host.fused_reduce points the
# sources a partials exchange would have copied into a receive buffer at the bytes that
# exchange copies, so the exchange need not run. The arithmetic is sum_rows' own, term for
# term, so the outputs are the same bits.
cdef Py_ssize_t _first_bad(const int32_t[::1] tiles, const int64_t[::1] out_off,
                           const int64_t[::1] src_ptr, const int32_t[::1] src_row,
                           const int64_t[::1] src_off, const int64_t[::1] n, int64_t n_rows,
                           int64_t row, int64_t isz, int64_t osz) noexcept nogil:
    """Index of the first vertex with a tile, output or source outside the arena (or an
    empty or out-of-range source list), or -1."""
    cdef Py_ssize_t v, k
    for v in range(tiles.shape[0]):
        if (tiles[v] < 0 or tiles[v] >= n_rows or _outside(out_off[v], n[v], osz, row)
                or src_ptr[v + 1] <= src_ptr[v] or src_ptr[v + 1] > src_off.shape[0]):
            return v
        for k in range(src_ptr[v], src_ptr[v + 1]):
            if src_row[k] < 0 or src_row[k] >= n_rows or _outside(src_off[k], n[v], isz, row):
                return v
    return -1


def sum_rows_from(unsigned char[:, ::1] data,    # IN/OUT: arena, row t = tile t's memory
                  const int32_t[::1] tiles,       # IN: tile of vertex v (where out is)
                  const int64_t[::1] out_off,     # IN: byte offset of the output on that tile
                  const int64_t[::1] src_ptr,     # IN: (V + 1,) vertex v sums sources src_ptr[v]..
                  const int32_t[::1] src_row,     # IN: tile holding source k
                  const int64_t[::1] src_off,     # IN: byte offset of source k on that tile
                  const int64_t[::1] n,           # IN: elements per vector of vertex v
                  int in_dt, int out_dt, int n_threads,   # IN
                  const int64_t[::1] bias_off=None,       # IN: the bias epilogue of sum_rows
                  const int64_t[:, ::1] bias_prm=None,    # IN
                  int act=0):                             # IN
    """out = sum_k src_k (k = src_ptr[v] .. src_ptr[v+1]-1, in that order), as
    ``_vertices.sum_rows`` computes it (its bias epilogue too). Raises ValueError before
    anything is written for bad codes, lengths, threads, or an operand outside the arena."""
    cdef Py_ssize_t V = tiles.shape[0], v, bad
    cdef int64_t stride = data.shape[1]
    cdef bint has_bias
    cdef unsigned char* base
    if (in_dt != IPK_F32 and in_dt != IPK_F16) or (out_dt != IPK_F32 and out_dt != IPK_F16):
        raise ValueError(f"sum_rows_from: dtype codes {in_dt}, {out_dt} must be IPK_F32 or IPK_F16")
    if n_threads < 1:
        raise ValueError(f"sum_rows_from: n_threads must be >= 1, got {n_threads}")
    if (out_off.shape[0] != V or n.shape[0] != V or src_ptr.shape[0] != V + 1
            or src_row.shape[0] != src_off.shape[0] or (V and src_ptr[0] < 0)):
        raise ValueError("sum_rows_from: tables do not match the vertex count")
    if V == 0:
        return
    with nogil:
        bad = _first_bad(tiles, out_off, src_ptr, src_row, src_off, n, data.shape[0], stride,
                         ipk_dt_size(in_dt), ipk_dt_size(out_dt))
    if bad >= 0:
        raise ValueError(f"sum_rows_from: vertex {bad} (tile {tiles[bad]}) has an operand "
                         f"outside the arena ({data.shape[0]} rows of {stride} B) or no sources")
    _check_bias_epilogue("sum_rows_from", tiles, out_off, n, bias_off, bias_prm, out_dt, stride,
                         act)
    has_bias = bias_off is not None
    base = &data[0, 0]
    for v in prange(V, nogil=True, schedule="static", num_threads=n_threads):
        _sum_vertex(base + tiles[v] * stride + out_off[v], base, stride, &src_row[0], tiles[v],
                    &src_off[0], src_ptr[v], src_ptr[v + 1], n[v], in_dt, out_dt)
        if has_bias:
            _bias_run(base + tiles[v] * stride + out_off[v], base + tiles[v] * stride + bias_off[v],
                      &bias_prm[v, 0], out_dt, act)


def sum_elems(unsigned char[:, ::1] data,   # IN/OUT: arena
              const int32_t[::1] tiles,      # IN: tile of vertex v
              const int64_t[::1] out_off,    # IN: byte offset of the one output element
              const int64_t[::1] in_off,     # IN: byte offset of the input run
              const int64_t[::1] n,          # IN: elements of vertex v
              int in_dt, int out_dt, int n_threads):   # IN
    """out[0] = sum of the n[v] input elements, in index order, accumulated in fp32."""
    cdef Py_ssize_t v, i, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef const unsigned char* pi
    cdef float acc
    _check_common("sum_elems", tiles, data.shape[0], in_dt, n_threads)
    _check_common("sum_elems", tiles, data.shape[0], out_dt, n_threads)
    _check_runs("sum_elems", "in", tiles, in_off, n, ipk_dt_size(in_dt), stride)
    _check_runs("sum_elems", "out", tiles, out_off, n, ipk_dt_size(out_dt), stride, True)
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        pi = base + tiles[v] * stride + in_off[v]
        acc = 0.0
        for i in range(n[v]):
            acc = acc + _ld(pi, i, in_dt)
        _st(base + tiles[v] * stride + out_off[v], 0, acc, out_dt)


# written as selects without early returns so that the loops stay branch-free (a branch
# per element on the sign of the data mispredicts half the time: 20x slower)
cdef inline float _relu_np(float x) noexcept nogil:
    """np.maximum(x, 0) bit for bit: NaN kept, -0 becomes +0 (NumPy's vector loops)."""
    return x if not x <= 0 else 0.0


cdef inline float _relu6_np(float x) noexcept nogil:
    """np.clip(x, 0, 6) bit for bit: NaN kept, -0 kept (clip's max keeps x when equal)."""
    x = x if not x < 0 else 0.0
    return 6.0 if x > 6 else x


cdef int _check_bias(str fn, const int32_t[::1] tiles, const int64_t[::1] out_off,
                     const int64_t[::1] bias_off, const int64_t[:, ::1] params, int dt,
                     int64_t stride, int act) except -1:
    """The operands of ``add_bias`` (or of a sum's bias epilogue) inside their tiles' rows."""
    cdef Py_ssize_t v
    cdef int64_t e0, n, inner, kj, G, K, ks0
    if act < 0 or act > 2 or (act and dt != IPK_F32):
        raise ValueError(f"{fn}: act must be 0, 1 (ReLU) or 2 (ReLU6), the last two for "
                         f"float32 only; got {act}")
    if (params.shape[0] != tiles.shape[0] or params.shape[1] != 7
            or out_off.shape[0] != tiles.shape[0] or bias_off.shape[0] != tiles.shape[0]):
        raise ValueError(f"{fn}: params must have shape ({tiles.shape[0]}, 7), the bias and output "
                         f"offsets ({tiles.shape[0]},)")
    for v in range(tiles.shape[0]):
        e0, n, inner, kj, G, K, ks0 = (params[v, 0], params[v, 1], params[v, 2], params[v, 3],
                                       params[v, 4], params[v, 5], params[v, 6])
        # bias indices reach (G - 1) * K + ks0 + kj - 1; each factor <= row keeps that exact
        if (e0 < 0 or inner < 1 or kj < 1 or G < 1 or K < 0 or ks0 < 0 or kj > stride
                or G > stride or K > stride or ks0 > stride
                or _outside(out_off[v], n, ipk_dt_size(dt), stride)
                or _outside(bias_off[v], (G - 1) * K + ks0 + kj, ipk_dt_size(dt), stride)):
            raise ValueError(f"{fn}: vertex {v} (tile {tiles[v]}): params {list(params[v])} "
                             f"reach outside the arena row of {stride} B")
    return 0


cdef inline void _bias_run(unsigned char* po, const unsigned char* pb, const int64_t* prm,
                           int dt, int act) noexcept nogil:
    """One add_bias vertex (params ``prm``, see add_bias) on the run at ``po``. Walks the run
    channel by channel (runs of ``inner`` elements share one bias value): one division per
    vertex instead of a division and a modulo per element."""
    cdef int64_t e0 = prm[0], n = prm[1], inner = prm[2], kj = prm[3], gk = prm[4] * prm[3]
    cdef int64_t K = prm[5], ks0 = prm[6]
    cdef int64_t e = e0 % inner          # position inside the current channel run
    cdef int64_t c = (e0 // inner) % gk  # its block channel
    cdef int64_t i = 0, j, run
    cdef float bv
    cdef float* fo
    while i < n:
        run = inner - e
        if run > n - i:
            run = n - i
        bv = _ld(pb, (c // kj) * K + ks0 + c % kj, dt)
        if dt == IPK_F32:
            fo = <float*>po
            if act == 0:
                for j in range(i, i + run):
                    fo[j] = fo[j] + bv
            elif act == 1:
                for j in range(i, i + run):
                    fo[j] = _relu_np(fo[j] + bv)
            else:
                for j in range(i, i + run):
                    fo[j] = _relu6_np(fo[j] + bv)
        else:
            for j in range(i, i + run):
                _st(po, j, _ld(po, j, dt) + bv, dt)
        i = i + run
        e = 0
        c = c + 1
        if c == gk:
            c = 0


def add_bias(unsigned char[:, ::1] data,    # IN/OUT: arena
             const int32_t[::1] tiles,       # IN: tile of vertex v
             const int64_t[::1] out_off,     # IN: byte offset of the output run
             const int64_t[::1] bias_off,    # IN: byte offset of the bias vector
             const int64_t[:, ::1] params,   # IN: (V, 7), see below
             int dt, int n_threads,          # IN
             int act=0):                     # IN: then 0 none, 1 ReLU, 2 ReLU6 (float32 only)
    """Add a per-channel bias to a run of a tile's [B][G][K_j][OR][OC] output block.

    params[v] = (e0, n, inner, K_j, G, K, ks0): the run is block elements [e0, e0 + n);
    element e belongs to block channel c = (e // inner) % (G * K_j), i.e. group
    g = c // K_j and slice channel k = c % K_j, whose bias is bias[g * K + ks0 + k].

    ``act`` applies the network's next activation to the sum in the same pass (execute
    mode's host fusion; the bits of ``np.maximum(y, 0)`` and ``np.clip(y, 0, 6)``).
    """
    cdef Py_ssize_t v, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    _check_common("add_bias", tiles, data.shape[0], dt, n_threads)
    _check_bias("add_bias", tiles, out_off, bias_off, params, dt, stride, act)
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        _bias_run(base + tiles[v] * stride + out_off[v], base + tiles[v] * stride + bias_off[v],
                  &params[v, 0], dt, act)


cdef inline void _strided_elems(unsigned char* pd, const unsigned char* ps, int64_t n,
                                int64_t ds, int64_t ss, int64_t elem_bytes) noexcept nogil:
    """n elements, strided on either side; fixed-size moves for 4- and 2-byte elements
    (a variable-size memcpy per element is a library call each)."""
    cdef int64_t d
    if elem_bytes == 4:
        for d in range(n):
            memcpy(pd + d * ds, ps + d * ss, 4)
    elif elem_bytes == 2:
        for d in range(n):
            memcpy(pd + d * ds, ps + d * ss, 2)
    else:
        for d in range(n):
            memcpy(pd + d * ds, ps + d * ss, <size_t>elem_bytes)


def copy_blocks(unsigned char[:, ::1] data,      # IN/OUT: arena
                const int32_t[::1] tiles,         # IN: tile of vertex v
                const int64_t[::1] src_off,       # IN: byte offset of block v's source (-1: zeros)
                const int64_t[::1] dst_off,       # IN: byte offset of block v's destination
                const int64_t[:, ::1] shape,      # IN: (V, 4) block extent in elements
                const int64_t[:, ::1] src_stride,  # IN: (V, 4) source strides in bytes (>= 0)
                const int64_t[:, ::1] dst_stride,  # IN: (V, 4) destination strides in bytes (>= 0)
                int64_t elem_bytes, int n_threads,   # IN
                bint check=True):                 # IN: False: the caller ran this table checked
    """On-tile strided block copy: dst[a, b, c, d] = src[a, b, c, d] (4-D blocks of
    ``elem_bytes``-byte elements, addresses off + sum(index * stride)); a negative source
    offset writes zeros. Blocks of one call must not overlap each other's destinations
    (the caller's tables guarantee it; blocks run in parallel). Every block is checked
    against the arena before anything is written (ValueError) unless ``check`` is False:
    for a fixed table the caller has already run checked on an arena of the same shape
    (the check is a quarter of the call for the million blocks of a 7x7 stem)."""
    cdef Py_ssize_t v, row = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef int64_t k, reach, n_el, V = tiles.shape[0], c
    if elem_bytes < 1 or elem_bytes > 8:
        raise ValueError(f"copy_blocks: elem_bytes must be 1..8, got {elem_bytes}")
    if n_threads < 1:
        raise ValueError(f"copy_blocks: n_threads must be >= 1, got {n_threads}")
    if (src_off.shape[0] != tiles.shape[0] or dst_off.shape[0] != tiles.shape[0]
            or shape.shape[0] != tiles.shape[0] or src_stride.shape[0] != tiles.shape[0]
            or dst_stride.shape[0] != tiles.shape[0] or shape.shape[1] != 4
            or src_stride.shape[1] != 4 or dst_stride.shape[1] != 4):
        raise ValueError(f"copy_blocks: tables must have {tiles.shape[0]} rows (offsets) and 4 columns")
    for v in range(tiles.shape[0] if check else 0):
        if tiles[v] < 0 or tiles[v] >= data.shape[0]:
            raise ValueError(f"copy_blocks: vertex {v} on tile {tiles[v]}, outside the arena's "
                             f"{data.shape[0]} rows")
        n_el = 1
        for k in range(4):
            # a stride matters (and is bounded, so that the reach below cannot overflow)
            # only along a dimension of more than one element: a block one tap deep may
            # carry the stride of the taps it would step over, which can exceed the row
            if shape[v, k] < 0 or shape[v, k] > row or src_stride[v, k] < 0 or dst_stride[v, k] < 0 \
                    or (shape[v, k] > 1 and (src_stride[v, k] > row or dst_stride[v, k] > row)):
                raise ValueError(f"copy_blocks: vertex {v}: bad extent or stride in dimension {k}")
            n_el = n_el * (shape[v, k] > 0)
        if n_el == 0:
            continue
        reach = elem_bytes
        for k in range(4):
            reach = reach + (shape[v, k] - 1) * dst_stride[v, k]
        if dst_off[v] < 0 or dst_off[v] > row - reach:
            raise ValueError(f"copy_blocks: vertex {v} (tile {tiles[v]}): destination reaches "
                             f"outside the arena row of {row} B")
        if src_off[v] >= 0:
            reach = elem_bytes
            for k in range(4):
                reach = reach + (shape[v, k] - 1) * src_stride[v, k]
            if src_off[v] > row - reach:
                raise ValueError(f"copy_blocks: vertex {v} (tile {tiles[v]}): source reaches "
                                 f"outside the arena row of {row} B")
    if V == 0:
        return
    # chunks of blocks: one shared counter update per 256 blocks, not per block (the
    # expandDims copy of a 7x7 stride-2 conv has a million blocks of 3 x 4 elements)
    for c in prange((V + 255) // 256, nogil=True, schedule="dynamic", num_threads=n_threads):
        _copy_chunk(base, row, &tiles[0], &src_off[0], &dst_off[0], &shape[0, 0],
                    &src_stride[0, 0], &dst_stride[0, 0], elem_bytes, c * 256,
                    min(c * 256 + 256, V))


cdef void _copy_chunk(unsigned char* base, int64_t row, const int32_t* tiles,
                      const int64_t* src_off, const int64_t* dst_off, const int64_t* shape,
                      const int64_t* src_stride, const int64_t* dst_stride, int64_t elem_bytes,
                      int64_t v0, int64_t v1) noexcept nogil:
    """Blocks v0..v1-1 of copy_blocks. The tables come in as arguments (not memoryviews of
    the prange's shared state) so that their addresses stay in registers: the byte stores
    may alias anything, and the compiler reloaded each one per block.

    The destination rows of the block _COPY_AHEAD places later are prefetched for writing:
    an im2col block writes a few short rows (the stem's: 3 rows of 20 B, 784 B apart) of a
    destination far larger than the caches, too many interleaved streams for the hardware
    prefetcher (ResNet-50 batch 8, its copy_blocks calls, one thread, same process: 0.051 s
    -> 0.043 s; prefetching the source rows too gained nothing: the source box is cached)."""
    cdef int64_t v, u, c
    cdef unsigned char* pd
    for v in range(v0, v1):
        u = v + _COPY_AHEAD
        if u < v1:
            pd = base + tiles[u] * row + dst_off[u]
            for c in range(shape[4 * u + 2]):
                ipk_pf_write(pd + c * dst_stride[4 * u + 2])
        _copy_block(base + tiles[v] * row, src_off[v], dst_off[v], shape + 4 * v,
                    src_stride + 4 * v, dst_stride + 4 * v, elem_bytes)


cdef inline void _copy_block(unsigned char* tb, int64_t so, int64_t do, const int64_t* shp,
                             const int64_t* ss, const int64_t* ds,
                             int64_t elem_bytes) noexcept nogil:
    """One block of copy_blocks on the tile row at ``tb`` (checked by the caller). Rows of up
    to 64 bytes (a conv window row: 3-16 floats) are moved inline (ipk_copy.h), not by a
    library call each; 4-byte elements at a source stride of 8 bytes (a stride-2 conv's
    taps) are gathered two output elements per 16-byte load where the loads stay inside
    the row's checked bytes."""
    cdef int64_t a, b, c, d
    cdef int64_t n = shp[3], ds3 = ds[3], ss3 = ss[3], nb = shp[3] * elem_bytes
    # in locals: a store through pd may alias the tables, so each use would reload them
    cdef int64_t n0 = shp[0], n1 = shp[1], n2 = shp[2], ss0 = ss[0], ss1 = ss[1], ss2 = ss[2]
    cdef int64_t ds0 = ds[0], ds1 = ds[1], ds2 = ds[2]
    cdef bint rows = ds3 == elem_bytes and ss3 == elem_bytes
    cdef bint pairs = elem_bytes == 4 and ss3 == 8 and ds3 == 4
    cdef unsigned char* pd
    cdef const unsigned char* ps
    for a in range(n0):
        for b in range(n1):
            for c in range(n2):
                pd = tb + do + a * ds0 + b * ds1 + c * ds2
                if so < 0:
                    if ds3 == elem_bytes and nb <= 64:
                        ipk_copy_run(pd, _ZEROS, nb)
                    elif ds3 == elem_bytes:
                        memset(pd, 0, <size_t>nb)
                    else:
                        for d in range(n):
                            memset(pd + d * ds3, 0, <size_t>elem_bytes)
                    continue
                ps = tb + so + a * ss0 + b * ss1 + c * ss2
                if rows:
                    ipk_copy_run(pd, ps, nb)
                elif pairs:
                    ipk_gather_even4(pd, ps, n)
                elif elem_bytes == 4:
                    for d in range(n):
                        memcpy(pd + d * ds3, ps + d * ss3, 4)
                else:
                    _strided_elems(pd, ps, n, ds3, ss3, elem_bytes)


# ---------------------------------------------------------------- max pooling
cdef inline float _max_np(float a, float b) noexcept nogil:
    """np.maximum(a, b) bit for bit: the first NaN, else the larger, ``b`` when equal
    (so max(+0, -0) is -0, as NumPy's vector loops give). Selects without branches, so
    that a loop of them vectorises (a branch per tap on the data mispredicts)."""
    cdef float r = a if a > b else b
    r = b if b != b else r
    return a if a != a else r


def max_pool_planes(const float[:, :, ::1] x,   # IN: planes (P, H, W), tile t's at [t*npl, (t+1)*npl)
                    float[:, :, ::1] out,       # OUT: (P, Ho, Wo)
                    const int64_t[::1] used,    # IN: planes tile t holds (<= npl); the rest: zeros
                    int kh, int kw, int sh, int sw, int ph, int pw,
                    int n_threads):
    """Max pooling of every plane with -inf padding: each output starts from -inf and takes
    ``np.maximum`` with the in-bounds taps in order (i, then j). Padded taps are skipped,
    which is exact: max(acc, -inf) is acc, bit for bit. Planes a tile does not hold (its
    row's padding) are written as zeros. ``prange`` over planes, no GIL."""
    cdef Py_ssize_t P = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef Py_ssize_t Ho = out.shape[1], Wo = out.shape[2], nt = used.shape[0], npl
    cdef Py_ssize_t p, y, xo, r, lo, hi
    cdef int i, j
    cdef float* po
    cdef const float* pr
    if kh < 1 or kw < 1 or sh < 1 or sw < 1 or ph < 0 or pw < 0 or n_threads < 1:
        raise ValueError("max_pool_planes: kernel and stride must be >= 1, padding >= 0, "
                         "n_threads >= 1")
    if out.shape[0] != P or Ho != (H + 2 * ph - kh) // sh + 1 or Wo != (W + 2 * pw - kw) // sw + 1 \
            or H + 2 * ph < kh or W + 2 * pw < kw:
        raise ValueError(f"max_pool_planes: output {tuple(out.shape)} does not match input "
                         f"{tuple(x.shape)} pooled {kh}x{kw}/{sh}x{sw} pad {ph}x{pw}")
    if nt < 1 or P % nt:
        raise ValueError(f"max_pool_planes: {P} planes are not {nt} tiles' equal shares")
    npl = P // nt
    for p in range(nt):
        if used[p] < 0 or used[p] > npl:
            raise ValueError(f"max_pool_planes: tile {p} uses {used[p]} of {npl} planes")
    if P == 0 or Ho == 0 or Wo == 0:
        return
    # a row of outputs at a time, tap by tap (i, then j): every output still takes its
    # in-bounds taps in that order; the columns xo in [lo, hi) are those whose tap j lies
    # inside the row (xo * sw + j - pw in [0, W)), so the inner loop has no test. Planes
    # are dealt one by one: the held ones are usually the first tiles' (ResNet-50's max pool:
    # 512 of 1472 tiles), which a split into halves gave to one thread alone
    for p in prange(P, nogil=True, schedule="static", chunksize=1, num_threads=n_threads):
        if p % npl >= used[p // npl]:
            memset(&out[p, 0, 0], 0, <size_t>(Ho * Wo) * sizeof(float))
            continue
        for y in range(Ho):
            po = &out[p, y, 0]
            for xo in range(Wo):
                po[xo] = -INFINITY
            for i in range(kh):
                r = y * sh + i - ph
                if r < 0 or r >= H:
                    continue
                pr = &x[p, r, 0]
                for j in range(kw):
                    lo = 0 if j >= pw else (pw - j + sw - 1) // sw
                    hi = 0 if W - 1 + pw - j < 0 else (W - 1 + pw - j) // sw + 1
                    if hi > Wo:
                        hi = Wo
                    for xo in range(lo, hi):
                        po[xo] = _max_np(po[xo], pr[xo * sw + j - pw])


# ---------------------------------------------------------------- host-side network helpers
# Execute mode's host work between programs (batch-norm folding, residual add + ReLU, a
# Linear weight's transpose), threaded and without the GIL. Each gives NumPy's bits.

def fold_scale(const float[:, ::1] w,      # IN: (K, R) conv weights, row k = output channel k
               const double[::1] s,         # IN: (K,) per-channel scale
               float[:, ::1] out,           # OUT: (K, R), may be ``w``
               int n_threads):
    """out[k, j] = (float)((double)w[k, j] * s[k]): NumPy's float32 * float64 in float64,
    rounded once to float32 (``np.multiply(w, s[:, None], dtype=np.float64)`` cast to
    float32). ``prange`` over channels."""
    cdef Py_ssize_t K = w.shape[0], R = w.shape[1], k, j
    cdef double sk
    if s.shape[0] != K or out.shape[0] != K or out.shape[1] != R or n_threads < 1:
        raise ValueError(f"fold_scale: weights {tuple(w.shape)}, scale ({s.shape[0]},) and "
                         f"output {tuple(out.shape)} do not match (or n_threads < 1)")
    for k in prange(K, nogil=True, schedule="static", num_threads=n_threads):
        sk = s[k]
        for j in range(R):
            out[k, j] = <float>(<double>w[k, j] * sk)


def add_act(const float[:, :] a,           # IN: (rows, n), rows contiguous
            const float[:, :] b,            # IN: (rows, n), or None (activation of ``a`` alone)
            float[:, :] out,                # OUT: (rows, n), may be ``a`` or ``b``
            int act, int n_threads):        # IN: act 0 none, 1 ReLU, 2 ReLU6
    """out = act(a + b): the bits of ``np.add`` then ``np.maximum(v, 0)`` (ReLU) or
    ``np.clip(v, 0, 6)`` (ReLU6), NaN and signed zeros included. Each row must be
    contiguous (rows may be apart: a Resident's view of padded tile rows). ``prange`` over
    rows."""
    cdef Py_ssize_t rows = a.shape[0], n = a.shape[1], r, j
    cdef const float* pa
    cdef const float* pb
    cdef float* po
    if act < 0 or act > 2 or n_threads < 1:
        raise ValueError(f"add_act: act must be 0, 1 (ReLU) or 2 (ReLU6) and n_threads >= 1; "
                         f"got act {act}, n_threads {n_threads}")
    if (out.shape[0] != rows or out.shape[1] != n
            or (b is not None and (b.shape[0] != rows or b.shape[1] != n))):
        raise ValueError(f"add_act: operand shapes differ: {tuple(a.shape)}, "
                         f"{None if b is None else tuple(b.shape)}, output {tuple(out.shape)}")
    if rows == 0 or n == 0:
        return
    if (a.strides[1] != sizeof(float) or out.strides[1] != sizeof(float)
            or (b is not None and b.strides[1] != sizeof(float))):
        raise ValueError("add_act: every operand's rows must be contiguous")
    for r in prange(rows, nogil=True, schedule="static", num_threads=n_threads):
        pa = &a[r, 0]
        po = &out[r, 0]
        if b is None:
            if act == 1:
                for j in range(n):
                    po[j] = _relu_np(pa[j])
            elif act == 2:
                for j in range(n):
                    po[j] = _relu6_np(pa[j])
            else:
                for j in range(n):
                    po[j] = pa[j]
        else:
            pb = &b[r, 0]
            if act == 1:
                for j in range(n):
                    po[j] = _relu_np(pa[j] + pb[j])
            elif act == 2:
                for j in range(n):
                    po[j] = _relu6_np(pa[j] + pb[j])
            else:
                for j in range(n):
                    po[j] = pa[j] + pb[j]


def transpose32(const uint32_t[:, ::1] src,   # IN: (R, C) 4-byte elements
                uint32_t[:, ::1] dst,          # OUT: (C, R), not overlapping ``src``
                int n_threads):
    """dst = src.T, bit for bit, in 32x32 blocks (cache-friendly on both sides); ``prange``
    over blocks of destination rows."""
    cdef Py_ssize_t R = src.shape[0], C = src.shape[1], i0, j0, i, j, i1, j1
    cdef Py_ssize_t B = 32
    if dst.shape[0] != C or dst.shape[1] != R or n_threads < 1:
        raise ValueError(f"transpose32: source {tuple(src.shape)} and destination "
                         f"{tuple(dst.shape)} do not match (or n_threads < 1)")
    if R == 0 or C == 0:
        return
    for j0 in prange(0, C, B, nogil=True, schedule="static", num_threads=n_threads):
        j1 = j0 + B if j0 + B < C else C
        i0 = 0
        while i0 < R:
            i1 = i0 + B if i0 + B < R else R
            for j in range(j0, j1):
                for i in range(i0, i1):
                    dst[j, i] = src[i, j]
            i0 = i0 + B


def write_scaled(unsigned char[:, ::1] data,   # IN/OUT: arena, row t = tile t's memory
                 const float[::1] w,            # IN: host values, flattened (K * inner,)
                 const double[::1] s,           # IN: (K,) scale of each block of ``inner``
                 const int64_t[::1] start,      # IN: run r copies elements [start, start + count)
                 const int32_t[::1] tiles,      # IN: ... to tile tiles[r]
                 const int64_t[::1] off,        # IN: ... at byte off[r] (4-byte aligned)
                 const int64_t[::1] count,      # IN
                 int n_threads):
    """Place ``w`` scaled per block onto the tiles: element e becomes
    (float)((double)w[e] * s[e // inner]) with inner = len(w) // len(s), as
    :func:`fold_scale` computes it, written straight into the arena (a folded batch norm's
    conv weights without a host copy of the scaled weights). ``prange`` over runs."""
    cdef Py_ssize_t R = start.shape[0], r, stride = data.shape[1]
    cdef int64_t n = w.shape[0], inner, e, i, seg, k, j
    cdef float* po
    cdef double sk
    if n_threads < 1 or s.shape[0] < 1 or n % s.shape[0] or tiles.shape[0] != R \
            or off.shape[0] != R or count.shape[0] != R:
        raise ValueError(f"write_scaled: {n} values are not {s.shape[0]} equal blocks, the "
                         f"run columns differ in length, or n_threads < 1")
    inner = n // s.shape[0]
    for r in range(R):
        if (tiles[r] < 0 or tiles[r] >= data.shape[0] or start[r] < 0 or count[r] < 0
                or start[r] > n - count[r] or off[r] % 4
                or _outside(off[r], count[r], 4, stride)):
            raise ValueError(f"write_scaled: run {r} ({count[r]} values from {start[r]} to tile "
                             f"{tiles[r]} byte {off[r]}) leaves the values, the arena rows of "
                             f"{stride} B, or is not 4-byte aligned")
    if inner == 0:
        return
    for r in prange(R, nogil=True, schedule="static", num_threads=n_threads):
        po = <float*>(&data[0, 0] + tiles[r] * stride + off[r])
        e = start[r]
        i = 0
        while i < count[r]:
            k = e // inner
            seg = (k + 1) * inner - e
            if seg > count[r] - i:
                seg = count[r] - i
            sk = s[k]
            for j in range(seg):
                po[i + j] = <float>(<double>w[e + j] * sk)
            i = i + seg
            e = e + seg
