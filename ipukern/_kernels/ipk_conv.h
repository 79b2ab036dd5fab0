/* Per-tile convolution partials: the compiled hot loop behind ipukern._kernels._conv.
 *
 * One vertex computes, for every (b, g) of its window,
 *
 *     out[b][g][k][y][x] = sum_{c,i,j} win[b][g][c][y*sh + i*dh + row_org][x*sw + j*dw + col_org]
 *                                      * wts[g][k][c][i][j]
 *
 * with taps outside the window reading +0.0 (zero padding). The work is shaped as a GEMM:
 *
 *  1. the window of one (b, g) is packed into fp32 scratch, zero padded, with the columns
 *     (and rows) split into stride phases, as planes of Mr rows x Wp columns. Then for every
 *     tap t = (c, i, j) and every output position n = y*Wp + x the input value sits at
 *     P[offs[t] + n]: consecutive n read consecutive floats. (Wp - OC columns per row are
 *     computed and thrown away; that is the price of one flat index.)
 *  2. the weights of group g are packed to fp32 in blocks of MR output channels with k
 *     innermost: W[block][t][m].
 *  3. a register-blocked micro-kernel keeps MR x NR vectors of accumulators in registers and
 *     runs over all taps with broadcast-FMA: acc[m][r] += W[t][m] * P[offs[t] + n0 + r*VW ..].
 *  4. the valid columns of the block are stored (rounded to the output dtype).
 *
 * Vertices with few channels per group (C * K <= 32: depthwise, cpg 2 and 4; stride 1,
 * dilation 1, 1x1/3x3/5x5) take their own AVX-512 kernels instead (ipk_conv_impl.h): a block
 * of output channels x rows x vectors stays in registers while input rows stream past, so
 * each loaded vector serves every output that uses it; fp32 windows are read in place and
 * results go straight to the output. Others with few channels (cpg 8, strided, dilated) use
 * the GEMM path with MR = K: blocks of 1, 2, 4 or 8 output channels by up to 12 vectors, so
 * no lanes are spent on absent channels. fp32 vertices whose every tap lies inside the
 * window (no padding: every 1x1 layer) take the direct path instead in every variant
 * (ipk_conv_direct.h): lanes over output channels, input values broadcast from the window in
 * place, no packing; fp32 vertices that need padding and have a full vector of output
 * channels per group or more (8 in AVX2, 16 in AVX-512: 3x3 layers) take it on a zero-padded
 * copy of the window. In the AVX-512 variant the few-channel kernels above come first.
 * Depthwise vertices (C = K = 1) of the baseline and AVX2 variants take their own path
 * (ipk_conv_dw.h): every image's window of a group packed once, lanes over output columns,
 * blocks of 12 vectors held over the taps.
 * While a thread computes a vertex it prefetches the next
 * one's operands (the arena is much larger than the caches).
 *
 * Every output element is one FMA chain over the taps in the fixed order t = c*kh*kw + i*kw
 * + j, whatever the blocking, the ISA variant or the thread, so results are deterministic and
 * independent of the thread count. Every variant fuses each multiply-add (one rounding): the
 * AVX-512 and AVX2 variants with FMA instructions, the baseline (SSE2 / NEON / plain C) with
 * C99 fmaf, so all variants and both paths give bitwise equal results.
 *
 * ISA variants are compiled into the same binary with target attributes and picked at run
 * time (ipk_conv_pick), so -march=native is not needed for speed.
 */
#ifndef IPK_CONV_H
#define IPK_CONV_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "ipk_dtype.h"
#include "ipk_half.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) \
    && !defined(IPK_NO_SIMD)
#define IPK_X86 1
#include <immintrin.h>
#endif

