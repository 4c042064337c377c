/* Hand-written SVG for the commands' plots (train, pretrain). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>

struct tg_cli_svg {
    FILE *f;
};

void tg_cli_svg_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

tg_cli_svg *tg_cli_svg_open(const char *path, double width, double height)
{
    tg_cli_svg *s = malloc(sizeof *s);
    if (!s) return NULL;
    if (!(s->f = fopen(path, "w"))) {
        free(s);
        return NULL;
    }
    fprintf(s->f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(s->f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            width, height, width, height);
    fprintf(s->f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    return s;
}

FILE *tg_cli_svg_file(tg_cli_svg *s) { return s->f; }

int tg_cli_svg_close(tg_cli_svg *s)
{
    fputs("</svg>\n", s->f);
    int bad = ferror(s->f);
    bad |= fclose(s->f) != 0;
    free(s);
    return bad ? -1 : 0;
}

double tg_cli_nice_step(double raw)
{
    if (!(raw > 0) || !isfinite(raw)) return 1;
    double p = pow(10, floor(log10(raw))), m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}
