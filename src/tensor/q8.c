/* llama.cpp's Q8_0 blocks (q8.h): quantizing, widening and the int8
 * products. */
#include "q8.h"
#include "internal.h"

#include <math.h>
#include <string.h>

/* ---- IEEE half ------------------------------------------------------------------------------ */

uint16_t tg__f16_from_f32(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;     /* NaN: a quiet NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;    /* >= 65520 (and inf): infinity */
    uint32_t e = a >> 23;
    if (e < 102) return sign;                        /* below 2^-25: zero */
    if (e < 113) {
        /* a half subnormal: the value in units of 2^-24, rounded to nearest even */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias the exponent, keep 10 mantissa bits, round to nearest even
     * (a carry moves into the exponent, which is the right result) */
    uint32_t h = ((e - 112) << 10) | ((a & 0x7fffffu) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

/* ---- Q8_0 ------------------------------------------------------------------------------------- */

/* Block of 32: d = max|x| / 127 (float32, stored as half), id = 1 / d (0 when
 * d is 0), q = roundf(x * id) (halves away from zero), all in float32 as
 * ggml's reference row quantiser computes them. */
void tg__q8_0_quantize(const float *x, int64_t n, uint8_t *out)
{
    /* blocks are independent: a large tensor's on all threads */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n >= TG_PAR_MIN)
#endif
    for (int64_t blk = 0; blk < n / 32; blk++) {
        const float *v = x + blk * 32;
        uint8_t *o = out + blk * 34;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = amax > fabsf(v[j]) ? amax : fabsf(v[j]); /* ggml's MAX */
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = tg__f16_from_f32(d);
        o[0] = (uint8_t)(dh & 0xff);
        o[1] = (uint8_t)(dh >> 8);
        if (amax <= 3.4028235e38f) { /* finite: |x * id| <= 127 (to an ulp) */
            for (int j = 0; j < 32; j++) {
                /* roundf (halves away from zero) as truncation and a step,
                 * branch-free so that the loop vectorises: y - trunc(y) is exact */
                float y = v[j] * id, t = truncf(y);
                t += copysignf(fabsf(y - t) >= 0.5f ? 1.0f : 0.0f, y);
                o[2 + j] = (uint8_t)(int8_t)(t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t);
            }
        } else { /* a NaN or an infinity: NaN products store 0, not an undefined cast */
            for (int j = 0; j < 32; j++) {
                float t = roundf(v[j] * id);
                o[2 + j] = (uint8_t)(int8_t)(t == t ? (t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t) : 0.0f);
            }
        }
    }
}
