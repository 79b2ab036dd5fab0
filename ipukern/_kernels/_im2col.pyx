"""The blocks of the expandDims copy vertex (the im2col of :mod:`ipukern.conv.expand_build`),
built in two passes over (segment, tap) instead of NumPy temporaries of every pair.

A ResNet-50 stem at batch 8 has 20,608 owned segments x 49 taps: a million blocks, whose
NumPy build (about 30 full-length temporaries, then a stable sort by tile) was the largest
part of building that conv's program. :func:`im2col_blocks` emits the same blocks in the
same order: by tile (segments in ``order``), then kind (copy, padding row, left padding,
right padding), then segment and tap.

Inputs are validated by the Python layer (``ipukern.conv.expand_build``); every divisor is
positive.
"""
cimport cython
import numpy as np

from libc.stdint cimport int64_t

#: the per-segment columns of ``seg``, in this order
SEG_COLUMNS = ("tile", "row", "cl", "n_planes", "plane_bytes", "off", "col", "width",
               "base", "img_rows", "r0", "ch", "gch", "rc", "c0")
#: the scalars of ``par``, in this order
PARAMS = ("kk", "kw_e", "wexp", "sh", "sw", "ph", "pw", "dh", "dw", "in_h", "in_w", "step",
          "isz")


@cython.cdivision(True)
cdef inline int64_t _fdiv(int64_t a, int64_t b) noexcept nogil:
    """Python's ``a // b`` for ``b > 0``."""
    cdef int64_t q = a // b
    if a % b != 0 and a < 0:
        q -= 1
    return q


cdef inline int64_t _clip(int64_t a, int64_t lo, int64_t hi) noexcept nogil:
    """NumPy's ``clip``: ``min(max(a, lo), hi)``."""
    if a < lo:
        a = lo
    if a > hi:
        a = hi
    return a


cdef struct Tap:
    int64_t ncs, dst0, x0, width, xv0, xv1, src, valid


@cython.cdivision(True)
cdef inline void _tap(const int64_t[:, ::1] seg, const int64_t* q, Py_ssize_t s,
                      int64_t tap, Tap* o) noexcept nogil:
    """Block geometry of segment ``s`` at kernel tap ``tap`` (the NumPy build's formulas)."""
    cdef int64_t kk = q[0], kw_e = q[1], i = tap // kw_e, j = tap % kw_e
    cdef int64_t cl = seg[s, 2], r, c_first, src_col, col
    c_first = -_fdiv(-(cl - tap), kk)
    o.ncs = _fdiv(cl + seg[s, 3] - 1 - tap, kk) - c_first + 1
    o.dst0 = seg[s, 5] + (c_first * kk + tap - cl) * seg[s, 4]
    o.x0, o.width = seg[s, 6], seg[s, 7]
    r = seg[s, 1] * q[3] - q[5] + i * q[7]
    o.valid = r >= 0 and r < q[9] and o.ncs > 0
    if q[2]:
        o.xv0 = _clip(-_fdiv(-(q[6] - j * q[8]), q[4]), o.x0, o.x0 + o.width)
        o.xv1 = _clip(_fdiv(q[10] - 1 + q[6] - j * q[8], q[4]) + 1, o.xv0, o.x0 + o.width)
        src_col = o.xv0 * q[4] - q[6] + j * q[8]
    else:
        o.xv0, o.xv1, src_col = o.x0, o.x0 + o.width, o.x0
    col = ((seg[s, 9] + _fdiv(r - seg[s, 10], q[11])) * seg[s, 11] + seg[s, 12] + c_first)
    o.src = seg[s, 8] + (col * seg[s, 13] + src_col - seg[s, 14]) * q[12]


