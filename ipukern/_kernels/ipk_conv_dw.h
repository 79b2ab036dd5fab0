/* The depthwise path of one ISA variant (baseline and AVX2; see ipk_conv.h): vertices with
 * one input and one output channel per group (C = K = 1: depthwise layers), any kernel,
 * stride, dilation, padding and dtype. Included by ipk_conv_impl.h, which defines the vector
 * vocabulary and the shared helpers.
 *
 * The GEMM path handles such a vertex one (b, g) window at a time: pack it, zero the tail,
 * run a few taps of MR = 1 micro-kernel on a handful of vectors, stage and store. Its windows
 * are small (a 2 x 7 or 1 x 37 output is typical) so that fixed cost per window, not the
 * FMAs, bounded it (measured: 3-8 GFLOP/s). Here every image's window of one group is packed
 * once, with rows padded to whole vectors of outputs, as stride-phase planes like the GEMM
 * path's ([B][phase][Mr][dwq], zero outside the window); then the output vectors of all
 * images and rows of the group form one list, worked through in blocks of up to IPK_DW_NB
 * vectors whose accumulators stay in registers over the taps:
 *
 *     acc[n] += w[t] * P[src[n] + toff[t] .. + VW)      lanes over output columns
 *
 * Every output element is one FMA chain from +0.0 over the taps in the order t = i*kw + j,
 * padding taps included (they read +0.0 from the packed planes), exactly as in the GEMM
 * path, so the bits are the GEMM path's (the tests compare them). */

#define IPK_DW_NB 12   /* accumulators per block: 12 of 16 vector registers */

/* dwk_NB: tile[n*VW + l] = sum_t w[t] * src[n][toff[t] + l], for the NB vectors n. */
#define IPK_DWK(NB)                                                                          \
    IPK_TGT static void IPK_SFX(dwk_##NB)(const float* const* src,                          \
                                          const int32_t* restrict toff, int64_t ntaps,       \
                                          const float* restrict w, float* restrict tile)     \
    {                                                                                        \
        V acc[NB];                                                                           \
        const float* s[NB];                                                                  \
        int n;                                                                               \
        int64_t t;                                                                           \
        _Pragma("GCC unroll 16") for (n = 0; n < NB; n++) {                                  \
            s[n] = src[n];                                                                   \
            acc[n] = VZERO();                                                                \
        }                                                                                    \
        for (t = 0; t < ntaps; t++) {                                                        \
            const int64_t o = toff[t];                                                       \
            const V wv = VSET1(w[t]);                                                        \
            _Pragma("GCC unroll 16") for (n = 0; n < NB; n++)                                \
                acc[n] = VFMA(wv, VLD(s[n] + o), acc[n]);                                    \
        }                                                                                    \
        _Pragma("GCC unroll 16") for (n = 0; n < NB; n++) VST(tile + n * VW, acc[n]);         \
    }

typedef void (*IPK_SFX(dwk_fn))(const float* const* src, const int32_t* restrict toff,
                                 int64_t ntaps, const float* restrict w, float* restrict tile);

#define IPK_DW_BLOCKS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
IPK_DW_BLOCKS(IPK_DWK)
#define IPK_DW_ENTRY(NB) [NB] = IPK_SFX(dwk_##NB),
static const IPK_SFX(dwk_fn) IPK_SFX(dwk_tab)[IPK_DW_NB + 1] = {IPK_DW_BLOCKS(IPK_DW_ENTRY)};
#undef IPK_DW_ENTRY
#undef IPK_DW_BLOCKS
#undef IPK_DWK

/* Prefetch the next ``nb`` bytes of the next vertex's operands (into L2), a line at a time.
 * A depthwise vertex does few FMAs per byte, so its time goes to memory: the next vertex's
 * bytes are all prefetched, spread over this vertex's blocks (not capped per tap as in the
 * other paths, which would leave part of them to demand misses). */
static inline void IPK_SFX(dw_prefetch)(ipk_pf* pf, int64_t nb)
{
    int r;
    for (r = 0; r < 3 && nb > 0; r++)
        for (; pf->n[r] > 0 && nb > 0; pf->p[r] += 64, pf->n[r] -= 64, nb -= 64)
            if (r == 2) __builtin_prefetch(pf->p[r], 1, 2);   /* the output: to be written */
            else __builtin_prefetch(pf->p[r], 0, 2);
}

#if defined(IPK_ISA_AVX2)
/* dw_pack for fp32 windows with column stride 2 whose taps read both column phases (3x3 and
 * 5x5 stride 2): 16 consecutive window columns are loaded once and split into the 8 even and
 * 8 odd ones by shuffles (plane pc holds columns 2m + pc + co). Columns where either phase
 * leaves the window are copied one by one; the values are those of the scalar copy. */
