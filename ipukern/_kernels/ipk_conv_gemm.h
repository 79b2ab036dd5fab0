/* The GEMM path of one ISA variant (see ipk_conv.h, steps 1-4): pack the window into stride
 * phase planes, pack the weights in blocks of MR output channels, run a register-blocked
 * micro-kernel over all taps, store the valid columns. Included by ipk_conv_impl.h, which
 * defines the vector vocabulary and the shared helpers. */

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

/* The (MR, NR) blocks, written once: instantiated here and indexed in mk_tab below, so the
 * two cannot drift. 16 vector registers hold 12 accumulators (MR <= 4); 32 hold 24 (MR <= 8). */
#define IPK_MK_BLOCKS(X) \
    X(1, 1) X(1, 2) X(1, 3) X(1, 4) X(1, 5) X(1, 6) X(1, 7) X(1, 8) \
    X(1, 9) X(1, 10) X(1, 11) X(1, 12) X(2, 1) X(2, 2) X(2, 3) X(2, 4) \
    X(2, 5) X(2, 6) X(4, 1) X(4, 2) X(4, 3)
#if IPK_ACC >= 24
#define IPK_MK_BLOCKS_WIDE(X) \
    X(2, 7) X(2, 8) X(2, 9) X(2, 10) X(2, 11) X(2, 12) X(4, 4) X(4, 5) \
    X(4, 6) X(8, 1) X(8, 2) X(8, 3)
#else
#define IPK_MK_BLOCKS_WIDE(X)
#endif
IPK_MK_BLOCKS(IPK_MK)
IPK_MK_BLOCKS_WIDE(IPK_MK)

/* [log2 MR][NR]; absent blocks are NULL (never picked: NR <= IPK_ACC / MR) */
#define IPK_MK_ENTRY(MR, NR) [IPK_LOG2_MR(MR)][NR] = IPK_SFX(mk_##MR##_##NR),
static const IPK_SFX(mk_fn) IPK_SFX(mk_tab)[4][IPK_NRMAX + 1] = {
    IPK_MK_BLOCKS(IPK_MK_ENTRY) IPK_MK_BLOCKS_WIDE(IPK_MK_ENTRY)};
#undef IPK_MK_ENTRY
#undef IPK_MK_BLOCKS
#undef IPK_MK_BLOCKS_WIDE
#undef IPK_MK

/* ---------------------------------------------------------------- window packing */
static inline int64_t IPK_SFX(cdiv)(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static inline int64_t IPK_SFX(fdiv)(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Pack window (b, g) = ``src`` (channel c, row r at c*cs + r*rs) into P[c][phase][Mr][Wp]
 * (fp32, zero padded). */
IPK_TGT static void IPK_SFX(pack_window)(const ipk_geom* g, const unsigned char* src, int in_dt,
                                         float* restrict P)
{
    const int64_t C = g->C, WR = g->WR, WC = g->WC, Mr = g->Mr, Wp = g->Wp;
    const int64_t rs = g->rs, cs = g->cs;
    const int64_t sh = g->sh, sw = g->sw, ro = g->ro, co = g->co, plane = g->plane;
    int64_t lo[IPK_CONV_MAX_K], hi[IPK_CONV_MAX_K], c, mrow;
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
        const int64_t nvec = (Wp + 15) / 16, isz = ipk_dt_size(in_dt);
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
        const int64_t nvec = (Wp + 15) / 16, isz = ipk_dt_size(in_dt);
        __mmask16 klo[64], khi[64];
        /* packed column m of phase ph <- window column q = 2m + ph + co: a block of 16
         * packed columns of both phases is 32 consecutive window columns starting at
         * q0 = 32*v + co, split into even / odd lanes */
        for (int64_t m = 0; m < nvec; m++) {
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
                        for (int64_t m = 0; m < nvec; m++) {
                            /* the last block is stored masked: past Wp is another plane */
                            const __mmask16 ks = m == nvec - 1 ? klast : (__mmask16)0xFFFF;
                            __m512 lo_v = _mm512_setzero_ps(), hi_v = _mm512_setzero_ps();
                            if (inside) {
                                const uintptr_t sp = srow + (uintptr_t)(32 * m * isz);
                                if (in_dt == IPK_F32) {
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
                    if (b > a)
                        IPK_SFX(load_row)(dst + a, src, c * cs + r * rs + a * sw + g->phc_val[pc] + co,
                                          in_dt, sw, b - a, 0);
                }
            }
        }
    }
    /* the tail that the last vectors may read: zero (finite values, no denormal stalls) */
    IPK_SFX(zero_f32)(P + C * g->nph * plane, g->p_floats - C * g->nph * plane);
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
            if (out_dt == IPK_F32)
                IPK_SFX(copy_f32)((float*)out_k0 + m * kstride + y * OC + x, src + (n - n0), len);
            else
                IPK_SFX(f2h_run)((uint16_t*)out_k0 + m * kstride + y * OC + x, src + (n - n0), len);
            n += len;
            x += len;
        }
    }
}

/* The whole vertex through the GEMM path; P, W: packed window and weights (scratch). */
IPK_TGT static void IPK_SFX(gemm_vertex)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                         int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                         float* P, float* W, ipk_pf* pf)
{
    const int64_t B = g->B, G = g->G, C = g->C, K = g->K, T = g->T, CT = C * T, N = g->N;
    const int64_t isz = ipk_dt_size(in_dt), osz = ipk_dt_size(out_dt);
    const int64_t kstride = g->OR * g->OC;
    const int64_t Nv = (N + VW - 1) / VW;
    int32_t* offs = (int32_t*)(W + g->w_floats);
    float tile[IPK_ACC * VW] __attribute__((aligned(64)));
    int64_t b, gi, c;
    int i, j;

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
        if (K == 1 && in_dt == IPK_F32)   /* depthwise: the weights are already [c][t] fp32 */
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
                const int lmr = IPK_LOG2_MR(mr);
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
                    if (out_dt == IPK_F32 && g->Wp == g->OC && mrv == mr && n0 + nr * VW <= N) {
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
