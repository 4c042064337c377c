/* print(model): PyTorch's Module.__repr__ over the module tree.
 *
 *   Name(extra)                          one extra_repr line, no children
 *   Name(\n  extra lines...\n  (child): Child(...)\n)   otherwise
 *
 * Each level indents its entries two spaces more than its own closing ")". */
#include "nn_internal.h"

#include <limits.h>
#include <stdlib.h>

typedef struct {
    char *s;
    size_t n, cap;
    int status;
} text;

static void put(text *t, const char *s, size_t len)
{
    if (t->status) return;
    if (t->n + len + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + len + 1) cap *= 2;
        char *s2 = realloc(t->s, cap);
        if (!s2) {
            t->status = tg_error_status(TG_ENOMEM, "repr: out of memory");
            return;
        }
        t->s = s2;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, len);
    t->n += len;
    t->s[t->n] = '\0';
}

static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

static void newline(text *t, int indent)
{
    puts_(t, "\n");
    for (int i = 0; i < indent && !t->status; i++) put(t, " ", 1);
}

/* The module's extra_repr text, malloc'd ("" when the type has none). */
static char *extra_text(const tg_module *m, int *status)
{
    char small[256];
    int len = m->type->extra_repr ? m->type->extra_repr(m, small, sizeof small) : 0;
    if (len < 0) {
        *status = len;
        if (!tg_last_error()[0]) tg_error("repr: %s's extra_repr failed (%d)", m->type->name, len);
        return NULL;
    }
    char *s = malloc((size_t)len + 1);
    if (!s) {
        *status = tg_error_status(TG_ENOMEM, "repr: out of memory");
        return NULL;
    }
    if (len == 0)
        s[0] = '\0';
    else if ((size_t)len < sizeof small)
        memcpy(s, small, (size_t)len + 1);
    else if (m->type->extra_repr(m, s, (size_t)len + 1) != len) {
        free(s);
        *status = tg_error_status(TG_EINVAL, "repr: %s's extra_repr changed its length between calls",
                                  m->type->name);
        return NULL;
    }
    return s;
}

static void render(text *t, const tg_module *m, int indent)
{
    if (t->status) return;
    char *extra = extra_text(m, &t->status);
    if (!extra) return;
    puts_(t, m->type->name);
    puts_(t, "(");
    bool one_line = extra[0] && !strchr(extra, '\n') && m->children.n == 0;
    if (one_line) {
        puts_(t, extra);
    } else if (extra[0] || m->children.n) {
        /* extra_repr.split('\n'), then the children */
        for (const char *line = extra; extra[0] && line;) {
            const char *end = strchr(line, '\n');
            newline(t, indent + 2);
            put(t, line, end ? (size_t)(end - line) : strlen(line));
            line = end ? end + 1 : NULL;
        }
        for (int i = 0; i < m->children.n; i++) {
            newline(t, indent + 2);
            puts_(t, "(");
            puts_(t, m->children.items[i].name);
            puts_(t, "): ");
            render(t, m->children.items[i].ptr, indent + 2);
        }
        newline(t, indent);
    }
    puts_(t, ")");
    free(extra);
}

/* The whole text, malloc'd; NULL with *status set on error. */
static char *repr_text(const tg_module *m, size_t *len, int *status)
{
    text t = {0};
    if (!m) {
        *status = tg_error_status(TG_EINVAL, "repr: NULL module");
        return NULL;
    }
    render(&t, m, 0);
    if (!t.status && t.n > INT_MAX) t.status = tg_error_status(TG_EINVAL, "repr: text too long");
    if (t.status) {
        free(t.s);
        *status = t.status;
        return NULL;
    }
    *len = t.n;
    return t.s;
}

int tg_module_repr(const tg_module *m, char *buf, size_t size)
{
    size_t len;
    int status = TG_OK;
    char *s = repr_text(m, &len, &status);
    if (!s) return status;
    if (buf && size) {
        size_t k = len < size - 1 ? len : size - 1;
        memcpy(buf, s, k);
        buf[k] = '\0';
    }
    free(s);
    return (int)len;
}

int tg_module_print(FILE *f, const tg_module *m)
{
    if (!f) return tg_error_status(TG_EINVAL, "print: NULL file");
    size_t len;
    int status = TG_OK;
    char *s = repr_text(m, &len, &status);
    if (!s) return status;
    bool ok = fwrite(s, 1, len, f) == len && fputc('\n', f) != EOF;
    free(s);
    return ok ? TG_OK : tg_error_status(TG_EIO, "print: write failed");
}
