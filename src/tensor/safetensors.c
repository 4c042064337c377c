/* safetensors files (https://github.com/huggingface/safetensors):
 *
 *   8 bytes   N, little-endian u64
 *   N bytes   JSON header {"name": {"dtype", "shape", "data_offsets": [b, e]}, ...,
 *             optional "__metadata__": {str: str}}, space-padded
 *   rest      the tensors' bytes, little-endian, row-major, back to back
 *
 * Writing follows the reference serializer byte for byte: tensors sorted by
 * descending dtype (the reference's alignment order) then by name, compact
 * JSON, header padded with spaces to a multiple of 8. Reading is as strict as
 * the reference's validation and then some: every rule names what is wrong.
 * BF16 entries are TG_BF16 tensors both ways (tg_safetensors_load widens
 * them to float32 exactly unless asked to keep them, tg_safetensors_load_ex);
 * F16 entries (Hugging Face checkpoints) are read only, widened to float32
 * exactly: a float16 checkpoint loaded into bf16 weights is widened, then
 * rounded to bf16 by the copy (tg_to_dtype's rounding).
 *
 * "Q8_0" entries are TG_Q8 tensors both ways: llama.cpp's Q8_0 blocks (an
 * IEEE half scale, little-endian, then 32 int8 values: 34 bytes a block,
 * row-major along the last dim) stored as they are in memory. A tapegrad
 * extension: the reference reader knows no such dtype.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference reader's limit on the header. */
#define ST_MAX_HEADER ((uint64_t)100000000)

/* How a file's 16-bit floats become float32. */
typedef enum { ST_NATIVE = 0, ST_WIDEN_F16, ST_WIDEN_BF16 } st_widen;

static const struct {
    const char *name;
    tg_dtype dt;     /* the loaded tensor's dtype */
    int rank;        /* position in the reference's Dtype enum: sort key when writing */
    st_widen widen;  /* ST_NATIVE: stored as dt; else 2 bytes in the file, read as float32 */
} st_dtypes[] = {
    {"BOOL", TG_BOOL, 0, ST_NATIVE}, {"U8", TG_U8, 1, ST_NATIVE},        {"F16", TG_F32, 7, ST_WIDEN_F16},
    {"BF16", TG_BF16, 8, ST_NATIVE}, {"F32", TG_F32, 11, ST_NATIVE},    {"F64", TG_F64, 12, ST_NATIVE},
    {"I64", TG_I64, 13, ST_NATIVE},
    /* not the reference's: sorted where its I8 is (bytes, 1-byte alignment) */
    {"Q8_0", TG_Q8, 2, ST_NATIVE},
};
#define ST_NDTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

/* How entry di is loaded: its dtype and widening, BF16 widened to float32
 * unless kept (keep_bf16). */
static tg_dtype loaded_dtype(int di, bool keep_bf16, st_widen *how)
{
    *how = st_dtypes[di].widen;
    if (st_dtypes[di].dt == TG_BF16 && !keep_bf16) {
        *how = ST_WIDEN_BF16;
        return TG_F32;
    }
    return st_dtypes[di].dt;
}

/* The table's entry written for dt (never a widened one); -1 for none. */
static int dtype_index(tg_dtype dt)
{
    for (size_t i = 0; i < ST_NDTYPES; i++)
        if (st_dtypes[i].dt == dt && st_dtypes[i].widen == ST_NATIVE) return (int)i;
    return -1;
}

/* Bytes of one element in the file (0 for Q8_0: see file_bytes). */
static size_t file_esize(int di)
{
    return st_dtypes[di].widen != ST_NATIVE ? 2 : tg_dtype_size(st_dtypes[di].dt);
}

static bool is_q8(int di) { return st_dtypes[di].dt == TG_Q8; }

/* Bytes of numel elements of entry di in the file (Q8_0: numel / 32 blocks). */
static uint64_t file_bytes(int di, uint64_t numel)
{
    return is_q8(di) ? numel / TG_Q8_BLOCK * TG_Q8_BYTES : numel * file_esize(di);
}

static bool host_is_little_endian(void)
{
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Reverses each element's bytes in place (files are little-endian). */
static void swap_elements(void *p, size_t count, size_t esize)
{
    if (esize < 2) return;
    uint8_t *b = p;
    for (size_t i = 0; i < count; i++, b += esize)
        for (size_t j = 0; j < esize / 2; j++) {
            uint8_t t = b[j];
            b[j] = b[esize - 1 - j];
            b[esize - 1 - j] = t;
        }
}

/* count 16-bit little-endian values at src to float32 at dst. dst may be
 * the start of a buffer whose second half is src (dst + count == src as
 * floats of two halves): each value is read before its bytes are written. */
static void widen(float *dst, const uint8_t *src, size_t count, st_widen how)
{
    for (size_t i = 0; i < count; i++) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        dst[i] = how == ST_WIDEN_BF16 ? tg__bf16_to_f32(h) : tg__f32_from_f16(h);
    }
}