/* status codes returned by ipk_conv_check (shared with ipukern/convkernel.py) */
enum {
    IPK_CONV_OK = 0,
    IPK_CONV_EPARAM = 1,    /* kernel/stride/dilation outside 1..IPK_CONV_MAX_K, bad dtype code */
    IPK_CONV_EDIMS = 2,     /* a negative dim, or sizes too large for 32-bit tap offsets */
    IPK_CONV_ETILE = 3,     /* tiles[v] outside the arena's rows */
    IPK_CONV_ERANGE = 4,    /* window / weights / output region outside the tile's row */
    IPK_CONV_EALIGN = 5,    /* an operand address not aligned to its element size */
    IPK_CONV_ESCRATCH = 6,  /* scratch row shorter than the vertex needs */
    IPK_CONV_ETHREADS = 7,  /* n_threads < 1 or more threads than scratch rows */
};

#define IPK_CONV_MAX_K 64   /* kh, kw, sh, sw, dh, dw are at most this */

/* index of a block of MR = 1, 2, 4, 8 output channels in the kernel tables */
#define IPK_LOG2_MR(MR) ((MR) == 1 ? 0 : (MR) == 2 ? 1 : (MR) == 4 ? 2 : 3)

typedef struct {
    int64_t B, G, C, K, WR, WC, OR, OC, ro, co;
    /* window layout [B][WR][G*C][WC] (rows outermost, see ipukern/convlayout.py): element
     * (b, g, c, r, q) sits at win_base(b, g) + c*cs + r*rs + q */
    int64_t rs, cs;
    int kh, kw, sh, sw, dh, dw, T;
    int nphr, nphc;                  /* distinct row / column stride phases used by the taps */
    int64_t Mr, Wp, plane, nph;      /* packed plane: Mr rows x Wp columns, nph planes/chan */
    int64_t N;                       /* flat outputs per (b, g, k): OR * Wp */
    int64_t p_floats;                /* packed window incl. tail */
    int64_t w_floats;                /* packed weights (upper bound over ISA blockings) */
    int64_t o_ints;                  /* tap offset table: C * T */
    /* the direct path on a window that needs padding (ipk_conv_direct.h) reads a zero-padded
     * copy of one group's window, [B][WRq][C][WCq], window row/column 0 at (qr0, qc0) */
    int64_t WRq, WCq, qr0, qc0;
    int64_t q_floats;                /* that copy; 0: no padded copy (none needed, or K < 8) */
    /* the depthwise path (C = K = 1, ipk_conv_dw.h): every image's window of one group packed
     * as [B][phase][Mr][dwq] (dwq: whole vectors of outputs plus the taps' reach) */
    int64_t dwq, dw_floats;          /* dw_floats = 0: not depthwise, or too large */
    int64_t need;                    /* scratch floats for this vertex */
    /* per tap row i / column j: packed-plane phase index and shift in rows / columns */
    int8_t phr_of[IPK_CONV_MAX_K], phc_of[IPK_CONV_MAX_K];
    int8_t phr_val[IPK_CONV_MAX_K], phc_val[IPK_CONV_MAX_K];
    int32_t ir[IPK_CONV_MAX_K], jc[IPK_CONV_MAX_K];
} ipk_geom;

static inline int64_t ipk_al16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Products of non-negative sizes, saturating at INT64_MAX: dims come from the caller, and a
 * wrapped product could pass a range check. */
static inline int64_t ipk_smul(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return INT64_MAX;
    return r;
}
static inline int64_t ipk_smul4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    return ipk_smul(ipk_smul(a, b), ipk_smul(c, d));
}

/* The zero-padded window copy of the direct path (g->q_floats = 0 when every tap of every
 * output lies inside the window, or the vertex has fewer than 8 output channels per group:
 * lanes run over channels there, so depthwise layers keep the packing path). */
static inline void ipk_geom_padded(ipk_geom* g)
{
    const int64_t rneed = g->ro + (g->OR - 1) * g->sh + (int64_t)(g->kh - 1) * g->dh + 1;
    const int64_t cneed = g->co + (g->OC - 1) * g->sw + (int64_t)(g->kw - 1) * g->dw + 1;
    int64_t n;
    g->WRq = g->WCq = g->qr0 = g->qc0 = g->q_floats = 0;
    if (g->OR < 1 || g->OC < 1 || g->K < 8
        || (g->ro >= 0 && g->co >= 0 && rneed <= g->WR && cneed <= g->WC))
        return;
    g->qr0 = g->ro < 0 ? -g->ro : 0;
    g->qc0 = g->co < 0 ? -g->co : 0;
    g->WRq = g->qr0 + (rneed > g->WR ? rneed : g->WR);
    g->WCq = g->qc0 + (cneed > g->WC ? cneed : g->WC);
    /* int32 tap offsets within one image's copy; the copy itself at most 2^26 floats */
    n = ipk_smul4(g->B, g->WRq, g->C, g->WCq);
    if (ipk_smul(ipk_smul(g->WRq, g->C), g->WCq) > ((int64_t)1 << 30) || n > ((int64_t)1 << 26))
        return;
    g->q_floats = ipk_al16(n + 16);
}

