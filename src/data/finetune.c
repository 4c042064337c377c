/* The book's fine-tuning data (include/tapegrad/data.h): chapter 6's
 * SpamDataset over a CSV file, chapter 7's instruction JSON, format_input,
 * the 85/10/5 split, InstructionDataset and custom_collate_fn.
 *
 * The CSV is parsed by libcsv in strict mode (CSV_STRICT | CSV_STRICT_FINI):
 * its callbacks give each field (quotes removed, doubled quotes made one)
 * and each row's end, csv_parse stops at the byte of a quoting error, and
 * csv_fini reports a quoted field still open at the end of the file. The
 * row of an error is the row being read when it happens: the rows completed
 * so far plus one. Spaces are not trimmed (libcsv's default trims spaces
 * and tabs around unquoted fields; pandas keeps them). The whole file is
 * checked as UTF-8 first; when a byte is not, only the bytes before it are
 * parsed, so that the error names the row it falls in (or an earlier error
 * in the file comes first). */
#include <csv.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

/* The whole of path, malloc'd with a NUL after its *len bytes; NULL and a
 * message naming the file when it cannot be read. */
static char *read_all(const char *path, size_t *len)
{
    int err;
    char *buf = tg__read_file(path, (size_t)1 << 40, len, &err);
    if (!buf && err != EIO && err != ENOMEM && err != EFBIG) return tg_error("%s: cannot open: %s", path, strerror(err));
    if (!buf) return tg_error("%s: cannot read the file%s", path, err == ENOMEM ? " (out of memory)" : "");
    return buf;
}

/* s[0..n) for a one-line message: at most max bytes (cut at a character
 * boundary, "..." after), control bytes as \xNN. cap >= 16. */
static const char *printable(char *out, size_t cap, const char *s, size_t n, size_t max)
{
    size_t o = 0, i = 0;
    for (; i < n && i < max && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    if (i < n) {
        /* not in the middle of a character: drop the bytes of one cut short
         * (bytes >= 0x80 are copied one for one) */
        while (i > 0 && o > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--, o--;
        memcpy(out + o, "...", 3), o += 3;
    }
    out[o] = '\0';
    return out;
}

/* Appends n int64 to a growing array; false when out of memory. */
static bool push_ids(int64_t **a, size_t *len, size_t *cap, const int64_t *v, size_t n)
{
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 1024;
        while (c < *len + n) {
            if (c > SIZE_MAX / 2 / sizeof **a) return false;
            c *= 2;
        }
        int64_t *b = realloc(*a, c * sizeof **a);
        if (!b) return false;
        *a = b, *cap = c;
    }
    if (n) memcpy(*a + *len, v, n * sizeof *v);
    *len += n;
    return true;
}

/* The line and column (from 1, in bytes) of byte off of text. */
static void line_col(const char *text, size_t off, size_t *line, size_t *col)
{
    size_t l = 1, c = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') l++, c = 1;
        else c++;
    }
    *line = l, *col = c;
}

/* ---- classifier CSV ------------------------------------------------------------------------------ */

struct tg_class_dataset {
    int64_t n, max_length, num_classes;
    int64_t *ids; /* (n, max_length) */
    int64_t *labels;
};

typedef struct {
    const char *path;
    tg_tokenizer *tok;
    int st;                 /* the first error; later callbacks do nothing */
    bool header_done;
    int64_t row;            /* data rows completed */
    int64_t field;          /* fields of the row being read */
    int64_t ncols, col_label, col_text;
    char *label, *text;     /* the row's fields (copies) */
    size_t label_len, text_len, label_cap, text_cap;
    int64_t *labels;        /* one per row */
    size_t nlabels, labels_cap;
    int64_t *ids, *off;     /* every row's ids back to back; row r's start at off[r] */
    size_t nids, ids_cap, noff, off_cap;
} csv_ctx;

static bool keep_field(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return false;
        *buf = b, *cap = c;
    }
    memcpy(*buf, s, n);
    (*buf)[n] = '\0';
    *len = n;
    return true;
}

static void csv_field(void *s, size_t n, void *data)
{
    csv_ctx *c = data;
    if (c->st != TG_OK) return;
    int64_t k = c->field++;
    if (!c->header_done) {
        if (c->col_label < 0 && n == 5 && memcmp(s, "Label", 5) == 0) c->col_label = k;
        if (c->col_text < 0 && n == 4 && memcmp(s, "Text", 4) == 0) c->col_text = k;
        return;
    }
    bool ok = true;
    if (k == c->col_label) ok = keep_field(&c->label, &c->label_len, &c->label_cap, s, n);
    if (k == c->col_text) ok = ok && keep_field(&c->text, &c->text_len, &c->text_cap, s, n);
    if (!ok) c->st = tg_error_status(TG_ENOMEM, "%s: out of memory", c->path);
}