cdef inline int _kinds(Tap* o, int64_t isz, int64_t* w, int64_t* dst) noexcept nogil:
    """Which blocks the tap emits (bit k: kind k), their widths and destinations."""
    cdef int got = 0
    if o.valid and o.xv1 > o.xv0:                       # the copy
        got |= 1
        w[0], dst[0] = o.xv1 - o.xv0, o.dst0 + (o.xv0 - o.x0) * isz
    if not o.valid and o.ncs > 0:                       # zeros: the tap's row is padding
        got |= 2
        w[1], dst[1] = o.width, o.dst0
    if o.valid and o.xv0 > o.x0:                        # zeros left of the valid columns
        got |= 4
        w[2], dst[2] = o.xv0 - o.x0, o.dst0
    if o.valid and o.x0 + o.width > o.xv1:              # zeros right of them
        got |= 8
        w[3], dst[3] = o.x0 + o.width - o.xv1, o.dst0 + (o.xv1 - o.x0) * isz
    return got


@cython.boundscheck(False)
@cython.wraparound(False)
def im2col_blocks(const int64_t[:, ::1] seg, const int64_t[::1] par, const int64_t[::1] order):
    """The blocks as columns ``(tile, src, dst, shape, src_stride, dst_stride, reach,
    s_reach)``: ``seg`` holds :data:`SEG_COLUMNS` per segment, ``par`` :data:`PARAMS`,
    ``order`` the segments by tile (stable)."""
    cdef const int64_t* q = &par[0]
    cdef int64_t kk = q[0], isz = q[12], colstep = (q[4] if q[2] else 1) * isz
    cdef Py_ssize_t n_seg = order.shape[0], a, b, m, s, k, c
    cdef int64_t tap, total = 0, ss, ds
    cdef int64_t w[4]
    cdef int64_t dst[4]
    cdef int64_t pos[4]
    cdef int got
    cdef Tap o
    for k in range(4):
        w[k], dst[k], pos[k] = 0, 0, 0
    counts_arr = np.zeros((n_seg + 1, 4), np.int64)     # per tile group, per kind
    cdef int64_t[:, ::1] counts = counts_arr
    with nogil:
        a = 0
        while a < n_seg:                                # pass 1: blocks per group and kind
            b = a
            while b < n_seg and seg[order[b], 0] == seg[order[a], 0]:
                for tap in range(kk):
                    _tap(seg, q, order[b], tap, &o)
                    got = _kinds(&o, isz, w, dst)
                    for k in range(4):
                        if got & (1 << k):
                            counts[a, k] += 1
                b += 1
            for k in range(4):
                total += counts[a, k]
            a = b
    out = [np.empty(total, np.int64) for _ in range(5)]
    cdef int64_t[::1] tile = out[0], src = out[1], dstc = out[2], reach = out[3], s_reach = out[4]
    shape_arr, sst_arr, dst_arr = (np.zeros((total, 4), np.int64) for _ in range(3))
    cdef int64_t[:, ::1] shape = shape_arr, sst = sst_arr, dstr = dst_arr
    with nogil:
        a, c = 0, 0
        while a < n_seg:                                # pass 2: fill, each kind at its cursor
            for k in range(4):
                pos[k] = c
                c += counts[a, k]
            b = a
            while b < n_seg and seg[order[b], 0] == seg[order[a], 0]:
                s = order[b]
                ss, ds = seg[s, 13] * isz, kk * seg[s, 4]
                for tap in range(kk):
                    _tap(seg, q, s, tap, &o)
                    got = _kinds(&o, isz, w, dst)
                    for k in range(4):
                        if not got & (1 << k):
                            continue
                        m = pos[k]
                        pos[k] += 1
                        tile[m] = seg[s, 0]
                        src[m] = o.src if k == 0 else -1
                        dstc[m] = dst[k]
                        shape[m, 0], shape[m, 1], shape[m, 2], shape[m, 3] = 1, 1, o.ncs, w[k]
                        sst[m, 2], dstr[m, 2], dstr[m, 3] = ss, ds, isz
                        sst[m, 3] = colstep if src[m] >= 0 else 0
                        reach[m] = isz + (o.ncs - 1) * ds + (w[k] - 1) * isz
                        s_reach[m] = (isz + (o.ncs - 1) * ss + (w[k] - 1) * sst[m, 3]
                                      if src[m] >= 0 else 0)
                b += 1
            a = b
    return out[0], out[1], out[2], shape_arr, sst_arr, dst_arr, out[3], out[4]