/* The depthwise path's packed windows (ipk_conv_dw.h): rows padded to whole 16-float vectors
 * of outputs (any ISA's) plus the taps' reach; then its scratch: packed windows, the group's
 * fp32 weights, the tap offsets and a staging tile. */
static inline void ipk_geom_dw(ipk_geom* g)
{
    const int64_t wq = (g->OC + 15) / 16 * 16 + ((int64_t)(g->kw - 1) * g->dw) / g->sw;
    const int64_t n = ipk_smul4(g->B, g->nph, g->Mr, wq);
    int64_t need;
    g->dwq = g->dw_floats = 0;
    if (g->C != 1 || g->K != 1 || g->OR < 1 || g->OC < 1 || n > ((int64_t)1 << 26)) return;
    g->dwq = wq;
    g->dw_floats = ipk_al16(n + 16);   /* + slack for the last row's whole-vector stores */
    need = 16 + g->dw_floats + 2 * ipk_al16(g->T) + 16 * 16 + 64;
    if (need > g->need) g->need = need;
}

/* Fill g from one row of dims (B, G, C, K, WR, WC, OR, OC, row_org, col_org). Returns a
 * status code; on success g->need is the scratch this vertex needs (floats). */
static inline int ipk_geom_init(ipk_geom* g, const int64_t* d, int kh, int kw, int sh, int sw,
                                int dh, int dw)
{
    int i, j, p;
    if (kh < 1 || kw < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 || kh > IPK_CONV_MAX_K
        || kw > IPK_CONV_MAX_K || sh > IPK_CONV_MAX_K || sw > IPK_CONV_MAX_K
        || dh > IPK_CONV_MAX_K || dw > IPK_CONV_MAX_K)
        return IPK_CONV_EPARAM;
    g->B = d[0]; g->G = d[1]; g->C = d[2]; g->K = d[3]; g->WR = d[4]; g->WC = d[5];
    g->OR = d[6]; g->OC = d[7]; g->ro = d[8]; g->co = d[9];
    for (i = 0; i < 8; i++)
        if (d[i] < 0 || d[i] > ((int64_t)1 << 30)) return IPK_CONV_EDIMS;
    g->cs = g->WC;
    g->rs = ipk_smul(ipk_smul(g->G, g->C), g->WC);
    if (d[8] < -((int64_t)1 << 30) || d[8] > ((int64_t)1 << 30)
        || d[9] < -((int64_t)1 << 30) || d[9] > ((int64_t)1 << 30))
        return IPK_CONV_EDIMS;
    g->kh = kh; g->kw = kw; g->sh = sh; g->sw = sw; g->dh = dh; g->dw = dw; g->T = kh * kw;
    /* compact the stride phases the taps use, in increasing phase order (stride 1: one
     * phase, no divisions: this runs once per vertex) */
    if (sh == 1 && sw == 1) {
        g->nphr = g->nphc = 1;
        g->phr_val[0] = g->phc_val[0] = 0;
        for (i = 0; i < kh; i++) { g->phr_of[i] = 0; g->ir[i] = i * dh; }
        for (j = 0; j < kw; j++) { g->phc_of[j] = 0; g->jc[j] = j * dw; }
    } else {
        int used[IPK_CONV_MAX_K], rank[IPK_CONV_MAX_K], n = 0;
        for (p = 0; p < sh; p++) used[p] = 0;
        for (i = 0; i < kh; i++) used[(i * dh) % sh] = 1;
        for (p = 0; p < sh; p++) { rank[p] = n; if (used[p]) g->phr_val[n++] = (int8_t)p; }
        g->nphr = n;
        for (i = 0; i < kh; i++) { g->phr_of[i] = (int8_t)rank[(i * dh) % sh]; g->ir[i] = (i * dh) / sh; }
        n = 0;
        for (p = 0; p < sw; p++) used[p] = 0;
        for (j = 0; j < kw; j++) used[(j * dw) % sw] = 1;
        for (p = 0; p < sw; p++) { rank[p] = n; if (used[p]) g->phc_val[n++] = (int8_t)p; }
        g->nphc = n;
        for (j = 0; j < kw; j++) { g->phc_of[j] = (int8_t)rank[(j * dw) % sw]; g->jc[j] = (j * dw) / sw; }
    }
    g->Mr = g->OR + ((int64_t)(kh - 1) * dh) / sh;
    g->Wp = g->OC + ((int64_t)(kw - 1) * dw) / sw;
    g->plane = g->Mr * g->Wp;                       /* each factor < 2^31: no overflow */
    g->nph = (int64_t)g->nphr * g->nphc;
    g->N = g->OR * g->Wp;
    /* tap offsets are int32: keep the packed window well inside that */
    if (ipk_smul(ipk_smul(g->C, g->nph), g->plane) > ((int64_t)1 << 30)
        || ipk_smul4(g->K + 15, g->C, g->T, 1) > ((int64_t)1 << 36))
        return IPK_CONV_EDIMS;
    /* tail: the last vector of the last plane reads up to jc_max + VW - 1 <= Wp + 15 floats
     * past the end of the packed planes */
    g->p_floats = ipk_al16(g->C * g->nph * g->plane + g->Wp + 32);
    /* the small-channel path (AVX-512) pads rows to whole vectors: up to 15 more per row */
    g->p_floats += ipk_al16(16 * (g->C <= 8 ? g->C : 1) * g->Mr + 128);
    /* K rounded up to whole vectors of the widest variant (the direct path packs kv * 16) */
    g->w_floats = ipk_al16((g->K + 15) * g->C * g->T);
    g->o_ints = ipk_al16(g->C * g->T);
    ipk_geom_padded(g);
    g->need = 16 + g->p_floats + g->w_floats + g->o_ints + g->q_floats;
    ipk_geom_dw(g);
    return IPK_CONV_OK;
}

