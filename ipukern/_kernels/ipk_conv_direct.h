/* The direct path of one ISA variant (see ipk_conv.h): fp32 windows whose every tap of every
 * output lies inside the window (no padding: all 1x1 convs of a plan, and valid convs) are
 * read in place, with no packing. Windows that need padding, with a full vector of output
 * channels or more (3x3 layers; not depthwise), are first copied per group with zeros
 * around them (rows outermost, as the window), and read there: the padded taps are FMAs
 * with +0.0 exactly as in the packing path, so the bits stay the packing path's. Included by ipk_conv_impl.h, which defines the vector
 * vocabulary and the shared helpers.
 *
 * The lanes run over output channels instead of output positions: the weights of a block
 * of up to 4 vectors of output channels are packed once per group as Wk[t][k] (k innermost,
 * zero past K), and a micro-kernel keeps KV vectors of channels x NP output positions of
 * accumulators in registers; per tap it loads the KV weight vectors and broadcasts the NP
 * input values straight from the window:
 *
 *     acc[p][kv] += x[pos p, tap t] * Wk[t][kv*VW .. kv*VW + VW)
 *
 * Every output element is still one FMA chain over the taps in the order t = c*kh*kw + i*kw
 * + j, starting from +0.0, with one rounding per step (fma(x, w, acc) == fma(w, x, acc)), so
 * the results are bitwise those of the GEMM path. The GEMM path's lanes run over the
 * positions of one (b, g) window, which are few on most tiles (e.g. 2x2 or 7x7 outputs
 * for 16 channels), and it must first pack every channel row of the window: for these
 * shapes packing and half-empty vectors, not FMAs, bounded it. Here the positions of all
 * images of the vertex are one list and there are always 16 or so output channels. */

/* dk_KV_NP: tile[p*KV*VW + kv*VW + l] = sum_t src[p][toff[t]] * w[t*KV*VW + kv*VW + l]. */
#define IPK_DK(KV, NP)                                                                       \
    IPK_TGT static void IPK_SFX(dk_##KV##_##NP)(const float* const* src,                     \
                                                const int32_t* restrict toff, int64_t ntaps, \
                                                const float* restrict w, float* restrict tile, \
                                                const unsigned char* pf, int64_t pfs)        \
    {                                                                                        \
        V acc[NP][KV];                                                                       \
        const float* s[NP];                                                                  \
        int p, kv;                                                                           \
        int64_t t;                                                                           \
        _Pragma("GCC unroll 16") for (p = 0; p < NP; p++) {                                  \
            s[p] = src[p];                                                                   \
            _Pragma("GCC unroll 16") for (kv = 0; kv < KV; kv++) acc[p][kv] = VZERO();       \
        }                                                                                    \
        for (t = 0; t < ntaps; t++) {                                                        \
            const int64_t o = toff[t];                                                       \
            const float* wt = w + t * (KV * VW);                                             \
            V wv[KV];                                                                        \
            __builtin_prefetch(pf + t * pfs, 0, 2);                                          \
            _Pragma("GCC unroll 16") for (kv = 0; kv < KV; kv++) wv[kv] = VLD(wt + kv * VW);  \
            _Pragma("GCC unroll 16") for (p = 0; p < NP; p++) {                              \
                const V x = VSET1(s[p][o]);                                                  \
                _Pragma("GCC unroll 16") for (kv = 0; kv < KV; kv++)                         \
                    acc[p][kv] = VFMA(x, wv[kv], acc[p][kv]);                                \
            }                                                                                \
        }                                                                                    \
        _Pragma("GCC unroll 16") for (p = 0; p < NP; p++)                                    \
            _Pragma("GCC unroll 16") for (kv = 0; kv < KV; kv++)                             \
                VST(tile + (p * KV + kv) * VW, acc[p][kv]);                                  \
    }

typedef void (*IPK_SFX(dk_fn))(const float* const* src, const int32_t* restrict toff,
                                int64_t ntaps, const float* restrict w, float* restrict tile,
                                const unsigned char* pf, int64_t pfs);

/* (KV, NP) blocks: KV * NP <= IPK_DK_ACC accumulators, NP <= IPK_NRMAX */
#define IPK_DK_BLOCKS(X) \
    X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(1, 5) X(1, 6) X(1, 7) X(1, 8) X(1, 9) X(1, 10) \
    X(1, 11) X(1, 12) X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(2, 5) X(2, 6) \
    X(3, 1) X(3, 2) X(3, 3) X(3, 4) X(4, 1) X(4, 2) X(4, 3)
