#!/usr/bin/env python3
"""dataloader_swap.py - does loaderd.diagnose's prediction for the swap to loaderd hold? Not a
test: a benchmark whose figures go into docs/BENCHMARKS.md.

    /usr/bin/python3 tools/bench/dataloader_swap.py [--per-class 64] [--epochs 3] [--rounds 5]
        [--num-workers 0]

It makes an ImageFolder of JPEGs (dsgen imagefolder, 4 classes, 500-800 px sides, as photos
are), runs python/tests/scripts/train_dataloader.py on it under loaderd.diagnose (a
torch DataLoader, num_workers=0 (--num-workers), RandomResizedCrop 224 + flip + ToTensor + Normalize, a model
that is little more than a pooling: loader-limited), and reads the prediction (with_loaderd: the
samples/s of the script after the swap, from loaderd measured on a sample of these files, for
the loaderd configuration the report names: a worker per core). It then packs the whole tree
(dpack), starts a loaderd with the workers the prediction assumed, and
runs the same script swapped (--loaderd: loaderd.Loader(..., normalize=) in place of the
DataLoader, as diagnose prints it) under loaderd.diagnose again: its samples/s against the
prediction, and the error of each pair (measured / predicted - 1). Rounds alternate both runs
(the host's load drifts). Needs the build and torch, torchvision.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "build" / "bin"
SCRIPT = REPO / "python" / "tests" / "scripts" / "train_dataloader.py"
sys.path.insert(0, str(REPO / "python"))
os.environ.setdefault("LOADERD_LIB", str(REPO / "build" / "lib" / "libldc.so"))


def diagnose(out, args):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMP_NUM_THREADS="1",
               PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "loaderd.diagnose", "--out", str(out), "--",
                        sys.executable, str(SCRIPT)] + [str(a) for a in args],
                       capture_output=True, text=True, env=env, timeout=1200)
    if p.returncode:
        raise SystemExit("diagnose failed:\n" + p.stderr[-3000:])
    return json.loads((Path(out) / "report.json").read_text()), p.stdout.strip().splitlines()[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-class", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--num-workers", type=int, default=0)
    a = ap.parse_args()
    from loaderd import daemon
    tmp = Path(tempfile.mkdtemp(prefix="dlswap."))
    ld = log = None
    try:
        subprocess.run([BIN / "dsgen", "imagefolder", tmp / "tree", "--classes", "4",
                        "--per-class", str(a.per_class), "--min-side", "500", "--max-side",
                        "800"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([BIN / "dpack", "pack", tmp / "tree", tmp / "tree.dpk"], check=True,
                       stdout=subprocess.DEVNULL)
        common = [tmp / "tree", "--epochs", a.epochs, "--batch", a.batch, "--model", "tiny"]
        stock = common + ["--workers", a.num_workers]
        rows = []
        for r in range(a.rounds):
            rep, last = diagnose(tmp / ("dl%d" % r), stock)
            sw = rep.get("swap") or {}
            if not sw.get("measured"):
                raise SystemExit("no prediction: %s" % sw)
            if ld is None:
                log = open(tmp / "loaderd.log", "w+")
                ld, _ = daemon.start([BIN / "loaderd", "--socket", tmp / "s.sock", "--workers",
                                      str(sw["workers"])], log)
            rep2, last2 = diagnose(tmp / ("ld%d" % r), common + ["--loaderd", tmp / "s.sock",
                                                                 "--dpk", tmp / "tree.dpk"])
            z, got = rep["with_loaderd"], rep2["samples_per_s"]
            rows.append((rep["samples_per_s"], z, got))
            m = rep["dataloader_model"]
            print("round %d: DataLoader(num_workers=%d) %.1f samples/s (verdict %s; the "
                  "script's own CPU %s ms per step, %d cores, a busy thread got %.0f%% of one); "
                  "predicted with %s: %.1f (%d "
                  "sampled files, %.2f ms of loaderd CPU per sample, convert %.1f ms per batch); "
                  "measured %.1f (verdict %s): error %+.1f%%" %
                  (r, a.num_workers, rep["samples_per_s"], rep["verdict"],
                   "%.2f" % m["rest_cpu_ms"] if m.get("rest_cpu_ms") is not None else "?",
                   m["cores"], 100 * sw.get("core_share", 1.0), sw.get("config"), z, sw["files"],
                   sw.get("cpu_ms_per_sample") or sw["fill_ms_per_sample"], sw["convert_ms"],
                   got, rep2["verdict"], 100 * (got / z - 1)), flush=True)
        errs = [g / z - 1 for _, z, g in rows]
        print("dataloader_swap: num_workers=%d rounds=%d predicted=%s measured=%s error=%s "
              "within_20pct=%d/%d" % (
                  a.num_workers, len(rows), ",".join("%.1f" % z for _, z, _ in rows),
                  ",".join("%.1f" % g for _, _, g in rows),
                  ",".join("%+.1f%%" % (100 * e) for e in errs),
                  sum(abs(e) <= 0.2 for e in errs), len(errs)))
    finally:
        if ld is not None:
            ld.terminate()
            ld.wait()
        if log is not None:
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