/* The dtypes the reader knows, for a message: "BOOL, U8, F16, ...". */
static const char *dtype_list(char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ST_NDTYPES && k < size; i++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? ", " : "", st_dtypes[i].name);
    return buf;
}

/* ---- parsing ----------------------------------------------------------------- */

typedef struct {
    const char *name;
    int di; /* st_dtypes index */
    int ndim;
    int64_t shape[TG_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

static int cmp_entry(const void *pa, const void *pb)
{
    const st_entry *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name);
}

static bool json_is_count(const json_t *v) { return json_is_integer(v) && json_integer_value(v) >= 0; }

/* A Q8_0 entry's shape: its blocks run along the last dim, a multiple of 32. */
static int check_q8_shape(const char *who, const st_entry *e)
{
    if (e->ndim == 0)
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': Q8_0 with a 0-dim shape (its blocks need a last dim)",
                               who, e->name);
    int64_t last = e->shape[e->ndim - 1];
    if (last % TG_Q8_BLOCK != 0)
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': Q8_0 last dim %lld is not a multiple of %d", who,
                               e->name, (long long)last, TG_Q8_BLOCK);
    return TG_OK;
}

/* Every block of a Q8_0 entry has a finite scale (a NaN or infinite one
 * would make all 32 values NaN or infinite). */
static int check_q8_scales(const char *who, const char *name, const uint8_t *blocks, size_t nblocks)
{
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *p = blocks + b * TG_Q8_BYTES;
        uint16_t h = (uint16_t)(p[0] | p[1] << 8);
        if ((h & 0x7c00) == 0x7c00)
            return tg_error_status(TG_EFORMAT, "%s: tensor '%s': block %zu's scale is %s", who, name, b,
                                   h & 0x03ff ? "NaN" : h & 0x8000 ? "-inf" : "+inf");
    }
    return TG_OK;
}

/* Fills e from one header entry; on error records a message prefixed by who. */
static int parse_entry(const char *who, const char *name, json_t *info, st_entry *e)
{
    e->name = name;
    if (!json_is_object(info))
        return tg_error_status(TG_EFORMAT, "%s: entry '%s' is not an object", who, name);

    json_t *dtype = json_object_get(info, "dtype");
    if (!json_is_string(dtype))
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': dtype missing or not a string", who, name);
    int di = -1;
    for (size_t i = 0; i < ST_NDTYPES; i++)
        if (strcmp(json_string_value(dtype), st_dtypes[i].name) == 0) di = (int)i;
    if (di < 0) {
        char known[96];
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': unknown dtype '%s' (supported: %s)", who, name,
                               json_string_value(dtype), dtype_list(known, sizeof known));
    }
    e->di = di;

    json_t *shape = json_object_get(info, "shape");
    if (!json_is_array(shape))
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': shape is not an array of non-negative integers",
                               who, name);
    if (json_array_size(shape) > TG_MAX_DIMS)
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': shape has %zu dims, more than %d", who, name,
                               json_array_size(shape), TG_MAX_DIMS);
    e->ndim = (int)json_array_size(shape);
    uint64_t nbytes = is_q8(di) ? 1 : file_esize(di); /* Q8_0: the element count, then its blocks' bytes */
    for (int i = 0; i < e->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_count(d))
            return tg_error_status(TG_EFORMAT, "%s: tensor '%s': shape is not an array of non-negative integers",
                                   who, name);
        e->shape[i] = (int64_t)json_integer_value(d);
        /* The byte count (twice the file's for a widened dtype) must fit well
         * inside int64 for every later size computation. */
        if (e->shape[i] > 0 && nbytes > (uint64_t)(INT64_MAX / 16) / (uint64_t)e->shape[i])
            return tg_error_status(TG_EFORMAT, "%s: tensor '%s': shape overflows (too many elements)", who, name);
        nbytes *= (uint64_t)e->shape[i];
    }
    if (is_q8(di)) {
        int st = check_q8_shape(who, e);
        if (st != TG_OK) return st;
        nbytes = file_bytes(di, nbytes);
    }

    json_t *offs = json_object_get(info, "data_offsets");
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_count(json_array_get(offs, 0)) ||
        !json_is_count(json_array_get(offs, 1)))
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': data_offsets is not two non-negative integers", who,
                               name);
    e->begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
    e->end = (uint64_t)json_integer_value(json_array_get(offs, 1));
    if (e->begin > e->end)
        return tg_error_status(TG_EFORMAT, "%s: tensor '%s': data_offsets begin %llu > end %llu", who, name,
                               (unsigned long long)e->begin, (unsigned long long)e->end);
    if (is_q8(di) && e->end - e->begin != nbytes)
        return tg_error_status(TG_EFORMAT,
                               "%s: tensor '%s': Q8_0 needs %llu bytes (%llu blocks of %d), the offsets give %llu", who,
                               name, (unsigned long long)nbytes, (unsigned long long)(nbytes / TG_Q8_BYTES),
                               TG_Q8_BYTES, (unsigned long long)(e->end - e->begin));
    if (e->end - e->begin != nbytes)
        return tg_error_status(TG_EFORMAT,
                               "%s: tensor '%s': byte length %llu does not match shape and dtype (%llu bytes)", who,
                               name, (unsigned long long)(e->end - e->begin), (unsigned long long)nbytes);
    return TG_OK;
}

