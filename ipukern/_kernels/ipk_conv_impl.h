/* One ISA variant of the per-vertex convolution (see ipk_conv.h for the method).
 *
 * Included by ipk_conv.h once per ISA with IPK_SFX(name) (adds the ISA suffix), IPK_TGT (the
 * target attribute) and one of IPK_ISA_BASE / IPK_ISA_AVX2 / IPK_ISA_AVX512 defined. Every
 * function carries IPK_TGT so the variants can live in one translation unit. */

/* ---------------------------------------------------------------- vector vocabulary */
#if defined(IPK_ISA_AVX512)
#define V __m512
#define VW 16
#define VLD(p) _mm512_loadu_ps(p)
#define VST(p, v) _mm512_storeu_ps((p), (v))
#define VSET1(s) _mm512_set1_ps(s)
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VZERO() _mm512_setzero_ps()
#define IPK_ACC 24   /* accumulator vectors: 32 zmm registers minus operands */
#define IPK_MRMAX 8
#elif defined(IPK_ISA_AVX2)
#define V __m256
#define VW 8
#define VLD(p) _mm256_loadu_ps(p)
#define VST(p, v) _mm256_storeu_ps((p), (v))
#define VSET1(s) _mm256_set1_ps(s)
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VZERO() _mm256_setzero_ps()
#define IPK_ACC 12   /* 16 ymm registers */
#define IPK_MRMAX 4
#else
#ifndef IPK_V4_DEFINED
#define IPK_V4_DEFINED
typedef float ipk_v4 __attribute__((vector_size(16)));
typedef float ipk_v4u __attribute__((vector_size(16), aligned(4), may_alias));
static inline ipk_v4 ipk_v4_set1(float s) { ipk_v4 v = {s, s, s, s}; return v; }
#endif
#define V ipk_v4
#define VW 4
#define VLD(p) (*(const ipk_v4u*)(p))
#define VST(p, v) (*(ipk_v4u*)(p) = (v))
#define VSET1(s) ipk_v4_set1(s)
/* contracted to one fused multiply-add where the target has one (arm64); SSE2 rounds twice */
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VZERO() ipk_v4_set1(0.0f)
#define IPK_ACC 12
#define IPK_MRMAX 4
#endif

#define IPK_NRMAX 12  /* longest row of accumulators (also caps the stack tile below) */

typedef void (*IPK_SFX(mk_fn))(const float* restrict src, const int32_t* restrict offs,
                                int64_t ntaps, const float* restrict w, float* restrict dst,
                                int64_t ldd, const unsigned char* pf, int64_t pfs);

/* Micro-kernel MR x NR: dst[m*ldd + r*VW + l] = sum_t w[t*MR + m] * src[offs[t] + r*VW + l].
 * Tap t also prefetches pf + t*pfs (the next vertex's operands, see ipk_pf).
 * The loop nest is written so that only min(MR, NR) + 1 registers hold operands: the
 * broadcast weights when MR < NR, the loaded input vectors otherwise. */
#define IPK_MK(MR, NR)                                                                       \
    IPK_TGT static void IPK_SFX(mk_##MR##_##NR)(const float* restrict src,                  \
                                                const int32_t* restrict offs, int64_t ntaps, \
                                                const float* restrict w, float* restrict dst,\
                                                int64_t ldd, const unsigned char* pf,        \
                                                int64_t pfs)                                 \
    {                                                                                        \
        V acc[MR][NR];                                                                       \
        int m, r;                                                                            \
        int64_t t;                                                                           \
        _Pragma("GCC unroll 16") for (m = 0; m < MR; m++)                                    \
            _Pragma("GCC unroll 16") for (r = 0; r < NR; r++) acc[m][r] = VZERO();           \
        for (t = 0; t < ntaps; t++) {                                                        \
            const float* p = src + offs[t];                                                  \
            const float* wt = w + t * MR;                                                    \
            __builtin_prefetch(pf + t * pfs, 0, 2);                                          \
            if (MR >= NR) {                                                                  \
                V x[NR];                                                                     \
                _Pragma("GCC unroll 16") for (r = 0; r < NR; r++) x[r] = VLD(p + r * VW);    \
                _Pragma("GCC unroll 16") for (m = 0; m < MR; m++) {                          \
                    V wb = VSET1(wt[m]);                                                     \
                    _Pragma("GCC unroll 16") for (r = 0; r < NR; r++)                        \
                        acc[m][r] = VFMA(wb, x[r], acc[m][r]);                               \
                }                                                                            \
            } else {                                                                         \
                V wb[MR];                                                                    \
                _Pragma("GCC unroll 16") for (m = 0; m < MR; m++) wb[m] = VSET1(wt[m]);      \
                _Pragma("GCC unroll 16") for (r = 0; r < NR; r++) {                          \
                    V x = VLD(p + r * VW);                                                   \
                    _Pragma("GCC unroll 16") for (m = 0; m < MR; m++)                        \
                        acc[m][r] = VFMA(wb[m], x, acc[m][r]);                               \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        _Pragma("GCC unroll 16") for (m = 0; m < MR; m++)                                    \
            _Pragma("GCC unroll 16") for (r = 0; r < NR; r++)                                \
                VST(dst + m * ldd + r * VW, acc[m][r]);                                      \
    }

IPK_MK(1, 1) IPK_MK(1, 2) IPK_MK(1, 3) IPK_MK(1, 4) IPK_MK(1, 5) IPK_MK(1, 6)
IPK_MK(1, 7) IPK_MK(1, 8) IPK_MK(1, 9) IPK_MK(1, 10) IPK_MK(1, 11) IPK_MK(1, 12)
IPK_MK(2, 1) IPK_MK(2, 2) IPK_MK(2, 3) IPK_MK(2, 4) IPK_MK(2, 5) IPK_MK(2, 6)
IPK_MK(4, 1) IPK_MK(4, 2) IPK_MK(4, 3)
#if IPK_ACC >= 24
IPK_MK(2, 7) IPK_MK(2, 8) IPK_MK(2, 9) IPK_MK(2, 10) IPK_MK(2, 11) IPK_MK(2, 12)
IPK_MK(4, 4) IPK_MK(4, 5) IPK_MK(4, 6)
IPK_MK(8, 1) IPK_MK(8, 2) IPK_MK(8, 3)
#define IPK_MK_ROW2 {0, IPK_SFX(mk_2_1), IPK_SFX(mk_2_2), IPK_SFX(mk_2_3), IPK_SFX(mk_2_4),     \
        IPK_SFX(mk_2_5), IPK_SFX(mk_2_6), IPK_SFX(mk_2_7), IPK_SFX(mk_2_8), IPK_SFX(mk_2_9),   \
        IPK_SFX(mk_2_10), IPK_SFX(mk_2_11), IPK_SFX(mk_2_12)}
#define IPK_MK_ROW4 {0, IPK_SFX(mk_4_1), IPK_SFX(mk_4_2), IPK_SFX(mk_4_3), IPK_SFX(mk_4_4),     \
        IPK_SFX(mk_4_5), IPK_SFX(mk_4_6), 0, 0, 0, 0, 0, 0}
#define IPK_MK_ROW8 {0, IPK_SFX(mk_8_1), IPK_SFX(mk_8_2), IPK_SFX(mk_8_3), 0, 0, 0, 0, 0, 0, 0, 0, 0}
#else
#define IPK_MK_ROW2 {0, IPK_SFX(mk_2_1), IPK_SFX(mk_2_2), IPK_SFX(mk_2_3), IPK_SFX(mk_2_4),     \
        IPK_SFX(mk_2_5), IPK_SFX(mk_2_6), 0, 0, 0, 0, 0, 0}
#define IPK_MK_ROW4 {0, IPK_SFX(mk_4_1), IPK_SFX(mk_4_2), IPK_SFX(mk_4_3), 0, 0, 0, 0, 0, 0, 0, 0, 0}
#define IPK_MK_ROW8 {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
#endif

