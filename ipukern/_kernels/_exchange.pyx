"""Byte copies between tile memories (and between host buffers and tiles).

One call executes a whole exchange table without the GIL. Copies are pre-sorted and
split into per-thread ranges of equal byte counts by the caller (``bounds``), so the
work is balanced and the order of copies within a thread is fixed. The caller has
already rejected overlapping destinations and destinations that overlap sources, so the
copies are independent and the result does not depend on the thread count.
"""
from cython.parallel cimport parallel, threadid
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from ipukern._kernels.ipk cimport ipk_copy_table, ipk_has_openmp, ipk_max_threads


def max_threads():
    """Threads OpenMP would use (1 when built without OpenMP)."""
    return ipk_max_threads()


def has_openmp():
    """True when the kernels were compiled with OpenMP."""
    return bool(ipk_has_openmp())


cdef inline bint _outside(int64_t off, int64_t nb, int64_t row) noexcept nogil:
    """[off, off + nb) not inside [0, row) (written so that nothing can wrap around)."""
    return off < 0 or nb < 0 or nb > row or off > row - nb


cdef inline bint _strided_outside(int64_t off, int64_t step, int64_t nb, int64_t count,
                                  int64_t row) noexcept nogil:
    """Some of ``count`` (>= 1) runs [off + i*step, + nb) not inside [0, row)."""
    if step < 0 or _outside(off, nb, row):
        return True
    return step > 0 and count - 1 > (row - nb - off) // step


cdef Py_ssize_t _bad_run(Py_ssize_t n, Py_ssize_t dst_rows, Py_ssize_t dst_stride,
                         Py_ssize_t src_rows, Py_ssize_t src_stride, const int32_t* src_row,
                         const int64_t* src_off, const int32_t* dst_row, const int64_t* dst_off,
                         const int64_t* nbytes) noexcept nogil:
    """Index of the first copy outside its source or destination rows, or -1."""
    cdef Py_ssize_t i
    for i in range(n):
        if (src_row[i] < 0 or src_row[i] >= src_rows or dst_row[i] < 0 or dst_row[i] >= dst_rows
                or _outside(src_off[i], nbytes[i], src_stride)
                or _outside(dst_off[i], nbytes[i], dst_stride)):
            return i
    return -1


cdef int _check_bounds(const int64_t[::1] bounds, Py_ssize_t n) except -1:
    """Thread ranges: at least one, non-decreasing, inside [0, n]."""
    cdef Py_ssize_t t
    if bounds.shape[0] < 2 or bounds[0] < 0 or bounds[bounds.shape[0] - 1] > n:
        raise ValueError(f"bounds must be at least 2 non-decreasing values in [0, {n}]")
    for t in range(bounds.shape[0] - 1):
        if bounds[t + 1] < bounds[t]:
            raise ValueError(f"bounds must be non-decreasing (bounds[{t + 1}] < bounds[{t}])")
    return 0