static int check_metadata(const char *who, json_t *meta)
{
    if (!json_is_object(meta)) return tg_error_status(TG_EFORMAT, "%s: __metadata__ is not an object", who);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return tg_error_status(TG_EFORMAT, "%s: __metadata__ value for key '%s' is not a string", who, k);
    }
    return TG_OK;
}

/* The 8-byte length of a file of len bytes, checked against the limit and
 * the file's size. */
static int header_length(const char *who, const uint8_t *first8, uint64_t len, uint64_t *n)
{
    if (len < 8)
        return tg_error_status(TG_EFORMAT, "%s: file is %llu bytes, shorter than the 8-byte header length", who,
                               (unsigned long long)len);
    *n = 0;
    for (int i = 7; i >= 0; i--) *n = *n << 8 | first8[i];
    if (*n > ST_MAX_HEADER)
        return tg_error_status(TG_EFORMAT, "%s: header length %llu is too large (limit 100 MB)", who,
                               (unsigned long long)*n);
    if (*n > len - 8)
        return tg_error_status(TG_EFORMAT, "%s: header length %llu runs past the end of the file (%llu bytes)", who,
                               (unsigned long long)*n, (unsigned long long)len);
    return TG_OK;
}

/* A validated header: the entries sorted by data offset, laid out back to
 * back over exactly data_len bytes. names point into root. */
typedef struct {
    json_t *root;
    st_entry *entries;
    size_t n;
} st_header;

static void header_free(st_header *h)
{
    free(h->entries);
    json_decref(h->root);
    memset(h, 0, sizeof *h);
}

static int parse_header(const char *who, const uint8_t *text, uint64_t n, uint64_t data_len, st_header *h)
{
    memset(h, 0, sizeof *h);
    json_error_t jerr;
    h->root = json_loadb((const char *)text, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!h->root) {
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return tg_error_status(TG_EFORMAT, "%s: duplicate name in header: %s", who, jerr.text);
        return tg_error_status(TG_EFORMAT, "%s: invalid JSON header: %s (at byte %d)", who, jerr.text,
                               jerr.position);
    }
    int st = TG_OK;
    if (!json_is_object(h->root)) {
        st = tg_error_status(TG_EFORMAT, "%s: header is not a JSON object", who);
        goto fail;
    }
    size_t count = json_object_size(h->root);
    h->entries = calloc(count ? count : 1, sizeof *h->entries);
    if (!h->entries) {
        st = tg_error_status(TG_ENOMEM, "%s: out of memory", who);
        goto fail;
    }
    const char *key;
    json_t *val;
    json_object_foreach(h->root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            st = check_metadata(who, val);
        } else {
            st = parse_entry(who, key, val, &h->entries[h->n]);
            h->n++;
        }
        if (st != TG_OK) goto fail;
    }

    /* Like the reference reader, accept any header order but require the data
     * to be laid out back to back, exactly covering the buffer. */
    qsort(h->entries, h->n, sizeof *h->entries, cmp_entry);
    uint64_t pos = 0;
    for (size_t i = 0; i < h->n; i++) {
        const st_entry *e = &h->entries[i];
        if (e->begin < pos) {
            st = tg_error_status(TG_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu) overlap the previous tensor",
                                 who, e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
            goto fail;
        }
        if (e->begin > pos) {
            st = tg_error_status(TG_EFORMAT,
                                 "%s: tensor '%s': data_offsets not contiguous: starts at %llu, expected %llu (gap)",
                                 who, e->name, (unsigned long long)e->begin, (unsigned long long)pos);
            goto fail;
        }
        if (e->end > data_len) {
            st = tg_error_status(TG_EFORMAT,
                                 "%s: tensor '%s': data_offsets end %llu is beyond the data buffer (%llu bytes)", who,
                                 e->name, (unsigned long long)e->end, (unsigned long long)data_len);
            goto fail;
        }
        pos = e->end;
    }
    if (pos != data_len) {
        st = tg_error_status(TG_EFORMAT, "%s: %llu trailing bytes after the last tensor are not covered", who,
                             (unsigned long long)(data_len - pos));
        goto fail;
    }
    return TG_OK;