/* [log2 MR][NR] */
static const IPK_SFX(mk_fn) IPK_SFX(mk_tab)[4][IPK_NRMAX + 1] = {
    {0, IPK_SFX(mk_1_1), IPK_SFX(mk_1_2), IPK_SFX(mk_1_3), IPK_SFX(mk_1_4), IPK_SFX(mk_1_5),
     IPK_SFX(mk_1_6), IPK_SFX(mk_1_7), IPK_SFX(mk_1_8), IPK_SFX(mk_1_9), IPK_SFX(mk_1_10),
     IPK_SFX(mk_1_11), IPK_SFX(mk_1_12)},
    IPK_MK_ROW2, IPK_MK_ROW4, IPK_MK_ROW8};
#undef IPK_MK_ROW2
#undef IPK_MK_ROW4
#undef IPK_MK_ROW8
#undef IPK_MK

/* ---------------------------------------------------------------- short copies
 * Rows here are tens of floats: inline vector copies beat a libc call per row. */
IPK_TGT static inline void IPK_SFX(copy_f32)(float* restrict dst, const float* restrict src, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) VST(dst + i, VLD(src + i));
#if defined(IPK_ISA_AVX512)
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_maskz_loadu_ps(k, src + i));
    }
#else
    for (; i < n; i++) dst[i] = src[i];
#endif
}

IPK_TGT static inline void IPK_SFX(zero_f32)(float* restrict dst, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) VST(dst + i, VZERO());
#if defined(IPK_ISA_AVX512)
    if (i < n) _mm512_mask_storeu_ps(dst + i, (__mmask16)((1u << (n - i)) - 1u), _mm512_setzero_ps());
#else
    for (; i < n; i++) dst[i] = 0.0f;
#endif
}

/* ---------------------------------------------------------------- dtype conversion runs */
IPK_TGT static inline void IPK_SFX(h2f_run)(float* restrict dst, const uint16_t* restrict src,
                                            int64_t n)
{
    int64_t i = 0;
#if defined(IPK_ISA_AVX512)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
        return;
    }
#elif defined(IPK_ISA_AVX2)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
#endif
    for (; i < n; i++) dst[i] = ipk_h2f(src[i]);
}

IPK_TGT static inline void IPK_SFX(f2h_run)(uint16_t* restrict dst, const float* restrict src,
                                            int64_t n)
{
    int64_t i = 0;
#if defined(IPK_ISA_AVX512)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i*)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i),
                                                             _MM_FROUND_TO_NEAREST_INT));
        return;
    }
#elif defined(IPK_ISA_AVX2)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i*)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = ipk_f2h(src[i]);
}

/* ---------------------------------------------------------------- packing */
static inline int64_t IPK_SFX(cdiv)(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static inline int64_t IPK_SFX(fdiv)(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

#if defined(IPK_ISA_AVX512)
/* Masks for a packed row of nvec vectors whose columns [a, b) lie inside the window. */
IPK_TGT static inline void IPK_SFX(row_masks)(__mmask16* ktab, int64_t nvec, int64_t a, int64_t b)
{
    int64_t m;
    for (m = 0; m < nvec; m++) {
        const int64_t m0 = m * 16;
        const int64_t l0 = a - m0 < 0 ? 0 : a - m0 > 16 ? 16 : a - m0;
        const int64_t l1 = b - m0 < 0 ? 0 : b - m0 > 16 ? 16 : b - m0;
        ktab[m] = (__mmask16)((0xFFFFu >> (16 - l1)) & (0xFFFFu << l0));
    }
}

/* Pack Mr rows of one channel ``src`` (rows rs elements apart): packed row mrow <- window row
 * r0 + mrow*rstep (zeros outside [0, WR)), packed column m <- window column m + shift.
 * Each row is nvec loads (masked only where the row meets the window's edges: masked loads
 * are slower, and lanes outside the window are never read) and full stores; a row's last
 * store runs up to 15 floats into the next row (written next) or past the plane (the
 * caller leaves room there). */
IPK_TGT static inline void IPK_SFX(pack_rows16)(float* restrict dst, const unsigned char* src,
                                                int in_dt, int64_t WR, int64_t rs, int64_t r0,
                                                int64_t rstep, int64_t Mr, int64_t Wp, int64_t shift,
                                                const __mmask16* ktab, int64_t nvec)
{
    const int64_t isz = in_dt ? 2 : 4;
    int64_t mrow, m, f0 = 0, f1;
    /* full vectors: [f0, f1) */
    while (f0 < nvec && ktab[f0] != (__mmask16)0xFFFF) f0++;
    f1 = f0;
    while (f1 < nvec && ktab[f1] == (__mmask16)0xFFFF) f1++;
    for (mrow = 0; mrow < Mr; mrow++, dst += Wp) {
        const int64_t r = r0 + mrow * rstep;
        const uintptr_t srow = (uintptr_t)src + (uintptr_t)((r * rs + shift) * isz);
        if (r < 0 || r >= WR) {
            for (m = 0; m < nvec; m++) _mm512_storeu_ps(dst + 16 * m, _mm512_setzero_ps());
        } else if (in_dt == 0) {
            for (m = 0; m < f0; m++)
                _mm512_storeu_ps(dst + 16 * m, _mm512_maskz_loadu_ps(ktab[m], (const void*)(srow + 64 * m)));
            for (; m < f1; m++)
                _mm512_storeu_ps(dst + 16 * m, _mm512_loadu_ps((const void*)(srow + 64 * m)));
            for (; m < nvec; m++)
                _mm512_storeu_ps(dst + 16 * m, _mm512_maskz_loadu_ps(ktab[m], (const void*)(srow + 64 * m)));
        } else {
            for (m = 0; m < f0; m++)
                _mm512_storeu_ps(dst + 16 * m, _mm512_cvtph_ps(
                    _mm256_maskz_loadu_epi16(ktab[m], (const void*)(srow + 32 * m))));
            for (; m < f1; m++)
                _mm512_storeu_ps(dst + 16 * m, _mm512_cvtph_ps(
                    _mm256_loadu_si256((const __m256i*)(srow + 32 * m))));
            for (; m < nvec; m++)
                _mm512_storeu_ps(dst + 16 * m, _mm512_cvtph_ps(
                    _mm256_maskz_loadu_epi16(ktab[m], (const void*)(srow + 32 * m))));
        }
    }
}
#endif

/* Pack window (b, g) = ``src`` (channel c, row r at c*cs + r*rs) into P[c][phase][Mr][Wp]
 * (fp32, zero padded). */
IPK_TGT static void IPK_SFX(pack_window)(const ipk_geom* g, const unsigned char* src, int in_dt,
                                         float* restrict P)
{
    const int64_t C = g->C, WR = g->WR, WC = g->WC, Mr = g->Mr, Wp = g->Wp;
    const int64_t rs = g->rs, cs = g->cs;
    const int64_t sh = g->sh, sw = g->sw, ro = g->ro, co = g->co, plane = g->plane;
    int64_t lo[IPK_CONV_MAX_K], hi[IPK_CONV_MAX_K], c, mrow, m;
    int pr, pc;
    /* per column phase, the packed columns m with 0 <= m*sw + ph + co <= WC-1 */
    for (pc = 0; pc < g->nphc; pc++) {
        const int64_t ph = g->phc_val[pc];
        int64_t a = IPK_SFX(cdiv)(-ph - co, sw), b = IPK_SFX(fdiv)(WC - 1 - ph - co, sw) + 1;
        if (a < 0) a = 0;
        if (b > Wp) b = Wp;
        if (a > Wp) a = Wp;
        if (b < a) b = a;
        lo[pc] = a;
        hi[pc] = b;
    }
#if defined(IPK_ISA_AVX512)
    if (sw == 1 && (Wp + 15) / 16 <= 64) {
        const int64_t nvec = (Wp + 15) / 16, isz = in_dt ? 2 : 4;
        __mmask16 ktab[64];
        IPK_SFX(row_masks)(ktab, nvec, lo[0], hi[0]);
        for (c = 0; c < C; c++)
            for (pr = 0; pr < g->nphr; pr++)
                IPK_SFX(pack_rows16)(P + (c * g->nphr + pr) * plane, src + c * cs * isz, in_dt,
                                     WR, rs, g->phr_val[pr] + ro, sh, Mr, Wp, g->phc_val[0] + co,
                                     ktab, nvec);
        IPK_SFX(zero_f32)(P + C * g->nph * plane, g->p_floats - C * g->nph * plane);
        return;
    }
    if (sw == 2 && (Wp + 15) / 16 <= 64) {
        const int64_t nvec = (Wp + 15) / 16, isz = in_dt ? 2 : 4;
        __mmask16 klo[64], khi[64];
        /* packed column m of phase ph <- window column q = 2m + ph + co: a block of 16
         * packed columns of both phases is 32 consecutive window columns starting at
         * q0 = 32*v + co, split into even / odd lanes */
        for (m = 0; m < nvec; m++) {
            const int64_t q0 = 32 * m + co;
            const int64_t a0 = -q0 < 0 ? 0 : -q0 > 16 ? 16 : -q0, b0 = WC - q0 < 0 ? 0 : WC - q0 > 16 ? 16 : WC - q0;
            const int64_t a1 = -q0 - 16 < 0 ? 0 : -q0 - 16 > 16 ? 16 : -q0 - 16;
            const int64_t b1 = WC - q0 - 16 < 0 ? 0 : WC - q0 - 16 > 16 ? 16 : WC - q0 - 16;
            klo[m] = b0 > a0 ? (__mmask16)((0xFFFFu >> (16 - b0)) & (0xFFFFu << a0)) : 0;
            khi[m] = b1 > a1 ? (__mmask16)((0xFFFFu >> (16 - b1)) & (0xFFFFu << a1)) : 0;
        }
        {
            const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
            /* phase plane of phase value 0 / 1 (-1 when the taps never read it) */
            const int64_t p0 = g->phc_val[0] == 0 ? 0 : -1;
            const int64_t p1 = g->phc_val[0] == 1 ? 0 : (g->nphc > 1 ? 1 : -1);
            const __mmask16 klast = (__mmask16)(0xFFFFu >> (16 - (Wp - 16 * (nvec - 1))));
            for (c = 0; c < C; c++) {
                for (pr = 0; pr < g->nphr; pr++) {
                    float* base = P + (c * g->nphr + pr) * g->nphc * plane;
                    for (mrow = 0; mrow < Mr; mrow++) {
                        const int64_t r = mrow * sh + g->phr_val[pr] + ro;
                        const int inside = r >= 0 && r < WR;
                        const uintptr_t srow = (uintptr_t)src + (uintptr_t)(c * cs + r * rs + co) * isz;
                        float* d0 = p0 >= 0 ? base + p0 * plane + mrow * Wp : 0;
                        float* d1 = p1 >= 0 ? base + p1 * plane + mrow * Wp : 0;
                        for (m = 0; m < nvec; m++) {
                            /* the last block is stored masked: past Wp is another plane */
                            const __mmask16 ks = m == nvec - 1 ? klast : (__mmask16)0xFFFF;
                            __m512 lo_v = _mm512_setzero_ps(), hi_v = _mm512_setzero_ps();
                            if (inside) {
                                const uintptr_t sp = srow + (uintptr_t)(32 * m * isz);
                                if (in_dt == 0) {
                                    lo_v = _mm512_maskz_loadu_ps(klo[m], (const void*)sp);
                                    hi_v = _mm512_maskz_loadu_ps(khi[m], (const void*)(sp + 64));
                                } else {
                                    lo_v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(klo[m], (const void*)sp));
                                    hi_v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(khi[m], (const void*)(sp + 32)));
                                }
                            }
                            if (d0) _mm512_mask_storeu_ps(d0 + 16 * m, ks, _mm512_permutex2var_ps(lo_v, ev, hi_v));
                            if (d1) _mm512_mask_storeu_ps(d1 + 16 * m, ks, _mm512_permutex2var_ps(lo_v, od, hi_v));
                        }
                    }
                }
            }
        }
        IPK_SFX(zero_f32)(P + C * g->nph * plane, g->p_floats - C * g->nph * plane);
        return;
    }
#endif
    for (c = 0; c < C; c++) {
        for (pr = 0; pr < g->nphr; pr++) {
            for (mrow = 0; mrow < Mr; mrow++) {
                const int64_t r = mrow * sh + g->phr_val[pr] + ro;
                const int inside = r >= 0 && r < WR;
                for (pc = 0; pc < g->nphc; pc++) {
                    float* restrict dst = P + ((c * g->nphr + pr) * g->nphc + pc) * plane + mrow * Wp;
                    const int64_t a = inside ? lo[pc] : 0, b = inside ? hi[pc] : 0;
                    IPK_SFX(zero_f32)(dst, a);
                    IPK_SFX(zero_f32)(dst + b, Wp - b);
                    if (b > a) {
                        const int64_t e0 = c * cs + r * rs + a * sw + g->phc_val[pc] + co;
                        if (in_dt == 0) {
                            const float* sp = (const float*)src + e0;
                            if (sw == 1) IPK_SFX(copy_f32)(dst + a, sp, b - a);
                            else for (m = a; m < b; m++) dst[m] = sp[(m - a) * sw];
                        } else {
                            const uint16_t* sp = (const uint16_t*)src + e0;
                            if (sw == 1) IPK_SFX(h2f_run)(dst + a, sp, b - a);
                            else for (m = a; m < b; m++) dst[m] = ipk_h2f(sp[(m - a) * sw]);
                        }
                    }
                }
            }
        }
    }
    /* the tail that the last vectors may read: zero (finite values, no denormal stalls) */
    IPK_SFX(zero_f32)(P + C * g->nph * plane, g->p_floats - C * g->nph * plane);
}

