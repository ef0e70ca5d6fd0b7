#!/usr/bin/env python3
"""compare.py - run every loader on the same images, back to back; write the table and chart.

Run by compare.sh (which makes the venv and the data); usable alone with the venv's python:
  compare.py --tree DIR --dpk F.dpk [--beton F.beton] [--repeat N] [--md OUT.md] [--svg OUT.svg]

Rows, in this order per round (rounds repeat the whole list, so slow drift hits every row alike):
  loaderd_py         one warm + one measured epoch through the Python client (run_loader.py)
  torch_pil          DataLoader(ImageFolder + RandomResizedCrop/RandomHorizontalFlip/PILToTensor)
  torch_decode_jpeg  DataLoader(file bytes -> torchvision.io.decode_jpeg -> v2 transforms; v1
                     where torchvision has no v2, as Debian 12's 0.14)
  dali_cpu           DALI CPU pipeline (readers.file + decoders.image_random_crop + resize + flip)
  ffcv               FFCV Loader over a .beton of the same tree (when ffcv installed)
  ldbench            build/bin/ldbench: loaderd over a timed window + the full-decode ceiling
Memory: a sampler thread here reads /proc/PID/smaps_rollup of every process in the row's tree
(the runner and all its descendants) every 0.1 s and keeps the largest sum of Rss (shared pages,
e.g. torch's libraries in forked workers or a ring mapped by two processes, count once per
process) and of Pss (shared pages split between the processes mapping them: closer to what the
tree really costs). CPU: run_loader.py's /proc sum over the measured epoch; getrusage(
RUSAGE_CHILDREN) around each subprocess is kept in the JSON as the whole run's total.
"""
import argparse
import datetime
import json
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../.."))
sys.path.insert(0, HERE)
from run_loader import tree_pids  # noqa: E402

LABELS = {
    "loaderd_py": "loaderd (Python client, 1 epoch)",
    "ldbench": "loaderd (ldbench, 10 s window)",
    "torch_pil": "PyTorch DataLoader (PIL)",
    "torch_decode_jpeg": "PyTorch DataLoader (decode_jpeg + v2)",
    "dali_cpu": "DALI CPU pipeline",
    "ffcv": "FFCV",
    "ceiling": "full-decode ceiling (ldbench)",
}
ORDER = ["loaderd_py", "ldbench", "torch_pil", "torch_decode_jpeg", "dali_cpu", "ffcv", "ceiling"]


class MemSampler(threading.Thread):
    def __init__(self, pid, period=0.1):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.rss = self.pss = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            rss = pss = 0
            for p in tree_pids(self.pid):
                try:
                    with open(f"/proc/{p}/smaps_rollup") as f:
                        for line in f:
                            if line.startswith("Rss:"):
                                rss += int(line.split()[1])
                            elif line.startswith("Pss:"):
                                pss += int(line.split()[1])
                except OSError:
                    pass
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            self.stop.wait(self.period)


