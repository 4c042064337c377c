/* Tensor headers, creation, inspection and the shape/stride rules of views. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

static const struct {
    size_t size;
    const char *name;
} dtype_info[TG_DTYPE_COUNT] = {
    [TG_F32] = {4, "float32"}, [TG_F64] = {8, "float64"}, [TG_BOOL] = {1, "bool"},
    [TG_U8] = {1, "uint8"},    [TG_I64] = {8, "int64"},  [TG_BF16] = {2, "bfloat16"},
    [TG_Q8] = {0, "q8_0"},
};

size_t tg_dtype_size(tg_dtype dt) { return (unsigned)dt < TG_DTYPE_COUNT ? dtype_info[dt].size : 0; }
const char *tg_dtype_name(tg_dtype dt)
{
    return (unsigned)dt < TG_DTYPE_COUNT ? dtype_info[dt].name : "unknown";
}

/* ---- shape helpers ------------------------------------------------------------- */

bool tg__check_shape(const char *op, int ndim, const int64_t *shape, int64_t *numel)
{
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg_error("%s: %d dims is outside 0..%d", op, ndim, TG_MAX_DIMS);
        return false;
    }
    if (ndim > 0 && !shape) {
        tg_error("%s: NULL shape", op);
        return false;
    }
    /* The bound is on the product of the non-zero sizes: a tensor with a zero
     * size has no elements, but its strides are still that product. */
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            tg_error("%s: negative size %lld in dim %d", op, (long long)shape[i], i);
            return false;
        }
        if (shape[i] == 0) {
            empty = true;
            continue;
        }
        if (n > INT64_MAX / 16 / shape[i]) {
            tg_error("%s: shape too large (numel overflows)", op);
            return false;
        }
        n *= shape[i];
    }
    if (numel) *numel = empty ? 0 : n;
    return true;
}

void tg__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

int tg__wrap_dim(const char *op, int dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        tg_error("%s: dim %d out of range for a %d-dim tensor", op, dim, ndim);
        return -1;
    }
    return dim < 0 ? dim + n : dim;
}

int tg__broadcast_shape(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = na - n + i, ib = nb - n + i;
        int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
        if (a != b && a != 1 && b != 1) {
            tg_error("%s: shapes not broadcastable: size %lld vs %lld in dim %d", op, (long long)a,
                     (long long)b, i);
            return -1;
        }
        out[i] = a == 1 ? b : a;
    }
    return n;
}

void tg__broadcast_strides(const tg_tensor *x, int ndim, const int64_t *shape, int64_t *stride)
{
    for (int i = 0; i < ndim; i++) {
        int ix = x->ndim - ndim + i;
        if (ix < 0 || (x->shape[ix] == 1 && shape[i] != 1))
            stride[i] = 0;
        else
            stride[i] = x->stride[ix];
    }
}

/* "<op>: shape [2, -1] is invalid for input of size 7", as PyTorch says it. */
static bool invalid_shape(const char *op, int ndim, const int64_t *shape, int64_t numel)
{
    char buf[TG_MAX_DIMS * 22 + 3];
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < ndim; i++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(buf + k, sizeof buf - k, "]");
    tg_error("%s: shape %s is invalid for input of size %lld", op, buf, (long long)numel);
    return false;
}

bool tg__infer_shape(const char *op, int64_t numel, int ndim, const int64_t *in, int64_t *out)
{
    if (ndim < 0 || ndim > TG_MAX_DIMS) {
        tg_error("%s: %d dims is outside 0..%d", op, ndim, TG_MAX_DIMS);
        return false;
    }
    int infer = -1;
    int64_t prod = 1;
    for (int i = 0; i < ndim; i++) {
        if (in[i] == -1) {
            if (infer >= 0) {
                tg_error("%s: only one dimension can be inferred", op);
                return false;
            }
            infer = i;
        } else if (in[i] < 0) {
            tg_error("%s: invalid shape dimension %lld", op, (long long)in[i]);
            return false;
        } else {
            if (in[i] > 0 && prod > INT64_MAX / in[i]) {
                tg_error("%s: shape too large", op);
                return false;
            }
            prod *= in[i];
        }
        out[i] = in[i];
    }
    if (infer >= 0) {
        if (prod == 0 || numel % prod != 0) return invalid_shape(op, ndim, in, numel);
        out[infer] = numel / prod;
    } else if (prod != numel) {
        return invalid_shape(op, ndim, in, numel);
    }
    return tg__check_shape(op, ndim, out, NULL);
}