/* The K blocking: full blocks of IPK_MRMAX, then the remainder rounded up to a power of two
 * (rows past K multiply zero weights and are not stored). */
static inline int IPK_SFX(block_mr)(int64_t K, int64_t k0)
{
    int64_t left = K - k0;
    int mr = 1;
    if (left >= IPK_MRMAX) return IPK_MRMAX;
    while (mr < left) mr *= 2;
    return mr;
}

/* Load 16 (or, with AVX2, 8) consecutive weights of one row as fp32. */
#if defined(IPK_ISA_AVX512)
IPK_TGT static inline __m512 IPK_SFX(ld16)(const unsigned char* p, int64_t i, int in_dt)
{
    if (in_dt == 0) return _mm512_loadu_ps((const float*)p + i);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)((const uint16_t*)p + i)));
}

/* rows r[0..7] (16 taps each) -> dst[t][m] for 16 taps: an 8x16 -> 16x8 transpose */
IPK_TGT static inline void IPK_SFX(tr8x16)(const __m512* r, float* dst)
{
    __m512 a = _mm512_unpacklo_ps(r[0], r[1]), b = _mm512_unpackhi_ps(r[0], r[1]);
    __m512 c = _mm512_unpacklo_ps(r[2], r[3]), d = _mm512_unpackhi_ps(r[2], r[3]);
    __m512 e = _mm512_unpacklo_ps(r[4], r[5]), f = _mm512_unpackhi_ps(r[4], r[5]);
    __m512 g = _mm512_unpacklo_ps(r[6], r[7]), h = _mm512_unpackhi_ps(r[6], r[7]);
    /* A_s / B_s: rows 0-3 / 4-7 of tap 4L+s in 128-bit lane L */
    __m512 A0 = _mm512_shuffle_ps(a, c, 0x44), A1 = _mm512_shuffle_ps(a, c, 0xEE);
    __m512 A2 = _mm512_shuffle_ps(b, d, 0x44), A3 = _mm512_shuffle_ps(b, d, 0xEE);
    __m512 B0 = _mm512_shuffle_ps(e, g, 0x44), B1 = _mm512_shuffle_ps(e, g, 0xEE);
    __m512 B2 = _mm512_shuffle_ps(f, h, 0x44), B3 = _mm512_shuffle_ps(f, h, 0xEE);
    __m512 X0l = _mm512_shuffle_f32x4(A0, B0, 0x44), X0h = _mm512_shuffle_f32x4(A0, B0, 0xEE);
    __m512 X1l = _mm512_shuffle_f32x4(A1, B1, 0x44), X1h = _mm512_shuffle_f32x4(A1, B1, 0xEE);
    __m512 X2l = _mm512_shuffle_f32x4(A2, B2, 0x44), X2h = _mm512_shuffle_f32x4(A2, B2, 0xEE);
    __m512 X3l = _mm512_shuffle_f32x4(A3, B3, 0x44), X3h = _mm512_shuffle_f32x4(A3, B3, 0xEE);
    /* tap 4L+s goes to dst[(4L+s)*8 ..]: pairs (s=0,1) and (s=2,3) of lane L */
    _mm512_storeu_ps(dst + 0 * 16, _mm512_shuffle_f32x4(X0l, X1l, 0x88));
    _mm512_storeu_ps(dst + 1 * 16, _mm512_shuffle_f32x4(X2l, X3l, 0x88));
    _mm512_storeu_ps(dst + 2 * 16, _mm512_shuffle_f32x4(X0l, X1l, 0xDD));
    _mm512_storeu_ps(dst + 3 * 16, _mm512_shuffle_f32x4(X2l, X3l, 0xDD));
    _mm512_storeu_ps(dst + 4 * 16, _mm512_shuffle_f32x4(X0h, X1h, 0x88));
    _mm512_storeu_ps(dst + 5 * 16, _mm512_shuffle_f32x4(X2h, X3h, 0x88));
    _mm512_storeu_ps(dst + 6 * 16, _mm512_shuffle_f32x4(X0h, X1h, 0xDD));
    _mm512_storeu_ps(dst + 7 * 16, _mm512_shuffle_f32x4(X2h, X3h, 0xDD));
}
#endif

