/* TG_Q8 tensors (tensor.h): copies to and from them, and the products that
 * read them (tg_k_gemm's TG_Q8 operand). The blocks and the int8 kernels
 * are q8.c's. */
#include "internal.h"
#include "q8.h"

#include <stdlib.h>
#include <string.h>

/* ---- layouts ------------------------------------------------------------------------------------ */

/* Whether x's last dim runs along its blocks: unit stride, whole blocks
 * (the offset and every other stride multiples of 32). Then each run of
 * the last dim is last/32 blocks back to back. */
static bool blocked_rows(const tg_tensor *x)
{
    int n = x->ndim;
    if (n < 1 || x->shape[n - 1] % TG_Q8_BLOCK || x->offset % TG_Q8_BLOCK) return false;
    if (x->shape[n - 1] > 1 && x->stride[n - 1] != 1) return false;
    for (int d = 0; d < n - 1; d++)
        if (x->shape[d] > 1 && x->stride[d] % TG_Q8_BLOCK) return false;
    return true;
}

static const uint8_t *block_at(const tg_tensor *x, int64_t off)
{
    return (const uint8_t *)x->data + (size_t)(off / TG_Q8_BLOCK) * TG_Q8_BYTES;
}

/* the offset of x's row r (its last dim's run number r, row-major over the
 * other dims) */
static int64_t row_offset(const tg_tensor *x, int64_t r)
{
    int64_t off = x->offset;
    for (int d = x->ndim - 2; d >= 0; d--) {
        off += (r % x->shape[d]) * x->stride[d];
        r /= x->shape[d];
    }
    return off;
}

/* ---- copies ------------------------------------------------------------------------------------- */

enum { CHUNK = 32 * 256 }; /* floats a copy converts at a time, on the stack */

/* a 1-D float32 header over buf (n values) */
static tg_tensor flat_f32(float *buf, int64_t n)
{
    tg_tensor t = {0};
    t.dtype = TG_F32;
    t.data = buf;
    t.ndim = 1;
    t.shape[0] = n;
    t.stride[0] = 1;
    return t;
}

/* elements [k0, k0 + n) of x's row at offset off, as a 1-D view header */
static tg_tensor row_part(const tg_tensor *x, int64_t off, int64_t k0, int64_t n)
{
    tg_tensor t = *x;
    t.ndim = 1;
    t.offset = off + k0 * (x->ndim ? x->stride[x->ndim - 1] : 0);
    t.shape[0] = n;
    t.stride[0] = x->ndim ? x->stride[x->ndim - 1] : 0;
    t.grad_fn = NULL;
    return t;
}

bool tg__q8_copy(tg_tensor *out, const tg_tensor *src)
{
    int n = out->ndim;
    int64_t K = n ? out->shape[n - 1] : 1, rows = K ? tg_numel(out) / K : 0;
    if (out->dtype == TG_Q8 && !blocked_rows(out)) {
        tg_error("copy: a q8_0 destination must hold whole blocks along its last dim");
        return false;
    }
    if (src->dtype == TG_Q8 && out->dtype == TG_Q8) {
        if (!blocked_rows(src)) {
            tg_error("copy: q8_0 to q8_0 needs both laid out in whole blocks along the last dim");
            return false;
        }
        for (int64_t r = 0; r < rows; r++)
            memcpy((uint8_t *)block_at(out, row_offset(out, r)), block_at(src, row_offset(src, r)),
                   (size_t)(K / TG_Q8_BLOCK) * TG_Q8_BYTES);
        return true;
    }
    float buf[CHUNK];
    bool src_rows = src->dtype == TG_Q8 && blocked_rows(src);
    for (int64_t r = 0; r < rows; r++) {
        int64_t oo = row_offset(out, r), so = row_offset(src, r);
        for (int64_t k0 = 0; k0 < K; k0 += CHUNK) {
            int64_t len = K - k0 < CHUNK ? K - k0 : CHUNK;
            tg_tensor f = flat_f32(buf, len);
            if (src->dtype != TG_Q8) {
                tg_tensor s = row_part(src, so, k0, len);
                tg_k_copy(&f, &s);
            } else if (src_rows) {
                tg__q8_0_dequantize(block_at(src, so + k0), len, buf);
            } else { /* a transposed or otherwise strided view: element by element */
                int64_t st = n ? src->stride[n - 1] : 0;
                for (int64_t i = 0; i < len; i++) buf[i] = tg__q8_load(src, so + (k0 + i) * st);
            }
            if (out->dtype == TG_Q8) {
                tg__q8_0_quantize(buf, len, (uint8_t *)block_at(out, oo + k0));
            } else {
                tg_tensor o = row_part(out, oo, k0, len);
                tg_k_copy(&o, &f);
            }
        }
    }
    return true;
}

/* ---- products ----------------------------------------------------------------------------------- */

/* x's dims before the last collapsed into M rows of stride *ld, inner unit
 * stride: true when x's layout allows it */
static bool as_rows(const tg_tensor *x, int64_t *M, int64_t *ld)
{
    int n = x->ndim;
    if (n < 1 || (x->shape[n - 1] > 1 && x->stride[n - 1] != 1)) return false;
    int64_t m = 1, s = x->shape[n - 1], next = -1;
    for (int d = n - 2; d >= 0; d--) {
        if (x->shape[d] == 1) continue;
        if (next < 0) s = x->stride[d];
        else if (x->stride[d] != next) return false;
        next = x->stride[d] * x->shape[d];
        m *= x->shape[d];
    }
    *M = m;
    *ld = s;
    return true;
}