/* The label of the row ending now, into *label. */
static int parse_label(const csv_ctx *c, int64_t row, int64_t *label)
{
    const char *s = c->label;
    size_t n = c->label_len;
    char shown[400];
    bool neg = n > 1 && s[0] == '-';
    size_t i = neg;
    int64_t v = 0;
    bool digits = n > i;
    for (; i < n && digits; i++) digits = s[i] >= '0' && s[i] <= '9';
    if (!digits)
        return tg_error_status(TG_EFORMAT, "%s: row %lld: label '%s' is not an integer", c->path, (long long)row,
                               printable(shown, sizeof shown, s, n, 40));
    if (neg)
        return tg_error_status(TG_EFORMAT, "%s: row %lld: label %s is negative (labels are class indices from 0)",
                               c->path, (long long)row, printable(shown, sizeof shown, s, n, 40));
    for (i = 0; i < n; i++) {
        /* the number of classes is the largest label + 1 */
        v = v * 10 + (s[i] - '0');
        if (v >= TG_CLASS_DATASET_MAX_CLASSES)
            return tg_error_status(TG_EFORMAT,
                                   "%s: row %lld: label %s is too large (class indices go up to %lld: at most "
                                   "%lld classes)",
                                   c->path, (long long)row, printable(shown, sizeof shown, s, n, 40),
                                   (long long)TG_CLASS_DATASET_MAX_CLASSES - 1, (long long)TG_CLASS_DATASET_MAX_CLASSES);
    }
    *label = v;
    return TG_OK;
}

static void csv_row(int ch, void *data)
{
    (void)ch;
    csv_ctx *c = data;
    if (c->st != TG_OK) return;
    int64_t nf = c->field;
    c->field = 0;
    if (!c->header_done) {
        c->header_done = true;
        c->ncols = nf;
        if (c->col_label < 0 || c->col_text < 0)
            c->st = tg_error_status(TG_EFORMAT, "%s: the header (the first row) has no \"%s\" column (it must name the columns "
                                    "\"Label\" and \"Text\")",
                                    c->path, c->col_label < 0 ? "Label" : "Text");
        return;
    }
    int64_t row = c->row + 1;
    if (nf != c->ncols) {
        c->st = tg_error_status(TG_EFORMAT, "%s: row %lld: %lld field%s, the header has %lld", c->path, (long long)row,
                                (long long)nf, nf == 1 ? "" : "s", (long long)c->ncols);
        return;
    }
    int64_t label = 0;
    if ((c->st = parse_label(c, row, &label)) != TG_OK) return;
    if (c->text_len == 0) {
        c->st = tg_error_status(TG_EFORMAT, "%s: row %lld: empty text (pandas reads it as a missing value)", c->path,
                                (long long)row);
        return;
    }
    int64_t *ids = NULL;
    size_t n = 0;
    int st = tg_tokenizer_encode(c->tok, c->text, c->text_len, &ids, &n);
    if (st != TG_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tg_last_error());
        c->st = tg_error_status(st, "%s: row %lld: %s", c->path, (long long)row, msg);
        return;
    }
    int64_t start = (int64_t)c->nids;
    bool ok = push_ids(&c->ids, &c->nids, &c->ids_cap, ids, n) && push_ids(&c->labels, &c->nlabels, &c->labels_cap, &label, 1) &&
              push_ids(&c->off, &c->noff, &c->off_cap, &start, 1);
    free(ids);
    if (!ok) {
        c->st = tg_error_status(TG_ENOMEM, "%s: out of memory", c->path);
        return;
    }
    c->row = row;
}

static void csv_ctx_free(csv_ctx *c)
{
    free(c->label);
    free(c->text);
    free(c->labels);
    free(c->ids);
    free(c->off);
}

/* libcsv trims these around unquoted fields: none (pandas keeps spaces). */
static int no_space(unsigned char ch)
{
    (void)ch;
    return 0;
}

/* "row N" for an error in the row being read, "the header" before it ends. */
static const char *where(char *buf, size_t cap, const csv_ctx *c)
{
    if (!c->header_done) snprintf(buf, cap, "the header");
    else snprintf(buf, cap, "row %lld", (long long)(c->row + 1));
    return buf;
}

/* Parses text[0..len) into c; TG_OK or the first error. */
static int parse_csv(csv_ctx *c, const char *text, size_t len)
{
    struct csv_parser p;
    if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI | CSV_APPEND_NULL) != 0)
        return tg_error_status(TG_ENOMEM, "%s: out of memory", c->path);
    csv_set_space_func(&p, no_space);
    /* a leading UTF-8 byte order mark is not part of the first column's name */
    size_t start = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    size_t bad = tg__utf8_check(text, len), end = bad < len ? bad : len;
    char w[64];
    size_t done = csv_parse(&p, text + start, end - start, csv_field, csv_row, c);
    if (c->st == TG_OK && done < end - start) {
        size_t at = start + done, line, col;
        line_col(text, at, &line, &col);
        if (csv_error(&p) == CSV_EPARSE)
            c->st = tg_error_status(TG_EFORMAT,
                                    "%s: %s: a quote inside an unquoted field or text after a closing quote (line %zu, "
                                    "column %zu)",
                                    c->path, where(w, sizeof w, c), line, col);
        else
            c->st = tg_error_status(TG_ENOMEM, "%s: %s", c->path, csv_strerror(csv_error(&p)));
    }
    if (c->st == TG_OK && bad < len) {
        size_t line, col;
        line_col(text, bad, &line, &col);
        c->st = tg_error_status(TG_EFORMAT, "%s: %s: invalid UTF-8 at byte %zu (line %zu, column %zu)", c->path,
                                where(w, sizeof w, c), bad, line, col);
    }
    if (c->st == TG_OK && csv_fini(&p, csv_field, csv_row, c) != 0 && c->st == TG_OK)
        c->st = tg_error_status(TG_EFORMAT, "%s: %s: unterminated quoted field (no closing quote before the end of the file)",
                                c->path, where(w, sizeof w, c));
    csv_free(&p);
    return c->st;
}