/* PyTorch's computeStride: can x be viewed as shape without copying? */
bool tg__view_strides(const tg_tensor *x, int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t numel = tg_numel(x);
    if (numel == 0 || x->ndim == 0) {
        tg__contiguous_strides(ndim, shape, stride);
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = x->stride[x->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int tensor_d = x->ndim - 1; tensor_d >= 0; tensor_d--) {
        tensor_numel *= x->shape[tensor_d];
        if (tensor_d == 0 ||
            (x->shape[tensor_d - 1] != 1 && x->stride[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                stride[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (tensor_d > 0) {
                chunk_base_stride = x->stride[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    return view_d == -1;
}

/* ---- headers and creation -------------------------------------------------------- */

tg_tensor *tg__alias(tg_tape *tp, const tg_tensor *x)
{
    tg_tensor *t = tg_tape_alloc(tp, sizeof *t, false);
    if (!t) return NULL;
    *t = *x;
    t->tape = tp;
    t->grad = NULL;
    t->grad_fn = NULL;
    t->requires_grad = false;
    t->is_param = false;
    return t;
}

tg_tensor *tg_empty(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape)
{
    int64_t numel;
    if (!tp) return tg_error("empty: NULL tape");
    if ((unsigned)dt >= TG_DTYPE_COUNT) return tg_error("empty: unknown dtype %d", (int)dt);
    if (!tg__check_shape("empty", ndim, shape, &numel)) return NULL;
    if (dt == TG_Q8 && (ndim < 1 || shape[ndim - 1] % TG_Q8_BLOCK != 0))
        return tg_error("empty: a q8_0 tensor's last dim must be a multiple of %d, got %s", TG_Q8_BLOCK,
                        ndim < 1 ? "a 0-dim shape" : tg__tape_printf(tp, "%lld", (long long)shape[ndim - 1]));
    /* the header and the storage's bookkeeping in one block */
    struct {
        tg_tensor t;
        tg_storage s;
    } *b = tg_tape_alloc(tp, sizeof *b, true);
    if (!b) return NULL;
    tg_tensor *t = &b->t;
    t->data = tg__tape_alloc_data(tp, tg__dtype_bytes(dt, numel));
    if (!t->data) return NULL;
    b->s.tape = tp;
    t->storage = &b->s;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    tg__contiguous_strides(ndim, shape, t->stride);
    t->tape = tp;
    return t;
}

tg_tensor *tg_zeros(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape)
{
    tg_tensor *t = tg_empty(tp, dt, ndim, shape);
    if (t) memset(t->data, 0, tg__dtype_bytes(dt, tg_numel(t)));
    return t;
}

tg_tensor *tg_full(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, double value)
{
    if (dt == TG_Q8 && value != 0)
        return tg_error("full: a q8_0 tensor is made by quantizing (tg_to_dtype), not filled with %g", value);
    if (dt == TG_Q8) return tg_zeros(tp, dt, ndim, shape);
    tg_tensor *t = tg_empty(tp, dt, ndim, shape);
    if (t) tg_k_fill(t, value);
    return t;
}

tg_tensor *tg_ones(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape)
{
    return tg_full(tp, dt, ndim, shape, 1.0);
}

tg_tensor *tg_from_data(tg_tape *tp, tg_dtype dt, int ndim, const int64_t *shape, const void *src)
{
    if (!src) return tg_error("from_data: NULL data");
    tg_tensor *t = tg_empty(tp, dt, ndim, shape);
    if (t) memcpy(t->data, src, tg__dtype_bytes(dt, tg_numel(t)));
    return t;
}

tg_tensor *tg_from_f32(tg_tape *tp, int ndim, const int64_t *shape, const float *src)
{
    return tg_from_data(tp, TG_F32, ndim, shape, src);
}

tg_tensor *tg_from_f64(tg_tape *tp, int ndim, const int64_t *shape, const double *src)
{
    return tg_from_data(tp, TG_F64, ndim, shape, src);
}

tg_tensor *tg_scalar(tg_tape *tp, tg_dtype dt, double value) { return tg_full(tp, dt, 0, NULL, value); }

static int set_elem(tg_tensor *x, const int64_t *idx, double v);

tg_tensor *tg_arange(tg_tape *tp, tg_dtype dt, double start, double end, double step)
{
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
        return tg_error("arange: invalid range [%g, %g) step %g", start, end, step);
    double n = ceil((end - start) / step);
    if (n < 0) n = 0;
    if (n > 1e12) return tg_error("arange: too many elements");
    int64_t shape[1] = {(int64_t)n};
    tg_tensor *t = tg_empty(tp, dt, 1, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < shape[0]; i++)
        if (set_elem(t, &i, start + (double)i * step) != TG_OK) return NULL; /* a value the dtype cannot hold */
    return t;
}

tg_tensor *tg_eye(tg_tape *tp, tg_dtype dt, int64_t n, int64_t m)
{
    int64_t shape[2] = {n, m < 0 ? n : m};
    tg_tensor *t = tg_zeros(tp, dt, 2, shape);
    if (!t) return NULL;
    for (int64_t i = 0; i < shape[0] && i < shape[1]; i++) {
        int64_t idx[2] = {i, i};
        set_elem(t, idx, 1.0);
    }
    return t;
}

static tg_tensor *tri(const char *op, tg_tape *tp, const tg_tensor *x, int64_t diagonal, bool upper)
{
    if (!x) return tg__error_null_input(op);
    if (tg__refuse_q8(op, x)) return NULL;
    if (x->ndim < 2) return tg_error("%s: input must have at least 2 dims, got %d", op, x->ndim);
    tg_tensor *t = tg_empty(tp, x->dtype, x->ndim, x->shape);
    if (!t) return NULL;
    tg_k_copy(t, x);
    int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
    int64_t batch = (rows > 0 && cols > 0) ? tg_numel(t) / (rows * cols) : 0;
    size_t es = tg_dtype_size(t->dtype);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) {
                bool keep = upper ? (j - i >= diagonal) : (j - i <= diagonal);
                if (!keep) memset((char *)t->data + (size_t)((b * rows + i) * cols + j) * es, 0, es);
            }
    return t;
}

tg_tensor *tg_triu(tg_tape *tp, const tg_tensor *x, int64_t diagonal) { return tri("triu", tp, x, diagonal, true); }
tg_tensor *tg_tril(tg_tape *tp, const tg_tensor *x, int64_t diagonal) { return tri("tril", tp, x, diagonal, false); }

tg_tensor *tg_empty_like(tg_tape *tp, const tg_tensor *x)
{
    if (!x) return tg__error_null_input("empty_like");
    return tg_empty(tp, x->dtype, x->ndim, x->shape);
}

tg_tensor *tg_zeros_like(tg_tape *tp, const tg_tensor *x)
{
    if (!x) return tg__error_null_input("zeros_like");
    return tg_zeros(tp, x->dtype, x->ndim, x->shape);
}

tg_tensor *tg_to_dtype(tg_tape *tp, const tg_tensor *x, tg_dtype dt)
{
    if (!x) return tg__error_null_input("to_dtype");
    tg_tensor *t = tg_empty(tp, dt, x->ndim, x->shape);
    if (t) tg_k_copy(t, x);
    return t;
}

/* ---- inspection --------------------------------------------------------------------- */

int64_t tg_tensor_version(const tg_tensor *x) { return x && x->storage ? x->storage->version : 0; }

size_t tg_tensor_nbytes(const tg_tensor *x) { return x ? tg__dtype_bytes(x->dtype, tg_numel(x)) : 0; }

int64_t tg_numel(const tg_tensor *x)
{
    if (!x) return 0;
    int64_t n = 1;
    for (int i = 0; i < x->ndim; i++) n *= x->shape[i];
    return n;
}

bool tg_is_contiguous(const tg_tensor *x)
{
    if (!x) return false;
    if (tg_numel(x) == 0) return true; /* as PyTorch: an empty tensor is contiguous */
    int64_t s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        if (x->shape[i] != 1 && x->stride[i] != s) return false;
        s *= x->shape[i];
    }
    return true;
}

bool tg_same_shape(const tg_tensor *a, const tg_tensor *b)
{
    if (!a || !b || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

char *tg_shape_str(const tg_tensor *x, char *buf, size_t n)
{
    if (!buf || n == 0) return buf;
    size_t k = 0;
    buf[0] = '\0';
    if (!x) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    k += (size_t)snprintf(buf + k, n - k, "(");
    for (int i = 0; i < x->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)x->shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

static double load(const tg_tensor *x, int64_t off)
{
    return x->dtype == TG_Q8 ? tg__q8_load(x, off) : tg__load_elem(x->dtype, tg__ptr(x, off));
}

static void store(tg_tensor *x, int64_t off, double v) { tg__store_elem(x->dtype, tg__ptr(x, off), v); }

/* Checks that x (any known dtype) and idx name an element; its offset in *off.
 * False with an error naming op, the index and the shape otherwise. */
static bool elem_offset(const char *op, const tg_tensor *x, const int64_t *idx, int64_t *off)
{
    if (!x) {
        tg__error_null_input(op);
        return false;
    }
    if ((unsigned)x->dtype >= TG_DTYPE_COUNT) {
        tg_error("%s: unknown dtype %d", op, (int)x->dtype);
        return false;
    }
    if (x->ndim > 0 && !idx) {
        tg_error("%s: NULL index for a %d-dim tensor", op, x->ndim);
        return false;
    }
    int64_t o = x->offset;
    for (int d = 0; d < x->ndim; d++) {
        if (idx[d] < 0 || idx[d] >= x->shape[d]) {
            char sh[64];
            tg_error("%s: index %lld is out of bounds for dimension %d with size %lld (shape %s)", op,
                     (long long)idx[d], d, (long long)x->shape[d], tg_shape_str(x, sh, sizeof sh));
            return false;
        }
        o += idx[d] * x->stride[d];
    }
    *off = o;
    return true;
}

double tg_get(const tg_tensor *x, const int64_t *idx)
{
    int64_t off;
    return elem_offset("get", x, idx, &off) ? load(x, off) : NAN;
}

/* tg_set without the version: for tensors being made */
static int set_elem(tg_tensor *x, const int64_t *idx, double v)
{
    int64_t off;
    if (!elem_offset("set", x, idx, &off)) return TG_EINVAL;
    if (x->dtype == TG_Q8) /* a value changes its block's scale: the whole block is quantized again */
        return tg_error_status(TG_EINVAL, "set: a q8_0 tensor's values are set by quantizing a float32 tensor "
                                          "(tg_copy_ or tg_to_dtype), not one by one");
    /* converting NaN or an out-of-range value to an integer type is undefined */
    bool ok = true;
    if (x->dtype == TG_U8) ok = v > -1.0 && v < 256.0;
    if (x->dtype == TG_I64) ok = v >= -0x1p63 && v < 0x1p63;
    if (!ok)
        return tg_error_status(TG_EINVAL, "set: value %g cannot be stored in a %s tensor", v, tg_dtype_name(x->dtype));
    store(x, off, v);
    return TG_OK;
}

int tg_set(tg_tensor *x, const int64_t *idx, double v)
{
    int st = set_elem(x, idx, v);
    if (st == TG_OK) tg__bump(x);
    return st;
}

/* The element at flat row-major position i, unchecked (0 <= i < numel). */
static double load_at(const tg_tensor *x, int64_t i)
{
    int64_t off = x->offset;
    for (int d = x->ndim - 1; d >= 0; d--) {
        off += (i % x->shape[d]) * x->stride[d];
        i /= x->shape[d];
    }
    return load(x, off);
}

double tg_item_at(const tg_tensor *x, int64_t i)
{
    if (!x) {
        tg__error_null_input("item_at");
        return NAN;
    }
    if ((unsigned)x->dtype >= TG_DTYPE_COUNT) {
        tg_error("item_at: unknown dtype %d", (int)x->dtype);
        return NAN;
    }
    int64_t n = tg_numel(x);
    if (i < 0 || i >= n) {
        char sh[64];
        tg_error("item_at: index %lld is out of bounds for %lld elements (shape %s)", (long long)i, (long long)n,
                 tg_shape_str(x, sh, sizeof sh));
        return NAN;
    }
    return load_at(x, i);
}

double tg_item(const tg_tensor *x)
{
    if (!x || tg_numel(x) != 1) {
        tg_error("item: tensor must have exactly one element");
        return NAN;
    }
    return tg_item_at(x, 0);
}

int tg_copy_to_f32(const tg_tensor *x, float *dst)
{
    if (!x || !dst) return tg_error_status(TG_EINVAL, "copy_to_f32: NULL argument");
    int64_t n = tg_numel(x);
    if (x->dtype == TG_F32 && tg_is_contiguous(x)) {
        memcpy(dst, tg__ptr(x, x->offset), (size_t)n * 4);
        return TG_OK;
    }
    for (int64_t i = 0; i < n; i++) dst[i] = (float)load_at(x, i);
    return TG_OK;
}

int tg_copy_to_f64(const tg_tensor *x, double *dst)
{
    if (!x || !dst) return tg_error_status(TG_EINVAL, "copy_to_f64: NULL argument");
    int64_t n = tg_numel(x);
    for (int64_t i = 0; i < n; i++) dst[i] = load_at(x, i);
    return TG_OK;
}

void *tg_data_ptr(const tg_tensor *x)
{
    if (!x || !tg_is_contiguous(x)) return NULL;
    return tg__ptr(x, x->offset);
}