/* Element offset of window (b, g) in the [B][WR][G*C][WC] layout. */
static inline int64_t ipk_win_base(const ipk_geom* g, int64_t b, int64_t gi)
{
    return b * g->WR * g->rs + gi * g->C * g->cs;
}

/* Byte sizes of the three operands of a vertex. */
static inline void ipk_geom_bytes(const ipk_geom* g, int in_dt, int out_dt, int64_t* win_b,
                                  int64_t* w_b, int64_t* out_b)
{
    int64_t isz = ipk_dt_size(in_dt), osz = ipk_dt_size(out_dt);
    *win_b = ipk_smul(ipk_smul4(g->B, g->G, g->C, g->WR), ipk_smul(g->WC, isz));
    *w_b = ipk_smul4(g->G, g->K, g->C, ipk_smul(g->T, isz));
    *out_b = ipk_smul(ipk_smul4(g->B, g->G, g->K, g->OR), ipk_smul(g->OC, osz));
}

/* Validate one vertex against the arena and the scratch before anything is written. */
static inline int ipk_conv_check(const ipk_geom* g, int64_t n_rows, int64_t row_bytes,
                                 const unsigned char* data, int64_t tile, int64_t win_off,
                                 int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                 int64_t scratch_floats)
{
    int64_t wb, kb, ob, isz = ipk_dt_size(in_dt), osz = ipk_dt_size(out_dt);
    uintptr_t tb;
    if (tile < 0 || tile >= n_rows) return IPK_CONV_ETILE;
    ipk_geom_bytes(g, in_dt, out_dt, &wb, &kb, &ob);
    if (win_off < 0 || w_off < 0 || out_off < 0 || win_off > row_bytes - wb
        || w_off > row_bytes - kb || out_off > row_bytes - ob)
        return IPK_CONV_ERANGE;
    tb = (uintptr_t)data + (uintptr_t)(tile * row_bytes);
    if ((tb + (uintptr_t)win_off) % (uintptr_t)isz || (tb + (uintptr_t)w_off) % (uintptr_t)isz
        || (tb + (uintptr_t)out_off) % (uintptr_t)osz)
        return IPK_CONV_EALIGN;
    if (g->need > scratch_floats) return IPK_CONV_ESCRATCH;
    return IPK_CONV_OK;
}