fail:
    header_free(h);
    return st;
}

/* Reads n bytes from f into p; false on a short read. */
static bool read_all(FILE *f, void *p, size_t n) { return n == 0 || fread(p, 1, n, f) == n; }

/* The tensors of a validated header, in tp: their bytes from mem (the data
 * buffer) or, when mem is NULL, read from f in order (f at the data's start:
 * the entries cover it back to back). path names f in a read error. */
static int fill_tensors(tg_tape *tp, const char *who, const char *path, const st_header *h, const uint8_t *mem,
                        FILE *f, bool keep_bf16, tg_safetensors *out)
{
    size_t ne = h->n;
    char **names = tg_tape_alloc(tp, (ne ? ne : 1) * sizeof *names, true);
    tg_tensor **tensors = tg_tape_alloc(tp, (ne ? ne : 1) * sizeof *tensors, true);
    if (!names || !tensors) return TG_ENOMEM;
    for (size_t i = 0; i < ne; i++) {
        const st_entry *e = &h->entries[i];
        size_t nbytes = (size_t)(e->end - e->begin), nlen = strlen(e->name) + 1;
        st_widen how;
        tg_dtype dt = loaded_dtype(e->di, keep_bf16, &how);
        names[i] = tg_tape_alloc(tp, nlen, false);
        tensors[i] = tg_empty(tp, dt, e->ndim, e->shape);
        if (!names[i] || !tensors[i]) return TG_ENOMEM;
        memcpy(names[i], e->name, nlen);
        uint8_t *dst = tg_data_ptr(tensors[i]);
        const uint8_t *raw = mem ? mem + e->begin : NULL;
        if (!mem) { /* a widened entry's bytes go to the second half of its float32 buffer */
            uint8_t *into = how != ST_NATIVE ? dst + nbytes : dst;
            if (!read_all(f, into, nbytes))
                return tg_error_status(TG_EIO, "safetensors_load: cannot read '%s' (tensor '%s')", path, e->name);
            raw = into;
        }
        if (how != ST_NATIVE) {
            widen((float *)(void *)dst, raw, nbytes / 2, how);
            continue;
        }
        if (raw != dst && nbytes) memcpy(dst, raw, nbytes);
        if (st_dtypes[e->di].dt == TG_BOOL)
            for (size_t k = 0; k < nbytes; k++)
                if (dst[k] > 1)
                    return tg_error_status(TG_EFORMAT, "%s: tensor '%s': BOOL element %zu is %u, not 0 or 1", who,
                                           e->name, k, (unsigned)dst[k]);
        if (is_q8(e->di)) { /* no swap: the scales are little-endian in memory too (q8.h) */
            int st = check_q8_scales(who, e->name, dst, nbytes / TG_Q8_BYTES);
            if (st != TG_OK) return st;
            continue;
        }
        if (!host_is_little_endian()) swap_elements(dst, nbytes / file_esize(e->di), file_esize(e->di));
    }
    out->n = (int)ne;
    out->names = names;
    out->tensors = tensors;
    return TG_OK;
}

static int parse(tg_tape *tp, const uint8_t *buf, size_t len, tg_safetensors *out, const char *who)
{
    if (!tp || !out || !buf) return tg_error_status(TG_EINVAL, "%s: NULL argument", who);
    memset(out, 0, sizeof *out);
    uint64_t n = 0;
    int st = header_length(who, buf, len, &n);
    if (st != TG_OK) return st;
    st_header h;
    st = parse_header(who, buf + 8, n, (uint64_t)len - 8 - n, &h);
    if (st != TG_OK) return st;
    st = fill_tensors(tp, who, NULL, &h, buf + 8 + n, NULL, false, out);
    header_free(&h);
    return st;
}

int tg_safetensors_parse(tg_tape *tp, const uint8_t *buf, size_t len, tg_safetensors *out)
{
    return parse(tp, buf, len, out, "safetensors_parse");
}

/* Opens path and reads and validates its header (the layout against the
 * file's size); f is left at the data's start. who receives the prefix of
 * format errors. */