def copy_runs(unsigned char[:, ::1] dst,          # OUT: destination rows (tiles or host)
              const unsigned char[:, ::1] src,    # IN: source rows (may alias dst)
              const int32_t[::1] src_row,         # IN
              const int64_t[::1] src_off,         # IN
              const int32_t[::1] dst_row,         # IN
              const int64_t[::1] dst_off,         # IN
              const int64_t[::1] nbytes,          # IN
              const int64_t[::1] bounds,          # IN: thread t copies [bounds[t], bounds[t+1])
              bint check=True,                    # IN: False: caller proved every copy in range
              bint stream=False):                 # IN: long runs with non-temporal stores
    """Copy ``nbytes[i]`` bytes from ``src[src_row[i], src_off[i]:]`` to
    ``dst[dst_row[i], dst_off[i]:]`` for every i.

    The caller validates the table (overlaps, the simulated tile size); checked here, before
    anything is copied, is only what would corrupt the host: array lengths, thread ranges
    and, unless ``check`` is False, that every copy lies inside the rows of ``src`` and
    ``dst`` (ValueError otherwise). ``ipukern.core.program.Exchange`` passes False: it
    validated its table when built and compares its extent with ``dst`` before each run,
    which saves a pass over many small copies (about 3 ns each). ``stream``: runs of 1 KiB
    or more bypass the caches (for tables writing far more than the last-level cache
    holds; same bytes).
    """
    cdef Py_ssize_t n = nbytes.shape[0]
    cdef Py_ssize_t n_threads = bounds.shape[0] - 1
    cdef Py_ssize_t dst_stride = dst.shape[1]
    cdef Py_ssize_t src_stride = src.shape[1]
    cdef unsigned char* dbase
    cdef const unsigned char* sbase
    cdef Py_ssize_t tid, bad
    if src_row.shape[0] != n or src_off.shape[0] != n or dst_row.shape[0] != n or dst_off.shape[0] != n:
        raise ValueError("copy table columns differ in length")
    _check_bounds(bounds, n)
    if n == 0:
        return
    bad = -1
    with nogil:
        if check:
            bad = _bad_run(n, dst.shape[0], dst_stride, src.shape[0], src_stride, &src_row[0],
                           &src_off[0], &dst_row[0], &dst_off[0], &nbytes[0])
    if bad >= 0:
        raise ValueError(f"copy {bad} ({nbytes[bad]} B from row {src_row[bad]} offset {src_off[bad]} "
                         f"to row {dst_row[bad]} offset {dst_off[bad]}) lies outside the arrays "
                         f"({src.shape[0]} x {src_stride} B -> {dst.shape[0]} x {dst_stride} B)")
    dbase = &dst[0, 0]
    sbase = &src[0, 0]
    # ipk_copy.h: short runs inline, the copies ahead prefetched
    if n_threads == 1:
        with nogil:
            ipk_copy_table(dbase, dst_stride, sbase, src_stride, &src_row[0], &src_off[0],
                           &dst_row[0], &dst_off[0], &nbytes[0], bounds[0], bounds[1], stream)
        return
    with nogil, parallel(num_threads=n_threads):
        tid = threadid()
        ipk_copy_table(dbase, dst_stride, sbase, src_stride, &src_row[0], &src_off[0],
                       &dst_row[0], &dst_off[0], &nbytes[0], bounds[tid], bounds[tid + 1], stream)


def copy_strided(unsigned char[:, ::1] dst,          # OUT: tile rows
                 const unsigned char[::1] src,       # IN: host bytes
                 const int32_t[::1] tile,            # IN
                 const int64_t[::1] dst_off,         # IN
                 const int64_t[::1] dst_stride,      # IN
                 const int64_t[::1] src_off,         # IN
                 const int64_t[::1] src_stride,      # IN
                 const int64_t[::1] run_bytes,       # IN
                 const int64_t[::1] n_runs,          # IN
                 const int64_t[::1] bounds):         # IN: thread t does [bounds[t], bounds[t+1])
    """Piece p copies n_runs[p] runs of run_bytes[p] from src[src_off + i*src_stride] to
    dst[tile, dst_off + i*dst_stride]. As in :func:`copy_runs`, only what would corrupt the
    host is checked here (ValueError): lengths, thread ranges, every run inside the arrays."""
    cdef Py_ssize_t n = tile.shape[0]
    cdef Py_ssize_t n_threads = bounds.shape[0] - 1
    cdef Py_ssize_t stride = dst.shape[1]
    cdef unsigned char* dbase
    cdef const unsigned char* sbase
    cdef Py_ssize_t p, i, tid
    if (dst_off.shape[0] != n or dst_stride.shape[0] != n or src_off.shape[0] != n
            or src_stride.shape[0] != n or run_bytes.shape[0] != n or n_runs.shape[0] != n):
        raise ValueError("piece table columns differ in length")
    _check_bounds(bounds, n)
    for p in range(n):
        if n_runs[p] < 0 or tile[p] < 0 or tile[p] >= dst.shape[0] or (n_runs[p] > 0 and (
                _strided_outside(dst_off[p], dst_stride[p], run_bytes[p], n_runs[p], stride)
                or _strided_outside(src_off[p], src_stride[p], run_bytes[p], n_runs[p], src.shape[0]))):
            raise ValueError(f"piece {p} lies outside the arrays")
    if n == 0:
        return
    dbase = &dst[0, 0]
    sbase = &src[0]
    with nogil, parallel(num_threads=n_threads):
        tid = threadid()
        for p in range(bounds[tid], bounds[tid + 1]):
            for i in range(n_runs[p]):
                memcpy(dbase + tile[p] * stride + dst_off[p] + i * dst_stride[p],
                       sbase + src_off[p] + i * src_stride[p], <size_t>run_bytes[p])


def memcpy_baseline(unsigned char[::1] dst, const unsigned char[::1] src):
    """One contiguous memcpy (the benchmark's baseline for exchange throughput)."""
    cdef size_t n = <size_t>src.shape[0]
    if n == 0:
        return
    with nogil:
        memcpy(&dst[0], &src[0], n)
