"""Built-in vertices: element-wise ops, fills, partial-sum reduction and bias adds.

Every function runs a whole batch of vertices (one per tile, or several) in one call,
``prange`` over vertices, without the GIL. Operands are byte offsets within the vertex's
own tile, so ``base + tile * stride + offset`` is the only address form used: a vertex
cannot reach another tile. fp16 data is computed in fp32 and rounded once on store.
Inputs are validated by ipukern.core.vertices.
"""
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint16_t
from libc.string cimport memcpy, memset

from ipukern._kernels.ipk cimport IPK_F16, IPK_F32, ipk_dt_size, ipk_f2h, ipk_h2f

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


def sum_rows(unsigned char[:, ::1] data,    # IN/OUT: arena
             const int32_t[::1] tiles,       # IN: tile of vertex v
             const int64_t[::1] out_off,     # IN: byte offset of the output
             const int64_t[::1] src_ptr,     # IN: (V + 1,) vertex v sums src_off[src_ptr[v]:src_ptr[v+1]]
             const int64_t[::1] src_off,     # IN: byte offsets of the source vectors
             const int64_t[::1] n,           # IN: elements per vector of vertex v
             int in_dt, int out_dt, int n_threads):   # IN
    """out = sum_k src_k (k = src_ptr[v] .. src_ptr[v+1]-1, in that fixed order).

    Accumulates in fp32 and rounds once to the output dtype, so the result does not depend
    on threads. ``out`` may alias the first source (in-place accumulation).
    """
    cdef Py_ssize_t v, i, k, k0, k1, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef unsigned char* tb
    cdef unsigned char* po
    cdef const float* fs
    cdef float* fo
    cdef float acc
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        tb = base + tiles[v] * stride
        po = tb + out_off[v]
        k0 = src_ptr[v]
        k1 = src_ptr[v + 1]
        if in_dt == IPK_F32 and out_dt == IPK_F32:
            # k-outer loop over contiguous rows vectorises; the order of additions per
            # element is still k0, k0+1, ... (fp32 round per step, as the real vertex)
            fo = <float*>po
            if tb + src_off[k0] != po:
                memcpy(po, tb + src_off[k0], <size_t>(n[v] * 4))
            for k in range(k0 + 1, k1):
                fs = <const float*>(tb + src_off[k])
                for i in range(n[v]):
                    fo[i] = fo[i] + fs[i]
        else:
            for i in range(n[v]):
                acc = 0.0
                for k in range(k0, k1):
                    acc = acc + _ld(tb + src_off[k], i, in_dt)
                _st(po, i, acc, out_dt)


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
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        pi = base + tiles[v] * stride + in_off[v]
        acc = 0.0
        for i in range(n[v]):
            acc = acc + _ld(pi, i, in_dt)
        _st(base + tiles[v] * stride + out_off[v], 0, acc, out_dt)


def add_bias(unsigned char[:, ::1] data,    # IN/OUT: arena
             const int32_t[::1] tiles,       # IN: tile of vertex v
             const int64_t[::1] out_off,     # IN: byte offset of the output run
             const int64_t[::1] bias_off,    # IN: byte offset of the bias vector
             const int64_t[:, ::1] params,   # IN: (V, 7), see below
             int dt, int n_threads):         # IN
    """Add a per-channel bias to a run of a tile's [B][G][K_j][OR][OC] output block.

    params[v] = (e0, n, inner, K_j, G, K, ks0): the run is block elements [e0, e0 + n);
    element e belongs to block channel c = (e // inner) % (G * K_j), i.e. group
    g = c // K_j and slice channel k = c % K_j, whose bias is bias[g * K + ks0 + k].
    """
    cdef Py_ssize_t v, i, e, c, stride = data.shape[1]
    cdef unsigned char* base = &data[0, 0]
    cdef unsigned char* po
    cdef const unsigned char* pb
    cdef int64_t e0, n, inner, kj, gk, K, ks0
    for v in prange(tiles.shape[0], nogil=True, schedule="static", num_threads=n_threads):
        po = base + tiles[v] * stride + out_off[v]
        pb = base + tiles[v] * stride + bias_off[v]
        e0 = params[v, 0]
        n = params[v, 1]
        inner = params[v, 2]
        kj = params[v, 3]
        gk = params[v, 4] * kj
        K = params[v, 5]
        ks0 = params[v, 6]
        for i in range(n):
            e = e0 + i
            c = (e // inner) % gk
            _st(po, i, _ld(po, i, dt) + _ld(pb, (c // kj) * K + ks0 + c % kj, dt), dt)