tg_class_dataset *tg_class_dataset_load(const char *csv_path, tg_tokenizer *tok, int64_t max_length, int64_t pad_id)
{
    if (!csv_path || !tok) return tg_error("class dataset: NULL argument");
    if (max_length < 0)
        return tg_error("%s: max_length must be >= 0 (0: the longest text), got %lld", csv_path, (long long)max_length);
    int64_t vocab = tg_tokenizer_vocab_size(tok);
    if (pad_id < 0 || pad_id >= vocab)
        return tg_error("%s: pad id %lld is outside the vocabulary [0, %lld)", csv_path, (long long)pad_id,
                        (long long)vocab);
    size_t len = 0;
    char *text = read_all(csv_path, &len);
    if (!text) return NULL;
    if (len == 0) {
        free(text);
        return tg_error("%s: empty file", csv_path);
    }
    csv_ctx c = {.path = csv_path, .tok = tok, .st = TG_OK, .col_label = -1, .col_text = -1};
    int st = parse_csv(&c, text, len);
    free(text);
    if (st == TG_OK && !c.header_done) st = tg_error_status(TG_EFORMAT, "%s: no header row (only blank lines)", csv_path);
    if (st == TG_OK && c.row == 0) st = tg_error_status(TG_EFORMAT, "%s: no data rows (only the header)", csv_path);
    tg_class_dataset *d = NULL;
    if (st == TG_OK) {
        int64_t n = c.row, longest = 0;
        for (int64_t r = 0; r < n; r++) {
            int64_t l = (r + 1 < n ? c.off[r + 1] : (int64_t)c.nids) - c.off[r];
            if (l > longest) longest = l;
        }
        int64_t L = max_length ? max_length : longest;
        d = calloc(1, sizeof *d);
        if (d && (uint64_t)L <= SIZE_MAX / sizeof(int64_t) / (uint64_t)n) {
            d->ids = malloc((size_t)n * (size_t)L * sizeof *d->ids);
            d->labels = malloc((size_t)n * sizeof *d->labels);
        }
        if (!d || !d->ids || !d->labels) {
            if (d) free(d->ids), free(d->labels);
            free(d);
            d = NULL;
            st = tg_error_status(TG_ENOMEM, "%s: out of memory for %lld rows of %lld ids", csv_path, (long long)n,
                                 (long long)L);
        } else {
            d->n = n, d->max_length = L;
            for (int64_t r = 0; r < n; r++) {
                int64_t l = (r + 1 < n ? c.off[r + 1] : (int64_t)c.nids) - c.off[r], keep = l < L ? l : L;
                int64_t *dst = d->ids + r * L;
                memcpy(dst, c.ids + c.off[r], (size_t)keep * sizeof *dst);
                for (int64_t j = keep; j < L; j++) dst[j] = pad_id;
                d->labels[r] = c.labels[r];
                if (c.labels[r] + 1 > d->num_classes) d->num_classes = c.labels[r] + 1;
            }
        }
    }
    csv_ctx_free(&c);
    return d;
}

void tg_class_dataset_free(tg_class_dataset *ds)
{
    if (!ds) return;
    free(ds->ids);
    free(ds->labels);
    free(ds);
}

int64_t tg_class_dataset_len(const tg_class_dataset *ds) { return ds ? ds->n : 0; }

int64_t tg_class_dataset_max_length(const tg_class_dataset *ds) { return ds ? ds->max_length : 0; }

int64_t tg_class_dataset_num_classes(const tg_class_dataset *ds) { return ds ? ds->num_classes : 0; }

int tg_class_dataset_get(const tg_class_dataset *ds, int64_t i, int64_t *ids, int64_t *label)
{
    if (!ds || !ids || !label) return tg_error_status(TG_EINVAL, "class dataset: NULL argument");
    if (i < 0 || i >= ds->n)
        return tg_error_status(TG_EINVAL, "class dataset: row index %lld out of range (%lld rows)", (long long)i,
                               (long long)ds->n);
    memcpy(ids, ds->ids + i * ds->max_length, (size_t)ds->max_length * sizeof *ids);
    *label = ds->labels[i];
    return TG_OK;
}