IPK_DK_BLOCKS(IPK_DK)
#define IPK_DK_ENTRY(KV, NP) [KV][NP] = IPK_SFX(dk_##KV##_##NP),
static const IPK_SFX(dk_fn) IPK_SFX(dk_tab)[5][IPK_NRMAX + 1] = {IPK_DK_BLOCKS(IPK_DK_ENTRY)};
#undef IPK_DK_ENTRY
#undef IPK_DK_BLOCKS
#undef IPK_DK

#define IPK_DK_KVMAX 4
/* accumulator vectors of a block: 12 in every variant (the AVX-512 one could hold 24, but a
 * staged block of KV * VW * NP floats must fit the smallest packed-window scratch, 192
 * floats (ipk_geom_init: p_floats >= 48 + 144), and the (KV, NP) table above stops at 12) */
#define IPK_DK_ACC 12

/* The direct path applies: fp32 input, and either every tap of every output inside the
 * window (read in place) or a zero-padded copy planned (ipk_geom_padded: a full vector of
 * output channels). */
static inline int IPK_SFX(direct_ok)(const ipk_geom* g, int in_dt)
{
    if (in_dt != IPK_F32) return 0;
    if (g->q_floats > 0) return g->K >= VW;
    /* tap offsets are int32: one (b, g) window spans at most WR * rs elements */
    return ipk_smul(g->WR, g->rs) <= ((int64_t)1 << 30) && g->ro >= 0 && g->co >= 0
           && g->ro + (g->OR - 1) * g->sh + (int64_t)(g->kh - 1) * g->dh < g->WR
           && g->co + (g->OC - 1) * g->sw + (int64_t)(g->kw - 1) * g->dw < g->WC;
}

/* Copy group gi's window of every image to Q, [B][WRq][C][WCq], zero padded: window
 * element (b, c, r, q) at ((b*WRq + qr0 + r)*C + c)*WCq + qc0 + q. Taps outside the window
 * then read +0.0 as in the packing path, so every FMA chain is the packing path's. */
#ifndef IPK_DIRECT_PAD_DEFINED
#define IPK_DIRECT_PAD_DEFINED   /* ISA-independent: defined once for every variant */
static void ipk_direct_pad(const ipk_geom* g, const float* win, int64_t gi, float* restrict Q)
{
    const int64_t C = g->C, WCq = g->WCq, WC = g->WC, tail = WCq - g->qc0 - WC;
    int64_t b, r, c;
    for (b = 0; b < g->B; b++)
        for (r = 0; r < g->WRq; r++) {
            const int64_t wr = r - g->qr0;
            float* dst = Q + (b * g->WRq + r) * C * WCq;
            if (wr < 0 || wr >= g->WR) {
                memset(dst, 0, (size_t)(C * WCq) * sizeof(float));
                continue;
            }
            for (c = 0; c < C; c++, dst += WCq) {
                const float* src = win + ipk_win_base(g, b, gi) + c * g->cs + wr * g->rs;
                memset(dst, 0, (size_t)g->qc0 * sizeof(float));
                memcpy(dst + g->qc0, src, (size_t)WC * sizeof(float));
                memset(dst + g->qc0 + WC, 0, (size_t)tail * sizeof(float));
            }
        }
}
#endif

#if defined(IPK_ISA_AVX2) || defined(IPK_ISA_AVX512)
/* r[i][j] <- r[j][i]: an 8 x 8 transpose of floats in registers. */
IPK_TGT static inline void IPK_SFX(tr8x8)(__m256* r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20); r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20); r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31); r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31); r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}
#endif

/* Pack channels [k0, k0 + kb) of one group's weights [K][CT] (fp32) to Wk[t][kvw], zero
 * past K; tap-outer, so the writes are sequential and the reads kvw sequential streams.
 * AVX2 and AVX-512: whole groups of 8 channels x 8 taps by register transposes (a vertex with
 * few taps and positions, as in 1x1 layers of 16-96 channels, spent a fifth of its time here). */
