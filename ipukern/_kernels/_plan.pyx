# cython: language_level=3
"""The conv planner's per-candidate sizing loop in C (:func:`ipukern.conv.sizing.fewest_serial_slices`).

The NumPy version sizes every still-unfitted candidate once per serial count: ~40 array
operations per count, up to 13 counts, over a few thousand rows, which is most of a large
matmul's planning time. Here one pass over the rows tries each row's serial counts in
order and stops at the first that fits: the same int64 arithmetic, so the same bytes,
slices and smallest requirement (``tests/conv/test_sizing_kernel.py`` compares the two).
"""
import numpy as np

cimport cython
from libc.stdint cimport int64_t, uint8_t

ctypedef int64_t i64


cdef inline i64 _cdiv(i64 a, i64 b) noexcept nogil:
    # ceil(a / b) for a >= 0, b > 0 (core.cost.ceil_div)
    return (a + b - 1) // b


cdef inline i64 _al(i64 n) noexcept nogil:
    # sizing.aligned with ALIGN = 8
    return (n + 7) & -8


@cython.boundscheck(False)
@cython.wraparound(False)
def fewest_serial(tuple cols, const i64[::1] serials, tuple consts):
    """Per row, the fewest serial slices (from ``serials``) whose busiest tile fits.

    ``cols``: the int64 columns (K_t, G_t, C_t, M, B_t, OR, OC, win_b, f1, f2, f3, KH_t)
    and the uint8 columns (reduce_needed, cast_needed) of :data:`~ipukern.conv.sizing.
    SIZING_COLUMNS`, contiguous and of one length. ``consts``: (out-chan grain, kernel
    width, input itemsize, partials itemsize, bias, tile budget, temporary-bytes bound or
    -1 for none). Returns (serial, mem, K_s, w_b, out_s, chunk, out_b, smallest bytes,
    smallest's slices); the sizes are 0 where no count fits, smallest bytes -1 when no row
    was sized."""
    cdef const i64[::1] K_t = cols[0]
    cdef const i64[::1] G_t = cols[1]
    cdef const i64[::1] C_t = cols[2]
    cdef const i64[::1] M = cols[3]
    cdef const i64[::1] B_t = cols[4]
    cdef const i64[::1] OR = cols[5]
    cdef const i64[::1] OC = cols[6]
    cdef const i64[::1] win_b = cols[7]
    cdef const i64[::1] f1 = cols[8]
    cdef const i64[::1] f2 = cols[9]
    cdef const i64[::1] f3 = cols[10]
    cdef const i64[::1] KH_t = cols[11]
    cdef const uint8_t[::1] red = cols[12]
    cdef const uint8_t[::1] cast = cols[13]
    cdef i64 og = consts[0], kw = consts[1], isz = consts[2], psz = consts[3]
    cdef bint bias = consts[4]
    cdef i64 budget = consts[5], temp_bound = consts[6]
    cdef Py_ssize_t n = K_t.shape[0], ns = serials.shape[0], r, j
    serial_a = np.zeros(n, np.int64)
    out = [np.zeros(n, np.int64) for _ in range(6)]
    cdef i64[::1] serial = serial_a
    cdef i64[::1] o_mem = out[0], o_ks = out[1], o_wb = out[2], o_outs = out[3]
    cdef i64[::1] o_chunk = out[4], o_outb = out[5]
    cdef i64 best_mem = -1, best_k = 0
    cdef i64 k, kg, K_s, w_b, w_store, out_s, size, chunk, recv, mid_b, s2, s3, part_b
    cdef i64 out_b, recv_b, bias_b, mem, a_out_b
    with nogil:
        for r in range(n):
            kg = _cdiv(K_t[r], og)
            for j in range(ns):
                k = serials[j]
                if kg < k:
                    continue
                K_s = _cdiv(kg, k) * og
                if K_s > K_t[r]:
                    K_s = K_t[r]
                w_b = G_t[r] * K_s * C_t[r] * (KH_t[r] * kw) * isz
                w_store = _cdiv(k, M[r]) * w_b if k > 1 else 0
                out_s = B_t[r] * G_t[r] * K_s * OR[r] * OC[r]
                # sizing._reduction_sizes
                size = _cdiv(out_s, f1[r])
                chunk = size
                recv = (f1[r] - 1) * size
                mid_b = 0
                if f2[r] > 1:
                    s2 = _cdiv(size, f2[r])
                    s3 = _cdiv(s2, f3[r])
                    if (f2[r] - 1) * s2 > recv:
                        recv = (f2[r] - 1) * s2
                    if (f3[r] - 1) * s3 > recv:
                        recv = (f3[r] - 1) * s3
                    chunk = s3
                    mid_b = _al(size * psz) + (_al(s2 * psz) if f3[r] > 1 else 0)
                part_b = ((2 if k > 1 else 1) * out_s * psz) if (red[r] or cast[r]) else 0
                out_b = k * (chunk if red[r] else out_s) * isz
                recv_b = recv * psz if red[r] else 0
                bias_b = G_t[r] * K_t[r] * isz if bias else 0
                a_out_b = _al(out_b)
                mem = (_al(win_b[r]) + _al(w_b) + _al(w_store) + _al(part_b) + a_out_b
                       + _al(recv_b) + _al(bias_b) + _al(mid_b))
                # the first count reaching the least bytes (the NumPy loop's strict <, in order)
                if best_mem < 0 or mem < best_mem or (mem == best_mem and k < best_k):
                    best_mem = mem
                    best_k = k
                if mem <= budget and (temp_bound < 0 or mem - a_out_b <= temp_bound):
                    serial[r] = k
                    o_mem[r] = mem
                    o_ks[r] = K_s
                    o_wb[r] = w_b
                    o_outs[r] = out_s
                    o_chunk[r] = chunk
                    o_outb[r] = a_out_b
                    break
    return (serial_a, *out, best_mem, best_k)