/* ------------------------------------------------------------------ prefetch
 * The arena is far larger than the caches, so a vertex's operands come from DRAM. While a
 * thread computes one vertex it prefetches the next one's: each micro-kernel call takes a
 * slice of the next vertex's bytes and prefetches one address per tap, so the loads are
 * spread evenly over the compute (a burst would just fill the miss buffers and stall). */
typedef struct {
    const unsigned char* p[3];   /* next vertex's window, weights, output */
    int64_t n[3];                /* bytes not yet prefetched */
    int64_t per_call;            /* bytes to prefetch per micro-kernel call */
    int64_t ntaps, full, stride; /* ipk_pf_taps: a whole slice of a call of ntaps taps */
} ipk_pf;

/* Every call will have ``ntaps`` taps: work out once the stride of a whole slice, so the
 * slices need no division per call (only a region's last, shorter slice divides). */
static inline void ipk_pf_taps(ipk_pf* pf, int64_t ntaps)
{
    if (ntaps < 1) ntaps = 1;
    pf->ntaps = ntaps;
    pf->full = pf->per_call < ntaps * 64 ? pf->per_call : ntaps * 64;
    pf->stride = pf->full / ntaps;
}

/* The slice for one call of ``ntaps`` taps: start pointer, and the stride per tap (<= one
 * line, so no line is skipped). Returns a harmless address with stride 0 when done. */
static inline const unsigned char* ipk_pf_slice(ipk_pf* pf, int64_t ntaps, int64_t* stride)
{
    int r;
    for (r = 0; r < 3; r++) {
        if (pf->n[r] > 0) {
            int64_t nb = pf->per_call < pf->n[r] ? pf->per_call : pf->n[r];
            const unsigned char* p = pf->p[r];
            if (ntaps < 1) ntaps = 1;
            if (ntaps == pf->ntaps && nb >= pf->full) {
                *stride = pf->stride;
            } else {
                if (nb > ntaps * 64) nb = ntaps * 64;
                *stride = nb / ntaps;
            }
            nb = *stride * ntaps;
            if (nb == 0) { *stride = 0; nb = pf->n[r] < 64 ? pf->n[r] : 64; }
            pf->p[r] += nb;
            pf->n[r] -= nb;
            return p;
        }
    }
    *stride = 0;
    return (const unsigned char*)pf;
}

/* ------------------------------------------------------------------ bias epilogue
 * Execute mode's host fusion of a conv's bias pass (ipukern.conv.build, _BiasCodelet) into
 * the conv vertex, when the vertex writes the final output (no partials reduction, no cast):
 * output channel k of group g (the vertex's [B][G][K][OR][OC] block) gets
 * bias[g * Kb + ks0 + k] added after the conv sum is rounded to the output dtype, then the
 * activation ``act`` (float32 only: 1 ReLU, 2 ReLU6) -- the add_bias vertex's arithmetic,
 * step for step, so the bits are the same. The simulated program is not changed: the bias
 * compute set still runs (and costs its cycles) in the simulation; the host skips its work. */
typedef struct {
    const unsigned char* bias;   /* NULL: no epilogue */
    int64_t Kb, ks0;             /* bias channels per group, first channel of this slice */
    int act;
} ipk_epi;

/* One fp32 output of the epilogue: y = x + bias, then the activation with NumPy's bits
 * (ReLU: np.maximum(y, 0), NaN kept, -0 -> +0; ReLU6: np.clip(y, 0, 6)) -- add_bias's
 * _relu_np / _relu6_np, written as selects so that loops over it vectorise. */