IPK_TGT static void IPK_SFX(pack_wk)(const float* restrict wsrc, int64_t CT, int64_t K,
                                     int64_t k0, int kvw, float* restrict Wk)
{
    const float* rows[IPK_DK_KVMAX * VW];
    int64_t t;
    int k, k8 = 0, kin = (int)(K - k0 < kvw ? K - k0 : kvw);
    for (k = 0; k < kin; k++) rows[k] = wsrc + (k0 + k) * CT;
#if defined(IPK_ISA_AVX2) || defined(IPK_ISA_AVX512)
    for (; k8 + 8 <= kin; k8 += 8) {
        for (t = 0; t + 8 <= CT; t += 8) {
            __m256 r[8];
            for (k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(rows[k8 + k] + t);
            IPK_SFX(tr8x8)(r);
            for (k = 0; k < 8; k++) _mm256_storeu_ps(Wk + (t + k) * kvw + k8, r[k]);
        }
        for (; t < CT; t++)
            for (k = k8; k < k8 + 8; k++) Wk[t * kvw + k] = rows[k][t];
    }
#endif
    for (t = 0; t < CT; t++) {
        float* w = Wk + t * kvw;
        for (k = k8; k < kin; k++) w[k] = rows[k][t];
        for (; k < kvw; k++) w[k] = 0.0f;
    }
}

#if defined(IPK_ISA_AVX2) || defined(IPK_ISA_AVX512)
/* ipk_epi_f32 on 8 lanes: y + bias, then ReLU / ReLU6 with the same selects (a NaN fails
 * every ordered compare, so it is kept; y <= 0 includes -0, which becomes +0). */
IPK_TGT static inline __m256 IPK_SFX(epi8)(__m256 y, float bv, int act)
{
    y = _mm256_add_ps(y, _mm256_set1_ps(bv));
    if (act == 1) {
        y = _mm256_andnot_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LE_OQ), y);
    } else if (act == 2) {
        const __m256 six = _mm256_set1_ps(6.0f);
        y = _mm256_andnot_ps(_mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_LT_OQ), y);
        y = _mm256_blendv_ps(y, six, _mm256_cmp_ps(y, six, _CMP_GT_OQ));
    }
    return y;
}
#endif

#if defined(IPK_ISA_AVX512)
/* r[i][j] <- r[j][i]: a 16 x 16 transpose of floats in registers. After the unpacks and the
 * in-lane shuffles r[4s + c] holds, in 128-bit lane L, rows 4s..4s+3 of column 4L + c; the
 * two lane shuffles then gather column j's four lanes in row order. */
IPK_TGT static inline void IPK_SFX(tr16x16)(__m512* r)
{
    __m512 t[16];
    int i;
    _Pragma("GCC unroll 8") for (i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 4") for (i = 0; i < 4; i++) {
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    /* lanes 0, 2 / 1, 3 of rows 0-3 and 4-7 (and of 8-11 and 12-15) */
    _Pragma("GCC unroll 4") for (i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
    }
    /* columns i, 4 + i from lanes 0, 2; columns 8 + i, 12 + i from lanes 1, 3 */
    _Pragma("GCC unroll 4") for (i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
    }
}

/* ipk_epi_f32 on 16 lanes (one position, 16 channels): y + bias, then ReLU / ReLU6 with
 * the same compares as epi8 (a NaN fails every ordered compare, so it is kept; y <= 0
 * includes -0, which becomes +0). */
IPK_TGT static inline __m512 IPK_SFX(epi16)(__m512 y, __m512 bias, int act)
{
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    y = _mm512_add_ps(y, bias);
    if (act == 1) {
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, zero, _CMP_LE_OQ), zero);
    } else if (act == 2) {
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, zero, _CMP_LT_OQ), zero);
        y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, six, _CMP_GT_OQ), six);
    }
    return y;
}

/* Prefetch for writing every line of the output of positions [q0, q1) x channels [0, kb)
 * (laid out as in direct_store). direct_vertex calls it as it starts staging a chunk, so the
 * lines are held for writing by the time the chunk is stored. Without it the stores were ~12%
 * of the direct path's samples (ResNet-50, one thread), nearly all on the stores themselves,
 * waiting for their lines (the next vertex's output is prefetched only for reading, before
 * its window and weights stream through the cache); with it ~5%. PREFETCHW: on every
 * AVX-512 CPU (AMD64 APM vol. 3, PREFETCHW; Intel SDM vol. 2B, PREFETCHW); 64-byte lines
 * (AMD64 APM vol. 2, 7.6.1; Intel SDM vol. 3A, 11.1): another line size only prefetches less
 * or more, never changes a result. */
