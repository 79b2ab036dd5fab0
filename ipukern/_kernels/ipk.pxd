# The one declaration file for the C side of the kernels: every .pyx cimports from here
# (OpenMP only through the ipk_omp.h shim, dtype codes from ipk_dtype.h).
from libc.stdint cimport int32_t, int64_t, uint16_t

cdef extern from "ipk_dtype.h" nogil:
    enum:
        IPK_F32    # dtype code of float32 (ipukern.core.vertices.DTYPE_CODE["float32"])
        IPK_F16    # dtype code of float16
    int64_t ipk_dt_size(int dt) noexcept

cdef extern from "ipk_half.h" nogil:
    float ipk_h2f(uint16_t h) noexcept
    uint16_t ipk_f2h(float f) noexcept

cdef extern from "ipk_copy.h" nogil:
    # one copy table's rows [lo, hi) (ipukern.core.copies.CopyTable runs them)
    void ipk_copy_table(unsigned char* dbase, int64_t dst_stride, const unsigned char* sbase,
                        int64_t src_stride, const int32_t* src_row, const int64_t* src_off,
                        const int32_t* dst_row, const int64_t* dst_off, const int64_t* nbytes,
                        int64_t lo, int64_t hi, int stream) noexcept
    void ipk_copy_run(unsigned char* d, const unsigned char* s, int64_t n) noexcept
    void ipk_gather_even4(unsigned char* d, const unsigned char* s, int64_t n) noexcept

cdef extern from "ipk_omp.h" nogil:
    int ipk_max_threads() noexcept
    int ipk_has_openmp() noexcept
    int ipk_team_size() noexcept     # threads of the enclosing parallel region

cdef extern from "ipk_conv.h" nogil:
    ctypedef struct ipk_geom:
        int64_t need
    ctypedef void* ipk_conv_vertex_fn
    enum:
        IPK_CONV_OK
        IPK_CONV_EPARAM
        IPK_CONV_EDIMS
        IPK_CONV_ETILE
        IPK_CONV_ERANGE
        IPK_CONV_EALIGN
        IPK_CONV_ESCRATCH
        IPK_CONV_ETHREADS
        IPK_CONV_MAX_K
        IPK_CONV_DIRECT
    int ipk_geom_init(ipk_geom* g, const int64_t* d, int kh, int kw, int sh, int sw,
                      int dh, int dw) noexcept
    int ipk_conv_check(const ipk_geom* g, int64_t n_rows, int64_t row_bytes,
                       const unsigned char* data, int64_t tile, int64_t win_off, int64_t w_off,
                       int64_t out_off, int in_dt, int out_dt, int64_t scratch_floats) noexcept
    int ipk_conv_isa_supported(int isa) noexcept
    int ipk_conv_best_isa() noexcept
    ipk_conv_vertex_fn ipk_conv_pick(int isa) noexcept
    void ipk_conv_one(ipk_conv_vertex_fn fn, const int64_t* dims, int64_t v, int64_t next,
                      int kh, int kw, int sh, int sw, int dh, int dw,
                      unsigned char* data, int64_t row_bytes, const int32_t* tiles,
                      const int64_t* win_off, const int64_t* w_off, const int64_t* out_off,
                      int in_dt, int out_dt, float* scratch, int flags,
                      const int64_t* bias_off, const int64_t* bias_prm, int act,
                      const unsigned char* vflags, unsigned char* shadow) noexcept
    int ipk_epi_check(const ipk_geom* g, int64_t row_bytes, const unsigned char* data,
                      int64_t tile, int64_t bias_off, int64_t Kb, int64_t ks0, int out_dt,
                      int act) noexcept