def run_tree(argv, timeout):
    """Run argv; return (rc, stdout, stderr, peak rss KiB, peak pss KiB, rusage cpu s)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    m = MemSampler(p.pid)
    m.start()
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += f"\n(killed after {timeout} s)"
    m.stop.set()
    m.join()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return p.returncode, out, err, m.rss, m.pss, cpu


def last_error(text, n=3):
    lines = [l.strip() for l in text.strip().splitlines() if l.strip() and "%|" not in l]
    return " / ".join(lines[-n:])[-400:] if lines else "no output"


def run_py(loader, a):
    argv = [sys.executable, os.path.join(HERE, "run_loader.py"), loader, "--tree", a.tree,
            "--dpk", a.dpk, "--workers", str(a.workers)]
    if a.beton:
        argv += ["--beton", a.beton]
    rc, out, err, rss, pss, total = run_tree(argv, a.timeout)
    m = re.search(r"^RESULT (.*)$", out, re.M)
    if rc != 0 or not m:
        return {"loader": loader, "error": f"exit {rc}: {last_error(err or out)}"}
    r = json.loads(m.group(1))
    r.update(rss_kib=rss, pss_kib=pss, total_cpu_s=total,
             per_s=r["samples"] / r["wall_s"], cpu_per_1000=1000 * r["cpu_s"] / r["samples"])
    return r


def run_ldbench(a):
    argv = [os.path.join(REPO, "build/bin/ldbench"), "--dataset", a.dpk, "--workers", str(a.workers),
            "--batch", "256", "--crop", "224", "--seconds", str(a.ldbench_seconds),
            "--warmup", str(a.ldbench_warmup), "--ceiling-seconds", str(a.ceiling_seconds)]
    rc, out, err, rss, pss, total = run_tree(argv, a.timeout)
    text = out + err
    if rc != 0:
        return {"loader": "ldbench", "error": f"exit {rc}: {last_error(text)}"}, None
    g = lambda pat: re.search(pat, text)
    per_s = float(g(r"samples_per_s=([\d.]+)").group(1))
    ceil = float(g(r"ceiling_per_s=([\d.]+)").group(1))
    pc = g(r"per CPU-second.*?loaderd ([\d.]+) samples using ([\d.]+) CPU-s.*?full decode ([\d.]+)/CPU-s")
    keep = [l for l in text.splitlines() if re.search(r"DCT scale|of fill time|per CPU-second|"
                                                     r"full-size decode|waited for a batch|warning", l)]
    lb = {"loader": "ldbench", "per_s": per_s, "cpu_per_1000": 1000 / float(pc.group(1)),
          "rss_kib": rss, "pss_kib": pss, "total_cpu_s": total, "lines": keep,
          "note": f"ldbench --workers {a.workers} --batch 256 --crop 224 --seconds "
                  f"{a.ldbench_seconds} --warmup {a.ldbench_warmup}: C client drains loaderd over a timed window "
                  "(crosses epochs); CPU from loaderd's /proc utime+stime over the window"}
    ce = {"loader": "ceiling", "per_s": ceil, "cpu_per_1000": 1000 / float(pc.group(3)),
          "note": f"tjDecompress2 full-size to RGB, single-thread rate x {a.workers}; no crop, "
                  "resize, flip or batching; CPU = decode thread's CPU clock"}
    return lb, ce


def summarize(runs):
    """runs: list of result dicts for one loader -> one row (mean over the runs that worked)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[-1]["error"]}
    mean = lambda k: sum(r[k] for r in ok if r.get(k) is not None) / len(ok)
    row = {"per_s": mean("per_s"), "cpu_per_1000": mean("cpu_per_1000"),
           "per_s_all": [r["per_s"] for r in ok], "cpu_all": [r["cpu_per_1000"] for r in ok],
           "note": ok[-1].get("note", ""), "runs": len(ok)}
    if ok[0].get("rss_kib"):
        row["rss_mib"] = max(r["rss_kib"] for r in ok) / 1024
        row["pss_mib"] = max(r["pss_kib"] for r in ok) / 1024
    return row


def machine():
    model = "?"
    try:
        for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if l.startswith("Model name:"):
                model = l.split(":", 1)[1].strip()
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Linux {platform.release()}"


def fmt(v, nd=0):
    return "—" if v is None else f"{v:,.{nd}f}"


