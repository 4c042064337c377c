/* Printing, character for character as PyTorch 1.13 prints a tensor
 * (torch/_tensor_str.py with the default print options: precision 4,
 * threshold 1000, edgeitems 3, linewidth 80). */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#define P_PRECISION 4
#define P_THRESHOLD 1000
#define P_EDGEITEMS 3
#define P_LINEWIDTH 80

/* ---- element access --------------------------------------------------------------- */

static double load(const tg_tensor *x, int64_t off)
{
    return x->dtype == TG_Q8 ? tg__q8_load(x, off) : tg__load_elem(x->dtype, tg__ptr(x, off));
}

/* Visits the elements PyTorch's formatter looks at: all of them, or when
 * summarizing only the first and last P_EDGEITEMS along every dimension longer
 * than 2 * P_EDGEITEMS (get_summarized_data). */
typedef void (*visit_fn)(void *ctx, const tg_tensor *x, int64_t off);

static void walk(const tg_tensor *x, int dim, int64_t off, bool summarize, visit_fn fn, void *ctx)
{
    if (dim == x->ndim) {
        fn(ctx, x, off);
        return;
    }
    int64_t n = x->shape[dim];
    for (int64_t i = 0; i < n; i++) {
        if (summarize && n > 2 * P_EDGEITEMS && i == P_EDGEITEMS) i = n - P_EDGEITEMS;
        walk(x, dim + 1, off + i * x->stride[dim], summarize, fn, ctx);
    }
}

/* ---- the formatter (_Formatter) ------------------------------------------------------ */

typedef struct {
    bool floating, int_mode, sci_mode;
    int max_width;
    /* scan state */
    bool any, not_int;
    double min_abs, max_abs;
} formatter;

static int fmt_plain(char *buf, size_t n, const tg_tensor *x, double v)
{
    if (x->dtype == TG_BOOL) return snprintf(buf, n, "%s", v != 0 ? "True" : "False");
    if (x->dtype == TG_U8) return snprintf(buf, n, "%u", (unsigned)v);
    return snprintf(buf, n, "%lld", (long long)v);
}

static void scan_ints(void *ctx, const tg_tensor *x, int64_t off)
{
    formatter *f = ctx;
    char buf[32];
    int w;
    if (x->dtype == TG_I64) /* exact: not through double */
        w = snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)tg__ptr(x, off));
    else
        w = fmt_plain(buf, sizeof buf, x, load(x, off));
    if (w > f->max_width) f->max_width = w;
}

static void scan_floats(void *ctx, const tg_tensor *x, int64_t off)
{
    formatter *f = ctx;
    double v = load(x, off);
    if (!isfinite(v) || v == 0) return;
    double a = fabs(v);
    if (!f->any || a < f->min_abs) f->min_abs = a;
    if (!f->any || a > f->max_abs) f->max_abs = a;
    f->any = true;
    if (v != ceil(v)) f->not_int = true;
}

static void width_floats(void *ctx, const tg_tensor *x, int64_t off)
{
    formatter *f = ctx;
    double v = load(x, off);
    if (!isfinite(v) || v == 0) return;
    char buf[512];
    int w;
    if (f->sci_mode)
        w = snprintf(buf, sizeof buf, "%.*e", P_PRECISION, v);
    else if (f->int_mode)
        w = snprintf(buf, sizeof buf, "%.0f", v) + 1; /* room for the trailing "." */
    else
        w = snprintf(buf, sizeof buf, "%.*f", P_PRECISION, v);
    if (w > f->max_width) f->max_width = w;
}

static void formatter_init(formatter *f, const tg_tensor *x, bool summarize)
{
    memset(f, 0, sizeof *f);
    f->floating = tg__is_float(x->dtype) || tg__is_compact(x->dtype);
    f->int_mode = true;
    f->max_width = 1;
    if (!f->floating) {
        walk(x, 0, x->offset, summarize, scan_ints, f);
        return;
    }
    walk(x, 0, x->offset, summarize, scan_floats, f);
    if (!f->any) return;
    f->int_mode = !f->not_int;
    double ratio = f->max_abs / f->min_abs;
    if (f->int_mode)
        f->sci_mode = ratio > 1000.0 || f->max_abs > 1.0e8;
    else
        f->sci_mode = ratio > 1000.0 || f->max_abs > 1.0e8 || f->min_abs < 1.0e-4;
    walk(x, 0, x->offset, summarize, width_floats, f);
}