/* op(x) of a 2-D Q8 x widened into buf (numel floats) with x's orientation:
 * x's rows along blocks (stride 1 in the last dim) stay row-major, a
 * transposed view stays column-major */
static tg_tensor widened(float *buf, const tg_tensor *x)
{
    tg_tensor w = *x;
    w.dtype = TG_F32;
    w.data = buf;
    w.offset = 0;
    w.storage = NULL;
    w.grad_fn = NULL;
    w.is_param = false;
    w.requires_grad = false;
    int64_t R = x->shape[0], C = x->shape[1];
    bool rows = x->stride[1] == 1 || C == 1;
    w.stride[0] = rows ? C : 1;
    w.stride[1] = rows ? 1 : R;
    int64_t outer = rows ? R : C, inner = rows ? C : R, so = rows ? x->stride[0] : x->stride[1];
    bool whole = inner % TG_Q8_BLOCK == 0 && x->offset % TG_Q8_BLOCK == 0 && so % TG_Q8_BLOCK == 0;
#pragma omp parallel for if (R * C > TG_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < outer; r++) {
        int64_t off = x->offset + r * so;
        if (whole) {
            tg__q8_0_dequantize(block_at(x, off), inner, buf + r * inner);
        } else {
            int64_t si = rows ? x->stride[1] : x->stride[0];
            for (int64_t i = 0; i < inner; i++) buf[r * inner + i] = tg__q8_load(x, off + i * si);
        }
    }
    return w;
}

/* c = alpha op(a) op(b) + beta c with an int8 weight widened to float32 in
 * blocks of c's columns (about 64 MiB of float32 each: a model's output
 * head is never widened whole), each block's product the policy's */
static void gemm_widened_blocks(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b,
                                bool tb, double alpha, double beta)
{
    enum { BLOCK = 16 << 20 }; /* floats */
    int n = c->ndim;
    if (a->dtype == TG_Q8) { /* an int8 first operand (not a weight's place): widened whole */
        if (a->ndim != 2) {
            tg_error("matmul: a q8_0 operand must be 2-D");
            return;
        }
        float *buf = malloc(sizeof(float) * (size_t)(tg_numel(a) ? tg_numel(a) : 1));
        if (!buf) {
            tg_error("matmul: out of memory widening a q8_0 operand");
            return;
        }
        tg_tensor wa = widened(buf, a);
        tg_k_gemm(nm, c, &wa, ta, b, tb, alpha, beta);
        free(buf);
        return;
    }
    if (b->ndim != 2) {
        tg_error("matmul: a q8_0 weight must be 2-D");
        return;
    }
    int64_t N = c->shape[n - 1], K = tb ? b->shape[1] : b->shape[0];
    if (tg_numel(c) == 0) return;
    int64_t jb = K > 0 ? BLOCK / K : N;
    jb = jb < TG_Q8_BLOCK ? TG_Q8_BLOCK : jb / TG_Q8_BLOCK * TG_Q8_BLOCK;
    if (jb > N) jb = N;
    float *buf = malloc(sizeof(float) * (size_t)(jb * K > 0 ? jb * K : 1));
    if (!buf) {
        tg_error("matmul: out of memory widening a q8_0 weight");
        return;
    }
    for (int64_t j0 = 0; j0 < N; j0 += jb) {
        tg_tensor cb, bb;
        tg__gemm_columns(c, b, tb, j0, N - j0 < jb ? N - j0 : jb, &cb, &bb);
        tg_tensor wb = widened(buf, &bb);
        tg_k_gemm(nm, &cb, a, ta, &wb, tb, alpha, beta);
    }
    free(buf);
}

void tg__gemm_q8(tg_numerics nm, tg_tensor *c, const tg_tensor *a, bool ta, const tg_tensor *b, bool tb, double alpha,
                 double beta)
{
    int n = c->ndim;
    /* the int8 product: grad mode off (generation, evaluation), a float32
     * operand times a 2-D weight whose K runs along its blocks, rows of
     * the weight back to back */
    bool int8 = !tg_is_grad_enabled() && b->dtype == TG_Q8 && a->dtype == TG_F32 && c->dtype == TG_F32 && !ta &&
                b->ndim == 2 && a->ndim == n;
    int64_t K = tb ? b->shape[1] : b->shape[0], N = c->shape[n - 1];
    int64_t wstride = tb ? b->stride[0] : b->stride[1], kstride = tb ? b->stride[1] : b->stride[0];
    int64_t M = 0, lda = 0, Mc = 0, ldc = 0;
    int8 = int8 && K % TG_Q8_BLOCK == 0 && (K == 0 || kstride == 1 || K == 1) && (N <= 1 || wstride == K) &&
           b->offset % TG_Q8_BLOCK == 0 && as_rows(a, &M, &lda) && as_rows(c, &Mc, &ldc) && M == Mc &&
           a->shape[n - 1] == K;
    for (int d = 0; int8 && d < n - 1; d++) int8 = a->shape[d] == c->shape[d];
    if (!int8) {
        gemm_widened_blocks(nm, c, a, ta, b, tb, alpha, beta);
        return;
    }
    if (M == 0 || N == 0) return;
    if (K == 0) {
        tg_tensor cv = *c;
        if (beta == 0) tg_k_fill(&cv, 0.0);
        else if (beta != 1) tg_k_binary_scalar(&cv, &cv, beta, TG_BIN_MUL, false);
        return;
    }
    /* out of memory: the error is set, as gemm's other failures set it */
    (void)tg__q8_0_matmul((float *)c->data + c->offset, ldc, (const float *)a->data + a->offset, lda,
                          block_at(b, b->offset), M, N, K, (float)alpha, (float)beta);
}
