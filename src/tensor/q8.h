/* llama.cpp's Q8_0 blocks (tensor.h, TG_Q8): 32 int8 values and one IEEE
 * half scale, 34 bytes a block, and the int8 products that read them. */
#ifndef TG_Q8_H
#define TG_Q8_H

#include "internal.h" /* TG_Q8_BLOCK (values a block), TG_Q8_BYTES (bytes: the f16 scale, little-endian, then 32 int8) */

#include <stdbool.h>
#include <stdint.h>

/* float32 -> IEEE half, round to nearest even (torch's .half(), ggml's
 * GGML_FP32_TO_FP16), overflow to infinity, NaN kept a NaN; the other way:
 * tg__f32_from_f16 (src/tensor/internal.h). */
uint16_t tg__f16_from_f32(float x);
/* ggml's quantize_row_q8_0 (the reference rounding of ggml-quants.c, which
 * gguf-py's quants.py repeats): n a multiple of 32; out receives n / 32
 * blocks (the f16 scale d = max|x| / 127, then 32 int8 values round(x / d),
 * halves away from zero). How weights are quantized. */
void tg__q8_0_quantize(const float *x, int64_t n, uint8_t *out);

/* The 32 values of each of n / 32 blocks, widened: q * d in float32
 * (ggml's dequantize_row_q8_0). */
void tg__q8_0_dequantize(const uint8_t *in, int64_t n, float *out);
/* An activation row quantized as llama.cpp quantizes the float32 operand of
 * a Q8_0 product on x86 (quantize_row_q8_0 of ggml-cpu: d = amax / 127
 * stored as half, id = 127 / amax, 0 when amax is 0, q = x * id rounded to
 * nearest even): n a multiple of 32, n / 32 blocks into out. */
void tg__q8_0_quantize_act(const float *x, int64_t n, uint8_t *out);

/* The int8 dot product's instructions, best first as the CPU has them. */
typedef enum {
    TG_Q8_SCALAR = 0, /* portable C */
    TG_Q8_AVX2,       /* vpmaddubsw + vpmaddwd */
    TG_Q8_AVXVNNI,    /* vpdpbusd, VEX (AVX-VNNI) */
    TG_Q8_AVX512VNNI, /* vpdpbusd, EVEX (AVX512_VNNI with VL) */
    TG_Q8_ISA_COUNT
} tg__q8_isa;
/* what this CPU runs (the best it has, or what tg__q8_isa_force chose) */
tg__q8_isa tg__q8_isa_now(void);
/* whether the CPU can run isa */
bool tg__q8_isa_available(tg__q8_isa isa);
/* Tests: run isa from now on (false if the CPU lacks it); -1: the best again. */
bool tg__q8_isa_force(int isa);
const char *tg__q8_isa_name(tg__q8_isa isa);

/* Sum over nb blocks of d_w * d_x * (sum of the 32 int8 products) (ggml's
 * ggml_vec_dot_q8_0_q8_0): w and x nb blocks each. */
float tg__q8_0_dot(const uint8_t *w, const uint8_t *x, int64_t nb);

/* c[i][j] = alpha * dot(w's row j, a's row i quantized) (+ beta c[i][j]):
 * a float32 (M, K) with row stride lda, w N rows of K / 32 blocks, row after
 * row, c float32 (M, N) with row stride ldc; K a multiple of 32. a's rows
 * are quantized once (tg__q8_0_quantize_act), each w row read once for all
 * M rows, the rows of w shared between the OpenMP threads. Returns 0, or
 * -1 with an error (tg_error) when out of memory. */
int tg__q8_0_matmul(float *c, int64_t ldc, const float *a, int64_t lda, const uint8_t *w, int64_t M, int64_t N,
                    int64_t K, float alpha, float beta);

#endif
