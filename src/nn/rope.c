/* RoPE: the book's compute_rope_params as tables computed as positions ask
 * for them, and its apply_rope (pkg/llms_from_scratch/qwen3.py and
 * llama3.py in the book's repository; tools/reference/decoder.py runs them). */
#include "nn_internal.h"

#include <math.h>
#include <string.h>

#include "tapegrad/gpt.h"

/* ---- RoPE tables ---------------------------------------------------------------------------- */

/* The book's compute_rope_params, every step a float32 tensor op as PyTorch
 * computes it:
 *   inv_freq = 1.0 / (theta_base ** (arange(0, hd, 2).float() / hd))
 *   (Llama 3) wavelen = 2 * pi / inv_freq; inv_freq / factor where the
 *             wavelength exceeds the low-frequency one, the smoothed blend
 *             (1 - s) * (inv_freq / factor) + s * inv_freq in between,
 *             s = (orig_ctx / wavelen - low) / (high - low)
 *   angles = positions[:, None] * inv_freq[None, :], cat([angles, angles])
 *   cos, sin = torch.cos(angles), torch.sin(angles)
 * Python's `a / t` on a tensor is t.reciprocal() * a; scalars are rounded
 * to float32 first. Rows are computed as positions ask for them (each row
 * depends on its position only), so a 131,072-position context costs
 * nothing until it is used. */
static void inv_freq_of(const tg__rope *r, float *inv)
{
    int64_t h2 = r->head_dim / 2;
    for (int64_t i = 0; i < h2; i++) inv[i] = (float)(2 * i) / (float)r->head_dim;
    tg__vrpowf(inv, (float)r->base, inv, h2);
    for (int64_t i = 0; i < h2; i++) inv[i] = 1.0f / inv[i];
    const tg_rope_freq *f = &r->freq;
    if (!(f->factor > 0)) return;
    const float low_wl = (float)((double)f->original_context_length / f->low_freq_factor);
    const float high_wl = (float)((double)f->original_context_length / f->high_freq_factor);
    const float two_pi = (float)(2 * 3.14159265358979323846), orig = (float)f->original_context_length;
    const float low = (float)f->low_freq_factor, span = (float)(f->high_freq_factor - f->low_freq_factor);
    const float factor = (float)f->factor;
    for (int64_t i = 0; i < h2; i++) {
        float wl = (1.0f / inv[i]) * two_pi;
        float scaled = inv[i] / factor;
        float s = ((1.0f / wl) * orig - low) / span;
        float smoothed = (1.0f - s) * scaled + s * inv[i];
        if (wl <= low_wl && wl >= high_wl)
            inv[i] = smoothed;
        else if (wl > low_wl)
            inv[i] = scaled;
    }
}

int tg__rope_need(tg__rope *r, tg_tape *tp, int64_t rows)
{
    if (rows <= r->rows) return TG_OK;
    if (rows > r->context_length)
        return tg_error_status(TG_EINVAL, "RoPE: position %lld is beyond context_length %lld", (long long)rows - 1,
                               (long long)r->context_length);
    int64_t n = r->rows * 2 > rows ? r->rows * 2 : rows;
    if (n < 64) n = 64;
    if (n > r->context_length) n = r->context_length;
    int64_t hd = r->head_dim, h2 = hd / 2, shape[2] = {n, hd};
    tg_tensor *c = tg_empty(tp, TG_F32, 2, shape), *s = c ? tg_empty(tp, TG_F32, 2, shape) : NULL;
    float *inv = tg_tape_alloc(tp, sizeof *inv * (size_t)h2, false);
    if (!c || !s || !inv) return TG_ENOMEM;
    inv_freq_of(r, inv);
    float *cd = tg_data_ptr(c), *sd = tg_data_ptr(s);
#pragma omp parallel for if (n * hd > (1 << 16)) schedule(static)
    for (int64_t p = 0; p < n; p++) {
        float *cr = cd + p * hd, *sr = sd + p * hd;
        for (int64_t i = 0; i < h2; i++) cr[i] = (float)p * inv[i];
        tg__vsinf(sr, cr, h2);
        tg__vcosf(cr, cr, h2);
        memcpy(cr + h2, cr, sizeof *cr * (size_t)h2);
        memcpy(sr + h2, sr, sizeof *sr * (size_t)h2);
    }
    r->cos = c, r->sin = s, r->rows = n;
    return TG_OK;
}

/* ---- the public RoPE functions --------------------------------------------------------------- */

int tg_rope_params(tg_tape *tp, int64_t head_dim, double theta_base, int64_t context_length, const tg_rope_freq *freq,
                   tg_tensor **cos, tg_tensor **sin)
{
    if (!tp || !cos || !sin) return tg_error_status(TG_EINVAL, "rope_params: NULL argument");
    *cos = *sin = NULL;
    tg_rope_freq f = freq ? *freq : (tg_rope_freq){0};
    if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > INT32_MAX)
        return tg_error_status(TG_EINVAL, "rope_params: head_dim must be even and positive, got %lld", (long long)head_dim);
    if (!(theta_base > 0 && isfinite(theta_base)))
        return tg_error_status(TG_EINVAL, "rope_params: theta_base must be > 0, got %g", theta_base);
    if (context_length < 1 || context_length > (1 << 24))
        return tg_error_status(TG_EINVAL, "rope_params: context_length must be in [1, 2^24], got %lld",
                               (long long)context_length);
    if (f.factor != 0 && !(f.factor > 0 && f.low_freq_factor > 0 && f.high_freq_factor > f.low_freq_factor &&
                           f.original_context_length > 0 && isfinite(f.factor) && isfinite(f.high_freq_factor)))
        return tg_error_status(TG_EINVAL, "rope_params: freq needs factor > 0, 0 < low_freq_factor < "
                                          "high_freq_factor and original_context_length > 0");
    tg__rope r = {.head_dim = head_dim, .context_length = context_length, .base = theta_base, .freq = f};
    int st = tg__rope_need(&r, tp, context_length);
    if (st != TG_OK) return st;
    *cos = r.cos, *sin = r.sin;
    return TG_OK;
}

tg_tensor *tg_apply_rope(tg_tape *tp, tg_tensor *x, tg_tensor *cos, tg_tensor *sin)
{
    char a[64], b[64];
    if (!x || !cos || !sin) return tg__error_null_input("apply_rope");
    int64_t hd = x->ndim >= 2 ? x->shape[x->ndim - 1] : 0, T = x->ndim >= 2 ? x->shape[x->ndim - 2] : 0;
    if (hd == 0 || hd % 2 != 0)
        return tg_error("apply_rope: x must be (..., T, head_dim) with an even head_dim, got %s", tg_shape_str(x, a, 64));
    if (cos->ndim != 2 || cos->shape[1] != hd || cos->shape[0] < T || !tg_same_shape(cos, sin))
        return tg_error("apply_rope: cos and sin must be (>= %lld, %lld) of one shape, got %s and %s", (long long)T,
                        (long long)hd, tg_shape_str(cos, a, 64), tg_shape_str(sin, b, 64));
    if (cos->dtype != x->dtype || sin->dtype != x->dtype)
        return tg_error("apply_rope: cos and sin must have x's dtype %s", tg_dtype_name(x->dtype));
    const tg_layer *layer = tg_layer_find("rope");
    tg_tensor *in[3] = {x, tg_narrow(tp, cos, 0, 0, T), tg_narrow(tp, sin, 0, 0, T)};
    tg_layer_args args = {0};
    return layer ? tg_layer_apply(tp, layer, false, tg_tape_numerics(tp), 3, in, &args) : NULL;
}
