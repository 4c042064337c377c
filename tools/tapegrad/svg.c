/* Hand-written SVG for the commands' plots (train, pretrain): the document
 * and its text, tick steps, and pretrain's loss plot. */
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

/* ---- the loss plot (pretrain) ------------------------------------------------------------- */

/* The plot's frame: the drawing area and the two scales. */
typedef struct {
    double W, H, L, T, pw, ph; /* the page, then the area's left, top, width, height */
    double lo, hi, ystep;      /* the loss axis */
    double epochs;             /* the x axis: 0..epochs */
    const char *what, *top;    /* "Loss" / "Accuracy"; the top axis: "Tokens seen" / "Examples seen" */
} loss_frame;

static double xp(const loss_frame *fr, double e) { return fr->L + fr->pw * e / fr->epochs; }
static double yp(const loss_frame *fr, double v) { return fr->T + fr->ph * (1.0 - (v - fr->lo) / (fr->hi - fr->lo)); }

static loss_frame frame_for(double epochs, int64_t n, const tg_cli_loss_row *rows)
{
    loss_frame fr = {.W = 720, .H = 460, .L = 70, .T = 70, .epochs = epochs};
    fr.pw = fr.W - fr.L - 30, fr.ph = fr.H - fr.T - 60;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v[2] = {rows[i].train, rows[i].val};
        for (int k = 0; k < 2; k++)
            if (isfinite(v[k])) lo = fmin(lo, v[k]), hi = fmax(hi, v[k]);
    }
    if (!(lo <= hi)) lo = 0, hi = 1;
    fr.ystep = tg_cli_nice_step((hi - lo) / 5);
    fr.lo = floor(lo / fr.ystep) * fr.ystep, fr.hi = ceil(hi / fr.ystep) * fr.ystep;
    if (fr.hi <= fr.lo) fr.hi = fr.lo + fr.ystep;
    return fr;
}

/* The loss grid, the epoch ticks at the bottom and the tokens-seen ticks at
 * the top (where t tokens falls on the epoch axis: between the rows around
 * it). */
static void draw_axes(FILE *f, const loss_frame *fr, int64_t n, const tg_cli_loss_row *rows)
{
    double L = fr->L, T = fr->T, pw = fr->pw, ph = fr->ph, ep = fr->epochs;
    for (double v = fr->lo; v <= fr->hi + fr->ystep / 2; v += fr->ystep) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", L, yp(fr, v), L + pw,
                yp(fr, v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, yp(fr, v) + 4, v);
    }
    double estep = tg_cli_nice_step(ep / 8);
    if (estep < 1) estep = 1;
    for (double e = 0; e <= ep + 1e-9; e += estep) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", xp(fr, e), T + ph,
                xp(fr, e), T + ph + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", xp(fr, e), T + ph + 19, e);
    }
    double tmax = n ? (double)rows[n - 1].tokens : 1, tstep = tg_cli_nice_step(tmax / 5);
    for (double t = 0; n > 1 && tmax > 0 && t <= tmax + 1e-9; t += tstep) {
        double x = 0;
        for (int64_t i = 1; i < n; i++) {
            double t0 = (double)rows[i - 1].tokens, t1 = (double)rows[i].tokens;
            if (t <= t1 || i == n - 1) {
                double u = t1 > t0 ? (t - t0) / (t1 - t0) : 0;
                x = ((double)(i - 1) + u) * ep / (double)(n - 1);
                break;
            }
        }
        if (x < 0 || x > ep + 1e-9) continue;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", xp(fr, x), T, xp(fr, x),
                T - 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", xp(fr, x), T - 9, t);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#000\"/>\n", L, T, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">Epochs</text>\n", L + pw / 2, fr->H - 18);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", L + pw / 2, T - 30, fr->top);
    fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">%s</text>\n",
            T + ph / 2, T + ph / 2, fr->what);
}

/* The two curves, training solid and validation dash-dot (the book's "-."),
 * and their legend at the upper right. */
static void draw_curves(FILE *f, const loss_frame *fr, int64_t n, const tg_cli_loss_row *rows)
{
    const char *style[2] = {"stroke=\"#1f77b4\"", "stroke=\"#ff7f0e\" stroke-dasharray=\"8 3 2 3\""};
    for (int k = 0; k < 2 && n > 0; k++) {
        fprintf(f, "<polyline fill=\"none\" stroke-width=\"1.8\" %s points=\"", style[k]);
        for (int64_t i = 0; i < n; i++) {
            double v = k ? rows[i].val : rows[i].train;
            if (!isfinite(v)) continue;
            double e = n > 1 ? fr->epochs * (double)i / (double)(n - 1) : 0;
            fprintf(f, "%s%.1f,%.1f", i ? " " : "", xp(fr, e), yp(fr, v));
        }
        fputs("\"/>\n", f);
    }
    double lx = fr->L + fr->pw - 180, ly = fr->T + 14;
    const char *label[2] = {"Training", "Validation"};
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"172\" height=\"44\" fill=\"white\" stroke=\"#ccc\"/>\n", lx - 6, ly - 8);
    for (int k = 0; k < 2; k++) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"1.8\" %s/>\n", lx, ly + 20 * k + 6,
                lx + 30, ly + 20 * k + 6, style[k]);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s %c%s</text>\n", lx + 38, ly + 20 * k + 10, label[k],
                fr->what[0] + 'a' - 'A', fr->what + 1);
    }
}

int tg_cli_svg_loss_plot(const char *path, const char *title, double epochs, int64_t n, const tg_cli_loss_row *rows)
{
    return tg_cli_svg_values_plot(path, title, "Loss", "Tokens seen", epochs, n, rows);
}

int tg_cli_svg_values_plot(const char *path, const char *title, const char *what, const char *top, double epochs,
                           int64_t n, const tg_cli_loss_row *rows)
{
    loss_frame fr = frame_for(epochs, n, rows);
    fr.what = what, fr.top = top;
    tg_cli_svg *s = tg_cli_svg_open(path, fr.W, fr.H);
    if (!s) return -1;
    FILE *f = tg_cli_svg_file(s);
    draw_axes(f, &fr, n, rows);
    fprintf(f, "<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", fr.W / 2);
    tg_cli_svg_escape(f, title);
    fputs("</text>\n", f);
    draw_curves(f, &fr, n, rows);
    return tg_cli_svg_close(s) != 0 ? -2 : 0;
}
