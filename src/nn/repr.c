/* print(model): PyTorch's Module.__repr__ over the module tree.
 *
 *   Name(extra)                          one extra_repr line, no children
 *   Name(\n  extra lines...\n  (child): Child(...)\n)   otherwise
 *
 * Each level indents its entries two spaces more than its own closing ")". */
#include "nn_internal.h"

#include <limits.h>
#include <stdlib.h>

static void newline(tg__strbuf *t, int indent)
{
    tg__sb_puts(t, "\n");
    tg__sb_spaces(t, indent);
}

/* The module's extra_repr text, malloc'd ("" when the type has none). */
static char *extra_text(const tg_module *m, int *status)
{
    char small[256];
    int len = m->type->extra_repr ? m->type->extra_repr(m, small, sizeof small) : 0;
    if (len < 0) {
        *status = len;
        if (!tg_last_error()[0]) tg_error("repr: %s's extra_repr failed (%d)", tg_module_type_name(m), len);
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
                                  tg_module_type_name(m));
        return NULL;
    }
    return s;
}

static void render(tg__strbuf *t, const tg_module *m, int indent, int *status)
{
    if (*status) return;
    char *extra = extra_text(m, status);
    if (!extra) return;
    tg__sb_puts(t, tg_module_type_name(m));
    tg__sb_puts(t, "(");
    bool one_line = extra[0] && !strchr(extra, '\n') && m->children.n == 0;
    if (one_line) {
        tg__sb_puts(t, extra);
    } else if (extra[0] || m->children.n) {
        /* extra_repr.split('\n'), then the children */
        for (const char *line = extra; extra[0] && line;) {
            const char *end = strchr(line, '\n');
            newline(t, indent + 2);
            tg__sb_putn(t, line, end ? (size_t)(end - line) : strlen(line));
            line = end ? end + 1 : NULL;
        }
        for (int i = 0; i < m->children.n; i++) {
            newline(t, indent + 2);
            tg__sb_puts(t, "(");
            tg__sb_puts(t, m->children.items[i].name);
            tg__sb_puts(t, "): ");
            render(t, m->children.items[i].ptr, indent + 2, status);
        }
        newline(t, indent);
    }
    tg__sb_puts(t, ")");
    free(extra);
}

/* The whole text, malloc'd; NULL with *status set on error. */
static char *repr_text(const tg_module *m, size_t *len, int *status)
{
    tg__strbuf t = {0};
    if (!m) {
        *status = tg_error_status(TG_EINVAL, "repr: NULL module");
        return NULL;
    }
    render(&t, m, 0, status);
    if (!*status && t.failed) *status = tg_error_status(TG_ENOMEM, "repr: out of memory");
    if (!*status && t.len > INT_MAX) *status = tg_error_status(TG_EINVAL, "repr: text too long");
    if (*status) {
        free(t.s);
        return NULL;
    }
    *len = t.len;
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
