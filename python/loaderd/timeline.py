"""timeline.py - the SVG step timeline of a loaderd-trainer-report/1 report: one row per rank with
every measured step cut into its phases, the report's shares per rank, and rates as bars. One
renderer for both programs that explain a run: ldprobe (the C trainer; tools/ldprobe.py imports
this file) and loaderd.diagnose (a PyTorch loop). Standard library only; nothing runs on import.

The steps come in as {rank: {step: {"start": us, "data": us, "copy": us, "compute": us,
"comm": us, "opt": us}}}: ldprobe reads them from the trainer's Chrome trace, diagnose from the
ranks' records.
"""
import textwrap
from xml.sax.saxutils import escape

PHASES = ("data", "copy", "compute", "comm", "opt")   # the report's phase keys
LABEL = {"data": "data wait", "copy": "exposed copy", "compute": "compute",
         "comm": "exposed allreduce", "opt": "optimizer", "gap": "unattributed"}
COLOUR = {"data": "#d62728", "copy": "#ff7f0e", "compute": "#2ca02c", "comm": "#1f77b4",
          "opt": "#9467bd", "gap": "#d9d9d9"}


def fmt_rate(x):
    return "%.1f" % x if x < 100 else "%.0f" % x


def common_steps(ranks):
    """The steps every rank has, in order."""
    if not ranks:
        return []
    return sorted(set.intersection(*(set(steps) for steps in ranks.values())))


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return 0.0 if n == 0 else xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def align(ranks, steps):
    """Per-rank clock offsets (us): ranks are aligned on the end of the allreduce, which they
    leave together (the trainer's trace times start at each rank's own start)."""
    off = {}
    ref = min(ranks)

    def sync(r, s):
        x = ranks[r][s]
        return x["start"] + x["data"] + x["copy"] + x["compute"] + x["comm"]
    for r in ranks:
        off[r] = median([sync(r, s) - sync(ref, s) for s in steps]) if r != ref else 0.0
    return off


class Svg:
    """SVG elements in a list; y is where the next row goes."""
    W, LEFT, RIGHT = 980, 120, 20
    PLOT_W = W - LEFT - RIGHT
    ROW_H, ROW_GAP = 22, 8

    def __init__(self):
        self.out = []
        self.y = 0

    def text(self, x, yy, s, size=12, anchor="start", weight="normal", fill="#222"):
        self.out.append('<text x="%.1f" y="%.1f" font-size="%d" text-anchor="%s" '
                        'font-weight="%s" fill="%s">%s</text>' %
                        (x, yy, size, anchor, weight, fill, escape(str(s))))

    def rect(self, x, yy, w, h, fill, title=None):
        t = "<title>%s</title>" % escape(title) if title else ""
        self.out.append('<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s">%s</rect>' %
                        (x, yy, max(w, 0.0), h, fill, t))

    def line(self, x1, y1, x2, y2, stroke, width=1):
        self.out.append('<line x1="%.2f" y1="%.1f" x2="%.2f" y2="%.1f" stroke="%s" '
                        'stroke-width="%g"/>' % (x1, y1, x2, y2, stroke, width))

    def write(self, path):
        h = self.y
        head = ('<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" '
                'width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">\n'
                '<rect width="100%%" height="100%%" fill="#fff"/>\n' % (self.W, h, self.W, h))
        with open(path, "w") as f:
            f.write(head + "\n".join(self.out) + "\n</svg>\n")


def header(g, title, subtitle, verdict, why):
    """Title, the run in one line, the verdict with its reasons, the legend."""
    g.y += 24
    g.text(10, g.y, title, 16, weight="bold")
    g.y += 18
    g.text(10, g.y, subtitle, 12, fill="#555")
    for line in textwrap.wrap(verdict + ": " + "; ".join(why), 150):
        g.y += 16
        g.text(10, g.y, line, 12, fill="#222")
    g.y += 22
    x = 10
    for p in PHASES + ("gap",):
        g.rect(x, g.y - 10, 12, 12, COLOUR[p])
        g.text(x + 16, g.y, LABEL[p], 12)
        x += 16 + 8 * len(LABEL[p]) + 18
    g.y += 28