static int open_file(const char *path, char *who, size_t who_size, FILE **fp, st_header *h)
{
    *fp = NULL;
    if (!path) return tg_error_status(TG_EINVAL, "safetensors_load: NULL path");
    /* Name the file in every format error. */
    snprintf(who, who_size, "safetensors_load '%s'", path);
    FILE *f = fopen(path, "rb");
    if (!f) return tg_error_status(TG_EIO, "safetensors_load: cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return tg_error_status(TG_EIO, "safetensors_load: '%s' is not a regular file", path);
    }
    uint64_t len = (uint64_t)sb.st_size, n = 0;
    uint8_t first8[8] = {0};
    int st = TG_OK;
    if (!read_all(f, first8, len < 8 ? (size_t)len : 8))
        st = tg_error_status(TG_EIO, "safetensors_load: cannot read '%s'", path);
    else
        st = header_length(who, first8, len, &n);
    uint8_t *text = st == TG_OK ? malloc(n ? (size_t)n : 1) : NULL;
    if (st == TG_OK && !text)
        st = tg_error_status(TG_ENOMEM, "safetensors_load: out of memory reading the header of '%s' (%llu bytes)",
                             path, (unsigned long long)n);
    if (st == TG_OK && !read_all(f, text, (size_t)n))
        st = tg_error_status(TG_EIO, "safetensors_load: cannot read '%s'", path);
    if (st == TG_OK) st = parse_header(who, text, n, len - 8 - n, h);
    free(text);
    if (st != TG_OK) {
        fclose(f);
        return st;
    }
    *fp = f;
    return TG_OK;
}

int tg_safetensors_load(tg_tape *tp, const char *path, tg_safetensors *out)
{
    return tg_safetensors_load_ex(tp, path, NULL, out);
}

int tg_safetensors_load_ex(tg_tape *tp, const char *path, const tg_safetensors_options *opt, tg_safetensors *out)
{
    if (!path) return tg_error_status(TG_EINVAL, "safetensors_load: NULL path");
    if (!tp || !out) return tg_error_status(TG_EINVAL, "safetensors_load: NULL argument");
    memset(out, 0, sizeof *out);
    char who[320];
    FILE *f;
    st_header h;
    int st = open_file(path, who, sizeof who, &f, &h);
    if (st != TG_OK) return st;
    /* each tensor read straight into its storage: no copy of the whole file */
    st = fill_tensors(tp, who, path, &h, NULL, f, opt && opt->keep_bf16, out);
    if (st == TG_OK && fgetc(f) != EOF) /* grown since fstat */
        st = tg_error_status(TG_EIO, "safetensors_load: '%s' changed while it was read", path);
    if (st != TG_OK) memset(out, 0, sizeof *out);
    header_free(&h);
    fclose(f);
    return st;
}

int tg__safetensors_header(tg_tape *tp, const char *path, int *n, tg__safetensors_entry **entries)
{
    if (!tp || !n || !entries) return tg_error_status(TG_EINVAL, "safetensors_load: NULL argument");
    *n = 0;
    *entries = NULL;
    char who[320];
    FILE *f;
    st_header h;
    int st = open_file(path, who, sizeof who, &f, &h);
    if (st != TG_OK) return st;
    fclose(f);
    tg__safetensors_entry *out = tg_tape_alloc(tp, (h.n ? h.n : 1) * sizeof *out, true);
    for (size_t i = 0; out && i < h.n; i++) {
        const st_entry *e = &h.entries[i];
        size_t nlen = strlen(e->name) + 1;
        char *name = tg_tape_alloc(tp, nlen, false);
        if (!name) {
            out = NULL;
            break;
        }
        memcpy(name, e->name, nlen);
        out[i].name = name;
        out[i].file_dtype = st_dtypes[e->di].name;
        st_widen how;
        out[i].dtype = loaded_dtype(e->di, false, &how);
        out[i].ndim = e->ndim;
        memcpy(out[i].shape, e->shape, sizeof out[i].shape);
    }
    if (out) *n = (int)h.n, *entries = out;
    header_free(&h);
    return out ? TG_OK : TG_ENOMEM;
}

tg_tensor *tg_safetensors_get(const tg_safetensors *st, const char *name)
{
    if (!st || !name) return tg_error("safetensors_get: NULL argument");
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->names[i], name) == 0) return st->tensors[i];
    return tg_error("safetensors_get: no tensor named '%s'", name);
}

/* ---- writing --------------------------------------------------------------------- */

/* One tensor as written: its entry in st_dtypes (the file's dtype) and how
 * its elements become the file's. */
typedef struct {
    const char *name;
    const tg_tensor *src;
    int di;
    tg__safetensors_convert convert;
} save_item;

typedef struct {
    int rank;
    const char *name;
    int index;
} save_key;

/* The reference writer's order: descending dtype, then name. */
static int cmp_save(const void *pa, const void *pb)
{
    const save_key *a = pa, *b = pb;
    if (a->rank != b->rank) return b->rank - a->rank;
    return strcmp(a->name, b->name);
}

