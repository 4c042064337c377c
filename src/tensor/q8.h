/* llama.cpp's Q8_0 blocks (tensor.h, TG_Q8): 32 int8 values and one IEEE
 * half scale, 34 bytes a block, and the int8 products that read them. */
#ifndef TG_Q8_H
#define TG_Q8_H

#include <stdbool.h>
#include <stdint.h>

#define TG_Q8_BLOCK 32 /* values a block */
#define TG_Q8_BYTES 34 /* bytes a block: the f16 scale (little-endian), then 32 int8 */

/* float32 -> IEEE half, round to nearest even (torch's .half(), ggml's
 * GGML_FP32_TO_FP16), overflow to infinity, NaN kept a NaN; the other way:
 * tg__f32_from_f16 (src/tensor/internal.h). */
uint16_t tg__f16_from_f32(float x);
/* ggml's quantize_row_q8_0 (the reference rounding of ggml-quants.c, which
 * gguf-py's quants.py repeats): n a multiple of 32; out receives n / 32
 * blocks (the f16 scale d = max|x| / 127, then 32 int8 values round(x / d),
 * halves away from zero). How weights are quantized. */
void tg__q8_0_quantize(const float *x, int64_t n, uint8_t *out);

#endif
