/* One ISA variant of the per-vertex convolution (see ipk_conv.h for the method).
 *
 * Included by ipk_conv.h once per ISA with IPK_SFX(name) (adds the ISA suffix), IPK_TGT (the
 * target attribute) and one of IPK_ISA_BASE / IPK_ISA_AVX2 / IPK_ISA_AVX512 defined. Every
 * function carries IPK_TGT so the variants can live in one translation unit.
 *
 * This file holds the vector vocabulary, the helpers both paths share (short copies, dtype
 * conversion, row packing, the K blocking, weight packing) and the per-vertex dispatch. The
 * paths have their own files:
 *   ipk_conv_gemm.h   the general path: packed window, register-blocked GEMM micro-kernels;
 *   ipk_conv_direct.h fp32 windows read in place (or a zero-padded copy), lanes over channels;
 *   ipk_conv_small.h  AVX-512 only: few channels per group, outputs held in registers;
 *   ipk_conv_dw.h     baseline and AVX2 only: depthwise. */

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
/* One fused multiply-add per lane (C99 fmaf: one rounding), so the baseline computes the same
 * FMA chains, bit for bit, as the AVX2 / AVX-512 variants. Where the target has an FMA
 * instruction (arm64) each fmaf is one; on plain SSE2 it is a libm call: slower, same bits. */
static inline ipk_v4 ipk_v4_fma(ipk_v4 a, ipk_v4 b, ipk_v4 c)
{
    ipk_v4 r = {__builtin_fmaf(a[0], b[0], c[0]), __builtin_fmaf(a[1], b[1], c[1]),
                __builtin_fmaf(a[2], b[2], c[2]), __builtin_fmaf(a[3], b[3], c[3])};
    return r;
}
#endif
#define V ipk_v4
#define VW 4
#define VLD(p) (*(const ipk_v4u*)(p))
#define VST(p, v) (*(ipk_v4u*)(p) = (v))
#define VSET1(s) ipk_v4_set1(s)
#define VFMA(a, b, c) ipk_v4_fma((a), (b), (c))
#define VZERO() ipk_v4_set1(0.0f)
#define IPK_ACC 12
#define IPK_MRMAX 4
#endif

#define IPK_NRMAX 12  /* longest row of accumulators (also caps the stack tile below) */

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

/* ---------------------------------------------------------------- row packing (both paths) */
/* Rows of packed planes are tens of floats: whole-vector stores that run past a row's end
 * (up to VW - 1 floats, into the row written next, or the slack ipk_geom_dw leaves after the
 * last) beat exact-length copies with scalar tails. dw_zero: dst[0, n) = 0; dw_copy:
 * dst[0, n) = src[0, n), never reading past src + n (AVX2: a masked load for the tail). */
IPK_TGT static inline void IPK_SFX(dw_zero)(float* dst, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i += VW) VST(dst + i, VZERO());
}

IPK_TGT static inline void IPK_SFX(dw_copy)(float* restrict dst, const float* restrict src, int64_t n)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW) VST(dst + i, VLD(src + i));
#if defined(IPK_ISA_AVX2)
    if (i < n) {
        static const int32_t lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        const __m256i k = _mm256_loadu_si256((const __m256i*)(lanes + 8 - (n - i)));
        VST(dst + i, _mm256_maskload_ps(src + i, k));
    }
#else
    for (; i < n; i++) dst[i] = src[i];
#endif
}

/* One window row into fp32: dst[m] = src element e0 + m*sw (fp32 copied, fp16 widened),
 * m in [0, n). ``overrun``: an fp32 stride-1 row may end with a whole-vector store (dw_copy;
 * the packed rows of the depthwise path leave room), else it writes exactly n floats. Both
 * packing paths load rows through here, so they read the same values. */
IPK_TGT static inline void IPK_SFX(load_row)(float* restrict dst, const unsigned char* src, int64_t e0,
                                             int in_dt, int64_t sw, int64_t n, int overrun)
{
    int64_t m;
    if (in_dt == IPK_F32) {
        const float* sp = (const float*)src + e0;
        if (sw != 1) for (m = 0; m < n; m++) dst[m] = sp[m * sw];
        else if (overrun) IPK_SFX(dw_copy)(dst, sp, n);
        else IPK_SFX(copy_f32)(dst, sp, n);
    } else {
        const uint16_t* sp = (const uint16_t*)src + e0;
        if (sw == 1) IPK_SFX(h2f_run)(dst, sp, n);
        else for (m = 0; m < n; m++) dst[m] = ipk_h2f(sp[m * sw]);
    }
}

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
    const int64_t isz = ipk_dt_size(in_dt);
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
        } else if (in_dt == IPK_F32) {
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
    if (in_dt == IPK_F32) return _mm512_loadu_ps((const float*)p + i);
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
    return in_dt == IPK_F32 ? ((const float*)p)[i] : ipk_h2f(((const uint16_t*)p)[i]);
}