static inline float IPK_SFX(ldw)(const unsigned char* p, int64_t i, int in_dt)
{
    return in_dt == 0 ? ((const float*)p)[i] : ipk_h2f(((const uint16_t*)p)[i]);
}

/* Pack the weights of one group, [K][C*T] in the tile, to W[block][t][m]: per tap the mr
 * weights of a block of output channels are adjacent, ready to broadcast. Reads the rows
 * in step (tap-outer) so the writes are sequential. */
IPK_TGT static void IPK_SFX(pack_weights)(const ipk_geom* g, const unsigned char* wsrc, int in_dt,
                                          float* restrict W)
{
    const int64_t K = g->K, CT = g->C * g->T, isz = in_dt ? 2 : 4;
    int64_t k0 = 0, t;
    float* dst = W;
    while (k0 < K) {
        const int mr = IPK_SFX(block_mr)(K, k0);
        const unsigned char* rows[IPK_MRMAX];
        int m;
        /* rows past K (a remainder block rounded up) repeat the last row: computed, not stored */
        for (m = 0; m < mr; m++) rows[m] = wsrc + (k0 + m < K ? k0 + m : K - 1) * CT * isz;
        t = 0;
#if defined(IPK_ISA_AVX512)
        if (mr == 8) {
            for (; t + 16 <= CT; t += 16) {
                __m512 r[8];
                for (m = 0; m < 8; m++) r[m] = IPK_SFX(ld16)(rows[m], t, in_dt);
                IPK_SFX(tr8x16)(r, dst + t * 8);
            }
        }
#endif
        if (in_dt == 0) {
            /* constant mr: the inner loop unrolls to mr loads and stores per tap */
            const float *r0 = (const float*)rows[0], *r1 = (const float*)rows[mr > 1 ? 1 : 0];
            const float *r2 = (const float*)rows[mr > 2 ? 2 : 0], *r3 = (const float*)rows[mr > 3 ? 3 : 0];
            if (mr == 1) {
                for (; t < CT; t++) dst[t] = r0[t];
            } else if (mr == 2) {
                for (; t < CT; t++) { dst[2 * t] = r0[t]; dst[2 * t + 1] = r1[t]; }
            } else if (mr == 4) {
                for (; t < CT; t++) {
                    dst[4 * t] = r0[t]; dst[4 * t + 1] = r1[t]; dst[4 * t + 2] = r2[t]; dst[4 * t + 3] = r3[t];
                }
            }
        }
        for (; t < CT; t++)
            for (m = 0; m < mr; m++) dst[t * mr + m] = IPK_SFX(ldw)(rows[m], t, in_dt);
        dst += (int64_t)mr * CT;
        k0 += mr;
    }
}

/* Store rows m < mrv of a computed block tile[m][n - n0] (n in [n0, n1)) to the output,
 * dropping the Wp - OC padding columns of each row. */
IPK_TGT static void IPK_SFX(emit)(const ipk_geom* g, const float* tile, int64_t ldt, int mrv,
                                  int64_t n0, int64_t n1, unsigned char* out_k0, int out_dt)
{
    const int64_t Wp = g->Wp, OC = g->OC, kstride = g->OR * g->OC;
    int m;
    for (m = 0; m < mrv; m++) {
        const float* src = tile + m * ldt;
        int64_t n = n0, y = n0 / Wp, x = n0 - (n0 / Wp) * Wp;
        while (n < n1) {
            int64_t len;
            if (x >= OC) { n += Wp - x; y++; x = 0; continue; }
            len = OC - x;
            if (len > n1 - n) len = n1 - n;
            if (out_dt == 0)
                IPK_SFX(copy_f32)((float*)out_k0 + m * kstride + y * OC + x, src + (n - n0), len);
            else
                IPK_SFX(f2h_run)((uint16_t*)out_k0 + m * kstride + y * OC + x, src + (n - n0), len);
            n += len;
            x += len;
        }
    }
}

#if defined(IPK_ISA_AVX512)
/* ---------------------------------------------------------------- small channel counts
 * Groups with few channels (C <= 8 in, K <= 16 out, C * K <= 32 per group: depthwise, cpg 2
 * and 4, channel multipliers), stride 1, dilation 1, square 1x1 / 3x3 / 5x5 kernels. A block of MR output channels x RY output rows
 * x NX vectors stays in registers while the input rows of every channel stream past; each
 * loaded input vector feeds the MR x (up to KS) outputs that use it (the GEMM path loads it
 * once per tap and must stage its results). Per output the FMAs still run over the taps in
 * the order (c, i, j), as in the GEMM path, so both paths give identical bits. Results are
 * stored straight to the output rows (last vector masked).
 *
 * Input row u of channel c is read at rows[u] + c*cs + 16*v + j (rows[u] == NULL: a row of
 * zeros). The first and last vectors of a row load with masks km[j] / km[KS + j] (zero
 * outside the window: the padding; lanes outside are never read), the ones between them
 * load plainly. fp32 windows are read in place; fp16 ones are packed first. */
#define IPK_SCK(KS, MR, RY, NX)                                                               \
    IPK_TGT static void IPK_SFX(sc_##KS##_##MR##_##RY##_##NX)(                                 \
        const float* const* rows, int64_t C, int64_t cs, const float* zrow,                   \
        const __mmask16* km, const float* restrict w, unsigned char* restrict out,            \
        int64_t ldo, int64_t kstride, __mmask16 lastk, int mstore, int out_dt)                \
    {                                                                                         \
        __m512 acc[MR][RY][NX];                                                               \
        int u, j, v, i, m;                                                                    \
        int64_t c;                                                                            \
        _Pragma("GCC unroll 16") for (m = 0; m < MR; m++)                                     \
            _Pragma("GCC unroll 16") for (u = 0; u < RY; u++)                                 \
                _Pragma("GCC unroll 16") for (v = 0; v < NX; v++)                             \
                    acc[m][u][v] = _mm512_setzero_ps();                                       \
        for (c = 0; c < C; c++) {                                                             \
            const float* wc = w + c * (KS * KS * MR);                                         \
            _Pragma("GCC unroll 16") for (u = 0; u < RY + KS - 1; u++) {                      \
                const float* rp = rows[u] ? rows[u] + c * cs : zrow;                          \
                _Pragma("GCC unroll 16") for (j = 0; j < KS; j++)                             \
                    _Pragma("GCC unroll 16") for (v = 0; v < NX; v++) {                       \
                        __m512 x;                                                             \
                        if (v == 0)                                                           \
                            x = _mm512_maskz_loadu_ps(km[j], rp + j);                         \
                        else if (v == NX - 1)                                                 \
                            x = _mm512_maskz_loadu_ps(km[KS + j], rp + 16 * v + j);           \
                        else                                                                  \
                            x = _mm512_loadu_ps(rp + 16 * v + j);                             \
                        /* keep x in a register: GCC would otherwise fold the load into */     \
                        /* every FMA that uses it, which is the reuse this kernel is for */     \
                        __asm__("" : "+v"(x));                                                 \
                        _Pragma("GCC unroll 16") for (i = 0; i < KS; i++)                     \
                            if (u - i >= 0 && u - i < RY)                                     \
                                _Pragma("GCC unroll 16") for (m = 0; m < MR; m++)             \
                                    acc[m][u - i][v] = _mm512_fmadd_ps(                       \
                                        _mm512_set1_ps(wc[(i * KS + j) * MR + m]), x,         \
                                        acc[m][u - i][v]);                                    \
                    }                                                                         \
            }                                                                                 \
        }                                                                                     \
        _Pragma("GCC unroll 16") for (m = 0; m < MR; m++) {                                   \
            if (m >= mstore) break; /* channels past K in a rounded-up block */               \
            _Pragma("GCC unroll 16") for (u = 0; u < RY; u++)                                 \
                _Pragma("GCC unroll 16") for (v = 0; v < NX; v++) {                           \
                    const __mmask16 k = v == NX - 1 ? lastk : (__mmask16)0xFFFF;               \
                    const int64_t e = m * kstride + u * ldo + 16 * v;                         \
                    if (out_dt == 0)                                                          \
                        _mm512_mask_storeu_ps((float*)out + e, k, acc[m][u][v]);              \
                    else                                                                      \
                        _mm256_mask_storeu_epi16((uint16_t*)out + e, k,                       \
                            _mm512_cvtps_ph(acc[m][u][v], _MM_FROUND_TO_NEAREST_INT));        \
                }                                                                             \
        }                                                                                     \
    }