int tg_class_dataset_batch(const tg_class_dataset *ds, tg_tape *tp, const int64_t *idx, int64_t count,
                           tg_tensor **input, tg_tensor **labels)
{
    if (input) *input = NULL;
    if (labels) *labels = NULL;
    if (!ds || !tp || (!idx && count) || !input || !labels)
        return tg_error_status(TG_EINVAL, "class dataset batch: NULL argument");
    if (count < 1) return tg_error_status(TG_EINVAL, "class dataset batch: empty batch");
    int64_t shape[2] = {count, ds->max_length};
    tg_tensor *x = tg_empty(tp, TG_I64, 2, shape), *y = tg_empty(tp, TG_I64, 1, shape);
    if (!x || !y) return TG_ENOMEM;
    for (int64_t b = 0; b < count; b++) {
        int st = tg_class_dataset_get(ds, idx[b], (int64_t *)x->data + b * ds->max_length, (int64_t *)y->data + b);
        if (st != TG_OK) return st;
    }
    *input = x, *labels = y;
    return TG_OK;
}

/* ---- instruction data ---------------------------------------------------------------------------- */

struct tg_instruction_data {
    int64_t n;
    tg_instruction *e; /* strings malloc'd, one allocation per entry */
};

/* The members of an entry: the instruction data's three, and the preference
 * data's chosen and rejected answers (its output optional). */
static const char *const FIELDS[5] = {"instruction", "input", "output", "chosen", "rejected"};

void tg_instruction_data_free(tg_instruction_data *d)
{
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) free((char *)d->e[i].instruction);
    free(d->e);
    free(d);
}

/* Entry i of the array into d->e[i]: the members of `need` required, those
 * of `may` kept when present (bit k: FIELDS[k]). */
static int load_entry(tg_instruction_data *d, const char *path, const json_t *o, size_t i, unsigned need, unsigned may)
{
    if (!json_is_object(o))
        return tg_error_status(TG_EFORMAT, "%s: entry %zu: not a JSON object (each entry has %s)", path, i,
                               need & 24u ? "\"instruction\", \"input\", \"chosen\" and \"rejected\""
                                          : "\"instruction\", \"input\" and \"output\"");
    size_t len[5] = {0}, total = 0;
    const json_t *v[5] = {NULL};
    for (int k = 0; k < 5; k++) {
        if (!((need | may) >> k & 1u)) continue;
        v[k] = json_object_get(o, FIELDS[k]);
        if (!v[k] && !(need >> k & 1u)) continue;
        if (!v[k]) return tg_error_status(TG_EFORMAT, "%s: entry %zu: \"%s\" is missing", path, i, FIELDS[k]);
        if (!json_is_string(v[k])) return tg_error_status(TG_EFORMAT, "%s: entry %zu: \"%s\" is not a string", path, i, FIELDS[k]);
        len[k] = json_string_length(v[k]);
        if (memchr(json_string_value(v[k]), '\0', len[k]))
            return tg_error_status(TG_EFORMAT, "%s: entry %zu: \"%s\" contains a NUL character (\\u0000)", path, i,
                                   FIELDS[k]);
        total += len[k] + 1;
    }
    char *s = malloc(total);
    if (!s) return tg_error_status(TG_ENOMEM, "%s: out of memory", path);
    const char **dst[5] = {&d->e[i].instruction, &d->e[i].input, &d->e[i].output, &d->e[i].chosen,
                           &d->e[i].rejected};
    for (int k = 0; k < 5; k++) {
        if (!v[k]) continue;
        memcpy(s, json_string_value(v[k]), len[k] + 1);
        *dst[k] = s;
        s += len[k] + 1;
    }
    d->n++;
    return TG_OK;
}

static tg_instruction_data *data_load(const char *json_path, unsigned need, unsigned may)
{
    if (!json_path) return tg_error("instruction data: NULL path");
    size_t len = 0;
    char *text = read_all(json_path, &len);
    if (!text) return NULL;
    if (len == 0) {
        free(text);
        return tg_error("%s: empty file", json_path);
    }
    size_t bad = tg__utf8_check(text, len);
    if (bad < len) {
        size_t line, col;
        line_col(text, bad, &line, &col);
        free(text);
        return tg_error("%s: invalid UTF-8 at byte %zu (line %zu:%zu)", json_path, bad, line, col);
    }
    json_error_t err;
    /* JSON_ALLOW_NUL: "\u0000" parses, to be refused with a clear message */
    json_t *root = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    free(text);
    if (!root) {
        char msg[4 * sizeof err.text + 8];
        return tg_error("%s: JSON syntax error at line %d:%d: %s", json_path, err.line, err.column,
                        printable(msg, sizeof msg, err.text, strnlen(err.text, sizeof err.text), sizeof err.text));
    }
    tg_instruction_data *d = NULL;
    int st = TG_OK;
    if (!json_is_array(root)) st = tg_error_status(TG_EFORMAT, "%s: not a JSON array (the file must be an array of entries)", json_path);
    else if (json_array_size(root) == 0) st = tg_error_status(TG_EFORMAT, "%s: the array has no entries", json_path);
    else if (!(d = calloc(1, sizeof *d)) || !(d->e = calloc(json_array_size(root), sizeof *d->e)))
        st = tg_error_status(TG_ENOMEM, "%s: out of memory", json_path);
    for (size_t i = 0; st == TG_OK && i < json_array_size(root); i++)
        st = load_entry(d, json_path, json_array_get(root, i), i, need, may);
    json_decref(root);
    if (st != TG_OK) {
        tg_instruction_data_free(d);
        return NULL;
    }
    return d;
}