IPK_TGT static void IPK_SFX(direct_pfw)(int64_t kb, int64_t q0, int64_t q1, int64_t kstride,
                                        int64_t GK, const float* out_k0)
{
    int64_t b = q0 < q1 ? q0 / kstride : 0, n = q0 - b * kstride, m;
    while (q0 < q1) {
        const int64_t run = q1 - q0 < kstride - n ? q1 - q0 : kstride - n;
        for (m = 0; m < kb; m++) {
            const float* row = out_k0 + (b * GK + m) * kstride + n;
            uintptr_t a = (uintptr_t)row & ~(uintptr_t)63;
            for (; a <= (uintptr_t)(row + run - 1); a += 64)
                __asm__ volatile("prefetchw %0" : : "m"(*(const char*)a));
        }
        q0 += run;
        b++;
        n = 0;
    }
}

/* direct_store's fp32 case: blocks of 16 positions x 16 channels, one transpose each, each
 * channel's row of a block one 64-byte store (the 8 x 8 transposes spent a quarter of their
 * time on the scalar tails: runs of 28 and 49 positions, chunk ends). The blocks run over
 * positions [q0, q1) regardless of images: where a block crosses the end of an image's run,
 * each row is stored with masks, the lanes of each image at that image's run. Lanes of
 * positions past q1 or channels past kb are never stored (rows past q1 are loaded as the
 * last row again; obuf rows are kvw >= kb floats, a multiple of 16, so loads stay inside).
 * The bias is added (and act applied) before the transpose, to one position's channels per
 * vector: the same operation per element. */
IPK_TGT static void IPK_SFX(direct_store16)(const float* obuf, int kvw, int64_t kb, int64_t q0,
                                            int64_t q1, int64_t kstride, int64_t GK,
                                            float* out_k0, const float* bk, int act)
{
    const int64_t b0 = q0 < q1 ? q0 / kstride : 0;   /* q0 < q1: kstride >= 1 */
    int64_t m, q;
    for (m = 0; m < kb; m += 16) {
        const int kc = (int)(kb - m < 16 ? kb - m : 16);
        const __m512 bv = bk ? _mm512_maskz_loadu_ps((__mmask16)((1u << kc) - 1), bk + m)
                             : _mm512_setzero_ps();
        int64_t bq = b0, nq0 = q0 - b0 * kstride;   /* block start: image bq, position nq0 */
        for (q = q0; q < q1; q += 16) {
            const int nq = (int)(q1 - q < 16 ? q1 - q : 16);
            const float* src = obuf + (q - q0) * kvw + m;
            int64_t b = bq, n = nq0;
            __m512 r[16];
            int i, j0;
            _Pragma("GCC unroll 16") for (i = 0; i < 16; i++)
                r[i] = _mm512_loadu_ps(src + (i < nq ? i : nq - 1) * kvw);
            if (bk)
                _Pragma("GCC unroll 16") for (i = 0; i < 16; i++)
                    r[i] = IPK_SFX(epi16)(r[i], bv, act);
            IPK_SFX(tr16x16)(r);
            for (j0 = 0; j0 < nq; b++, n = 0) {   /* lanes [j0, j0 + seg): image b from n */
                const int seg = (int)(nq - j0 < kstride - n ? nq - j0 : kstride - n);
                const __mmask16 k = (__mmask16)(((1u << seg) - 1) << j0);
                /* lane j to position n + j - j0 of channel m + i of image b */
                float* d = out_k0 + (b * GK + m) * kstride + n - j0;
                if (k == 0xFFFF) {   /* a masked store costs more, even with every lane */
                    _Pragma("GCC unroll 16") for (i = 0; i < 16; i++)
                        if (i < kc) _mm512_storeu_ps(d + i * kstride, r[i]);
                } else {
                    _Pragma("GCC unroll 16") for (i = 0; i < 16; i++)
                        if (i < kc) _mm512_mask_storeu_ps(d + i * kstride, k, r[i]);
                }
                j0 += seg;
            }
            for (nq0 += 16; nq0 >= kstride; bq++) nq0 -= kstride;
        }
    }
}
#endif

/* Store positions [q0, q1) x channels [0, kb) of obuf[q - q0][kvw] to the output of one
 * group (positions q = (b*OR + y)*OC + x; channel k of image b at (b*G*K + k)*kstride):
 * per channel one run per image. obuf was written by earlier micro-kernel calls (long
 * committed: reading a lane of a just-stored vector back stalls store forwarding).
 * bk (fp32 output only; NULL: none): the bias epilogue's values for these kb channels,
 * added (and ``act`` applied) to the fp32 sums as they are stored, as ipk_epi_f32. */