static bool write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = EIO;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* Bytes of an item's data in the file. */
static uint64_t item_bytes(const save_item *it) { return file_bytes(it->di, (uint64_t)tg_numel(it->src)); }

/* Writes one tensor's elements in row-major order, gathering strided views
 * (and converting, when the item converts) through bounded staging buffers. */
static bool write_tensor(int fd, const save_item *it)
{
    const tg_tensor *x = it->src;
    size_t es = tg_dtype_size(x->dtype), fes = file_esize(it->di);
    int64_t numel = tg_numel(x);
    if (numel == 0) return true;
    if (x->dtype == TG_Q8) /* whole blocks, contiguous (check_items): the bytes as they are, on any host */
        return write_all(fd, (const uint8_t *)x->data + (size_t)(x->offset / TG_Q8_BLOCK) * TG_Q8_BYTES,
                         tg_tensor_nbytes(x));
    if (!it->convert && tg_is_contiguous(x) && host_is_little_endian())
        return write_all(fd, tg__ptr(x, x->offset), (size_t)numel * es);
    enum { STAGE = 1 << 16 };
    uint8_t stage[STAGE], conv[STAGE];
    /* elements per round: both buffers hold them */
    size_t per = STAGE / (es > fes ? es : fes), fill = 0;
    if (it->convert && tg_is_contiguous(x)) { /* converted straight from the storage */
        const uint8_t *base = tg__ptr(x, x->offset);
        for (int64_t i = 0; i < numel; i += (int64_t)per) {
            size_t n = numel - i < (int64_t)per ? (size_t)(numel - i) : per;
            it->convert(conv, base + (size_t)i * es, (int64_t)n);
            if (!host_is_little_endian()) swap_elements(conv, n, fes);
            if (!write_all(fd, conv, n * fes)) return false;
        }
        return true;
    }
    int64_t idx[TG_MAX_DIMS] = {0};
    for (int64_t i = 0; i < numel; i++) {
        int64_t off = x->offset;
        for (int d = 0; d < x->ndim; d++) off += idx[d] * x->stride[d];
        memcpy(stage + fill * es, tg__ptr(x, off), es);
        if (++fill == per || i == numel - 1) {
            const uint8_t *out = stage;
            if (it->convert) {
                it->convert(conv, stage, (int64_t)fill);
                out = conv;
            }
            if (!host_is_little_endian()) swap_elements((void *)out, fill, fes);
            if (!write_all(fd, out, fill * fes)) return false;
            fill = 0;
        }
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (++idx[d] < x->shape[d]) break;
            idx[d] = 0;
        }
    }
    return true;
}

static json_t *entry_json(const save_item *it, uint64_t begin, uint64_t end)
{
    json_t *o = json_object(), *shape = json_array(), *offs = json_array();
    if (!o || !shape || !offs) goto fail;
    for (int d = 0; d < it->src->ndim; d++)
        if (json_array_append_new(shape, json_integer(it->src->shape[d])) != 0) goto fail;
    if (json_array_append_new(offs, json_integer((json_int_t)begin)) != 0 ||
        json_array_append_new(offs, json_integer((json_int_t)end)) != 0)
        goto fail;
    /* Field order as the reference writes it. */
    if (json_object_set_new(o, "dtype", json_string(st_dtypes[it->di].name)) != 0) goto fail;
    if (json_object_set_new(o, "shape", shape) != 0) {
        shape = NULL;
        goto fail;
    }
    shape = NULL;
    if (json_object_set_new(o, "data_offsets", offs) != 0) {
        offs = NULL;
        goto fail;
    }
    return o;
fail:
    json_decref(shape);
    json_decref(offs);
    json_decref(o);
    return NULL;
}

/* The header bytes, padded with spaces to a multiple of 8; NULL with an
 * error. __metadata__ (n_meta key/value pairs) first, as the reference
 * writes it. */