/* the (KS, MR, RY, NX) blocks with MR * RY * NX <= 24 accumulators, RY <= 6, NX <= 4 */
IPK_SCK(1,1,1,1) IPK_SCK(1,1,2,1) IPK_SCK(1,1,3,1) IPK_SCK(1,1,4,1) IPK_SCK(1,1,5,1)
IPK_SCK(1,1,6,1) IPK_SCK(1,1,1,2) IPK_SCK(1,1,2,2) IPK_SCK(1,1,3,2) IPK_SCK(1,1,4,2)
IPK_SCK(1,1,5,2) IPK_SCK(1,1,6,2) IPK_SCK(1,1,1,3) IPK_SCK(1,1,2,3) IPK_SCK(1,1,3,3)
IPK_SCK(1,1,4,3) IPK_SCK(1,1,5,3) IPK_SCK(1,1,6,3) IPK_SCK(1,1,1,4) IPK_SCK(1,1,2,4)
IPK_SCK(1,1,3,4) IPK_SCK(1,1,4,4) IPK_SCK(1,1,5,4) IPK_SCK(1,1,6,4) IPK_SCK(1,2,1,1)
IPK_SCK(1,2,2,1) IPK_SCK(1,2,3,1) IPK_SCK(1,2,4,1) IPK_SCK(1,2,5,1) IPK_SCK(1,2,6,1)
IPK_SCK(1,2,1,2) IPK_SCK(1,2,2,2) IPK_SCK(1,2,3,2) IPK_SCK(1,2,4,2) IPK_SCK(1,2,5,2)
IPK_SCK(1,2,6,2) IPK_SCK(1,2,1,3) IPK_SCK(1,2,2,3) IPK_SCK(1,2,3,3) IPK_SCK(1,2,4,3)
IPK_SCK(1,2,1,4) IPK_SCK(1,2,2,4) IPK_SCK(1,2,3,4) IPK_SCK(1,4,1,1) IPK_SCK(1,4,2,1)
IPK_SCK(1,4,3,1) IPK_SCK(1,4,4,1) IPK_SCK(1,4,5,1) IPK_SCK(1,4,6,1) IPK_SCK(1,4,1,2)
IPK_SCK(1,4,2,2) IPK_SCK(1,4,3,2) IPK_SCK(1,4,1,3) IPK_SCK(1,4,2,3) IPK_SCK(1,4,1,4)
IPK_SCK(1,8,1,1) IPK_SCK(1,8,2,1) IPK_SCK(1,8,3,1) IPK_SCK(1,8,1,2) IPK_SCK(1,8,1,3)
IPK_SCK(3,1,1,1) IPK_SCK(3,1,2,1) IPK_SCK(3,1,3,1) IPK_SCK(3,1,4,1) IPK_SCK(3,1,5,1)
IPK_SCK(3,1,6,1) IPK_SCK(3,1,1,2) IPK_SCK(3,1,2,2) IPK_SCK(3,1,3,2) IPK_SCK(3,1,4,2)
IPK_SCK(3,1,5,2) IPK_SCK(3,1,6,2) IPK_SCK(3,1,1,3) IPK_SCK(3,1,2,3) IPK_SCK(3,1,3,3)
IPK_SCK(3,1,4,3) IPK_SCK(3,1,5,3) IPK_SCK(3,1,6,3) IPK_SCK(3,1,1,4) IPK_SCK(3,1,2,4)
IPK_SCK(3,1,3,4) IPK_SCK(3,1,4,4) IPK_SCK(3,1,5,4) IPK_SCK(3,1,6,4) IPK_SCK(3,2,1,1)
IPK_SCK(3,2,2,1) IPK_SCK(3,2,3,1) IPK_SCK(3,2,4,1) IPK_SCK(3,2,5,1) IPK_SCK(3,2,6,1)
IPK_SCK(3,2,1,2) IPK_SCK(3,2,2,2) IPK_SCK(3,2,3,2) IPK_SCK(3,2,4,2) IPK_SCK(3,2,5,2)
IPK_SCK(3,2,6,2) IPK_SCK(3,2,1,3) IPK_SCK(3,2,2,3) IPK_SCK(3,2,3,3) IPK_SCK(3,2,4,3)
IPK_SCK(3,2,1,4) IPK_SCK(3,2,2,4) IPK_SCK(3,2,3,4) IPK_SCK(3,4,1,1) IPK_SCK(3,4,2,1)
IPK_SCK(3,4,3,1) IPK_SCK(3,4,4,1) IPK_SCK(3,4,5,1) IPK_SCK(3,4,6,1) IPK_SCK(3,4,1,2)
IPK_SCK(3,4,2,2) IPK_SCK(3,4,3,2) IPK_SCK(3,4,1,3) IPK_SCK(3,4,2,3) IPK_SCK(3,4,1,4)
IPK_SCK(3,8,1,1) IPK_SCK(3,8,2,1) IPK_SCK(3,8,3,1) IPK_SCK(3,8,1,2) IPK_SCK(3,8,1,3)
IPK_SCK(5,1,1,1) IPK_SCK(5,1,2,1) IPK_SCK(5,1,3,1) IPK_SCK(5,1,4,1) IPK_SCK(5,1,5,1)
IPK_SCK(5,1,6,1) IPK_SCK(5,1,1,2) IPK_SCK(5,1,2,2) IPK_SCK(5,1,3,2) IPK_SCK(5,1,4,2)
IPK_SCK(5,1,5,2) IPK_SCK(5,1,6,2) IPK_SCK(5,1,1,3) IPK_SCK(5,1,2,3) IPK_SCK(5,1,3,3)
IPK_SCK(5,1,4,3) IPK_SCK(5,1,5,3) IPK_SCK(5,1,6,3) IPK_SCK(5,1,1,4) IPK_SCK(5,1,2,4)
IPK_SCK(5,1,3,4) IPK_SCK(5,1,4,4) IPK_SCK(5,1,5,4) IPK_SCK(5,1,6,4) IPK_SCK(5,2,1,1)
IPK_SCK(5,2,2,1) IPK_SCK(5,2,3,1) IPK_SCK(5,2,4,1) IPK_SCK(5,2,5,1) IPK_SCK(5,2,6,1)
IPK_SCK(5,2,1,2) IPK_SCK(5,2,2,2) IPK_SCK(5,2,3,2) IPK_SCK(5,2,4,2) IPK_SCK(5,2,5,2)
IPK_SCK(5,2,6,2) IPK_SCK(5,2,1,3) IPK_SCK(5,2,2,3) IPK_SCK(5,2,3,3) IPK_SCK(5,2,4,3)
IPK_SCK(5,2,1,4) IPK_SCK(5,2,2,4) IPK_SCK(5,2,3,4) IPK_SCK(5,4,1,1) IPK_SCK(5,4,2,1)
IPK_SCK(5,4,3,1) IPK_SCK(5,4,4,1) IPK_SCK(5,4,5,1) IPK_SCK(5,4,6,1) IPK_SCK(5,4,1,2)
IPK_SCK(5,4,2,2) IPK_SCK(5,4,3,2) IPK_SCK(5,4,1,3) IPK_SCK(5,4,2,3) IPK_SCK(5,4,1,4)
IPK_SCK(5,8,1,1) IPK_SCK(5,8,2,1) IPK_SCK(5,8,3,1) IPK_SCK(5,8,1,2) IPK_SCK(5,8,1,3)
#undef IPK_SCK
typedef void (*IPK_SFX(sc_fn))(const float* const*, int64_t, int64_t, const float*,
                               const __mmask16*, const float* restrict, unsigned char* restrict,
                               int64_t, int64_t, __mmask16, int, int);
