/* IEEE binary16 <-> binary32 conversion (round to nearest even, NaN/inf preserved).
 * Uses the compiler's _Float16 where it exists (GCC >= 12, Clang), otherwise bit
 * manipulation with the same results. */
#ifndef IPK_HALF_H
#define IPK_HALF_H
#include <stdint.h>
#include <string.h>

#if defined(__FLT16_MAX__) && !defined(IPK_NO_FLOAT16)
static inline float ipk_h2f(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline uint16_t ipk_f2h(float f) { _Float16 x = (_Float16)f; uint16_t h; memcpy(&h, &x, 2); return h; }
#else
static inline float ipk_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);           /* inf / NaN */
    else if (exp) bits = sign | ((exp + 112u) << 23) | (man << 13);      /* normal */
    else if (!man) bits = sign;                                          /* zero */
    else {                                                               /* subnormal */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t ipk_f2h(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);           /* overflow -> inf */
    if (ax < 0x38800000u) {                                              /* subnormal / zero */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax - 0x38000000u) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}
#endif
#endif
