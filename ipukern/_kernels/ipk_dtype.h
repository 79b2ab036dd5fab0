/* Element type codes, declared once for C (ipk.pxd exposes them to Cython; Python's
 * ipukern.core.vertices.DTYPE_CODE must agree, which tests/core/test_kernels.py checks). */
#ifndef IPK_DTYPE_H
#define IPK_DTYPE_H
#include <stdint.h>

enum { IPK_F32 = 0, IPK_F16 = 1 };

/* Bytes per element of a dtype code. */
static inline int64_t ipk_dt_size(int dt) { return dt == IPK_F16 ? 2 : 4; }
#endif