#define IPK_SC_RYMAX 6
/* [KS 1/3/5][MR 1/2/4/8][RY - 1][NX - 1] */
static const IPK_SFX(sc_fn) IPK_SFX(sc_tab)[3][4][IPK_SC_RYMAX][4] = {
    {{{IPK_SFX(sc_1_1_1_1), IPK_SFX(sc_1_1_1_2), IPK_SFX(sc_1_1_1_3), IPK_SFX(sc_1_1_1_4)},
      {IPK_SFX(sc_1_1_2_1), IPK_SFX(sc_1_1_2_2), IPK_SFX(sc_1_1_2_3), IPK_SFX(sc_1_1_2_4)},
      {IPK_SFX(sc_1_1_3_1), IPK_SFX(sc_1_1_3_2), IPK_SFX(sc_1_1_3_3), IPK_SFX(sc_1_1_3_4)},
      {IPK_SFX(sc_1_1_4_1), IPK_SFX(sc_1_1_4_2), IPK_SFX(sc_1_1_4_3), IPK_SFX(sc_1_1_4_4)},
      {IPK_SFX(sc_1_1_5_1), IPK_SFX(sc_1_1_5_2), IPK_SFX(sc_1_1_5_3), IPK_SFX(sc_1_1_5_4)},
      {IPK_SFX(sc_1_1_6_1), IPK_SFX(sc_1_1_6_2), IPK_SFX(sc_1_1_6_3), IPK_SFX(sc_1_1_6_4)}},
     {{IPK_SFX(sc_1_2_1_1), IPK_SFX(sc_1_2_1_2), IPK_SFX(sc_1_2_1_3), IPK_SFX(sc_1_2_1_4)},
      {IPK_SFX(sc_1_2_2_1), IPK_SFX(sc_1_2_2_2), IPK_SFX(sc_1_2_2_3), IPK_SFX(sc_1_2_2_4)},
      {IPK_SFX(sc_1_2_3_1), IPK_SFX(sc_1_2_3_2), IPK_SFX(sc_1_2_3_3), IPK_SFX(sc_1_2_3_4)},
      {IPK_SFX(sc_1_2_4_1), IPK_SFX(sc_1_2_4_2), IPK_SFX(sc_1_2_4_3), 0},
      {IPK_SFX(sc_1_2_5_1), IPK_SFX(sc_1_2_5_2), 0, 0},
      {IPK_SFX(sc_1_2_6_1), IPK_SFX(sc_1_2_6_2), 0, 0}},
     {{IPK_SFX(sc_1_4_1_1), IPK_SFX(sc_1_4_1_2), IPK_SFX(sc_1_4_1_3), IPK_SFX(sc_1_4_1_4)},
      {IPK_SFX(sc_1_4_2_1), IPK_SFX(sc_1_4_2_2), IPK_SFX(sc_1_4_2_3), 0},
      {IPK_SFX(sc_1_4_3_1), IPK_SFX(sc_1_4_3_2), 0, 0},
      {IPK_SFX(sc_1_4_4_1), 0, 0, 0},
      {IPK_SFX(sc_1_4_5_1), 0, 0, 0},
      {IPK_SFX(sc_1_4_6_1), 0, 0, 0}},
     {{IPK_SFX(sc_1_8_1_1), IPK_SFX(sc_1_8_1_2), IPK_SFX(sc_1_8_1_3), 0},
      {IPK_SFX(sc_1_8_2_1), 0, 0, 0},
      {IPK_SFX(sc_1_8_3_1), 0, 0, 0},
      {0, 0, 0, 0},
      {0, 0, 0, 0},
      {0, 0, 0, 0}}},
    {{{IPK_SFX(sc_3_1_1_1), IPK_SFX(sc_3_1_1_2), IPK_SFX(sc_3_1_1_3), IPK_SFX(sc_3_1_1_4)},
      {IPK_SFX(sc_3_1_2_1), IPK_SFX(sc_3_1_2_2), IPK_SFX(sc_3_1_2_3), IPK_SFX(sc_3_1_2_4)},
      {IPK_SFX(sc_3_1_3_1), IPK_SFX(sc_3_1_3_2), IPK_SFX(sc_3_1_3_3), IPK_SFX(sc_3_1_3_4)},
      {IPK_SFX(sc_3_1_4_1), IPK_SFX(sc_3_1_4_2), IPK_SFX(sc_3_1_4_3), IPK_SFX(sc_3_1_4_4)},
      {IPK_SFX(sc_3_1_5_1), IPK_SFX(sc_3_1_5_2), IPK_SFX(sc_3_1_5_3), IPK_SFX(sc_3_1_5_4)},
      {IPK_SFX(sc_3_1_6_1), IPK_SFX(sc_3_1_6_2), IPK_SFX(sc_3_1_6_3), IPK_SFX(sc_3_1_6_4)}},
     {{IPK_SFX(sc_3_2_1_1), IPK_SFX(sc_3_2_1_2), IPK_SFX(sc_3_2_1_3), IPK_SFX(sc_3_2_1_4)},
      {IPK_SFX(sc_3_2_2_1), IPK_SFX(sc_3_2_2_2), IPK_SFX(sc_3_2_2_3), IPK_SFX(sc_3_2_2_4)},
      {IPK_SFX(sc_3_2_3_1), IPK_SFX(sc_3_2_3_2), IPK_SFX(sc_3_2_3_3), IPK_SFX(sc_3_2_3_4)},
      {IPK_SFX(sc_3_2_4_1), IPK_SFX(sc_3_2_4_2), IPK_SFX(sc_3_2_4_3), 0},
      {IPK_SFX(sc_3_2_5_1), IPK_SFX(sc_3_2_5_2), 0, 0},
      {IPK_SFX(sc_3_2_6_1), IPK_SFX(sc_3_2_6_2), 0, 0}},
     {{IPK_SFX(sc_3_4_1_1), IPK_SFX(sc_3_4_1_2), IPK_SFX(sc_3_4_1_3), IPK_SFX(sc_3_4_1_4)},
      {IPK_SFX(sc_3_4_2_1), IPK_SFX(sc_3_4_2_2), IPK_SFX(sc_3_4_2_3), 0},
      {IPK_SFX(sc_3_4_3_1), IPK_SFX(sc_3_4_3_2), 0, 0},
      {IPK_SFX(sc_3_4_4_1), 0, 0, 0},
      {IPK_SFX(sc_3_4_5_1), 0, 0, 0},
      {IPK_SFX(sc_3_4_6_1), 0, 0, 0}},
     {{IPK_SFX(sc_3_8_1_1), IPK_SFX(sc_3_8_1_2), IPK_SFX(sc_3_8_1_3), 0},
      {IPK_SFX(sc_3_8_2_1), 0, 0, 0},
      {IPK_SFX(sc_3_8_3_1), 0, 0, 0},
      {0, 0, 0, 0},
      {0, 0, 0, 0},
      {0, 0, 0, 0}}},
    {{{IPK_SFX(sc_5_1_1_1), IPK_SFX(sc_5_1_1_2), IPK_SFX(sc_5_1_1_3), IPK_SFX(sc_5_1_1_4)},
      {IPK_SFX(sc_5_1_2_1), IPK_SFX(sc_5_1_2_2), IPK_SFX(sc_5_1_2_3), IPK_SFX(sc_5_1_2_4)},
      {IPK_SFX(sc_5_1_3_1), IPK_SFX(sc_5_1_3_2), IPK_SFX(sc_5_1_3_3), IPK_SFX(sc_5_1_3_4)},
      {IPK_SFX(sc_5_1_4_1), IPK_SFX(sc_5_1_4_2), IPK_SFX(sc_5_1_4_3), IPK_SFX(sc_5_1_4_4)},
      {IPK_SFX(sc_5_1_5_1), IPK_SFX(sc_5_1_5_2), IPK_SFX(sc_5_1_5_3), IPK_SFX(sc_5_1_5_4)},
      {IPK_SFX(sc_5_1_6_1), IPK_SFX(sc_5_1_6_2), IPK_SFX(sc_5_1_6_3), IPK_SFX(sc_5_1_6_4)}},
     {{IPK_SFX(sc_5_2_1_1), IPK_SFX(sc_5_2_1_2), IPK_SFX(sc_5_2_1_3), IPK_SFX(sc_5_2_1_4)},
      {IPK_SFX(sc_5_2_2_1), IPK_SFX(sc_5_2_2_2), IPK_SFX(sc_5_2_2_3), IPK_SFX(sc_5_2_2_4)},
      {IPK_SFX(sc_5_2_3_1), IPK_SFX(sc_5_2_3_2), IPK_SFX(sc_5_2_3_3), IPK_SFX(sc_5_2_3_4)},
      {IPK_SFX(sc_5_2_4_1), IPK_SFX(sc_5_2_4_2), IPK_SFX(sc_5_2_4_3), 0},
      {IPK_SFX(sc_5_2_5_1), IPK_SFX(sc_5_2_5_2), 0, 0},
      {IPK_SFX(sc_5_2_6_1), IPK_SFX(sc_5_2_6_2), 0, 0}},
     {{IPK_SFX(sc_5_4_1_1), IPK_SFX(sc_5_4_1_2), IPK_SFX(sc_5_4_1_3), IPK_SFX(sc_5_4_1_4)},
      {IPK_SFX(sc_5_4_2_1), IPK_SFX(sc_5_4_2_2), IPK_SFX(sc_5_4_2_3), 0},
      {IPK_SFX(sc_5_4_3_1), IPK_SFX(sc_5_4_3_2), 0, 0},
      {IPK_SFX(sc_5_4_4_1), 0, 0, 0},
      {IPK_SFX(sc_5_4_5_1), 0, 0, 0},
      {IPK_SFX(sc_5_4_6_1), 0, 0, 0}},
     {{IPK_SFX(sc_5_8_1_1), IPK_SFX(sc_5_8_1_2), IPK_SFX(sc_5_8_1_3), 0},
      {IPK_SFX(sc_5_8_2_1), 0, 0, 0},
      {IPK_SFX(sc_5_8_3_1), 0, 0, 0},
      {0, 0, 0, 0},
      {0, 0, 0, 0},
      {0, 0, 0, 0}}}};

