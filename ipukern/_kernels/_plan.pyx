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


# --------------------------------------------------------------------------- AMP vertex cycles
# ipukern.conv.estimators.amp's _amp_nx1_parts and _amp_1x1_parts, one row at a time. The
# constants come from amp.amp_kernel_constants (named and sourced there); only the
# formulas' shape is here. Worker i of a tile with ``rows`` rows of ``width`` positions
# takes positions [i*N//nw, (i+1)*N//nw) cut at row ends (estimators._common._worker_piece).

cdef inline i64 _slowest(i64 hi, i64 lo, i64 nw, i64 tag) noexcept nogil:
    # the tile waits for its slowest worker; the least loaded one pays the tag cost
    if nw * hi >= nw * lo + tag:
        return nw * hi
    return nw * lo + tag


cdef inline i64 _nx1_entry(i64 n, const i64* k) noexcept nogil:
    # k: [setup - retention, c1, c2, c3, core]
    if n >= 3:
        return k[0] + k[3] + k[4] * (n - 3)
    if n == 2:
        return k[0] + k[2]
    return k[0] + k[1]


cdef inline i64 _nx1_pass(i64 rows, i64 width, i64 nw, i64 start, i64 tag,
                          const i64* ek) noexcept nogil:
    cdef i64 total = rows * width, i, begin, end, end_m1, row_b, row_l, first, n_full, last
    cdef i64 w, hi = 0, lo = 0
    for i in range(nw):
        begin = i * total // nw
        end = (i + 1) * total // nw
        w = start
        if end > begin:
            end_m1 = end - 1
            row_b = begin // width
            row_l = end_m1 // width
            if row_b == row_l:
                first, n_full, last = end - begin, 0, 0
            else:
                first = width - begin % width
                n_full = row_l - row_b - 1
                if n_full < 0:
                    n_full = 0
                last = end_m1 % width + 1
            if first > 0:
                w = w + _nx1_entry(first, ek)
            w = w + n_full * _nx1_entry(width, ek)
            if last > 0:
                w = w + _nx1_entry(last, ek)
        if i == 0 or w > hi:
            hi = w
        if i == 0 or w < lo:
            lo = w
    return _slowest(hi, lo, nw, tag)


cdef inline i64 _x1_worker(i64 n, bint zeroing, const i64* k) noexcept nogil:
    # k: [half common path, c0, c1, c2, c3, zeroing fixed, zeroing per position,
    #     retention, core]
    cdef i64 z = 1 if zeroing else 0, body
    if n <= 0:
        return 0
    if k[0]:
        if n >= 3:
            body = k[4] - z + k[8] * (n - 3)
        elif n == 2:
            body = k[3] - z
        else:
            body = k[2] - z
    else:
        if n >= 3:
            body = k[4] + (k[5] + k[6] * n) * z + k[8] * (n - 3)
        elif n == 2:
            body = k[3] + (k[5] + 2 * k[6]) * z
        else:
            body = k[2] + (k[5] + k[6]) * z
    return body - k[7]