tg_instruction_data *tg_instruction_data_load(const char *json_path) { return data_load(json_path, 7u, 0u); }

tg_instruction_data *tg_preference_data_load(const char *json_path) { return data_load(json_path, 27u, 4u); }

int64_t tg_instruction_data_len(const tg_instruction_data *d) { return d ? d->n : 0; }

const tg_instruction *tg_instruction_data_get(const tg_instruction_data *d, int64_t i)
{
    if (!d) return tg_error("instruction data: NULL data");
    if (i < 0 || i >= d->n)
        return tg_error("instruction data: entry %lld out of range (%lld entries)", (long long)i, (long long)d->n);
    return &d->e[i];
}

static const char PREAMBLE[] = "Below is an instruction that describes a task. Write a response that appropriately "
                               "completes the request.\n\n### Instruction:\n";
static const char INPUT_HEAD[] = "\n\n### Input:\n";
static const char RESPONSE_HEAD[] = "\n\n### Response:\n";

char *tg_format_input(const tg_instruction *e)
{
    if (!e || !e->instruction || !e->input) return tg_error("format_input: NULL entry or field");
    size_t li = strlen(e->instruction), ln = strlen(e->input);
    size_t n = sizeof PREAMBLE - 1 + li + (ln ? sizeof INPUT_HEAD - 1 + ln : 0);
    char *s = malloc(n + 1);
    if (!s) return tg_error("format_input: out of memory");
    char *p = s;
    memcpy(p, PREAMBLE, sizeof PREAMBLE - 1), p += sizeof PREAMBLE - 1;
    memcpy(p, e->instruction, li), p += li;
    if (ln) {
        memcpy(p, INPUT_HEAD, sizeof INPUT_HEAD - 1), p += sizeof INPUT_HEAD - 1;
        memcpy(p, e->input, ln), p += ln;
    }
    *p = '\0';
    return s;
}

int tg_instruction_split(int64_t n, int64_t *n_train, int64_t *n_test, int64_t *n_val)
{
    if (!n_train || !n_test || !n_val) return tg_error_status(TG_EINVAL, "instruction split: NULL argument");
    if (n < 0) return tg_error_status(TG_EINVAL, "instruction split: negative entry count %lld", (long long)n);
    /* int(len(data) * 0.85): the int converted to a double, the product
     * rounded to a double, truncated */
    int64_t train = (int64_t)((double)n * 0.85), test = (int64_t)((double)n * 0.1);
    *n_train = train, *n_test = test, *n_val = n - train - test;
    return TG_OK;
}

/* ---- InstructionDataset and custom_collate_fn ----------------------------------------------------------- */

struct tg_instruction_dataset {
    int64_t n;
    int64_t *ids, *off; /* entry i: ids[off[i] .. off[i + 1]) */
};

void tg_instruction_dataset_free(tg_instruction_dataset *ds)
{
    if (!ds) return;
    free(ds->ids);
    free(ds->off);
    free(ds);
}

char *tg_format_chat_user(const tg_instruction *e)
{
    if (!e || !e->instruction || !e->input) return tg_error("format_chat_user: NULL entry or field");
    size_t li = strlen(e->instruction), ln = strlen(e->input);
    char *s = malloc(li + (ln ? 2 + ln : 0) + 1);
    if (!s) return tg_error("format_chat_user: out of memory");
    memcpy(s, e->instruction, li);
    if (ln) memcpy(s + li, "\n\n", 2), memcpy(s + li + 2, e->input, ln);
    s[li + (ln ? 2 + ln : 0)] = '\0';
    return s;
}

/* One entry's ids: format_input(e) + "\n\n### Response:\n" + output, or the
 * conversation (user: tg_format_chat_user(e), assistant: output) in the
 * tokenizer's chat format. */
static int encode_entry(tg_tokenizer *tok, const tg_instruction *e, tg_instruction_format format, int64_t **ids,
                        size_t *n)
{
    if (format == TG_INSTRUCTION_CHAT) {
        char *user = tg_format_chat_user(e);
        if (!user) return TG_ENOMEM;
        const tg_chat_message m[2] = {{"user", user}, {"assistant", e->output}};
        int st = tg_tokenizer_encode_chat(tok, m, 2, NULL, ids, n);
        free(user);
        return st;
    }
    char *prompt = tg_format_input(e);
    if (!prompt) return TG_ENOMEM;
    size_t lp = strlen(prompt), lo = strlen(e->output), lr = sizeof RESPONSE_HEAD - 1;
    char *full = malloc(lp + lr + lo + 1);
    if (!full) {
        free(prompt);
        return tg_error_status(TG_ENOMEM, "instruction dataset: out of memory");
    }
    memcpy(full, prompt, lp);
    memcpy(full + lp, RESPONSE_HEAD, lr);
    memcpy(full + lp + lr, e->output, lo + 1);
    free(prompt);
    int st = tg_tokenizer_encode(tok, full, lp + lr + lo, ids, n);
    free(full);
    return st;
}