static inline int IPK_SFX(sc_nxmax)(int mr) { return 24 / mr < 4 ? 24 / mr : 4; }
static inline int IPK_SFX(sc_rymax)(int mr, int64_t nx) { return 24 / (mr * nx) < IPK_SC_RYMAX ? (int)(24 / (mr * nx)) : IPK_SC_RYMAX; }

/* Small-channel kernels or the GEMM path? They win where packing and staging would cost
 * most relative to the FMAs (C * K small: measured better up to cpg 4, worse at cpg 8) and
 * where whole vectors per output row waste few lanes compared with the GEMM's flat rows
 * (a 7-column output uses 7 of 16 lanes here, 49 of 64 in the GEMM). */
static inline int IPK_SFX(sc_ok)(const ipk_geom* g)
{
    int64_t lanes_sc, lanes_gemm;
    if (!(g->C >= 1 && g->C <= 8 && g->K <= 16 && g->C * g->K <= 32 && g->sh == 1 && g->sw == 1
          && g->dh == 1 && g->dw == 1 && g->kh == g->kw && (g->kh == 1 || g->kh == 3 || g->kh == 5)
          && (g->OC + 15) / 16 * 16 + g->kw <= 1024))
        return 0;
    lanes_sc = g->OR * ((g->OC + 15) / 16 * 16);
    lanes_gemm = (g->N + 15) / 16 * 16;
    return 100 * lanes_gemm >= 85 * lanes_sc;    /* sc's lane use >= 0.85x the GEMM's */
}

/* Lanes l of a 16-float load at window column q0 + l that lie inside [0, WC). */
static inline __mmask16 IPK_SFX(col_mask)(int64_t q0, int64_t WC)
{
    const int64_t a = -q0 < 0 ? 0 : -q0 > 16 ? 16 : -q0, b = WC - q0 < 0 ? 0 : WC - q0 > 16 ? 16 : WC - q0;
    return b > a ? (__mmask16)((0xFFFFu >> (16 - b)) & (0xFFFFu << a)) : (__mmask16)0;
}