/* One element, padded on the left to the formatter's width. */
static void format_value(tg__strbuf *b, const formatter *f, const tg_tensor *x, int64_t off)
{
    char buf[512];
    int n;
    if (!f->floating) {
        if (x->dtype == TG_I64)
            n = snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)tg__ptr(x, off));
        else
            n = fmt_plain(buf, sizeof buf, x, load(x, off));
    } else {
        double v = load(x, off);
        /* Python spells every NaN "nan", whatever its sign bit. */
        if (isnan(v))
            n = snprintf(buf, sizeof buf, "nan");
        else if (isinf(v))
            n = snprintf(buf, sizeof buf, "%s", v < 0 ? "-inf" : "inf");
        else if (f->sci_mode)
            n = snprintf(buf, sizeof buf, "%.*e", P_PRECISION, v);
        else if (f->int_mode)
            n = snprintf(buf, sizeof buf, "%.0f.", v);
        else
            n = snprintf(buf, sizeof buf, "%.*f", P_PRECISION, v);
    }
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    tg__sb_spaces(b, f->max_width - n);
    tg__sb_putn(b, buf, (size_t)n);
}

/* ---- layout (_vector_str, _tensor_str_with_formatter) ---------------------------------- */

static void vector_str(tg__strbuf *b, const formatter *f, const tg_tensor *x, int64_t off, int indent,
                       bool summarize)
{
    int element_length = f->max_width + 2;
    int per_line = (P_LINEWIDTH - indent) / element_length;
    if (per_line < 1) per_line = 1;
    int64_t n = x->shape[x->ndim - 1], stride = x->stride[x->ndim - 1];
    bool cut = summarize && n > 2 * P_EDGEITEMS;
    int64_t items = cut ? 2 * P_EDGEITEMS + 1 : n;

    tg__sb_puts(b, "[");
    for (int64_t k = 0; k < items; k++) {
        if (k > 0) {
            if (k % per_line == 0) {
                tg__sb_puts(b, ",\n");
                tg__sb_spaces(b, indent + 1);
            } else {
                tg__sb_puts(b, ", ");
            }
        }
        if (cut && k == P_EDGEITEMS) {
            tg__sb_puts(b, " ...");
            continue;
        }
        int64_t i = cut && k > P_EDGEITEMS ? n - (items - k) : k;
        format_value(b, f, x, off + i * stride);
    }
    tg__sb_puts(b, "]");
}

static void tensor_str(tg__strbuf *b, const formatter *f, const tg_tensor *x, int dim, int64_t off, int indent,
                       bool summarize)
{
    if (dim == x->ndim - 1) {
        vector_str(b, f, x, off, indent, summarize);
        return;
    }
    int64_t n = x->shape[dim];
    bool cut = summarize && n > 2 * P_EDGEITEMS;
    int64_t items = cut ? 2 * P_EDGEITEMS + 1 : n;
    int rest = x->ndim - dim; /* dims of each slice, plus one */

    tg__sb_puts(b, "[");
    for (int64_t k = 0; k < items; k++) {
        if (k > 0) {
            tg__sb_puts(b, ",");
            for (int j = 0; j < rest - 1; j++) tg__sb_puts(b, "\n");
            tg__sb_spaces(b, indent + 1);
        }
        if (cut && k == P_EDGEITEMS) {
            tg__sb_puts(b, "...");
            continue;
        }
        int64_t i = cut && k > P_EDGEITEMS ? n - (items - k) : k;
        tensor_str(b, f, x, dim + 1, off + i * x->stride[dim], indent + 1, summarize);
    }
    tg__sb_puts(b, "]");
}

/* _add_suffixes: each suffix goes on the current line unless it would pass the
 * line width, then on a new line indented under the opening parenthesis. */