IPK_TGT static void IPK_SFX(direct_store)(const float* obuf, int kvw, int64_t kb, int64_t q0,
                                          int64_t q1, int64_t kstride, int64_t GK,
                                          unsigned char* out_k0, int out_dt, const float* bk,
                                          int act)
{
#if defined(IPK_ISA_AVX512)
    if (out_dt == IPK_F32) {
        IPK_SFX(direct_store16)(obuf, kvw, kb, q0, q1, kstride, GK, (float*)out_k0, bk, act);
        return;
    }
#endif
    while (q0 < q1) {
        const int64_t b = q0 / kstride, n0 = q0 - b * kstride;
        const int64_t len = q1 - q0 < kstride - n0 ? q1 - q0 : kstride - n0;
        int64_t m = 0, p;
#if defined(IPK_ISA_AVX2) || defined(IPK_ISA_AVX512)
        if (out_dt == IPK_F32)   /* whole groups of 8 channels x 8 positions by transposes */
            for (; m + 8 <= kb; m += 8) {
                float* d = (float*)out_k0 + (b * GK + m) * kstride + n0;
                for (p = 0; p + 8 <= len; p += 8) {
                    __m256 r[8];
                    int i;
                    for (i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(obuf + (p + i) * kvw + m);
                    IPK_SFX(tr8x8)(r);
                    if (bk)
                        for (i = 0; i < 8; i++) r[i] = IPK_SFX(epi8)(r[i], bk[m + i], act);
                    for (i = 0; i < 8; i++) _mm256_storeu_ps(d + i * kstride + p, r[i]);
                }
                for (; p < len; p++) {
                    int i;
                    if (bk)
                        for (i = 0; i < 8; i++)
                            d[i * kstride + p] = ipk_epi_f32(obuf[p * kvw + m + i], bk[m + i], act);
                    else
                        for (i = 0; i < 8; i++) d[i * kstride + p] = obuf[p * kvw + m + i];
                }
            }
#endif
        for (; m < kb; m++) {
            const float* src = obuf + m;
            const int64_t o = (b * GK + m) * kstride + n0;
            if (out_dt == IPK_F32) {
                float* restrict d = (float*)out_k0 + o;
                if (bk)
                    for (p = 0; p < len; p++) d[p] = ipk_epi_f32(src[p * kvw], bk[m], act);
                else
                    for (p = 0; p < len; p++) d[p] = src[p * kvw];
            } else {
                uint16_t* restrict d = (uint16_t*)out_k0 + o;
                for (p = 0; p < len; p++) d[p] = ipk_f2h(src[p * kvw]);
            }
        }
        obuf += len * kvw;
        q0 += len;
    }
}

/* The whole vertex through the direct path; W: scratch for the packed weights (w_floats),
 * followed by the tap offset table and, when the window needs padding, its zero-padded
 * copy (q_floats); P: the packed-window scratch (p_floats), unused by this path, stages the
 * results (obuf). */
IPK_TGT static void IPK_SFX(direct_vertex)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                           int64_t w_off, int64_t out_off, int out_dt, float* P,
                                           float* W, ipk_pf* pf, const ipk_epi* epi)
{
    /* the bias epilogue in the stores (fp32 output; the caller does it otherwise) */
    const float* bias = epi != NULL && epi->bias != NULL && out_dt == IPK_F32
                        ? (const float*)epi->bias + epi->ks0 : NULL;
    const int act = bias ? epi->act : 0;
    const int64_t B = g->B, G = g->G, C = g->C, K = g->K, T = g->T, CT = C * T;
    const int64_t OR = g->OR, OC = g->OC, kstride = OR * OC, npos = B * kstride;
    const int64_t sh = g->sh, sw = g->sw;
    const int64_t osz = ipk_dt_size(out_dt);
    int32_t* toff = (int32_t*)(W + g->w_floats);
    float* Q = g->q_floats > 0 ? (float*)(toff + g->o_ints) : NULL;
    /* where the taps read: the window in place, or its padded copy (one group at a time) */
    const int64_t cs = Q ? g->WCq : g->cs, rs = Q ? C * g->WCq : g->rs;
    const int64_t img = Q ? g->WRq * rs : g->WR * g->rs;
    const int64_t ro = Q ? g->ro + g->qr0 : g->ro, co = Q ? g->co + g->qc0 : g->co;
    const float* src[IPK_NRMAX];
    int64_t gi, c, k0;
    int i, j;

    {   /* spread the next vertex's prefetches over this vertex's micro-kernel calls: count
         * them as the loops below make them (a K block of kv vectors takes np positions) */
        const int64_t total = pf->n[0] + pf->n[1] + pf->n[2];
        int64_t calls = 1;
        for (k0 = 0; k0 < K; k0 += IPK_DK_KVMAX * VW) {
            const int64_t kb = K - k0 < IPK_DK_KVMAX * VW ? K - k0 : IPK_DK_KVMAX * VW;
            const int64_t kv = (kb + VW - 1) / VW;
            const int64_t np = IPK_DK_ACC / kv < IPK_NRMAX ? IPK_DK_ACC / kv : IPK_NRMAX;
            calls += G * ((npos + np - 1) / np);
        }
        pf->per_call = ((total + calls - 1) / calls + 63) & ~(int64_t)63;
        ipk_pf_taps(pf, CT);
    }
    {   /* toff[c*T + i*kw + j]: where tap (c, i, j) reads, relative to the output's origin
         * (the geometry in locals: toff may alias *g as far as the compiler knows, and
         * reloading it per entry cost ~1% of a ResNet-50 forward) */
        const int kh = g->kh, kw = g->kw;
        const int64_t ds = (int64_t)g->dh * rs, dw = g->dw;
        int32_t* tp = toff;
        for (c = 0; c < C; c++)
            for (i = 0; i < kh; i++)
                for (j = 0; j < kw; j++)
                    *tp++ = (int32_t)(c * cs + i * ds + j * dw);
    }

    for (gi = 0; gi < G; gi++) {
        const float* wsrc = (const float*)(tb + w_off) + gi * K * CT;
        const float* win_g = (const float*)(tb + win_off) + ipk_win_base(g, 0, gi);
        if (Q) {
            ipk_direct_pad(g, (const float*)(tb + win_off), gi, Q);
            win_g = Q;
        }
        for (k0 = 0; k0 < K; k0 += IPK_DK_KVMAX * VW) {
            const int64_t kb = K - k0 < IPK_DK_KVMAX * VW ? K - k0 : IPK_DK_KVMAX * VW;
            const int kv = (int)((kb + VW - 1) / VW), kvw = kv * VW;
            const int np = IPK_DK_ACC / kv < IPK_NRMAX ? IPK_DK_ACC / kv : IPK_NRMAX;
            /* positions per staged chunk: whole blocks that fit in P (>= one block: P holds
             * at least 192 floats, a block at most IPK_DK_ACC * VW: 48 floats (baseline),
             * 96 (AVX2), 192 (AVX-512)) */
            const int64_t chunk = (g->p_floats / kvw) / np * np;
            unsigned char* out_k0 = tb + out_off + (gi * K + k0) * kstride * osz;
            const float* bk = bias ? bias + gi * epi->Kb + k0 : NULL;
            int64_t q0, c0 = 0, b = 0, y = 0, x = 0;
            IPK_SFX(pack_wk)(wsrc, CT, K, k0, kvw, W);
            for (q0 = 0; q0 < npos; q0 += np) {
                const int n = (int)(npos - q0 < np ? npos - q0 : np);
                int64_t pfs;
                const unsigned char* pfp = ipk_pf_slice(pf, CT, &pfs);
                int p;
                if (q0 - c0 == chunk) {
                    IPK_SFX(direct_store)(P, kvw, kb, c0, q0, kstride, G * K, out_k0, out_dt,
                                          bk, act);
                    c0 = q0;
                }
#if defined(IPK_ISA_AVX512)
                if (q0 == c0 && out_dt == IPK_F32)   /* a chunk starts: its output lines */
                    IPK_SFX(direct_pfw)(kb, c0, c0 + chunk < npos ? c0 + chunk : npos, kstride,
                                        G * K, (const float*)out_k0);
#endif
                /* the n positions (b, y, x) of this block, in output order: along a row
                 * the pointer steps by sw, and is computed afresh where a row starts */
                {
                    const float* rp = NULL;
                    for (p = 0; p < n; p++) {
                        if (p == 0 || x == 0) rp = win_g + b * img + (y * sh + ro) * rs + co + x * sw;
                        src[p] = rp;
                        rp += sw;
                        if (++x == OC) { x = 0; if (++y == OR) { y = 0; b++; } }
                    }
                }
                IPK_SFX(dk_tab)[kv][n](src, toff, CT, W, P + (q0 - c0) * kvw, pfp, pfs);
            }
            IPK_SFX(direct_store)(P, kvw, kb, c0, npos, kstride, G * K, out_k0, out_dt, bk, act);
        }
    }
}