IPK_TGT static void IPK_SFX(dw_pack_s2)(const ipk_geom* g, const float* src, const int64_t* lo,
                                        const int64_t* hi, float* restrict Pb)
{
    const int64_t Wq = g->dwq, Mr = g->Mr, co = g->co + g->phc_val[0];
    /* phc_val = {0, 1}: both phases; packed column m of both reads window columns 2m + co
     * and 2m + 1 + co, inside for m in [m0, m1) */
    const int64_t m0 = lo[0] > lo[1] ? lo[0] : lo[1], m1 = hi[0] < hi[1] ? hi[0] : hi[1];
    int64_t mrow, m;
    int pr, pc;
    for (pr = 0; pr < g->nphr; pr++) {
        float* d0 = Pb + (int64_t)(pr * 2) * Mr * Wq;
        float* d1 = d0 + Mr * Wq;
        for (mrow = 0; mrow < Mr; mrow++, d0 += Wq, d1 += Wq) {
            const int64_t r = mrow * g->sh + g->phr_val[pr] + g->ro;
            const float* sp = src + r * g->rs + co;
            /* exact-length zeros (the two planes are written row by row in step, so a
             * row's overrun could reach a row of the other plane already written), then
             * the values over them */
            IPK_SFX(zero_f32)(d0, Wq);
            IPK_SFX(zero_f32)(d1, Wq);
            if (r < 0 || r >= g->WR) continue;
            for (pc = 0; pc < 2; pc++) {
                float* d = pc ? d1 : d0;
                for (m = lo[pc]; m < (m0 > lo[pc] ? m0 : lo[pc]) && m < hi[pc]; m++)
                    d[m] = sp[2 * m + pc];
            }
            m = m0 > m1 ? m1 : m0;
            for (; m + 8 <= m1; m += 8) {
                const __m256 a = _mm256_loadu_ps(sp + 2 * m), b = _mm256_loadu_ps(sp + 2 * m + 8);
                /* shuffle_ps works per 128-bit lane: evens/odds come out as lanes 0,2,1,3 */
                _mm256_storeu_ps(d0 + m, _mm256_castpd_ps(_mm256_permute4x64_pd(
                    _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8)));
                _mm256_storeu_ps(d1 + m, _mm256_castpd_ps(_mm256_permute4x64_pd(
                    _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8)));
            }
            for (pc = 0; pc < 2; pc++) {
                float* d = pc ? d1 : d0;
                int64_t q = m > lo[pc] ? m : lo[pc];
                for (; q < hi[pc]; q++) d[q] = sp[2 * q + pc];
            }
        }
    }
}
#endif

/* Pack window (b, g) = ``src`` (row r at r*rs) into Pb[phase][Mr][dwq], fp32, zero outside
 * the window; lo/hi: per column phase, the packed columns that lie inside it. Each row is
 * written left to right (zeros, values, zeros), so a store's overrun is overwritten. */
IPK_TGT static void IPK_SFX(dw_pack)(const ipk_geom* g, const unsigned char* src, int in_dt,
                                     const int64_t* lo, const int64_t* hi, float* restrict Pb)
{
    const int64_t Wq = g->dwq, Mr = g->Mr, sw = g->sw;
    int64_t mrow;
    int pr, pc;
#if defined(IPK_ISA_AVX2)
    if (in_dt == IPK_F32 && sw == 2 && g->nphc == 2) {
        IPK_SFX(dw_pack_s2)(g, (const float*)src, lo, hi, Pb);
        return;
    }
#endif
    for (pr = 0; pr < g->nphr; pr++)
        for (pc = 0; pc < g->nphc; pc++) {
            float* dst = Pb + (int64_t)(pr * g->nphc + pc) * Mr * Wq;
            for (mrow = 0; mrow < Mr; mrow++, dst += Wq) {
                const int64_t r = mrow * g->sh + g->phr_val[pr] + g->ro;
                const int64_t a = lo[pc], b = hi[pc];
                if (r < 0 || r >= g->WR || b <= a) {
                    IPK_SFX(dw_zero)(dst, Wq);
                    continue;
                }
                IPK_SFX(dw_zero)(dst, a);
                IPK_SFX(load_row)(dst + a, src, r * g->rs + a * sw + g->phc_val[pc] + g->co,
                                  in_dt, sw, b - a, 1);
                IPK_SFX(dw_zero)(dst + b, Wq - b);
            }
        }
}