tg_instruction_dataset *tg_instruction_dataset_new(const tg_instruction_data *d, int64_t begin, int64_t end,
                                                   tg_tokenizer *tok)
{
    return tg_instruction_dataset_new_format(d, begin, end, tok, TG_INSTRUCTION_ALPACA);
}

tg_instruction_dataset *tg_instruction_dataset_new_format(const tg_instruction_data *d, int64_t begin, int64_t end,
                                                          tg_tokenizer *tok, tg_instruction_format format)
{
    if (!d || !tok) return tg_error("instruction dataset: NULL argument");
    if (format != TG_INSTRUCTION_ALPACA && format != TG_INSTRUCTION_CHAT)
        return tg_error("instruction dataset: format %d is not alpaca or chat", (int)format);
    if (format == TG_INSTRUCTION_CHAT && tg_tokenizer_chat_format(tok) == TG_CHAT_NONE)
        return tg_error("instruction dataset: the chat format needs a tokenizer with one (Qwen3's, Llama 3's, Gemma 3's)");
    if (begin < 0 || begin > end || end > d->n)
        return tg_error("instruction dataset: entries [%lld, %lld) are not a range of the %lld entries", (long long)begin,
                        (long long)end, (long long)d->n);
    tg_instruction_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->off = malloc((size_t)(end - begin + 1) * sizeof *ds->off))) {
        free(ds);
        return tg_error("instruction dataset: out of memory");
    }
    size_t nids = 0, cap = 0;
    int st = TG_OK;
    ds->off[0] = 0;
    for (int64_t i = begin; st == TG_OK && i < end; i++) {
        int64_t *ids = NULL;
        size_t n = 0;
        st = encode_entry(tok, &d->e[i], format, &ids, &n);
        if (st != TG_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tg_last_error());
            st = tg_error_status(st, "instruction dataset: entry %lld: %s", (long long)i, msg);
            break;
        }
        if (!push_ids(&ds->ids, &nids, &cap, ids, n)) st = tg_error_status(TG_ENOMEM, "instruction dataset: out of memory");
        free(ids);
        ds->off[i - begin + 1] = (int64_t)nids;
    }
    if (st != TG_OK) {
        tg_instruction_dataset_free(ds);
        return NULL;
    }
    ds->n = end - begin;
    return ds;
}

int64_t tg_instruction_dataset_len(const tg_instruction_dataset *ds) { return ds ? ds->n : 0; }

const int64_t *tg_instruction_dataset_ids(const tg_instruction_dataset *ds, int64_t i, int64_t *n)
{
    if (n) *n = 0;
    if (!ds || !n) return tg_error("instruction dataset: NULL argument");
    if (i < 0 || i >= ds->n)
        return tg_error("instruction dataset: entry %lld out of range (%lld entries)", (long long)i, (long long)ds->n);
    *n = ds->off[i + 1] - ds->off[i];
    return ds->ids + ds->off[i];
}

int tg_collate_pad(tg_tape *tp, int n, const int64_t *const *ids, const int64_t *lens, int64_t pad_id,
                   int64_t ignore_index, int64_t allowed_max_length, tg_tensor **inputs, tg_tensor **targets)
{
    if (inputs) *inputs = NULL;
    if (targets) *targets = NULL;
    if (!tp || !ids || !lens || !inputs || !targets) return tg_error_status(TG_EINVAL, "collate: NULL argument");
    if (n < 1) return tg_error_status(TG_EINVAL, "collate: empty batch (%d sequences)", n);
    if (allowed_max_length < 0)
        return tg_error_status(TG_EINVAL, "collate: allowed_max_length must be >= 0 (0: no limit), got %lld",
                               (long long)allowed_max_length);
    int64_t longest = 0;
    for (int b = 0; b < n; b++) {
        if (lens[b] < 0 || lens[b] > (INT64_MAX >> 4))
            return tg_error_status(TG_EINVAL, "collate: sequence %d has length %lld", b, (long long)lens[b]);
        if (lens[b] && !ids[b]) return tg_error_status(TG_EINVAL, "collate: sequence %d is NULL", b);
        if (lens[b] > longest) longest = lens[b];
    }
    /* batch_max_length = max(len(item) + 1); inputs and targets have one less */
    int64_t L = longest;
    if (allowed_max_length > 0 && allowed_max_length < L) L = allowed_max_length;
    int64_t shape[2] = {n, L};
    tg_tensor *x = tg_empty(tp, TG_I64, 2, shape), *y = tg_empty(tp, TG_I64, 2, shape);
    if (!x || !y) return TG_ENOMEM;
    for (int b = 0; b < n; b++) {
        int64_t *xi = (int64_t *)x->data + (int64_t)b * L, *yi = (int64_t *)y->data + (int64_t)b * L;
        const int64_t *item = ids[b];
        bool seen_pad = false;
        for (int64_t j = 0; j < L; j++) {
            /* padded[j] = item[j] while j < len, else pad */
            xi[j] = j < lens[b] ? item[j] : pad_id;
            int64_t t = j + 1 < lens[b] ? item[j + 1] : pad_id;
            if (t == pad_id) {
                if (seen_pad) t = ignore_index;
                seen_pad = true;
            }
            yi[j] = t;
        }
    }
    *inputs = x, *targets = y;
    return TG_OK;
}

