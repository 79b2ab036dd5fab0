/* The small-channel path of the AVX-512 variant (see ipk_conv.h). Included by
 * ipk_conv_impl.h only when IPK_ISA_AVX512 is defined. */

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
#define IPK_SC_RYMAX 6
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
                    if (out_dt == IPK_F32)                                                          \
                        _mm512_mask_storeu_ps((float*)out + e, k, acc[m][u][v]);              \
                    else                                                                      \
                        _mm256_mask_storeu_epi16((uint16_t*)out + e, k,                       \
                            _mm512_cvtps_ph(acc[m][u][v], _MM_FROUND_TO_NEAREST_INT));        \
                }                                                                             \
        }                                                                                     \
    }
/* The (MR, RY, NX) register blocks of one kernel size KS: MR * RY * NX <= 24 accumulators,
 * RY <= IPK_SC_RYMAX, NX <= 4. Written once: instantiated here and indexed in sc_tab below,
 * so the two cannot drift. */
#define IPK_SC_BLOCKS(X, KS) \
    X(KS, 1, 1, 1) X(KS, 1, 2, 1) X(KS, 1, 3, 1) X(KS, 1, 4, 1) X(KS, 1, 5, 1) X(KS, 1, 6, 1) \
    X(KS, 1, 1, 2) X(KS, 1, 2, 2) X(KS, 1, 3, 2) X(KS, 1, 4, 2) X(KS, 1, 5, 2) X(KS, 1, 6, 2) \
    X(KS, 1, 1, 3) X(KS, 1, 2, 3) X(KS, 1, 3, 3) X(KS, 1, 4, 3) X(KS, 1, 5, 3) X(KS, 1, 6, 3) \
    X(KS, 1, 1, 4) X(KS, 1, 2, 4) X(KS, 1, 3, 4) X(KS, 1, 4, 4) X(KS, 1, 5, 4) X(KS, 1, 6, 4) \
    X(KS, 2, 1, 1) X(KS, 2, 2, 1) X(KS, 2, 3, 1) X(KS, 2, 4, 1) X(KS, 2, 5, 1) X(KS, 2, 6, 1) \
    X(KS, 2, 1, 2) X(KS, 2, 2, 2) X(KS, 2, 3, 2) X(KS, 2, 4, 2) X(KS, 2, 5, 2) X(KS, 2, 6, 2) \
    X(KS, 2, 1, 3) X(KS, 2, 2, 3) X(KS, 2, 3, 3) X(KS, 2, 4, 3) X(KS, 2, 1, 4) X(KS, 2, 2, 4) \
    X(KS, 2, 3, 4) X(KS, 4, 1, 1) X(KS, 4, 2, 1) X(KS, 4, 3, 1) X(KS, 4, 4, 1) X(KS, 4, 5, 1) \
    X(KS, 4, 6, 1) X(KS, 4, 1, 2) X(KS, 4, 2, 2) X(KS, 4, 3, 2) X(KS, 4, 1, 3) X(KS, 4, 2, 3) \
    X(KS, 4, 1, 4) X(KS, 8, 1, 1) X(KS, 8, 2, 1) X(KS, 8, 3, 1) X(KS, 8, 1, 2) X(KS, 8, 1, 3)
IPK_SC_BLOCKS(IPK_SCK, 1)
IPK_SC_BLOCKS(IPK_SCK, 3)
IPK_SC_BLOCKS(IPK_SCK, 5)
#undef IPK_SCK
typedef void (*IPK_SFX(sc_fn))(const float* const*, int64_t, int64_t, const float*,
                               const __mmask16*, const float* restrict, unsigned char* restrict,
                               int64_t, int64_t, __mmask16, int, int);
/* [KS 1/3/5][log2 MR][RY - 1][NX - 1]; absent blocks are NULL (never picked, see sc_rymax) */
#define IPK_SC_ENTRY(KS, MR, RY, NX) \
    [(KS) / 2][IPK_LOG2_MR(MR)][(RY) - 1][(NX) - 1] = IPK_SFX(sc_##KS##_##MR##_##RY##_##NX),
static const IPK_SFX(sc_fn) IPK_SFX(sc_tab)[3][4][IPK_SC_RYMAX][4] = {
    IPK_SC_BLOCKS(IPK_SC_ENTRY, 1) IPK_SC_BLOCKS(IPK_SC_ENTRY, 3) IPK_SC_BLOCKS(IPK_SC_ENTRY, 5)};
#undef IPK_SC_ENTRY
#undef IPK_SC_BLOCKS

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
    const int64_t WR = g->WR, WC = g->WC, CT = C * g->T, isz = ipk_dt_size(in_dt), osz = ipk_dt_size(out_dt);
    const int64_t co = g->co, ro = g->ro;
    const int64_t Wp = (OC + 15) / 16 * 16 + KS - 1, Mr = OR + KS - 1, nvec = (Wp + 15) / 16;
    const int64_t nvt = (OC + 15) / 16;   /* vectors per output row */
    const int ksi = KS == 1 ? 0 : KS == 3 ? 1 : 2;
    /* in place needs every vector but a row's first and last inside the window */
    const int direct = in_dt == IPK_F32 && (nvt <= 2 || (co + 16 >= 0 && co + 16 * (nvt - 1) + KS - 2 < WC));
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
        if (K == 1 && in_dt == IPK_F32)   /* depthwise: the weights are already [c][t] fp32 */
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
                const int mri = IPK_LOG2_MR(mr);
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
