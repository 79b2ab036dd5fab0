/* The copy loop of an exchange table (ipukern._kernels._exchange.copy_runs).
 *
 * Most runs of a rearrangement are a few elements (e.g. 3 to 16 floats of a conv window
 * row) at scattered places of an arena far larger than the caches, so the loop is bound by
 * per-copy overhead and cache misses, not bytes: runs up to 64 bytes are copied inline as
 * fixed-size moves (all loads of a run before its stores, so a run's bytes land exactly as
 * with memcpy), longer ones by memcpy, and the source and destination of the copy
 * IPK_COPY_AHEAD places later are prefetched so that the misses overlap.
 *
 * A table that writes far more than the last-level cache holds (a conv program's exchange
 * broadcasting its inputs and weights to every tile: 0.1-0.4 GB) is bound by the writes;
 * with ``stream`` its runs of IPK_COPY_NT_MIN bytes or more are written with non-temporal
 * stores (x86-64: SSE2), which skip reading each destination line before overwriting it.
 * The bytes written are the same; a store fence ends the table. */
#ifndef IPK_COPY_H
#define IPK_COPY_H
#include <stdint.h>
#include <string.h>

#define IPK_COPY_AHEAD 12
#define IPK_COPY_NT_MIN 1024

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define IPK_COPY_HAVE_NT 1
/* memcpy(d, s, n) through non-temporal stores: head up to the next 64-byte (cache line)
 * boundary of d by memcpy, then whole lines, tail by memcpy. Every streamed line is written
 * whole: a line streamed in part (16-byte alignment, as before) costs the write-combining
 * buffer a partial flush, and the runs of a conv's exchange (1-8 KiB at any 4-byte offset)
 * then copied up to 3x slower (ResNet-50 batch 8, its exchanges over 32 MiB, one thread:
 * 0.56 s -> 0.43 s CPU per forward; plain stores 0.73 s). */
static inline void ipk_copy_nt(unsigned char* d, const unsigned char* s, int64_t n)
{
    int64_t head = (int64_t)((64 - ((uintptr_t)d & 63)) & 63), i;
    if (head > n) head = n;
    memcpy(d, s, (size_t)head);
    d += head; s += head; n -= head;
    for (i = 0; i + 64 <= n; i += 64) {
        const __m128i a = _mm_loadu_si128((const __m128i*)(s + i));
        const __m128i b = _mm_loadu_si128((const __m128i*)(s + i + 16));
        const __m128i c = _mm_loadu_si128((const __m128i*)(s + i + 32));
        const __m128i e = _mm_loadu_si128((const __m128i*)(s + i + 48));
        _mm_stream_si128((__m128i*)(d + i), a);
        _mm_stream_si128((__m128i*)(d + i + 16), b);
        _mm_stream_si128((__m128i*)(d + i + 32), c);
        _mm_stream_si128((__m128i*)(d + i + 48), e);
    }
    memcpy(d + i, s + i, (size_t)(n - i));
}
#endif

typedef unsigned char ipk_b16 __attribute__((vector_size(16), aligned(1), may_alias));

static inline void ipk_copy_run(unsigned char* d, const unsigned char* s, int64_t n)
{
    if (n <= 16) {
        if (n >= 8) {
            uint64_t a, b;
            memcpy(&a, s, 8); memcpy(&b, s + n - 8, 8);
            memcpy(d, &a, 8); memcpy(d + n - 8, &b, 8);
        } else if (n >= 4) {
            uint32_t a, b;
            memcpy(&a, s, 4); memcpy(&b, s + n - 4, 4);
            memcpy(d, &a, 4); memcpy(d + n - 4, &b, 4);
        } else if (n > 0) {
            const unsigned char a = s[0], b = s[n / 2], c = s[n - 1];
            d[0] = a; d[n / 2] = b; d[n - 1] = c;
        }
    } else if (n <= 32) {
        const ipk_b16 a = *(const ipk_b16*)s, b = *(const ipk_b16*)(s + n - 16);
        *(ipk_b16*)d = a; *(ipk_b16*)(d + n - 16) = b;
    } else if (n <= 64) {
        const ipk_b16 a = *(const ipk_b16*)s, b = *(const ipk_b16*)(s + 16);
        const ipk_b16 c = *(const ipk_b16*)(s + n - 32), e = *(const ipk_b16*)(s + n - 16);
        *(ipk_b16*)d = a; *(ipk_b16*)(d + 16) = b;
        *(ipk_b16*)(d + n - 32) = c; *(ipk_b16*)(d + n - 16) = e;
    } else {
        memcpy(d, s, (size_t)n);
    }
}

/* d[i] = s[2 i] for n 4-byte elements (d contiguous, s at a stride of 8 bytes): four
 * elements from two 16-byte loads (SSE2) while the second load ends before the last
 * element's bytes, i.e. reads only bytes of [s, s + 8 (n - 1) + 4); the rest one by one. */
static inline void ipk_gather_even4(unsigned char* d, const unsigned char* s, int64_t n)
{
    int64_t i = 0;
#if defined(__x86_64__) && defined(__SSE2__)
    for (; i + 4 < n; i += 4) {
        const __m128 a = _mm_loadu_ps((const float*)(s + 8 * i));
        const __m128 b = _mm_loadu_ps((const float*)(s + 8 * i + 16));
        _mm_storeu_ps((float*)(d + 4 * i), _mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
    }
#endif
    for (; i < n; i++) memcpy(d + 4 * i, s + 8 * i, 4);
}

/* Copies [lo, hi) of the table, in order; ``stream``: long runs bypass the caches. */
static inline void ipk_copy_table(unsigned char* dbase, int64_t dst_stride,
                                  const unsigned char* sbase, int64_t src_stride,
                                  const int32_t* src_row, const int64_t* src_off,
                                  const int32_t* dst_row, const int64_t* dst_off,
                                  const int64_t* nbytes, int64_t lo, int64_t hi, int stream)
{
    int64_t i;
    for (i = lo; i < hi; i++) {
        const int64_t a = i + IPK_COPY_AHEAD;
        unsigned char* d = dbase + dst_row[i] * dst_stride + dst_off[i];
        const unsigned char* s = sbase + src_row[i] * src_stride + src_off[i];
        if (a < hi) {
            __builtin_prefetch(sbase + src_row[a] * src_stride + src_off[a], 0, 3);
            if (!stream || nbytes[a] < IPK_COPY_NT_MIN)
                __builtin_prefetch(dbase + dst_row[a] * dst_stride + dst_off[a], 1, 3);
        }
#ifdef IPK_COPY_HAVE_NT
        if (stream && nbytes[i] >= IPK_COPY_NT_MIN) {
            ipk_copy_nt(d, s, nbytes[i]);
            continue;
        }
#endif
        ipk_copy_run(d, s, nbytes[i]);
    }
#ifdef IPK_COPY_HAVE_NT
    if (stream) _mm_sfence();   /* the streamed bytes are visible before the table returns */
#else
    (void)stream;
#endif
}
#endif