int tg_instruction_dataset_batch(const tg_instruction_dataset *ds, tg_tape *tp, const int64_t *idx, int64_t count,
                                 int64_t pad_id, int64_t ignore_index, int64_t allowed_max_length, tg_tensor **inputs,
                                 tg_tensor **targets)
{
    if (inputs) *inputs = NULL;
    if (targets) *targets = NULL;
    if (!ds || !tp || (!idx && count) || !inputs || !targets)
        return tg_error_status(TG_EINVAL, "instruction dataset batch: NULL argument");
    if (count < 1 || count > INT32_MAX)
        return tg_error_status(TG_EINVAL, "instruction dataset batch: batch of %lld entries", (long long)count);
    const int64_t **seqs = tg_tape_alloc(tp, (size_t)count * sizeof *seqs, false);
    int64_t *lens = tg_tape_alloc(tp, (size_t)count * sizeof *lens, false);
    if (!seqs || !lens) return TG_ENOMEM;
    for (int64_t b = 0; b < count; b++) {
        seqs[b] = tg_instruction_dataset_ids(ds, idx[b], &lens[b]);
        if (!seqs[b]) return TG_EINVAL;
    }
    return tg_collate_pad(tp, (int)count, seqs, lens, pad_id, ignore_index, allowed_max_length, inputs, targets);
}

/* ---- PreferenceDataset and the DPO notebook's collate ------------------------------------------------ */

struct tg_preference_dataset {
    int64_t n;
    int64_t *ids;  /* entry i: its prompt, chosen and rejected ids, one after the other */
    int64_t *off;  /* entry i: ids[off[3i] ..), lengths len[3i], len[3i + 1], len[3i + 2] */
    int64_t *len;
    int64_t *mask_from; /* the first position of the answer in the mask */
};

void tg_preference_dataset_free(tg_preference_dataset *ds)
{
    if (!ds) return;
    free(ds->ids);
    free(ds->off);
    free(ds);
}

/* The answer's ids: format_input(e) + "\n\n### Response:\n" + answer, or the
 * conversation (user, assistant: answer) in the chat format. */
static int encode_answer(tg_tokenizer *tok, const tg_instruction *e, const char *answer, tg_instruction_format format,
                         int64_t **ids, size_t *n)
{
    tg_instruction a = *e;
    a.output = answer;
    return encode_entry(tok, &a, format, ids, n);
}

/* The prompt's ids: format_input(e), or the user's turn and the assistant's
 * header (thinking left open). */
static int encode_prompt(tg_tokenizer *tok, const tg_instruction *e, tg_instruction_format format, int64_t **ids,
                         size_t *n)
{
    char *text = format == TG_INSTRUCTION_CHAT ? tg_format_chat_user(e) : tg_format_input(e);
    if (!text) return TG_ENOMEM;
    int st;
    if (format == TG_INSTRUCTION_CHAT) {
        const tg_chat_message m = {"user", text};
        const tg_chat_options o = {.add_generation_prompt = true, .thinking = true};
        st = tg_tokenizer_encode_chat(tok, &m, 1, &o, ids, n);
    } else {
        st = tg_tokenizer_encode(tok, text, strlen(text), ids, n);
    }
    free(text);
    return st;
}

tg_preference_dataset *tg_preference_dataset_new(const tg_instruction_data *d, int64_t begin, int64_t end,
                                                 tg_tokenizer *tok, tg_instruction_format format)
{
    if (!d || !tok) return tg_error("preference dataset: NULL argument");
    if (format != TG_INSTRUCTION_ALPACA && format != TG_INSTRUCTION_CHAT)
        return tg_error("preference dataset: format %d is not alpaca or chat", (int)format);
    if (format == TG_INSTRUCTION_CHAT && tg_tokenizer_chat_format(tok) == TG_CHAT_NONE)
        return tg_error("preference dataset: the chat format needs a tokenizer with one (Qwen3's, Llama 3's, Gemma 3's)");
    if (begin < 0 || begin > end || end > d->n)
        return tg_error("preference dataset: entries [%lld, %lld) are not a range of the %lld entries", (long long)begin,
                        (long long)end, (long long)d->n);
    int64_t n = end - begin;
    tg_preference_dataset *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->off = malloc((size_t)(5 * n + 1) * sizeof *ds->off))) {
        free(ds);
        return tg_error("preference dataset: out of memory");
    }
    ds->len = ds->off + n;
    ds->mask_from = ds->off + 4 * n;
    size_t nids = 0, cap = 0;
    int st = TG_OK;
    static const char *const part[3] = {"prompt", "chosen answer", "rejected answer"};
    for (int64_t i = begin; st == TG_OK && i < end; i++) {
        const tg_instruction *e = &d->e[i];
        if (!e->chosen || !e->rejected) {
            st = tg_error_status(TG_EINVAL, "preference dataset: entry %lld has no \"%s\" (read the file with "
                                            "tg_preference_data_load)", (long long)i, e->chosen ? "rejected" : "chosen");
            break;
        }
        int64_t k = i - begin;
        ds->off[k] = (int64_t)nids;
        for (int p = 0; p < 3 && st == TG_OK; p++) {
            int64_t *ids = NULL;
            size_t len = 0;
            st = p == 0 ? encode_prompt(tok, e, format, &ids, &len)
                        : encode_answer(tok, e, p == 1 ? e->chosen : e->rejected, format, &ids, &len);
            if (st != TG_OK) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", tg_last_error());
                st = tg_error_status(st, "preference dataset: entry %lld's %s: %s", (long long)i, part[p], msg);
            } else if (!push_ids(&ds->ids, &nids, &cap, ids, len)) {
                st = tg_error_status(TG_ENOMEM, "preference dataset: out of memory");
            }
            free(ids);
            ds->len[3 * k + p] = (int64_t)len;
        }
        if (st != TG_OK) break;
        /* the notebook masks the prompt and the 2 "\n" of "\n\n### Response:";
         * in the chat format the prompt ends with the assistant's header */
        ds->mask_from[k] = ds->len[3 * k] + (format == TG_INSTRUCTION_CHAT ? 0 : 2);
        for (int p = 1; p < 3 && st == TG_OK; p++)
            if (ds->len[3 * k + p] <= ds->mask_from[k])
                st = tg_error_status(TG_EINVAL, "preference dataset: entry %lld's %s has no ids after its prompt "
                                                "(%lld ids, the prompt %lld)",
                                     (long long)i, part[p], (long long)ds->len[3 * k + p], (long long)ds->mask_from[k]);
    }
    if (st != TG_OK) {
        tg_preference_dataset_free(ds);
        return NULL;
    }
    ds->n = n;
    return ds;
}