/* The whole vertex through the small-channel kernels. */
IPK_TGT static void IPK_SFX(sc_vertex)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                       int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                       float* P, float* W, ipk_pf* pf)
{
    const int64_t B = g->B, G = g->G, C = g->C, K = g->K, OR = g->OR, OC = g->OC, KS = g->kh;
    const int64_t WR = g->WR, WC = g->WC, CT = C * g->T, isz = in_dt ? 2 : 4, osz = out_dt ? 2 : 4;
    const int64_t co = g->co, ro = g->ro;
    const int64_t Wp = (OC + 15) / 16 * 16 + KS - 1, Mr = OR + KS - 1, nvec = (Wp + 15) / 16;
    const int64_t nvt = (OC + 15) / 16;   /* vectors per output row */
    const int ksi = KS == 1 ? 0 : KS == 3 ? 1 : 2;
    /* in place needs every vector but a row's first and last inside the window */
    const int direct = in_dt == 0 && (nvt <= 2 || (co + 16 >= 0 && co + 16 * (nvt - 1) + KS - 2 < WC));
    const float* zrow = P;
    const float* rows[IPK_SC_RYMAX + 4];
    /* edge masks per (K block, column chunk): at most two block widths since K <= 16 */
    __mmask16 ktab[64], kmt[2][64][10];
    int64_t b, gi, u, calls = 0, k0;
    int kb;
    if (direct) {
        IPK_SFX(zero_f32)(P, 128);
    } else {
        const int64_t a = -co < 0 ? 0 : -co, e = WC - co;
        IPK_SFX(row_masks)(ktab, nvec, a, e < a ? a : e > Wp ? Wp : e);
    }
    for (k0 = 0, kb = 0; k0 < K; kb++) {   /* masks; kernel calls per (b, g) for prefetch */
        const int mr = IPK_SFX(block_mr)(K, k0);
        const int64_t cw = 16 * IPK_SFX(sc_nxmax)(mr);
        int64_t x0, t;
        for (x0 = 0; x0 < OC; x0 += cw) {
            const int64_t nx = ((OC - x0 < cw ? OC - x0 : cw) + 15) / 16;
            const int64_t ry = OR < IPK_SFX(sc_rymax)(mr, nx) ? OR : IPK_SFX(sc_rymax)(mr, nx);
            __mmask16* km = kmt[kb][x0 / cw];
            calls += (OR + ry - 1) / ry;
            for (t = 0; t < KS; t++) {
                if (direct) {
                    km[t] = IPK_SFX(col_mask)(x0 + co + t, WC);
                    km[KS + t] = IPK_SFX(col_mask)(x0 + co + 16 * (nx - 1) + t, WC);
                    if (nx == 1) km[t] &= km[KS + t];
                } else {
                    km[t] = km[KS + t] = (__mmask16)0xFFFF;   /* P is padded */
                }
            }
        }
        k0 += mr;
    }
    pf->per_call = ((pf->n[0] + pf->n[1] + pf->n[2]) / (B * G * calls) + 63) & ~(int64_t)63;
    for (gi = 0; gi < G; gi++) {
        if (K == 1 && in_dt == 0)   /* depthwise: the weights are already [c][t] fp32 */
            W = (float*)(tb + w_off + gi * CT * 4);
        else
            IPK_SFX(pack_weights)(g, tb + w_off + gi * K * CT * isz, in_dt, W);
        for (b = 0; b < B; b++) {
            const int64_t bg = b * G + gi;
            const unsigned char* win = tb + win_off + ipk_win_base(g, b, gi) * isz;
            unsigned char* out = tb + out_off + bg * K * OR * OC * osz;
            const float* wblk = W;
            int64_t c;
            if (!direct)
                for (c = 0; c < C; c++)
                    IPK_SFX(pack_rows16)(P + c * Mr * Wp, win + c * g->cs * isz, in_dt, WR, g->rs,
                                         ro, 1, Mr, Wp, co, ktab, nvec);
            for (k0 = 0, kb = 0; k0 < K; kb++) {
                const int mr = IPK_SFX(block_mr)(K, k0);
                const int mrv = (int)(K - k0 < mr ? K - k0 : mr);
                const int mri = mr == 1 ? 0 : mr == 2 ? 1 : mr == 4 ? 2 : 3;
                const int64_t cw = 16 * IPK_SFX(sc_nxmax)(mr);
                int64_t x0;
                for (x0 = 0; x0 < OC; x0 += cw) {
                    const int64_t left = OC - x0 < cw ? OC - x0 : cw, nx = (left + 15) / 16;
                    const __mmask16 lastk = (__mmask16)(0xFFFFu >> (16 - (left - 16 * (nx - 1))));
                    const int64_t ry = OR < IPK_SFX(sc_rymax)(mr, nx) ? OR : IPK_SFX(sc_rymax)(mr, nx);
                    const IPK_SFX(sc_fn) fn = IPK_SFX(sc_tab)[ksi][mri][ry - 1][nx - 1];
                    const __mmask16* km = kmt[kb][x0 / cw];
                    int64_t y0;
                    for (y0 = 0; y0 < OR; y0 += ry) {
                        /* the last block moves up to stay inside: it recomputes (bit for bit)
                         * a few rows instead of needing a kernel per row count */
                        const int64_t ys = y0 + ry > OR ? OR - ry : y0;
                        int64_t stride, q;
                        const unsigned char* pp = ipk_pf_slice(pf, 32, &stride);
                        if (stride)
                            for (q = 0; q < 32; q++) __builtin_prefetch(pp + q * stride, 0, 2);
                        for (u = 0; u < ry + KS - 1; u++) {
                            const int64_t r = ys + u + ro;
                            if (!direct)
                                rows[u] = P + (ys + u) * Wp + x0;
                            else if (r >= 0 && r < WR)
                                /* lanes before the row start are masked: never read */
                                rows[u] = (const float*)(uintptr_t)((uintptr_t)win + (uintptr_t)((r * g->rs + x0 + co) * 4));
                            else
                                rows[u] = 0;
                        }
                        fn(rows, C, direct ? g->cs : Mr * Wp, zrow, km, wblk,
                           out + ((k0 * OR + ys) * OC + x0) * osz, OC, OR * OC, lastk, mrv, out_dt);
                    }
                }
                wblk += (int64_t)mr * CT;
                k0 += mr;
            }
        }
    }
}
#endif

/* ---------------------------------------------------------------- one vertex */
IPK_TGT static void IPK_SFX(ipk_conv_vertex)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                             int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                             float* scratch, ipk_pf* pf)
{
    const int64_t B = g->B, G = g->G, C = g->C, K = g->K, T = g->T, CT = C * T, N = g->N;
    const int64_t isz = in_dt ? 2 : 4, osz = out_dt ? 2 : 4;
    const int64_t kstride = g->OR * g->OC;
    const int64_t Nv = (N + VW - 1) / VW;
    float* P = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float* W = P + g->p_floats;
    int32_t* offs = (int32_t*)(W + g->w_floats);
    float tile[IPK_ACC * VW] __attribute__((aligned(64)));
    int64_t b, gi, c;
    int i, j;

    if (B == 0 || G == 0 || K == 0 || g->OR == 0 || g->OC == 0) return;
#if defined(IPK_ISA_AVX512)
    if (IPK_SFX(sc_ok)(g)) {
        IPK_SFX(sc_vertex)(g, tb, win_off, w_off, out_off, in_dt, out_dt, P, W, pf);
        return;
    }
#endif
    {   /* spread the next vertex's prefetches over this vertex's micro-kernel calls */
        int64_t calls = 0, k0 = 0, total = pf->n[0] + pf->n[1] + pf->n[2];
        while (k0 < K) {
            const int mr = IPK_SFX(block_mr)(K, k0);
            const int64_t nrmax = IPK_ACC / mr < IPK_NRMAX ? IPK_ACC / mr : IPK_NRMAX;
            calls += (Nv + nrmax - 1) / nrmax;
            k0 += mr;
        }
        calls *= B * G;
        pf->per_call = ((total + calls - 1) / calls + 63) & ~(int64_t)63;
    }
    /* offs[c*T + t]: where tap (c, i, j) reads output 0 in the packed window */
    for (i = 0; i < g->kh; i++)
        for (j = 0; j < g->kw; j++)
            offs[i * g->kw + j] = (int32_t)(((int64_t)g->phr_of[i] * g->nphc + g->phc_of[j]) * g->plane
                                            + (int64_t)g->ir[i] * g->Wp + g->jc[j]);
    {
        const int32_t cstride = (int32_t)(g->nph * g->plane);
        for (c = 1; c < C; c++)
            for (i = 0; i < T; i++) offs[c * T + i] = offs[(c - 1) * T + i] + cstride;
    }

    for (gi = 0; gi < G; gi++) {
        if (K == 1 && in_dt == 0)   /* depthwise: the weights are already [c][t] fp32 */
            W = (float*)(tb + w_off + gi * CT * 4);
        else
            IPK_SFX(pack_weights)(g, tb + w_off + gi * K * CT * isz, in_dt, W);
        for (b = 0; b < B; b++) {
            const int64_t bg = b * G + gi;
            unsigned char* out_bg = tb + out_off + bg * K * kstride * osz;
            const float* wblk = W;
            int64_t k0 = 0;
            IPK_SFX(pack_window)(g, tb + win_off + ipk_win_base(g, b, gi) * isz, in_dt, P);
            while (k0 < K) {
                const int mr = IPK_SFX(block_mr)(K, k0);
                const int mrv = (int)(K - k0 < mr ? K - k0 : mr);
                const int lmr = mr == 1 ? 0 : mr == 2 ? 1 : mr == 4 ? 2 : 3;
                int nrmax = IPK_ACC / mr;
                int64_t v0;
                unsigned char* out_k0 = out_bg + k0 * kstride * osz;
                if (nrmax > IPK_NRMAX) nrmax = IPK_NRMAX;
                for (v0 = 0; v0 < Nv; v0 += nrmax) {
                    const int nr = (int)(Nv - v0 < nrmax ? Nv - v0 : nrmax);
                    const int64_t n0 = v0 * VW, n1 = n0 + nr * VW < N ? n0 + nr * VW : N;
                    const IPK_SFX(mk_fn) fn = IPK_SFX(mk_tab)[lmr][nr];
                    int64_t pfs;
                    const unsigned char* pfp = ipk_pf_slice(pf, CT, &pfs);
                    if (out_dt == 0 && g->Wp == g->OC && mrv == mr && n0 + nr * VW <= N) {
                        /* no padding columns, whole block inside: store straight to the output */
                        fn(P + n0, offs, CT, wblk, (float*)out_k0 + n0, kstride, pfp, pfs);
                    } else {
                        fn(P + n0, offs, CT, wblk, tile, (int64_t)nr * VW, pfp, pfs);
                        IPK_SFX(emit)(g, tile, (int64_t)nr * VW, mrv, n0, n1, out_k0, out_dt);
                    }
                }
                wblk += (int64_t)mr * CT;
                k0 += mr;
            }
        }
    }
}

#undef V
#undef VW
#undef VLD
#undef VST
#undef VSET1
#undef VFMA
#undef VZERO
#undef IPK_ACC
#undef IPK_MRMAX
#undef IPK_NRMAX