static inline float ipk_epi_f32(float x, float bias, int act)
{
    float y = x + bias;
    if (act == 1) return !(y <= 0.0f) ? y : 0.0f;
    if (act == 2) {
        y = !(y < 0.0f) ? y : 0.0f;
        return y > 6.0f ? 6.0f : y;
    }
    return y;
}

/* Status of vertex g's bias operand at byte bias_off of its tile (row_bytes long): every
 * index the epilogue reads, up to (G - 1) * Kb + ks0 + K - 1, inside the row and aligned. */
static inline int ipk_epi_check(const ipk_geom* g, int64_t row_bytes, const unsigned char* data,
                                int64_t tile, int64_t bias_off, int64_t Kb, int64_t ks0,
                                int out_dt, int act)
{
    const int64_t osz = ipk_dt_size(out_dt);
    int64_t hi;
    if (act < 0 || act > 2 || (act && out_dt != IPK_F32)) return IPK_CONV_EPARAM;
    if (Kb < 0 || ks0 < 0 || Kb > row_bytes || ks0 > row_bytes) return IPK_CONV_ERANGE;
    if (g->G == 0 || g->K == 0) return IPK_CONV_OK;
    hi = ipk_smul(g->G - 1, Kb);
    if (hi > row_bytes) return IPK_CONV_ERANGE;
    hi = ipk_smul(hi + ks0 + g->K, osz);   /* terms <= row_bytes, row_bytes, 2^30: no wrap */
    if (bias_off < 0 || hi > row_bytes || bias_off > row_bytes - hi) return IPK_CONV_ERANGE;
    if (((uintptr_t)data + (uintptr_t)(tile * row_bytes) + (uintptr_t)bias_off) % (uintptr_t)osz)
        return IPK_CONV_EALIGN;
    return IPK_CONV_OK;
}

/* ------------------------------------------------------------------ ISA variants */
typedef void (*ipk_conv_vertex_fn)(const ipk_geom* g, unsigned char* tb, int64_t win_off,
                                   int64_t w_off, int64_t out_off, int in_dt, int out_dt,
                                   float* scratch, ipk_pf* pf, int flags, const ipk_epi* epi);

/* flags of a conv_tiles call */
#define IPK_CONV_DIRECT 1   /* take the direct path (ipk_conv_direct.h) where it applies */

/* GCC turns the short row-copy loops into memcpy/memset calls, which cost more than the
 * copies themselves for rows of tens of floats: keep them inline. */
#if defined(__GNUC__) && !defined(__clang__)
#define IPK_INLINE_LOOPS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define IPK_INLINE_LOOPS
#endif

/* Baseline: plain C with GCC/Clang vector extensions (SSE2 on x86-64, NEON on arm64). */
#define IPK_SFX(name) name##_base
#define IPK_TGT IPK_INLINE_LOOPS
#define IPK_ISA_BASE 1
#include "ipk_conv_impl.h"
#undef IPK_ISA_BASE
#undef IPK_TGT
#undef IPK_SFX

#ifdef IPK_X86
#define IPK_SFX(name) name##_avx2
#define IPK_TGT __attribute__((target("avx2,fma,f16c"))) IPK_INLINE_LOOPS
#define IPK_ISA_AVX2 1
#include "ipk_conv_impl.h"
#undef IPK_ISA_AVX2
#undef IPK_TGT
#undef IPK_SFX

#define IPK_SFX(name) name##_avx512
#define IPK_TGT __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"))) IPK_INLINE_LOOPS
#define IPK_ISA_AVX512 1
#include "ipk_conv_impl.h"
#undef IPK_ISA_AVX512
#undef IPK_TGT
#undef IPK_SFX
#endif

/* ISA codes: 0 = baseline, 1 = avx2+fma+f16c, 2 = avx512f+vl+bw (with avx2, fma, f16c). */
static inline int ipk_conv_isa_supported(int isa)
{
    if (isa == 0) return 1;
#ifdef IPK_X86
    if (isa == 1)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
               && __builtin_cpu_supports("f16c");
    if (isa == 2)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
               && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
               && __builtin_cpu_supports("f16c");
#endif
    return 0;
}