/* Store the n vectors of a computed block (tile[k*VW ..], output vector q0 + k of the
 * group's list: image b, row y, columns xv*VW ..) to the output, dropping lanes past OC. */
IPK_TGT static void IPK_SFX(dw_store)(const ipk_geom* g, const float* tile, int n, int64_t q0,
                                      int64_t nvo, unsigned char* out_g, int out_dt)
{
    const int64_t OC = g->OC, img = g->G * g->OR * OC;
    int64_t b = q0 / (g->OR * nvo), rest = q0 - b * g->OR * nvo, y = rest / nvo, xv = rest - y * nvo;
    int k;
    for (k = 0; k < n; k++) {
        const int64_t x0 = xv * VW, len = OC - x0 < VW ? OC - x0 : VW;
        const int64_t e = b * img + y * OC + x0;
        if (out_dt == IPK_F32) IPK_SFX(copy_f32)((float*)out_g + e, tile + k * VW, len);
        else IPK_SFX(f2h_run)((uint16_t*)out_g + e, tile + k * VW, len);
        if (++xv == nvo) { xv = 0; if (++y == g->OR) { y = 0; b++; } }
    }
}

/* The whole vertex through the depthwise path; P: scratch (ipk_geom_dw). */
IPK_TGT static void IPK_SFX(dw_vertex)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                       int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                       float* P, ipk_pf* pf)
{
    const int64_t B = g->B, G = g->G, OR = g->OR, OC = g->OC, T = g->T, Wq = g->dwq;
    const int64_t isz = ipk_dt_size(in_dt), osz = ipk_dt_size(out_dt);
    const int64_t planeq = g->Mr * Wq, imgq = g->nph * planeq;
    const int64_t nvo = (OC + VW - 1) / VW, nq = B * OR * nvo;
    float* wv = P + g->dw_floats;
    int32_t* toff = (int32_t*)(wv + ipk_al16(T));
    float* tile = (float*)(toff + ipk_al16(T));
    const float* src[IPK_DW_NB];
    int64_t lo[IPK_CONV_MAX_K], hi[IPK_CONV_MAX_K], gi, b, t;
    int i, j, pc;

    {   /* spread the next vertex's prefetches over this vertex's blocks */
        const int64_t calls = G * ((nq + IPK_DW_NB - 1) / IPK_DW_NB);
        pf->per_call = ((pf->n[0] + pf->n[1] + pf->n[2] + calls - 1) / calls + 63) & ~(int64_t)63;
    }
    for (i = 0; i < g->kh; i++)
        for (j = 0; j < g->kw; j++)
            toff[i * g->kw + j] = (int32_t)(((int64_t)g->phr_of[i] * g->nphc + g->phc_of[j]) * planeq
                                            + (int64_t)g->ir[i] * Wq + g->jc[j]);
    /* per column phase, the packed columns m with 0 <= m*sw + ph + co <= WC-1 */
    for (pc = 0; pc < g->nphc; pc++) {
        const int64_t ph = g->phc_val[pc];
        int64_t a = IPK_SFX(cdiv)(-ph - g->co, g->sw), e = IPK_SFX(fdiv)(g->WC - 1 - ph - g->co, g->sw) + 1;
        a = a < 0 ? 0 : a > Wq ? Wq : a;
        e = e > Wq ? Wq : e < a ? a : e;
        lo[pc] = a;
        hi[pc] = e;
    }
    for (gi = 0; gi < G; gi++) {
        unsigned char* out_g = tb + out_off + gi * OR * OC * osz;
        int64_t q0, y = 0, xv = 0;
        b = 0;
        for (t = 0; t < T; t++) wv[t] = IPK_SFX(ldw)(tb + w_off, gi * T + t, in_dt);
        for (b = 0; b < B; b++)
            IPK_SFX(dw_pack)(g, tb + win_off + ipk_win_base(g, b, gi) * isz, in_dt, lo, hi,
                             P + b * imgq);
        b = 0;
        for (q0 = 0; q0 < nq; q0 += IPK_DW_NB) {
            const int n = (int)(nq - q0 < IPK_DW_NB ? nq - q0 : IPK_DW_NB);
            int k;
            for (k = 0; k < n; k++) {
                src[k] = P + b * imgq + y * Wq + xv * VW;
                if (++xv == nvo) { xv = 0; if (++y == OR) { y = 0; b++; } }
            }
            IPK_SFX(dwk_tab)[n](src, toff, T, wv, tile);
            IPK_SFX(dw_prefetch)(pf, pf->per_call);
            IPK_SFX(dw_store)(g, tile, n, q0, nvo, out_g, out_dt);
        }
    }
}