static void add_suffix(tg__strbuf *b, const char *suffix, int indent)
{
    if (b->failed) return;
    /* PyTorch's len - rfind("\n") + 1 counts two more than the line holds. */
    const char *nl = strrchr(b->s, '\n');
    size_t last_line_len = nl ? b->len - (size_t)(nl - b->s) + 1 : b->len + 2;
    if (last_line_len + strlen(suffix) + 2 > P_LINEWIDTH) {
        tg__sb_puts(b, ",\n");
        tg__sb_spaces(b, indent);
    } else {
        tg__sb_puts(b, ", ");
    }
    tg__sb_puts(b, suffix);
}

char *tg_format(const tg_tensor *x)
{
    if (!x) return tg_error("format: NULL tensor");
    if ((unsigned)x->dtype >= TG_DTYPE_COUNT) return tg_error("format: unknown dtype %d", (int)x->dtype);
    if (x->ndim < 0 || x->ndim > TG_MAX_DIMS)
        return tg_error("format: %d dims is outside 0..%d", x->ndim, TG_MAX_DIMS);
    if (x->ndim > 0 && !x->data && tg_numel(x) > 0) return tg_error("format: tensor has no data");

    const char *prefix = "tensor(";
    int indent = (int)strlen(prefix);
    tg__strbuf b = {0};
    tg__sb_puts(&b, prefix);

    /* Suffixes in PyTorch's order: size and dtype, then autograd state. Only
     * two of them can occur at once here, so a small array does. */
    char suffix[3][160];
    int nsuffix = 0;
    int64_t numel = tg_numel(x);
    char dtype_suffix[64];
    /* q8_0 has no torch dtype: its own name */
    snprintf(dtype_suffix, sizeof dtype_suffix, "dtype=%s%s", x->dtype == TG_Q8 ? "" : "torch.", tg_dtype_name(x->dtype));

    if (numel == 0) {
        tg__sb_puts(&b, "[]");
        if (x->ndim != 1) {
            /* str(tuple(shape)): "(2, 0)" */
            size_t k = (size_t)snprintf(suffix[nsuffix], sizeof suffix[0], "size=(");
            for (int i = 0; i < x->ndim && k < sizeof suffix[0]; i++)
                k += (size_t)snprintf(suffix[nsuffix] + k, sizeof suffix[0] - k, i ? ", %lld" : "%lld",
                                      (long long)x->shape[i]);
            if (k < sizeof suffix[0]) snprintf(suffix[nsuffix] + k, sizeof suffix[0] - k, ")");
            nsuffix++;
        }
        /* No elements to show an integer type by, so any non-default dtype is named. */
        if (x->dtype != TG_F32) snprintf(suffix[nsuffix++], sizeof suffix[0], "%s", dtype_suffix);
    } else {
        bool summarize = numel > P_THRESHOLD;
        formatter f;
        formatter_init(&f, x, summarize);
        if (x->ndim == 0)
            format_value(&b, &f, x, x->offset);
        else
            tensor_str(&b, &f, x, 0, x->offset, indent, summarize);
        /* float32, int64 and bool are the types PyTorch infers from literals. */
        if (x->dtype != TG_F32 && x->dtype != TG_I64 && x->dtype != TG_BOOL)
            snprintf(suffix[nsuffix++], sizeof suffix[0], "%s", dtype_suffix);
    }

    if (x->grad_fn)
        snprintf(suffix[nsuffix++], sizeof suffix[0], "grad_fn=<%s>", tg__node_head_name(x->grad_fn));
    else if (x->requires_grad)
        snprintf(suffix[nsuffix++], sizeof suffix[0], "requires_grad=True");

    for (int i = 0; i < nsuffix; i++) add_suffix(&b, suffix[i], indent);
    tg__sb_puts(&b, ")");
    if (b.failed) {
        free(b.s);
        return tg_error("format: out of memory");
    }
    return b.s;
}

int tg_print(FILE *f, const tg_tensor *x)
{
    if (!f) return tg_error_status(TG_EINVAL, "print: NULL file");
    char *s = tg_format(x);
    if (!s) return TG_EINVAL; /* tg_format recorded why */
    int rc = fprintf(f, "%s\n", s);
    free(s);
    if (rc < 0) return tg_error_status(TG_EIO, "print: write failed");
    return TG_OK;
}