int64_t tg_preference_dataset_len(const tg_preference_dataset *ds) { return ds ? ds->n : 0; }

int tg_preference_dataset_get(const tg_preference_dataset *ds, int64_t i, tg_preference_ids *out)
{
    if (out) *out = (tg_preference_ids){0};
    if (!ds || !out) return tg_error_status(TG_EINVAL, "preference dataset: NULL argument");
    if (i < 0 || i >= ds->n)
        return tg_error_status(TG_EINVAL, "preference dataset: entry %lld out of range (%lld entries)", (long long)i,
                               (long long)ds->n);
    const int64_t *p = ds->ids + ds->off[i], *len = ds->len + 3 * i;
    *out = (tg_preference_ids){.prompt = p, .chosen = p + len[0], .rejected = p + len[0] + len[1],
                               .n_prompt = len[0], .n_chosen = len[1], .n_rejected = len[2],
                               .mask_from = ds->mask_from[i]};
    return TG_OK;
}

int tg_preference_dataset_batch(const tg_preference_dataset *ds, tg_tape *tp, const int64_t *idx, int64_t count,
                                int64_t pad_id, int64_t allowed_max_length, bool mask_prompt_tokens,
                                tg_tensor *out[4])
{
    if (out) out[0] = out[1] = out[2] = out[3] = NULL;
    if (!ds || !tp || (!idx && count) || !out) return tg_error_status(TG_EINVAL, "preference batch: NULL argument");
    if (count < 1 || count > INT32_MAX)
        return tg_error_status(TG_EINVAL, "preference batch: batch of %lld entries", (long long)count);
    if (allowed_max_length < 0)
        return tg_error_status(TG_EINVAL, "preference batch: allowed_max_length must be >= 0 (0: no limit), got %lld",
                               (long long)allowed_max_length);
    tg_preference_ids *e = tg_tape_alloc(tp, (size_t)count * sizeof *e, false);
    if (!e) return TG_ENOMEM;
    /* max_length_common = max(len(item[key]) + 1) over chosen and rejected */
    int64_t L = 0;
    for (int64_t b = 0; b < count; b++) {
        int st = tg_preference_dataset_get(ds, idx[b], &e[b]);
        if (st != TG_OK) return st;
        int64_t m = (e[b].n_chosen > e[b].n_rejected ? e[b].n_chosen : e[b].n_rejected) + 1;
        if (m > L) L = m;
    }
    /* tensor_stack[:, :allowed_max_length] */
    if (allowed_max_length > 0 && allowed_max_length < L) L = allowed_max_length;
    int64_t shape[2] = {count, L};
    for (int k = 0; k < 4; k++)
        if (!(out[k] = tg_empty(tp, k < 2 ? TG_I64 : TG_BOOL, 2, shape))) return TG_ENOMEM;
    for (int64_t b = 0; b < count; b++)
        for (int k = 0; k < 2; k++) {
            const int64_t *seq = k == 0 ? e[b].chosen : e[b].rejected;
            int64_t len = k == 0 ? e[b].n_chosen : e[b].n_rejected;
            int64_t *x = (int64_t *)out[k]->data + b * L;
            uint8_t *m = (uint8_t *)out[k + 2]->data + b * L;
            for (int64_t j = 0; j < L; j++) {
                x[j] = j < len ? seq[j] : pad_id;
                m[j] = j < len && (!mask_prompt_tokens || j >= e[b].mask_from);
            }
        }
    return TG_OK;
}