def svg_chart(rows):
    """Two horizontal bar panels: samples/s (longer is better), CPU-s per 1000 (shorter)."""
    names = [k for k in ORDER if k in rows and "error" not in rows[k]]
    lw, pw, bh, gap, top = 290, 300, 20, 8, 46
    h = top + len(names) * (bh + gap) + 30
    w = lw + 2 * pw + 60
    colour = {"loaderd_py": "#1f77b4", "ldbench": "#1f77b4", "ceiling": "#999999"}
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         f'font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>']
    for j, (key, title) in enumerate([("per_s", "samples/s (higher is better)"),
                                      ("cpu_per_1000", "CPU-s per 1000 images (lower is better)")]):
        x0 = lw + j * (pw + 30)
        vmax = max(rows[k][key] for k in names) or 1
        s.append(f'<text x="{x0}" y="20" font-weight="bold">{title}</text>')
        for i, k in enumerate(names):
            y = top + i * (bh + gap)
            v = rows[k][key]
            bw = max(1, (pw - 70) * v / vmax)
            s.append(f'<rect x="{x0}" y="{y}" width="{bw:.1f}" height="{bh}" '
                     f'fill="{colour.get(k, "#ff7f0e")}"/>')
            s.append(f'<text x="{x0 + bw + 4:.1f}" y="{y + bh - 5}">{v:,.{0 if key == "per_s" else 2}f}</text>')
    for i, k in enumerate(names):
        y = top + i * (bh + gap)
        s.append(f'<text x="{lw - 8}" y="{y + bh - 5}" text-anchor="end">{LABELS[k]}</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


# The page's opening: what it answers, in order (the hand-written sections below the notes
# marker carry these headings).
CONTENTS = """What a user asks, in order: [how fast against PyTorch's DataLoader, DALI and
FFCV](#how-fast-against-pytorchs-dataloader-dali-and-ffcv) (on generated images, on photographs,
on your own DataLoader script); [image-text pairs](#image-text-pairs) (against webdataset);
[what a record kind costs](#what-a-record-kind-costs); [small
records](#small-records); [huge datasets](#huge-datasets); [packing
time](#packing-time-dpack-against-tar-and-cp); [ranks of different
speeds](#ranks-of-different-speeds); [decode workers and
rings](#decode-workers-one-ring-several-jobs-the-ring-itself). Every table gives the command
that regenerates it, the machine and its load, and the date. GPU figures are in
[PERFORMANCE.md](PERFORMANCE.md)."""


def write_md(a, rows, raw, meta):
    ref = rows.get("loaderd_py", {}).get("per_s")
    refc = rows.get("loaderd_py", {}).get("cpu_per_1000")
    L = ["# Benchmarks", "", CONTENTS, "",
         "<!-- Written by tools/bench/compare.py; text below the 'notes' marker is kept on rerun. -->",
         "", "## How fast against PyTorch's DataLoader, DALI and FFCV", "",
         f"- **Machine:** {meta['machine']}",
         f"- **Date:** {meta['date']} (load average before / after: {meta['load0']} / {meta['load1']})",
         f"- **Command:** `{a.command}`",
         f"- **Dataset:** {meta['dataset']}",
         "- **Work, every row:** RandomResizedCrop(224) (scale 0.08–1, ratio 3/4–4/3), random "
         f"horizontal flip, uint8 output, batch 256, shuffled, {a.workers} CPU workers/threads; "
         "one warm epoch, then one measured epoch; page cache warm (the tree is read once first).",
         f"- **Rounds:** {a.repeat}, every row once per round, back to back; figures are the mean "
         "over rounds (each round's value in the last column).", "",
         "| loader | samples/s | × loaderd | CPU-s / 1000 img | peak RSS (MiB) | peak PSS (MiB) | runs: samples/s; CPU-s/1000 |",
         "|---|---:|---:|---:|---:|---:|---|"]
    for k in ORDER:
        if k not in rows:
            continue
        r = rows[k]
        if "error" in r:
            L.append(f"| {LABELS[k]} | did not run | | | | | {r['error'].replace('|', '/')} |")
            continue
        ratio = f"{r['per_s'] / ref:.2f}" if ref else "—"
        runs = "; ".join(f"{p:,.0f}" for p in r["per_s_all"]) + " ; " + \
            "; ".join(f"{c:.2f}" for c in r["cpu_all"])
        L.append(f"| {LABELS[k]} | {fmt(r['per_s'])} | {ratio} | {r['cpu_per_1000']:.2f} | "
                 f"{fmt(r.get('rss_mib'))} | {fmt(r.get('pss_mib'))} | {runs} |")
    L += ["", "![samples/s and CPU-seconds per 1000 images](benchmarks.svg)", "",
          "### What each row is", ""]
    for k in ORDER:
        if k in rows and "error" not in rows[k]:
            L.append(f"- **{LABELS[k]}:** {rows[k]['note']}.")
        elif k in rows:
            L.append(f"- **{LABELS[k]}:** did not run: {rows[k]['error']}")
    L += ["", "**Columns.** samples/s: samples yielded in the measured epoch / its wall time "
          "(ldbench: over its window). × loaderd: against the loaderd Python-client row. "
          "CPU-s / 1000 img: user+sys of the whole process tree over the measured epoch, from "
          "/proc/PID/stat (utime+stime+cutime+cstime of each process, summed at the epoch's start "
          "and end), per 1000 samples; other load on the host does not inflate it the way it does "
          "wall time. Peak RSS / PSS: the largest sum over the process tree (runner, DataLoader "
          "workers, loaderd) of /proc/PID/smaps_rollup Rss and Pss, sampled every 0.1 s over the "
          "whole run (startup, both epochs). RSS counts shared pages once per process (forked "
          "workers share torch's libraries; loaderd and its client both map the ring), PSS splits "
          "them, so PSS is the fairer total.", ""]
    if ref and "torch_pil" in rows and "error" not in rows["torch_pil"]:
        L += ["### Ratios", ""]
        for k, want in (("torch_pil", 5.0), ("torch_decode_jpeg", None), ("dali_cpu", 3.0),
                        ("ffcv", None)):
            r = rows.get(k)
            if not r or "error" in r:
                continue
            x = ref / r["per_s"]
            c = r["cpu_per_1000"] / refc
            goal = f" (target ≥ {want}×: {'met' if x >= want else 'NOT met'})" if want else ""
            L.append(f"- vs {LABELS[k]}: loaderd is {x:.2f}× in samples/s{goal}; it uses "
                     f"{c:.2f}× less CPU per image ({'fewer' if c > 1 else 'MORE'} CPU-s per image).")
        L.append("")
    lb = raw.get("ldbench_lines")
    if lb:
        L += ["### loaderd's own account (ldbench, last round)", "", "```"] + lb + ["```", ""]
    L.append("<!-- notes -->")
    notes = ""
    if os.path.exists(a.md):
        old = open(a.md).read()
        if "<!-- notes -->" in old:
            notes = old.split("<!-- notes -->", 1)[1]
    return "\n".join(L) + (notes if notes.strip() else "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True)
    ap.add_argument("--dpk", required=True)
    ap.add_argument("--beton", help="FFCV .beton of the same tree")
    ap.add_argument("--skip", action="append", default=[],
                    help="LOADER=REASON: a row that could not be set up (e.g. install failed)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--ldbench-seconds", type=float, default=10)
    ap.add_argument("--ldbench-warmup", type=float, default=2)
    ap.add_argument("--ceiling-seconds", type=float, default=3,
                    help="ldbench's full-decode ceiling measurement")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--md", default=os.path.join(REPO, "docs/BENCHMARKS.md"))
    ap.add_argument("--svg", default=os.path.join(REPO, "docs/benchmarks.svg"))
    ap.add_argument("--json", help="raw results")
    ap.add_argument("--dataset-desc", default="")
    ap.add_argument("--command", default=" ".join(sys.argv))
    a = ap.parse_args()
    skip = dict(s.split("=", 1) for s in a.skip)
    meta = {"machine": machine(), "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip(),
            "load0": "%.2f" % os.getloadavg()[0], "dataset": a.dataset_desc or a.tree}
    order = ["loaderd_py", "torch_pil", "torch_decode_jpeg", "dali_cpu", "ffcv", "ldbench"]
    results = {k: [] for k in order + ["ceiling"]}
    raw = {}
    for rnd in range(a.repeat):
        for k in order:
            if k in skip:
                results[k] = [{"error": skip[k]}]
                continue
            if k == "ffcv" and not a.beton:
                results[k] = [{"error": "no .beton (--beton not given)"}]
                continue
            t0 = time.time()
            if k == "ldbench":
                lb, ce = run_ldbench(a)
                results["ldbench"].append(lb)
                if ce:
                    results["ceiling"].append(ce)
                    raw["ldbench_lines"] = lb["lines"]
                r = lb
            else:
                r = run_py(k, a)
                results[k].append(r)
            msg = r.get("error") or f"{r['per_s']:.0f} samples/s, {r['cpu_per_1000']:.2f} CPU-s/1000"
            print(f"compare: round {rnd + 1}/{a.repeat} {k}: {msg} ({time.time() - t0:.0f} s)",
                  flush=True)
    meta["load1"] = "%.2f" % os.getloadavg()[0]
    rows = {k: summarize(v) for k, v in results.items() if v}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "results": results, "rows": rows}, f, indent=1)
    md = write_md(a, rows, raw, meta)
    with open(a.md, "w") as f:
        f.write(md)
    with open(a.svg, "w") as f:
        f.write(svg_chart(rows))
    print(f"compare: wrote {a.md} and {a.svg}")


if __name__ == "__main__":
    main()
