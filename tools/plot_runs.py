#!/usr/bin/python3
"""Two `tapegrad pretrain --json` runs of the same data on one chart.

    /usr/bin/python3 tools/plot_runs.py EXACT.json BF16.json OUT.svg [--title T]
        [--labels exact,bf16]

Each input is a file whose last line is pretrain's JSON ({"rows": [...]}).
The chart: training and validation loss against steps, the first run in
solid lines and the second dashed; below it, the second run's distance from
the first per row (|train - train'|, |val - val'|). Prints the largest
distances, over all rows and over the first 12. Python's standard library
only.
"""
import argparse
import json
import sys
from xml.sax.saxutils import escape


def rows(path):
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    return json.loads(lines[-1])["rows"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first")
    ap.add_argument("second")
    ap.add_argument("out")
    ap.add_argument("--title", default="The book's pretraining run (the-verdict.txt, seed 123)")
    ap.add_argument("--labels", default="exact,bf16")
    a = ap.parse_args()
    la, lb = a.labels.split(",")
    ra, rb = rows(a.first), rows(a.second)
    if [r["step"] for r in ra] != [r["step"] for r in rb]:
        sys.exit("plot_runs: the two runs print different steps")
    steps = [r["step"] for r in ra]
    dist = [(abs(x["train_loss"] - y["train_loss"]), abs(x["val_loss"] - y["val_loss"])) for x, y in zip(ra, rb)]
    worst = max(max(d) for d in dist)
    worst12 = max(max(d) for d in dist[:12])
    print("%s against %s: %d rows, largest distance %.3f (first 12 rows: %.3f)" % (lb, la, len(ra), worst, worst12))

    W, H, L, R, T, B = 800, 560, 70, 190, 40, 50
    top_h, gap = 300, 60
    bot_h = H - T - B - top_h - gap
    xmax = max(steps) or 1
    ymax = 2 * int(max(max(r["train_loss"], r["val_loss"]) for r in ra + rb) / 2 + 1)
    xstep = 10 if xmax <= 200 else 10 ** (len(str(int(xmax))) - 1)
    dmax = max(worst, 1e-3) * 1.1

    def x(s):
        return L + (W - L - R) * s / xmax

    def y(v):
        return T + top_h * (1 - v / ymax)

    def yd(v):
        return T + top_h + gap + bot_h * (1 - v / dmax)

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="12">' % (W, H), '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14">%s</text>' % (L, escape(a.title))]
    for y0, h in ((T, top_h), (T + top_h + gap, bot_h)):
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (L, y0, W - L - R, h))
    for s in range(0, int(xmax) + 1, xstep):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(s), H - B + 16, s))
    out.append('<text x="%d" y="%d" text-anchor="middle">step</text>' % ((L + W - R) / 2, H - 8))
    for v in range(0, ymax + 1, 2):
        out.append('<text x="%d" y="%.1f" text-anchor="end">%d</text>' % (L - 6, y(v) + 4, v))
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (L, W - R, y(v), y(v)))
    for k in range(0, 3):
        v = dmax * k / 2
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>' % (L - 6, yd(v) + 4, v))
    out.append('<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">loss</text>'
               % (T + top_h / 2, T + top_h / 2))
    out.append('<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">distance</text>'
               % (T + top_h + gap + bot_h / 2, T + top_h + gap + bot_h / 2))

    def line(pts, color, dash):
        d = " ".join("%.1f,%.1f" % p for p in pts)
        return '<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (
            d, color, ' stroke-dasharray="6,4"' if dash else "")

    legend = []
    for rs, dash, name in ((ra, False, la), (rb, True, lb)):
        for key, color in (("train_loss", "#1f77b4"), ("val_loss", "#d62728")):
            out.append(line([(x(r["step"]), y(r[key])) for r in rs], color, dash))
            legend.append((color, dash, "%s %s" % (name, "train" if key == "train_loss" else "validation")))
    for i, (key, color) in enumerate((("train", "#1f77b4"), ("validation", "#d62728"))):
        out.append(line([(x(s), yd(d[i])) for s, d in zip(steps, dist)], color, False))
        legend.append((color, False, "|%s - %s| %s" % (lb, la, key)))
    for i, (color, dash, text) in enumerate(legend):
        ly = T + 10 + 20 * i + (top_h + gap - 80 if i >= 4 else 0)
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                   % (W - R + 10, W - R + 34, ly, ly, color, ' stroke-dasharray="6,4"' if dash else ""))
        out.append('<text x="%d" y="%d" font-size="10">%s</text>' % (W - R + 38, ly + 4, escape(text)))
    out.append("</svg>")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