static char *build_header(const save_item *items, const int *order, int n, int n_meta, const char *const *meta,
                          size_t *hlen)
{
    json_t *root = json_object(), *md = n_meta > 0 ? json_object() : NULL;
    if (!root || (n_meta > 0 && !md)) {
        json_decref(root);
        json_decref(md);
        return tg_error("safetensors_save: out of memory");
    }
    for (int i = 0; i < n_meta; i++)
        if (json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1])) != 0) {
            json_decref(md);
            json_decref(root);
            return tg_error("safetensors_save: cannot encode __metadata__ '%s' (not valid UTF-8, or out of memory)",
                            meta[2 * i]);
        }
    if (md && json_object_set_new(root, "__metadata__", md) != 0) {
        json_decref(root);
        return tg_error("safetensors_save: out of memory");
    }
    uint64_t pos = 0;
    for (int k = 0; k < n; k++) {
        const save_item *t = &items[order[k]];
        uint64_t nbytes = item_bytes(t);
        json_t *e = entry_json(t, pos, pos + nbytes);
        if (!e || json_object_set_new(root, t->name, e) != 0) {
            json_decref(root);
            return tg_error("safetensors_save: cannot encode tensor '%s' (name not valid UTF-8, or out of memory)",
                            t->name);
        }
        pos += nbytes;
    }
    char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!js) return tg_error("safetensors_save: out of memory encoding the header");
    size_t len = strlen(js), padded = (len + 7) / 8 * 8;
    char *h = realloc(js, padded + 1);
    if (!h) {
        free(js);
        return tg_error("safetensors_save: out of memory encoding the header");
    }
    memset(h + len, ' ', padded - len);
    h[padded] = '\0';
    *hlen = padded;
    return h;
}

/* A TG_Q8 tensor is stored as Q8_0, its blocks whole and back to back in
 * row-major order; Q8_0 holds nothing else. */
static int check_q8_item(const save_item *t)
{
    bool q8 = t->src->dtype == TG_Q8;
    if (q8 != is_q8(t->di) || (q8 && t->convert))
        return tg_error_status(TG_EINVAL,
                               "safetensors_save: tensor '%s' is %s, stored as %s: Q8_0 holds q8_0 tensors only",
                               t->name, tg_dtype_name(t->src->dtype), st_dtypes[t->di].name);
    const tg_tensor *x = t->src;
    if (q8 && tg_numel(x) > 0 &&
        (!tg_is_contiguous(x) || x->ndim < 1 || x->shape[x->ndim - 1] % TG_Q8_BLOCK || x->offset % TG_Q8_BLOCK))
        return tg_error_status(TG_EINVAL,
                               "safetensors_save: tensor '%s' is a q8_0 view whose blocks are not whole and back to "
                               "back (save a contiguous copy)", t->name);
    return TG_OK;
}

static int check_items(const char *path, const save_item *items, int n, int n_meta, const char *const *meta)
{
    if (!path) return tg_error_status(TG_EINVAL, "safetensors_save: NULL path");
    if (n_meta < 0 || (n_meta > 0 && !meta))
        return tg_error_status(TG_EINVAL, "safetensors_save: bad __metadata__ (%d pairs)", n_meta);
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta[i]) return tg_error_status(TG_EINVAL, "safetensors_save: __metadata__ pair %d has a NULL", i / 2);
    for (int i = 0; i < n; i++) {
        const save_item *t = &items[i];
        if (!t->name) return tg_error_status(TG_EINVAL, "safetensors_save: tensor %d has a NULL name", i);
        if (!t->src) return tg_error_status(TG_EINVAL, "safetensors_save: tensor '%s' is NULL", t->name);
        if (strcmp(t->name, "__metadata__") == 0)
            return tg_error_status(TG_EINVAL, "safetensors_save: '__metadata__' is reserved, not a tensor name");
        if (t->di < 0)
            return tg_error_status(TG_EINVAL, "safetensors_save: tensor '%s' has unsupported dtype %d", t->name,
                                   (int)t->src->dtype);
        if (t->src->ndim < 0 || t->src->ndim > TG_MAX_DIMS)
            return tg_error_status(TG_EINVAL, "safetensors_save: tensor '%s' has %d dims", t->name, t->src->ndim);
        if (tg_numel(t->src) > 0 && !t->src->data)
            return tg_error_status(TG_EINVAL, "safetensors_save: tensor '%s' has no data", t->name);
        int st = check_q8_item(t);
        if (st != TG_OK) return st;
        if (!t->convert && file_esize(t->di) != tg_dtype_size(t->src->dtype))
            return tg_error_status(TG_EINVAL, "safetensors_save: tensor '%s' is %s, stored as %s without a conversion",
                                   t->name, tg_dtype_name(t->src->dtype), st_dtypes[t->di].name);
        for (int j = 0; j < i; j++)
            if (strcmp(items[j].name, t->name) == 0)
                return tg_error_status(TG_EINVAL, "safetensors_save: duplicate tensor name '%s'", t->name);
    }
    return TG_OK;
}