def timeline(g, ranks, steps, what="the measured run"):
    """Up to 40 measured steps from the middle of the run, one row per rank, ranks aligned."""
    rank_ids = sorted(ranks)
    off = align(ranks, steps)
    n_show = min(40, len(steps))
    first = (len(steps) - n_show) // 2
    show = steps[first:first + n_show]
    t0 = min(ranks[r][show[0]]["start"] - off[r] for r in rank_ids)
    t1 = max(ranks[r][show[-1]]["start"] - off[r] +
             sum(ranks[r][show[-1]][p] for p in PHASES) for r in rank_ids)
    span = max(t1 - t0, 1e-3)
    g.text(10, g.y, "Step timeline, steps %d-%d of %s (%.1f ms; ranks aligned on "
           "the end of the allreduce)" % (show[0], show[-1], what, span / 1e3), 13,
           weight="bold")
    g.y += 12
    left, sx = g.LEFT, g.PLOT_W / span
    for r in rank_ids:
        g.out.append('<g class="rank-row" data-rank="%d">' % r)
        g.text(left - 8, g.y + g.ROW_H - 6, "rank %d" % r, 12, anchor="end")
        g.rect(left, g.y, g.PLOT_W, g.ROW_H, COLOUR["gap"])
        for s in show:
            rec = ranks[r].get(s)
            if not rec:
                continue
            t = rec["start"] - off[r]
            for p in PHASES:
                x0, x1 = max(t, t0), min(t + rec[p], t1)
                if rec[p] > 0 and x1 > x0:
                    g.rect(left + (x0 - t0) * sx, g.y, (x1 - x0) * sx, g.ROW_H, COLOUR[p],
                           "rank %d step %d: %s %.2f ms" % (r, s, LABEL[p], rec[p] / 1e3))
                t += rec[p]
            x = left + (rec["start"] - off[r] - t0) * sx
            if left < x < left + g.PLOT_W:   # where each step begins
                g.line(x, g.y, x, g.y + g.ROW_H, "#fff")
        g.out.append("</g>")
        g.y += g.ROW_H + g.ROW_GAP
    for i in range(6):   # time axis
        xx = left + g.PLOT_W * i / 5
        g.line(xx, g.y - g.ROW_GAP, xx, g.y - g.ROW_GAP + 4, "#888")
        g.text(xx, g.y + 8, "%.1f ms" % (span * i / 5 / 1e3), 10, anchor="middle", fill="#555")
    g.y += 30


def shares(g, report):
    """The report's shares of step time, one bar per rank."""
    g.text(10, g.y, "Share of step time per rank (warm-up left out, %d steps)" %
           report["steps_compared"], 13, weight="bold")
    g.y += 12
    for rank in report["per_rank"]:
        sh = rank["shares"]
        g.text(g.LEFT - 8, g.y + 14, "rank %d" % rank["rank"], 12, anchor="end")
        x = g.LEFT
        for p in PHASES + ("gap",):
            w = g.PLOT_W * sh[p]
            g.rect(x, g.y, w, 18, COLOUR[p], "rank %d: %s %.1f%%" %
                   (rank["rank"], LABEL[p], 100 * sh[p]))
            if w > 34:
                g.text(x + w / 2, g.y + 13, "%.0f%%" % (100 * sh[p]), 11, anchor="middle",
                       fill="#fff" if p != "gap" else "#333")
            x += w
        g.y += 18 + 6
    g.y += 18


def rates(g, bars, verdict):
    """Rates as bars: @bars is [(name, samples/s, colour)]."""
    g.text(10, g.y, "Throughput, samples/s", 13, weight="bold")
    g.y += 12
    top = max(b[1] for b in bars) or 1.0
    bar_w = g.PLOT_W - 90
    for name, v, col in bars:
        g.out.append('<g class="rate-bar" data-name="%s">' % escape(name))
        g.text(g.LEFT - 8, g.y + 15, name, 12, anchor="end")
        g.rect(g.LEFT, g.y, bar_w * v / top, 20, col, "%s: %.1f samples/s" % (name, v))
        g.text(g.LEFT + bar_w * v / top + 6, g.y + 15, fmt_rate(v), 12)
        g.out.append("</g>")
        g.y += 26
    g.y += 10
    g.text(10, g.y, "AU = compute / wall time, warm-up excluded. Verdict: %s." % verdict, 12,
           fill="#555")
    g.y += 16


def render(path, title, subtitle, report, ranks, bars, verdict, why, what="the measured run"):
    """timeline.svg: the header, the measured steps of every rank, the report's shares per rank
    (when there are at least two common steps) and the rate bars."""
    g = Svg()
    header(g, title, subtitle, verdict, why)
    steps = common_steps(ranks)
    if len(steps) >= 2:
        timeline(g, ranks, steps, what)
        shares(g, report)
    else:
        g.text(10, g.y, "no step timeline: the trace was missing or too short", 12, fill="#a00")
        g.y += 24
    rates(g, bars, verdict)
    g.write(path)