cdef inline i64 _x1_inner(i64 positions, bint zeroing, i64 nw, i64 tag,
                          const i64* k) noexcept nogil:
    cdef i64 i, w, hi = 0, lo = 0
    for i in range(nw):
        w = _x1_worker((i + 1) * positions // nw - i * positions // nw, zeroing, k)
        if i == 0 or w > hi:
            hi = w
        if i == 0 or w < lo:
            lo = w
    return _slowest(hi, lo, nw, tag)


cdef i64[::1] _consts(object values):
    return np.ascontiguousarray(np.array(values, dtype=np.int64))


@cython.boundscheck(False)
@cython.wraparound(False)
def amp_cycles(tuple dims, tuple nx1, tuple x1):
    """Per row, the AMP vertex total of :func:`~ipukern.conv.estimators.conv_vertex_cycles_array`
    (nx1, or 1x1 where the row is eligible and ``x1`` is not empty). ``dims``: the raw tile
    sizes (groups, in_chans, out_chans, batch, out_h, out_w, kernel_h, kernel_w) as
    contiguous int64 columns of one length; ``nx1`` and ``x1``: the constants of
    :func:`~ipukern.conv.estimators.amp.amp_kernel_constants`."""
    cdef const i64[::1] G = dims[0]
    cdef const i64[::1] C = dims[1]
    cdef const i64[::1] K = dims[2]
    cdef const i64[::1] B = dims[3]
    cdef const i64[::1] H = dims[4]
    cdef const i64[::1] W = dims[5]
    cdef const i64[::1] KH = dims[6]
    cdef const i64[::1] KW = dims[7]
    cdef i64[::1] a = _consts(nx1)
    cdef bint has_x1 = len(x1) > 0
    cdef i64[::1] b = _consts(x1 if has_x1 else (0,) * 32)
    cdef Py_ssize_t n = G.shape[0], r
    out_a = np.empty(n, np.int64)
    cdef i64[::1] out = out_a
    cdef i64 nw = a[0], f = a[1], cgpg = a[2], icpg = a[3], ocpg = a[4]
    cdef i64 g, ci, co, pos, n_cg, n_ig, n_og, k_outer, per_pass, kernel_loop, total, zero
    cdef i64 per_worker, iz, ia, c
    with nogil:
        for r in range(n):
            g, ci, co = G[r], C[r], K[r]
            if f > 1:      # combineConvGroups (estimators._common._vertex_dims)
                g = _cdiv(g, f)
                ci = ci * f
                co = co * f
            n_cg = _cdiv(g, cgpg)
            n_ig = _cdiv(ci, icpg)
            n_og = _cdiv(co, ocpg)
            pos = B[r] * H[r] * W[r]
            if has_x1 and KH[r] * KW[r] == 1 and B[r] == 1 and H[r] == 1:
                # b: [nw, tag, worker consts x9, sup, ret0, ret1, cg, c, ig, og, pass, wl,
                #     inner passes, zig, zpass]
                iz = _x1_inner(pos, True, nw, b[1], &b[2])
                ia = _x1_inner(pos, False, nw, b[1], &b[2])
                c = b[15]
                out[r] = (b[11] + nw * (b[12] + b[13] * (n_ig * n_cg - 1))
                          + n_cg * (b[14] + c
                                    + (n_ig - 1) * (b[16] - c + n_og * (
                                        b[17] + b[20] * (b[18] + b[19] + ia)))
                                    + b[21] + n_og * (b[17] - c + b[20] * (b[22] + b[19] + iz))))
                continue
            # a: [nw, f, cgpg, icpg, ocpg, start, tag, entry consts x5, height, passes,
            #     per_load, outer, inner, sup const, zero loop, stall, cg, ig, og,
            #     zero vector elems, zero overhead]
            per_pass = _nx1_pass(B[r] * H[r], W[r], nw, a[5], a[6], &a[7])
            k_outer = _cdiv(KH[r], a[12])
            kernel_loop = (k_outer * (a[15] + KW[r] * (a[16] + a[13] * a[14]))
                           + k_outer * KW[r] * a[13] * per_pass)
            total = (a[17] + n_cg * (a[18] * n_og + a[19] * (n_og - 1) + 1)
                     + a[19] * (n_cg - 1) + 1
                     + n_cg * (a[20] + n_ig * (a[21] + n_og * (a[22] + kernel_loop))))
            per_worker = _cdiv(pos * ocpg, nw)
            zero = (_cdiv(per_worker, a[23]) + a[24]) * nw * (n_og * n_cg)
            out[r] = total + zero
    return out_a


# --------------------------------------------------------------------------- split vectors
cdef inline Py_ssize_t _count_le(const i64[::1] s, i64 x) noexcept nogil:
    # entries of the ascending ``s`` that are <= x (numpy.searchsorted side="right")
    cdef Py_ssize_t lo = 0, hi = s.shape[0], mid
    while lo < hi:
        mid = (lo + hi) // 2
        if s[mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cython.boundscheck(False)
@cython.wraparound(False)
def field_pairs(const i64[::1] n, const i64[::1] sorted_n, const i64[::1] cn, i64 T):
    """:func:`ipukern.conv.search._field_pairs` by enumeration: the (field, channel) index
    pairs with ``n[f] * cn[c] <= T`` and ``2 * n[f] * cn[c]`` above the most tiles any such
    pair uses, field-major then channel (the NumPy version's order), as two int64 arrays;
    None when no pair fits. ``sorted_n``: ``n`` ascending (the most tiles and the pair
    count come from bisecting it per channel, as the NumPy version does)."""
    cdef Py_ssize_t nf = n.shape[0], nc = cn.shape[0], f, c, k = 0, hi, lo
    cdef i64 u_max = 0, u
    with nogil:
        for c in range(nc):
            hi = _count_le(sorted_n, T // cn[c])
            if hi > 0 and sorted_n[hi - 1] * cn[c] > u_max:
                u_max = sorted_n[hi - 1] * cn[c]
        if u_max > 0:
            for c in range(nc):
                hi = _count_le(sorted_n, T // cn[c])
                lo = _count_le(sorted_n, u_max // (2 * cn[c]))
                if hi > lo:
                    k += hi - lo
    if u_max == 0:
        return None
    fi_a = np.empty(k, np.int64)
    chi_a = np.empty(k, np.int64)
    cdef i64[::1] fi = fi_a, chi = chi_a
    k = 0
    with nogil:
        for f in range(nf):
            for c in range(nc):
                u = n[f] * cn[c]
                if u <= T and 2 * u > u_max:
                    fi[k] = f
                    chi[k] = c
                    k += 1
    return fi_a, chi_a


@cython.boundscheck(False)
@cython.wraparound(False)
def lower_bound_keep(tuple cols, i64 kernel_w, double rate, tuple red, double slack):
    """The rows :func:`ipukern.conv.search._lower_bound_prune` keeps (ascending int64
    indices): the busiest tile's useful MACs over ``rate``, plus, when ``red`` is
    (partials itemsize, 2 x exchange bytes per cycle, sync cycles, bound), a reduction's
    least first stage on rows with in-chan x kernel splits; kept when at most the bound,
    or without one (``red`` empty) at most ``slack`` x the least. ``cols``: contiguous
    int64 (G_t, C_t, K_t, B_t, OR, OC, KH_t, is_, kr). The same float64 operations in
    the same order as the NumPy version."""
    cdef const i64[::1] G = cols[0]
    cdef const i64[::1] C = cols[1]
    cdef const i64[::1] K = cols[2]
    cdef const i64[::1] B = cols[3]
    cdef const i64[::1] OR = cols[4]
    cdef const i64[::1] OC = cols[5]
    cdef const i64[::1] KH = cols[6]
    cdef const i64[::1] IS = cols[7]
    cdef const i64[::1] KR = cols[8]
    cdef Py_ssize_t n = G.shape[0], r, k = 0
    cdef bint has_bound = len(red) > 0
    cdef i64 psz = red[0] if has_bound else 0
    cdef double denom = red[1] if has_bound else 1.0
    cdef double sync = red[2] if has_bound else 0.0
    cdef double cut = red[3] if has_bound else 0.0
    lb_a = np.empty(n, np.float64)
    keep_a = np.empty(n, np.int64)
    cdef double[::1] lb = lb_a
    cdef i64[::1] keep = keep_a
    cdef double lo = 0.0
    with nogil:
        for r in range(n):
            lb[r] = <double>(G[r] * C[r] * K[r] * B[r] * OR[r] * OC[r] * (KH[r] * kernel_w)) / rate
            if has_bound and IS[r] * KR[r] > 1:
                lb[r] = lb[r] + (<double>(G[r] * K[r] * B[r] * OR[r] * OC[r] * psz) / denom + sync)
            if r == 0 or lb[r] < lo:
                lo = lb[r]
        if not has_bound:
            cut = slack * lo
        for r in range(n):
            if lb[r] <= cut:
                keep[k] = r
                k += 1
    return keep_a[:k]


@cython.boundscheck(True)
@cython.wraparound(False)
def gather_pairs(const i64[::1] fi, const i64[::1] chi, tuple field_cols, tuple chan_cols):
    """``[col[fi] for col in field_cols] + [col[chi] for col in chan_cols]`` (contiguous
    int64 columns) in one pass: the split-vector table of the field x channel pairs."""
    cdef Py_ssize_t n = fi.shape[0], r, j, nfc = len(field_cols), ncc = len(chan_cols)
    out = [np.empty(n, np.int64) for _ in range(nfc + ncc)]
    cdef i64[::1] dst
    cdef const i64[::1] src
    for j in range(nfc + ncc):
        dst = out[j]
        if j < nfc:
            src = field_cols[j]
            for r in range(n):
                dst[r] = src[fi[r]]
        else:
            src = chan_cols[j - nfc]
            for r in range(n):
                dst[r] = src[chi[r]]
    return out


@cython.boundscheck(False)
@cython.wraparound(False)
def beat_fixed(tuple cols, tuple consts):
    """The part of :func:`ipukern.conv.search._beat_prune`'s bound every slice count pays:
    the exchange of the busiest receiver's inputs (``search._input_receive``) and, when
    weights move, the tile's weights (``core.cost.exchange_cycles`` with its overhead),
    plus one slice's supersteps (``search._syncs``), per row as int64. ``cols``: int64
    (KH_t, G_t, K_t, C_t, M, hs, ws, WR, WC, B_t, win_b, os_, later_b, R, f2, f3), then
    uint8 (reduce_needed, cast_needed); ``consts``: (kernel width, itemsize, in_h, in_w,
    input owners, tiles per bus, exchange scale, rate, overhead, sync cycles, bias).
    None when a row leaves the exact int64 range of the NumPy code (it then runs)."""
    cdef const i64[::1] KH = cols[0]
    cdef const i64[::1] G = cols[1]
    cdef const i64[::1] K = cols[2]
    cdef const i64[::1] C = cols[3]
    cdef const i64[::1] M = cols[4]
    cdef const i64[::1] hs = cols[5]
    cdef const i64[::1] ws = cols[6]
    cdef const i64[::1] WR = cols[7]
    cdef const i64[::1] WC = cols[8]
    cdef const i64[::1] B = cols[9]
    cdef const i64[::1] win_b = cols[10]
    cdef const i64[::1] os_ = cols[11]
    cdef const i64[::1] later_b = cols[12]
    cdef const i64[::1] R = cols[13]
    cdef const i64[::1] f2 = cols[14]
    cdef const i64[::1] f3 = cols[15]
    cdef const uint8_t[::1] red = cols[16]
    cdef const uint8_t[::1] cast = cols[17]
    cdef i64 kw = consts[0], isz = consts[1], in_h = consts[2], in_w = consts[3]
    cdef i64 owners = consts[4], bus = consts[5], scale = consts[6], rate = consts[7]
    cdef i64 overhead = consts[8], sync = consts[9]
    cdef bint bias = consts[10]
    cdef i64 limit = (<i64>1 << 62) // scale
    cdef Py_ssize_t n = G.shape[0], r
    out_a = np.empty(n, np.int64)
    cdef i64[::1] out = out_a
    cdef i64 w_eff, cr, cc, recv, nb, ex, stages
    cdef bint bad = False
    with nogil:
        for r in range(n):
            w_eff = G[r] * K[r] * C[r] * (KH[r] * kw) * isz if M[r] > 1 else 0
            cr = _cdiv(in_h, hs[r])
            if cr > WR[r]:
                cr = WR[r]
            cc = _cdiv(in_w, ws[r])
            if cc > WC[r]:
                cc = WC[r]
            recv = win_b[r] - ((B[r] * cr * G[r] * C[r] * cc * isz) // os_[r]
                               if os_[r] <= owners else 0)
            if later_b[r] > recv:
                recv = later_b[r]
            if recv < 0:
                bad = True       # floor and C division differ below 0
                break
            if bus > 1 and os_[r] % bus == 0:
                recv = recv // 2
            nb = recv + w_eff
            if nb > limit:
                bad = True
                break
            ex = _cdiv(nb * scale, rate) + overhead if nb > 0 else 0
            stages = (R[r] > 1) + (f2[r] > 1) + (f3[r] > 1)
            if stages < 1:
                stages = 1
            out[r] = ex + (1 + stages + (1 if (red[r] or cast[r] or bias) else 0)) * sync
    return None if bad else out_a
