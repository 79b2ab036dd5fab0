/* OpenMP shim: the package builds (serially) when the compiler has no OpenMP. Every kernel
 * reaches OpenMP only through these (declared for Cython in ipk.pxd). */
#ifndef IPK_OMP_H
#define IPK_OMP_H
#ifdef _OPENMP
#include <omp.h>
static inline int ipk_max_threads(void) { return omp_get_max_threads(); }
static inline int ipk_has_openmp(void) { return 1; }
static inline int ipk_team_size(void) { return omp_get_num_threads(); }
#else
static inline int ipk_max_threads(void) { return 1; }
static inline int ipk_has_openmp(void) { return 0; }
static inline int ipk_team_size(void) { return 1; }
#endif
#endif
