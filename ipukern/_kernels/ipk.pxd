# Shared C declarations for the ipukern kernels.
from libc.stdint cimport uint16_t

cdef extern from "ipk_half.h":
    float ipk_h2f(uint16_t h) noexcept nogil
    uint16_t ipk_f2h(float f) noexcept nogil

cdef extern from "ipk_omp.h":
    int ipk_max_threads() noexcept nogil
    int ipk_has_openmp() noexcept nogil