/* What a file that is not a regular one is, for a message. */
static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* Writes the items at path: a temporary file beside it, synced, renamed over it. */
static int save_items(const char *path, const save_item *items, int n, int n_meta, const char *const *meta)
{
    int st = check_items(path, items, n, n_meta, meta);
    if (st != TG_OK) return st;
    /* the rename below replaces what path names: never a device, a FIFO or a
     * socket (as root, saving to /dev/null would replace the device with a
     * regular file) */
    struct stat old;
    bool exists = stat(path, &old) == 0;
    if (exists && !S_ISREG(old.st_mode))
        return tg_error_status(TG_EIO, "safetensors_save: '%s' exists and is %s, not a regular file", path,
                               file_kind(old.st_mode));

    size_t slots = n > 0 ? (size_t)n : 1;
    int *order = malloc(slots * sizeof *order);
    save_key *keys = malloc(slots * sizeof *keys);
    if (!order || !keys) {
        free(order);
        free(keys);
        return tg_error_status(TG_ENOMEM, "safetensors_save: out of memory");
    }
    for (int i = 0; i < n; i++) keys[i] = (save_key){st_dtypes[items[i].di].rank, items[i].name, i};
    qsort(keys, (size_t)n, sizeof *keys, cmp_save);
    for (int i = 0; i < n; i++) order[i] = keys[i].index;
    free(keys);

    size_t hlen = 0;
    char *header = build_header(items, order, n, n_meta, meta, &hlen);
    if (!header) {
        free(order);
        return TG_ENOMEM;
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + sizeof ".tmp.XXXXXX");
    if (!tmp) {
        free(order);
        free(header);
        return tg_error_status(TG_ENOMEM, "safetensors_save: out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = tg_error_status(TG_EIO, "safetensors_save: cannot create a temporary file next to '%s': %s", path,
                             strerror(errno));
        goto out;
    }
    /* mkstemp makes the file 0600; give it the usual permissions of a new
     * file, or those of the file being replaced. */
    mode_t mode = exists ? (old.st_mode & 07777) : 0644;
    (void)fchmod(fd, mode);

    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    bool ok = write_all(fd, lenbuf, sizeof lenbuf) && write_all(fd, header, hlen);
    for (int k = 0; ok && k < n; k++) ok = write_tensor(fd, &items[order[k]]);
    if (ok && fsync(fd) != 0) ok = false;
    int err = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        st = tg_error_status(TG_EIO, "safetensors_save: writing '%s' failed: %s", path, strerror(err));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        st = tg_error_status(TG_EIO, "safetensors_save: cannot rename the temporary file to '%s': %s", path,
                             strerror(err));
        goto out;
    }

out:
    free(tmp);
    free(header);
    free(order);
    return st;
}

int tg_safetensors_save(const char *path, const tg_named_tensor *tensors, int n)
{
    if (!path) return tg_error_status(TG_EINVAL, "safetensors_save: NULL path");
    if (n < 0) return tg_error_status(TG_EINVAL, "safetensors_save: negative tensor count %d", n);
    if (n > 0 && !tensors) return tg_error_status(TG_EINVAL, "safetensors_save: NULL tensor list");
    save_item *items = malloc((n > 0 ? (size_t)n : 1) * sizeof *items);
    if (!items) return tg_error_status(TG_ENOMEM, "safetensors_save: out of memory");
    for (int i = 0; i < n; i++) {
        const tg_tensor *x = tensors[i].tensor;
        items[i] = (save_item){tensors[i].name, x, x ? dtype_index(x->dtype) : -1, NULL};
    }
    int st = save_items(path, items, n, 0, NULL);
    free(items);
    return st;
}

int tg__safetensors_write(const char *path, int n, const tg__safetensors_item *tensors, int n_meta,
                          const char *const *meta)
{
    if (!path) return tg_error_status(TG_EINVAL, "safetensors_save: NULL path");
    if (n < 0) return tg_error_status(TG_EINVAL, "safetensors_save: negative tensor count %d", n);
    if (n > 0 && !tensors) return tg_error_status(TG_EINVAL, "safetensors_save: NULL tensor list");
    save_item *items = malloc((n > 0 ? (size_t)n : 1) * sizeof *items);
    if (!items) return tg_error_status(TG_ENOMEM, "safetensors_save: out of memory");
    int st = TG_OK;
    for (int i = 0; i < n && st == TG_OK; i++) {
        const tg__safetensors_item *t = &tensors[i];
        int di = -1;
        if (t->dtype) {
            for (size_t k = 0; k < ST_NDTYPES; k++)
                if (strcmp(st_dtypes[k].name, t->dtype) == 0) di = (int)k;
            if (di < 0) {
                char known[96];
                st = tg_error_status(TG_EINVAL, "safetensors_save: tensor '%s': unknown dtype '%s' (supported: %s)",
                                     t->name ? t->name : "?", t->dtype, dtype_list(known, sizeof known));
            }
        } else if (t->tensor) {
            di = dtype_index(t->tensor->dtype);
        }
        items[i] = (save_item){t->name, t->tensor, di, t->convert};
    }
    if (st == TG_OK) st = save_items(path, items, n, n_meta, meta);
    free(items);
    return st;
}