static inline int ipk_conv_best_isa(void)
{
    if (ipk_conv_isa_supported(2)) return 2;
    if (ipk_conv_isa_supported(1)) return 1;
    return 0;
}

static inline ipk_conv_vertex_fn ipk_conv_pick(int isa)
{
#ifdef IPK_X86
    if (isa == 2) return ipk_conv_vertex_avx512;
    if (isa == 1) return ipk_conv_vertex_avx2;
#endif
    (void)isa;
    return ipk_conv_vertex_base;
}

/* Run vertex v (already checked) of a batch; the geometry lives on this thread's stack.
 * ``next`` is the vertex this thread runs after v (static round-robin schedule), whose
 * operands are prefetched meanwhile; -1 for none.
 *
 * ``vflags`` (NULL: none) and ``shadow``: bit 0 of vflags[v] set = v's window, bit 1 = its
 * weights were received into ``shadow``, this thread's stand-in for the tile's row (same
 * offsets, same alignment modulo 64; see ipukern.core.host.fused), so the vertex reads them
 * there; its output (and bias) stay in the tile's row. The vertex functions address every
 * operand as one base plus an offset, so the operands left in the tile get their offset
 * from the shadow row. */
static inline void ipk_conv_one(ipk_conv_vertex_fn fn, const int64_t* dims, int64_t v, int64_t next,
                                int kh, int kw, int sh, int sw, int dh, int dw,
                                unsigned char* data, int64_t row_bytes, const int32_t* tiles,
                                const int64_t* win_off, const int64_t* w_off, const int64_t* out_off,
                                int in_dt, int out_dt, float* scratch, int flags,
                                const int64_t* bias_off, const int64_t* bias_prm, int act,
                                const unsigned char* vflags, unsigned char* shadow)
{
    ipk_geom g;
    ipk_pf pf;
    ipk_epi epi = {NULL, 0, 0, 0};
    memset(&pf, 0, sizeof pf);
    /* bias_off (NULL: none; -1: none for this vertex), bias_prm[2v] = (Kb, ks0): the bias
     * epilogue (checked with ipk_epi_check) */
    if (bias_off != NULL && bias_off[v] >= 0) {
        epi.bias = data + (int64_t)tiles[v] * row_bytes + bias_off[v];
        epi.Kb = bias_prm[2 * v];
        epi.ks0 = bias_prm[2 * v + 1];
        epi.act = act;
    }
    if (next >= 0) {
        const int64_t* d = dims + 10 * next;
        const int64_t isz = ipk_dt_size(in_dt), osz = ipk_dt_size(out_dt);
        unsigned char* tb = data + (int64_t)tiles[next] * row_bytes;
        pf.n[0] = d[0] * d[1] * d[2] * d[4] * d[5] * isz;
        pf.n[1] = d[1] * d[3] * d[2] * kh * kw * isz;
        pf.n[2] = d[0] * d[1] * d[3] * d[6] * d[7] * osz;
        pf.p[0] = tb + win_off[next];
        pf.p[1] = tb + w_off[next];
        pf.p[2] = tb + out_off[next];
        if (vflags != NULL) {   /* operands the next item's copies put in the shadow row */
            if (vflags[next] & 1) pf.n[0] = 0;
            if (vflags[next] & 2) pf.n[1] = 0;
        }
    }
    if (ipk_geom_init(&g, dims + 10 * v, kh, kw, sh, sw, dh, dw) == IPK_CONV_OK) {
        unsigned char* tb = data + (int64_t)tiles[v] * row_bytes;
        int64_t wo = win_off[v], ww = w_off[v], oo = out_off[v];
        const int fl = vflags != NULL ? vflags[v] : 0;
        if (fl) {
            const int64_t d = (int64_t)((uintptr_t)tb - (uintptr_t)shadow);
            if (!(fl & 1)) wo += d;
            if (!(fl & 2)) ww += d;
            oo += d;
            tb = shadow;
        }
        fn(&g, tb, wo, ww, oo, in_dt, out_dt, scratch, &pf, flags, &epi);
    }
}

#endif