/* Pack the weights of one group, [K][C*T] in the tile, to W[block][t][m]: per tap the mr
 * weights of a block of output channels are adjacent, ready to broadcast. Reads the rows
 * in step (tap-outer) so the writes are sequential. */
IPK_TGT static void IPK_SFX(pack_weights)(const ipk_geom* g, const unsigned char* wsrc, int in_dt,
                                          float* restrict W)
{
    const int64_t K = g->K, CT = g->C * g->T, isz = ipk_dt_size(in_dt);
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
        if (in_dt == IPK_F32) {
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

#include "ipk_conv_gemm.h"
#include "ipk_conv_direct.h"
#if defined(IPK_ISA_AVX512)
#include "ipk_conv_small.h"
#else
#include "ipk_conv_dw.h"
#endif

/* ---------------------------------------------------------------- bias epilogue */
/* The bias epilogue (ipk_epi, ipk_conv.h) over the vertex's output at ``out``, just written
 * (in the cache): per channel run, y = out + bias in the output dtype's arithmetic of the
 * add_bias vertex (fp32; fp16 widened, added in fp32, rounded once), then the activation
 * with NumPy's bits (ReLU: np.maximum(y, 0), NaN kept, -0 -> +0; ReLU6: np.clip(y, 0, 6)). */
IPK_TGT static void IPK_SFX(bias_epi)(const ipk_geom* g, unsigned char* out, int out_dt,
                                      const ipk_epi* e)
{
    const int64_t n = g->OR * g->OC;
    int64_t b, gi, k, i;
    for (b = 0; b < g->B; b++)
        for (gi = 0; gi < g->G; gi++)
            for (k = 0; k < g->K; k++) {
                const int64_t bi = gi * e->Kb + e->ks0 + k, o = ((b * g->G + gi) * g->K + k) * n;
                if (out_dt == IPK_F32) {
                    const float bv = ((const float*)e->bias)[bi];
                    float* restrict d = (float*)out + o;
                    /* constant act per loop: each one vectorises */
                    if (e->act == 0)
                        for (i = 0; i < n; i++) d[i] = ipk_epi_f32(d[i], bv, 0);
                    else if (e->act == 1)
                        for (i = 0; i < n; i++) d[i] = ipk_epi_f32(d[i], bv, 1);
                    else
                        for (i = 0; i < n; i++) d[i] = ipk_epi_f32(d[i], bv, 2);
                } else {
                    const float bv = ipk_h2f(((const uint16_t*)e->bias)[bi]);
                    uint16_t* restrict d = (uint16_t*)out + o;
                    for (i = 0; i < n; i++) d[i] = ipk_f2h(ipk_h2f(d[i]) + bv);
                }
            }
}

/* ---------------------------------------------------------------- one vertex */
/* Runs the vertex through its path; returns 1 when the path did the bias epilogue too. */
IPK_TGT static int IPK_SFX(conv_paths)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                       int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                       float* scratch, ipk_pf* pf, int flags, const ipk_epi* epi)
{
    /* scratch: packed window (64-byte aligned), packed weights, tap offsets (ipk_geom_init) */
    float* P = (float*)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float* W = P + g->p_floats;
#if !defined(IPK_ISA_AVX512)
    if ((flags & IPK_CONV_DIRECT) && g->dw_floats > 0) {
        IPK_SFX(dw_vertex)(g, tb, win_off, w_off, out_off, in_dt, out_dt, P, pf);
        return 0;
    }
#else
    /* few channels per group (depthwise included): the AVX-512 variant's own kernels */
    if (IPK_SFX(sc_ok)(g)) {
        IPK_SFX(sc_vertex)(g, tb, win_off, w_off, out_off, in_dt, out_dt, P, W, pf);
        return 0;
    }
#endif
    /* every variant, AVX-512 included (measured on a Zen 5 host, ResNet-50 fp32 batch 8
     * forward, one thread: 1.48 s CPU with AVX-512 vertices on the GEMM path, 1.18-1.23 s
     * with the direct path; docs/performance-log.md) */
    if ((flags & IPK_CONV_DIRECT) && IPK_SFX(direct_ok)(g, in_dt)) {
        IPK_SFX(direct_vertex)(g, tb, win_off, w_off, out_off, out_dt, P, W, pf, epi);
        return out_dt == IPK_F32;
    }
    IPK_SFX(gemm_vertex)(g, tb, win_off, w_off, out_off, in_dt, out_dt, P, W, pf);
    return 0;
}

IPK_TGT static void IPK_SFX(ipk_conv_vertex)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                             int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                             float* scratch, ipk_pf* pf, int flags,
                                             const ipk_epi* epi)
{
    if (g->B == 0 || g->G == 0 || g->K == 0 || g->OR == 0 || g->OC == 0) return;
    if (!IPK_SFX(conv_paths)(g, tb, win_off, w_off, out_off, in_dt, out_dt, scratch, pf, flags, epi)
        && epi != NULL && epi->bias != NULL)
        IPK_SFX(bias_epi)(g, tb + out_off, out_dt, epi);
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
