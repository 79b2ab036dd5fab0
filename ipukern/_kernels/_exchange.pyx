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

from ipukern._kernels.ipk cimport ipk_has_openmp, ipk_max_threads


def max_threads():
    """Threads OpenMP would use (1 when built without OpenMP)."""
    return ipk_max_threads()


def has_openmp():
    """True when the kernels were compiled with OpenMP."""
    return bool(ipk_has_openmp())


def copy_runs(unsigned char[:, ::1] dst,          # OUT: destination rows (tiles or host)
              const unsigned char[:, ::1] src,    # IN: source rows (may alias dst)
              const int32_t[::1] src_row,         # IN
              const int64_t[::1] src_off,         # IN
              const int32_t[::1] dst_row,         # IN
              const int64_t[::1] dst_off,         # IN
              const int64_t[::1] nbytes,          # IN
              const int64_t[::1] bounds):         # IN: thread t copies [bounds[t], bounds[t+1])
    """Copy ``nbytes[i]`` bytes from ``src[src_row[i], src_off[i]:]`` to
    ``dst[dst_row[i], dst_off[i]:]`` for every i. Inputs are validated by the caller."""
    cdef Py_ssize_t n_threads = bounds.shape[0] - 1
    cdef Py_ssize_t dst_stride = dst.shape[1]
    cdef Py_ssize_t src_stride = src.shape[1]
    cdef unsigned char* dbase
    cdef const unsigned char* sbase
    cdef Py_ssize_t i, tid
    if nbytes.shape[0] == 0 or n_threads < 1:
        return
    dbase = &dst[0, 0]
    sbase = &src[0, 0]
    if n_threads == 1:
        with nogil:
            for i in range(bounds[0], bounds[1]):
                memcpy(dbase + dst_row[i] * dst_stride + dst_off[i],
                       sbase + src_row[i] * src_stride + src_off[i], <size_t>nbytes[i])
        return
    with nogil, parallel(num_threads=n_threads):
        tid = threadid()
        for i in range(bounds[tid], bounds[tid + 1]):
            memcpy(dbase + dst_row[i] * dst_stride + dst_off[i],
                   sbase + src_row[i] * src_stride + src_off[i], <size_t>nbytes[i])


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
    dst[tile, dst_off + i*dst_stride]. Inputs are validated by the caller."""
    cdef Py_ssize_t n_threads = bounds.shape[0] - 1
    cdef Py_ssize_t stride = dst.shape[1]
    cdef unsigned char* dbase
    cdef const unsigned char* sbase
    cdef Py_ssize_t p, i, tid
    if tile.shape[0] == 0 or n_threads < 1:
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
