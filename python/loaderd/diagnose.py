"""diagnose.py - is my training loader-limited? Run a PyTorch script that iterates loaderd.Loader
or torch.utils.data.DataLoader with per-step attribution on, gather its ranks' records, and
answer with the trainer's report:

    python -m loaderd.diagnose [--out DIR] -- python train.py ARGS...
    python -m loaderd.diagnose --out diag -- torchrun --nproc_per_node 8 train.py ARGS...

The script is not changed: LOADERD_PROFILE=1 turns attribution on in every Loader it makes
(profile.py says what is measured), a sitecustomize of ours (DIR/site, first on PYTHONPATH)
wraps torch's DataLoader iterator, and each rank writes its records into DIR/records/ (one per
Loader or DataLoader; the training loop is the one whose steps ran backward, the others are
reported apart). For a loader-limited DataLoader: its knobs with predicted step times and,
for an ImageFolder of JPEGs with loaderd's transforms, loaderd measured on a sample of its
files and the predicted samples/s after the swap (with_loaderd= on the last line). The
report is the trainer's (loaderd-trainer-report/1, computed by loaderd.report from the one
threshold table trainer/report_limits.def), with loaderd's side (its workers' busy share and
fill time per sample, from its stats) and advice in numbers. Written into DIR: report.json,
report.txt (also printed) and timeline.svg (the renderer ldprobe uses). The last line is

    loaderd.diagnose: samples_per_s=X data_wait=Y verdict=V [with_loaderd=Z]

(data_wait: the average rank's share of step time waiting for batches). The exit status is the
command's, or 1 when it left no record. Standard library only here; the script needs what it
needs.
"""
import argparse
import collections
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import _bins
from . import profile as P
from . import timeline as TL

from .analysis import (  # noqa: F401  (re-exported: the analysis of the records)
    BUSY_TARGET, COPY_MIN, GAP_MIN, LATENCY_BOUND_MIBS, BURST_SHARE, warmup_for, plural,
    per_rank, other_loops, runs_of, loader_side, analyse, dataloader_model, predict_step,
    dataloader_advice, advise, dataparallel_advice, _rate_without_wait)


def load_records(d):
    recs = []
    for p in sorted(glob.glob(os.path.join(d, "rank-*.json"))):
        try:
            with open(p) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            print("loaderd.diagnose: skipping %s: %s" % (p, e), file=sys.stderr)
            continue
        if isinstance(r, dict) and r.get("version") == 1 and r.get("steps"):
            recs.append(r)
    return recs


# ---- the swap to loaderd, measured on the user's own files ----

JPEG_EXT = (".jpg", ".jpeg")
SAMPLE_FILES = 256          # files of the dataset packed for the measurement
MEASURE_S = 3.0             # drain the private loaderd this long (at least 2 epochs of it)


def keep_file_list(rep, recdir, out):
    """The training DataLoader's (image file, label) list, when its dataset is not an
    ImageFolder (profile.py wrote it beside the records), as @out/files.tsv for pack_list."""
    folder = ((rep.get("dataloader") or {}).get("dataset") or {}).get("folder") or {}
    if folder.get("tsv"):
        src = os.path.join(recdir, os.path.basename(folder["tsv"]))
        if os.path.isfile(src):
            os.replace(src, os.path.join(out, "files.tsv"))
            folder["tsv"] = os.path.join(out, "files.tsv")
        else:
            folder.pop("tsv")


DONE_BY_LOADERD = ("RandomResizedCrop", "RandomHorizontalFlip", "Resize", "CenterCrop",
                   "ToTensor", "PILToTensor", "ConvertImageDtype", "Normalize")
WHAT_IT_DOES = {   # a word on what the common ones do, for the advice
    "ColorJitter": "colour jitter", "RandAugment": "random augmentation policy",
    "TrivialAugmentWide": "random augmentation policy", "AutoAugment": "augmentation policy",
    "AugMix": "augmentation mix", "RandomErasing": "random erasing on the tensor",
    "GaussianBlur": "blur", "RandomGrayscale": "grayscale", "RandomRotation": "rotation",
    "RandomAffine": "affine warp", "RandomPerspective": "perspective warp",
    "RandomCrop": "random crop", "Pad": "padding", "Lambda": "a function of the script's"}


def _fmt(v):
    if isinstance(v, list):
        return "(%s)" % ", ".join("%g" % x if isinstance(x, (int, float)) else str(x) for x in v)
    return "%g" % v if isinstance(v, float) else str(v)


# What Loader(augment=) reproduces (docs/AUGMENT.md), from the transforms' recorded facts.
AUGMENTED = ("ColorJitter", "RandAugment", "TrivialAugmentWide", "AutoAugment", "RandomErasing")


def _pair(v):
    return v if isinstance(v, (list, tuple)) and len(v) == 2 else None


def augment_spec(f):
    """(spec, covered): the Loader(augment=) spec of the per-sample augmentations of a
    DataLoader's pipeline (facts @f) that loaderd reproduces, and the places (in the transforms'
    list) of those it covers. Only
    transforms applied always (not inside RandomApply or the like) and read whole count;
    AutoAugment only with the ImageNet policy; one auto-augment policy (loaderd runs one) and
    ColorJitter only before it (loaderd runs the jitter first); the interpolation of
    RandomResizedCrop (bicubic, antialiased as PIL resizes)."""
    from . import augment_map as AM
    ds = f.get("dataset") or {}
    items, done, norm, auto = [], [], None, False
    for at, t in enumerate(ds.get("transforms") or []):
        n = t["name"]
        if t.get("within") or t.get("unreadable"):
            continue
        if n == "Normalize" and t.get("mean") and t.get("std"):
            norm = (list(t["mean"]), list(t["std"]))
        if n in ("RandAugment", "TrivialAugmentWide", "AutoAugment") and auto:
            continue  # a second policy: not reproduced
        if n == "ColorJitter" and not auto:
            got = []
            for i, k in enumerate(AM.JITTER):
                r = _pair(t.get(k))
                v = AM._jitter_range(tuple(r), i) if r else None
                if v is not None:
                    got.append("%s=%s" % (k, v))
            if got:
                items += got
                done.append(at)
        elif n == "RandAugment" and t.get("num_ops") is not None:
            items.append("randaugment=%d:%d:%d" % (t["num_ops"], t.get("magnitude", 9),
                                                   t.get("num_magnitude_bins") or 31))
            done.append(at)
            auto = True
        elif n == "TrivialAugmentWide":
            items.append("trivialaugment=%d" % (t.get("num_magnitude_bins") or 31))
            done.append(at)
            auto = True
        elif n == "AutoAugment" and "IMAGENET" in str(t.get("policy", "")).upper():
            items.append("autoaugment")
            done.append(at)
            auto = True
        elif n == "RandomErasing" and t.get("p") is not None and _pair(t.get("scale")) and \
                _pair(t.get("ratio")) and isinstance(t.get("value", 0), (int, float)):
            sc, ra = t["scale"], t["ratio"]
            items.append("erase=%g:%g:%g:%g:%g" % (t["p"], sc[0], sc[1], ra[0], ra[1]))
            mean, std = norm or ((0.0,) * 3, (1.0,) * 3)
            v = float(t.get("value", 0))
            items.append("erase_value=" + ":".join(
                str(min(255, max(0, round((mean[c] + v * std[c]) * 255)))) for c in range(3)))
            done.append(at)
        elif n == "RandomResizedCrop":
            interp = str(t.get("interpolation", "bilinear")).lower()
            if "bicubic" in interp or interp in ("3", "3.0"):
                items += ["interp=bicubic", "antialias"]
                done.append(at)
    return ",".join(items), done


def not_reproduced(f):
    """Every part of a DataLoader's input pipeline (facts @f) that the swap to loaderd.Loader
    (RandomResizedCrop with torchvision's default scale and ratio and bilinear interpolation,
    a flip with p 0.5, Resize(crop / 0.875) + CenterCrop, ToTensor/Normalize) would not
    reproduce, each named with its parameters: other transforms (ColorJitter, RandAugment,
    TrivialAugmentWide, AutoAugment, RandomErasing, ...), other interpolation, scale, ratio or
    p, a collate_fn of the script's (mixup, cutmix), a target_transform."""
    ds = f.get("dataset") or {}
    out = []
    covered = set(augment_spec(f)[1])
    for at, t in enumerate(ds.get("transforms") or []):
        n = t["name"]
        wrap = " (inside %s)" % t["within"] if t.get("within") else ""
        interp = str(t.get("interpolation", "bilinear")).lower()
        if at in covered and n != "RandomResizedCrop":
            continue  # Loader(augment=) does it (augment_spec)
        if n not in DONE_BY_LOADERD or t.get("within") or t.get("unreadable"):
            args = ", ".join("%s=%s" % (k, _fmt(t[k])) for k in (
                "brightness", "contrast", "saturation", "hue", "num_ops", "magnitude", "policy",
                "p", "scale", "degrees", "size") if t.get(k) is not None)
            what = WHAT_IT_DOES.get(n)
            out.append("%s(%s)%s%s" % (n, args, wrap, ": " + what if what else ""))
            continue
        if n == "RandomResizedCrop" and at in covered:
            pass  # bicubic: augment='interp=bicubic,antialias'
        elif n in ("RandomResizedCrop", "Resize") and interp not in ("bilinear", "2", "2.0"):
            out.append("%s interpolation=%s (loaderd's resize is bilinear)" % (n, interp))
        if n == "RandomResizedCrop":
            sc, ra = t.get("scale"), t.get("ratio")
            if sc and [round(x, 3) for x in sc] != [0.08, 1.0]:
                out.append("RandomResizedCrop scale=%s (loaderd's: (0.08, 1))" % _fmt(sc))
            if ra and [round(x, 3) for x in ra] != [0.75, 1.333]:
                out.append("RandomResizedCrop ratio=%s (loaderd's: (3/4, 4/3))" % _fmt(ra))
        if n == "RandomHorizontalFlip" and t.get("p") is not None and t["p"] != 0.5:
            out.append("RandomHorizontalFlip p=%g (loaderd's: 0.5)" % t["p"])
    if f.get("collate_fn"):
        name = f["collate_fn"]
        low = name.lower()
        if "mix" in low or "cutmix" in low:
            out.append("collate_fn %s: mixup/cutmix on the batch (loaderd.Loader yields "
                       "(images, labels): apply loaderd.mixup.Mixup, timm's semantics, to each "
                       "batch in the loop)" % name)
        else:
            out.append("collate_fn %s: batch-level work of the script's (loaderd.Loader yields "
                       "(images, labels): apply it to each batch in the loop)" % name)
    if ds.get("target_transform"):
        out.append("target_transform %s (apply it to the labels in the loop)" %
                   ds["target_transform"])
    return out


def swap_plan(rep):
    """Whether the training DataLoader maps onto a loaderd.Loader: an ImageFolder/DatasetFolder
    of JPEGs with RandomResizedCrop [+ flip] ("train") or Resize + CenterCrop ("eval"), then
    ToTensor [+ Normalize]. Returns a dict (transforms, crop, normalize, files) or a reason
    (str) why not."""
    f = rep.get("dataloader") or {}
    ds = f.get("dataset") or {}
    folder = ds.get("folder")
    if not folder:
        why = [u for u in ds.get("unread") or [] if u.startswith(("file list", "dataset"))]
        return "the dataset (a %s) was not understood: %s" % (
            ds.get("inner") or ds.get("class"),
            "; ".join(why) or "no (image file, label) list found in it")
    listed = rep.get("_folder_files") or []
    files = [x for x in listed if x.lower().endswith(JPEG_EXT)]
    if not files or len(files) < len(listed) * 0.9:
        exts = sorted({os.path.splitext(x)[1].lower() or "(none)" for x in listed})[:6]
        return "the %s's files (%s, found in %s) are not JPEGs: the measurement packs JPEGs "\
            "only" % (folder.get("class"), ", ".join(exts), folder.get("from", "?"))
    bad = [t for t in ds.get("transforms") or [] if t.get("unreadable")]
    if bad:
        return "transforms that could not be read: %s" % ", ".join(
            "%s (%s)" % (t["name"], t["unreadable"]) for t in bad)
    tf = {t["name"]: t for t in ds.get("transforms") or [] if not t.get("within")}
    lost = not_reproduced(f)
    if "RandomResizedCrop" in tf:
        mode, size = "train", tf["RandomResizedCrop"].get("size")
        if "RandomHorizontalFlip" not in tf:
            mode = ["random_resized_crop"]
    elif "CenterCrop" in tf:
        mode, size = "eval", tf["CenterCrop"].get("size")
    else:
        return "no RandomResizedCrop or CenterCrop: the output size is not fixed"
    crop = [int(x) for x in size] if isinstance(size, list) else [int(size)] * 2
    norm = None
    if "Normalize" in tf:
        norm = (tf["Normalize"].get("mean"), tf["Normalize"].get("std"))
    return {"transforms": mode, "crop": crop, "normalize": norm, "files": files,
            "not_reproduced": lost, "augment": augment_spec(f)[0],
            "root": folder["root"], "classes": folder["classes"],
            "kind": folder.get("kind", "folder"), "from": folder.get("from"),
            "total": folder.get("total"), "tsv": folder.get("tsv")}


def find_bin(name):
    """A loaderd program (_bins.py: $LOADERD_BIN_DIR, PATH, make install, the service, the
    checkout's build/bin), or None."""
    return _bins.find_bin(name)


def measure_swap(rep, plan, workers, sample=SAMPLE_FILES, seconds=MEASURE_S):
    """loaderd on a sample of the user's files: @sample of them (spread over the folder's list)
    linked into a temporary tree, packed with dpack into a temporary .dpk, served by a private
    loaderd with @workers decode workers, drained by one Loader of the script's batch and crop
    for about @seconds (no consumer work: the workers' rate). Returns loaderd's worker time per
    sample (its stats) and the drain rate, or raises RuntimeError naming what failed."""
    from . import daemon
    from . import loader as LD
    dpack, loaderd = find_bin("dpack"), find_bin("loaderd")
    if not dpack or not loaderd:
        raise RuntimeError(_bins.not_found([n for n, b in (("dpack", dpack),
                                                          ("loaderd", loaderd)) if not b]))
    files = plan["files"]
    step = max(1, len(files) // sample)
    pick = files[::step][:sample]
    tmp = tempfile.mkdtemp(prefix="loaderd-diagnose.")
    proc = log = None
    try:
        tree = os.path.join(tmp, "tree")
        for i, src in enumerate(pick):
            cls = os.path.basename(os.path.dirname(src)) or "c"
            os.makedirs(os.path.join(tree, cls), exist_ok=True)
            os.symlink(os.path.abspath(src), os.path.join(tree, cls, "%05d%s" % (
                i, os.path.splitext(src)[1])))
        dpk = os.path.join(tmp, "sample.dpk")
        p = subprocess.run([dpack, "pack", tree, dpk], capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError("dpack pack: " + (p.stderr.strip().splitlines() or ["?"])[-1])
        sock = os.path.join(tmp, "s.sock")
        log = open(os.path.join(tmp, "loaderd.log"), "w+")
        proc, _ = daemon.start([loaderd, "--socket", sock, "--workers", str(workers)], log,
                               start_new_session=True)
        batch = min(rep.get("batch") or 32, len(pick))
        n = 0
        with LD.Loader(sock, dpk, batch, crop=tuple(plan["crop"]),
                       transforms=plan["transforms"], output="numpy", epochs=1000,
                       profile=False) as it:
            st0, t0, cpu0 = None, time.monotonic(), None
            while st0 is None or time.monotonic() - t0 < seconds:
                for b in it:         # one epoch per loop
                    if st0 is None:  # the first batch: loaderd is warm from here
                        st0, t0 = it.stats(), time.monotonic()
                        cpu0 = _proc_cpu_ms(proc.pid)   # its CPU: the budget's cost
                        continue
                    n += len(b[1])
                    if time.monotonic() - t0 >= seconds:
                        break
            st1, t1 = it.stats(), time.monotonic()
            cpu1 = _proc_cpu_ms(proc.pid)
        fill = st1["fill_ns"] - st0["fill_ns"]
        done = st1["samples"] - st0["samples"]
        if done <= 0 or fill <= 0:
            raise RuntimeError("the private loaderd delivered nothing")
        cpu = (cpu1 - cpu0) / done if cpu0 is not None and cpu1 is not None else None
        return {"files": len(pick), "workers": workers, "fill_ms_per_sample": fill / done / 1e6,
                "cpu_ms_per_sample": cpu if cpu and cpu > 0 else None,
                "drained_per_s": n / (t1 - t0) if t1 > t0 else 0.0, "batch": batch}
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if log is not None:
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _proc_cpu_ms(pid):
    """The user + system CPU of process @pid so far (ms), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def handover_ms(batch, crop, f32):
    """The CPU a rank spends per batch on a DataLoader worker's shared-memory hand-over, outside
    the batch request: the release of the mapping, timed here on a batch-sized shared tensor,
    and the first touch of the mapped pages, taken as the same again. 0 without torch."""
    try:
        import torch
    except ImportError:
        return 0.0
    best = None
    for _ in range(5):
        x = torch.empty((batch, 3, crop[0], crop[1]),
                        dtype=torch.float32 if f32 else torch.uint8).share_memory_()
        x.fill_(1)
        t = time.process_time_ns()
        del x
        d = time.process_time_ns() - t
        best = d if best is None else min(best, d)
    return 2 * best / 1e6


def convert_ms(batch, crop):
    """The Loader's uint8 NHWC batch to a normalised float NCHW one in this process (what the
    swapped script does per step, or Loader(normalize=) for it), per batch, in ms."""
    try:
        import torch
    except ImportError:
        return 0.0
    # the Loader's own conversion (NCHW layout: loaderd writes the planes), on one thread,
    # in this thread's CPU time: the cost itself, not the host's load at this moment
    from ._normalize import _parse_normalize, normalized
    norm = _parse_normalize(((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), None, crop, "NCHW",
                            torch)
    consts = {}
    x = torch.randint(0, 255, (batch, 3, crop[0], crop[1]), dtype=torch.uint8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = None
        for _ in range(10):
            t = time.thread_time()
            normalized(norm, torch, x, consts)
            d = time.thread_time() - t
            best = d if best is None else min(best, d)
    finally:
        torch.set_num_threads(threads)
    return best * 1e3


def predict_swap(rep, meas, conv_ms):
    """Samples/s of the script with loaderd (meas["workers"] decode workers, by default all
    the host's cores, sharing them with the ranks): the CPU budget of a step. A step takes at
    least the rank's own work (the rest of the step, model and allreduce, plus the batch's
    conversion), at least the batch's decode CPU over the workers, and at least the host's CPU
    demand over its cores: the ranks' own CPU per step (measured outside the batch requests)
    plus loaderd's CPU for their batches (measured: its process CPU per sample), over the
    cores as far as this host gives them now (a shared host gives a busy thread a share of a
    core: loaderd's CPU over its workers' filling time in the measurement)."""
    m = rep["dataloader_model"]
    b = rep.get("batch") or meas["batch"]
    f = meas.get("cpu_ms_per_sample") or meas["fill_ms_per_sample"]
    # the share of a core a busy thread gets on this host now (loaderd's CPU over its workers'
    # filling time in the measurement): other work on a shared host takes the rest
    share = min(1.0, max(0.05, f / meas["fill_ms_per_sample"])) \
        if meas.get("cpu_ms_per_sample") and meas.get("fill_ms_per_sample") else 1.0
    cores = max(1, m.get("cores") or 1) * share
    ranks = max(1, m.get("ranks_per_host") or 1)
    ho = meas.get("handover_ms") or 0.0    # a DataLoader worker's hand-over, gone
    rest = max(0.5 * m["rest_ms"], m["rest_ms"] - ho) + conv_ms
    own = m["rest_cpu_ms"] if m.get("rest_cpu_ms") is not None else m["rest_ms"]
    own_cpu = max(0.5 * own, own - ho) + conv_ms
    step = max(rest, b * f / (max(1, meas["workers"]) * share),
               ranks * (own_cpu + b * f) / cores)
    return b * rep["ranks"] / (step * 1e-3), step


def script_lines(script, plan, rep, pred):
    """The lines to change in @script, printed as 'file:line: old' then '  -> new'."""
    try:
        with open(script) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    crop = plan["crop"]
    crop_s = str(crop[0]) if crop[0] == crop[1] else "(%d, %d)" % tuple(crop)
    f = rep["dataloader"]
    norm = ""
    if plan["normalize"]:
        norm = ", normalize=(%s, %s), dtype=torch.float32, layout=\"NCHW\"" % (
            [round(x, 3) for x in plan["normalize"][0]], [round(x, 3) for x in
                                                          plan["normalize"][1]])
    if f.get("drop_last"):   # DataLoader(drop_last=True): whole batches only
        norm += ", tail=\"drop_last\""
    if plan.get("augment"):  # the per-sample augmentations loaderd reproduces
        norm += ", augment=%r" % plan["augment"]
    dpk = os.path.join(os.path.dirname(plan["root"].rstrip("/")) or ".",
                       (os.path.basename(plan["root"].rstrip("/")) or "data") + ".dpk")
    new_dl = ("loaderd.Loader(None, %r, %d, crop=%s, transforms=%r%s, epochs=EPOCHS)" %
              (dpk, f.get("batch_size") or 0, crop_s, plan["transforms"], norm))
    where = f.get("where") or [None, 0]
    at = where[1] if where[0] and os.path.abspath(where[0]) == os.path.abspath(script) else 0
    for i, ln in enumerate(lines, 1):
        s = ln.strip()
        if i == at or (not at and "DataLoader(" in s and "import" not in s):
            out.append("%s:%d: %s" % (os.path.basename(script), i, s))
            out.append("  -> %s%s" % (s.split("=")[0].strip() + " = " if "=" in s.split(
                "DataLoader(")[0] else "", new_dl))
        elif "set_epoch(" in s:
            out.append("%s:%d: %s" % (os.path.basename(script), i, s))
            out.append("  -> the Loader's set_epoch(epoch) (DistributedSampler goes)")
    if out and plan.get("kind") == "list":
        out.insert(0, "once: python -m loaderd.pack_list %s %s (the %s files listed in %s, "
                   "linked by label into a temporary tree and packed with dpack)" %
                   (os.path.join(rep.get("_out") or ".", "files.tsv"), dpk,
                    plan.get("total") or "?", plan.get("from")))
    elif out:
        out.insert(0, "once: dpack pack %s %s" % (plan["root"], dpk))
    return out


def swap_advice(rep, cmd_script, sample=SAMPLE_FILES, seconds=MEASURE_S):
    """The loaderd swap for a loader-limited DataLoader run: measured, predicted, the lines.
    Sets rep["swap"]; returns advice lines."""
    plan = swap_plan(rep)
    if isinstance(plan, str):
        rep["swap"] = {"possible": False, "why": plan}
        return ["loaderd: the swap to loaderd.Loader was not measured: %s" % plan]
    m = rep["dataloader_model"]
    # the configuration predicted: loaderd as it starts by default, a worker per core of the
    # host (self-sizing), the workers sharing the cores with the ranks
    workers = max(1, m.get("cores") or os.cpu_count() or 1)
    try:
        meas = measure_swap(rep, plan, workers, sample, seconds)
    except (RuntimeError, OSError, ValueError) as e:
        rep["swap"] = {"possible": True, "measured": False, "why": str(e)}
        return ["loaderd: this dataset and its transforms map onto loaderd.Loader, but the "
                "measurement failed: %s" % e]
    conv = convert_ms(rep.get("batch") or meas["batch"], plan["crop"]) if plan["normalize"] \
        else 0.0
    # a DataLoader with workers hands each batch over in shared memory: mapping and releasing
    # it is CPU of the rank outside the batch request that the swap takes away
    if m.get("num_workers"):
        f32 = any(t["name"] in ("ToTensor", "ConvertImageDtype", "Normalize")
                  for t in (rep["dataloader"].get("dataset") or {}).get("transforms") or [])
        meas["handover_ms"] = handover_ms(rep.get("batch") or meas["batch"], plan["crop"], f32)
    rate, step = predict_swap(rep, meas, conv)
    rep["swap"] = dict(meas, possible=True, measured=True, convert_ms=conv,
                       predicted_samples_per_s=rate, predicted_step_ms=step,
                       transforms=plan["transforms"], crop=plan["crop"])
    rep["with_loaderd"] = rate
    lost = plan.get("not_reproduced") or []
    rep["swap"]["not_reproduced"] = lost
    lines = script_lines(cmd_script, plan, rep, rate) if cmd_script else []
    if lines and lost:
        lines.insert(1, "NOT reproduced by these lines (loaderd does not do them; apply them "
                        "to the batch in the loop, or keep the DataLoader): " + "; ".join(lost))
    rep["swap"]["lines"] = lines
    own = m.get("rest_cpu_ms")
    if meas.get("cpu_ms_per_sample") and meas.get("fill_ms_per_sample"):
        rep["swap"]["core_share"] = min(1.0, meas["cpu_ms_per_sample"] /
                                        meas["fill_ms_per_sample"])
    cfg = "loaderd --workers %d (its default here: a worker per core, self-sizing)" % workers
    rep["swap"]["config"] = cfg
    a = ("loaderd: measured on %d of this dataset's JPEGs (a temporary .dpk, a private loaderd "
         "with %d worker%s on this host): %.2f ms of loaderd CPU per sample (%.2f ms of worker "
         "time) against this loop's %.1f ms of loading per batch of %d in the DataLoader; the "
         "script's own CPU %s per step, %d core%s (a busy thread gets %.0f%% of one now) for "
         "%d rank%s and loaderd -> with "
         "loaderd.Loader and %s about %.1f ms per step (%.1f ms of it converting to normalised "
         "floats), %.0f samples/s (%.2fx now)" %
         (meas["files"], workers, plural(workers),
          meas.get("cpu_ms_per_sample") or meas["fill_ms_per_sample"],
          meas["fill_ms_per_sample"], m["load_ms_per_batch"], rep.get("batch") or 0,
          "%.1f ms" % own if own is not None else "(not measured: its wall time)",
          m.get("cores") or 1, plural(m.get("cores") or 1),
          100 * rep["swap"].get("core_share", 1.0), m.get("ranks_per_host") or 1,
          plural(m.get("ranks_per_host") or 1), cfg, step, conv, rate,
          rate / rep["samples_per_s"] if rep["samples_per_s"] else 0))
    if lost:
        a += ("; the prediction is without what the swap would not reproduce: %s" %
              "; ".join(lost))
    return [a]


# ---- output ----

def render_text(rep, files=()):
    sh = rep["shares"]
    out = ["loaderd.diagnose: %d rank%s x batch %s, %d steps (%d warm-up left out), %.2f s; "
           "device %s%s" % (rep["ranks"], plural(rep["ranks"]), rep.get("batch"), rep["steps"],
                            rep["warmup"], rep["wall_s"], rep.get("device"),
                            ", backend %s" % rep["backend"] if rep.get("backend") else ""),
           "  time per step: data wait %.1f%%, exposed copy %.1f%%, compute %.1f%% (optimizer "
           "included), exposed allreduce %.1f%%, unattributed %.1f%%" %
           (100 * sh["data"], 100 * sh["copy"], 100 * sh["compute"], 100 * sh["comm"],
            100 * sh["gap"])]
    for x in rep["per_rank"]:
        s = x["shares"]
        out.append("  rank %d: data %.1f%%, copy %.1f%%, compute %.1f%%, allreduce %.1f%%; "
                   "%.2f ms per step, compute %.2f ms, %.1f samples/s" %
                   (rep["rank_ids"][x["rank"]], 100 * s["data"], 100 * s["copy"],
                    100 * s["compute"], 100 * s["comm"], x["step_ms"], x["compute_ms"],
                    x["samples_per_s"]))
    if rep["ranks"] > 1:
        c, st = rep["causes"], rep["straggler"]
        out.append("  per step, across ranks: worst rank's data wait + copy %.1f%%, least "
                   "exposed allreduce %.1f%%; compute, slowest rank %d / fastest rank %d: %.2fx "
                   "(the slowest in %.0f%% of the steps)" %
                   (100 * c["loader"], 100 * c["comm"], rep["rank_ids"][st["slow_rank"]],
                    rep["rank_ids"][st["fast_rank"]], st["imbalance"], 100 * st["consistency"]))
    ld = rep.get("loaderd")
    if ld:
        out.append("  loaderd: %d worker%s, busy %.0f%% for this job; %.2f ms of worker time "
                   "per sample (reading %.0f%%, decoding %.0f%%)%s" %
                   (ld["workers"], plural(ld["workers"]), 100 * (ld["busy"] or 0),
                    ld["fill_ms_per_sample"], 100 * ld["read_share"], 100 * ld["decode_share"],
                    ": at most %.0f samples/s with these workers" % ld["capacity_per_s"]
                    if ld.get("capacity_per_s") else ""))
    for o in rep.get("other_loops") or []:
        out.append("  %s loop %s: %d steps over %d rank%s, %.1f ms per step, data wait %.0f%% "
                   "(reported apart, not in the verdict)" %
                   ("evaluation" if o["loop"] == "eval" else "other", o["job"], o["steps"],
                    o["ranks"], plural(o["ranks"]), o["step_ms"], 100 * o["data_share"]))
    if rep.get("dataloader"):
        f = rep["dataloader"]
        ds = f.get("dataset") or {}
        out.append("  input: torch DataLoader over %s (%s samples), batch %s, num_workers=%d, "
                   "pin_memory=%s, persistent_workers=%s, prefetch_factor=%s, drop_last=%s" %
                   (ds.get("class"), ds.get("len", "?"), f.get("batch_size"),
                    f.get("num_workers") or 0, f.get("pin_memory"),
                    f.get("persistent_workers"), f.get("prefetch_factor"),
                    f.get("drop_last")))
        fo = ds.get("folder")
        if fo:
            out.append("  files: %s (image file, label) pairs in %s%s" % (
                fo.get("total", "?"), fo.get("from", fo.get("class")),
                ", %d not found" % fo["missing"] if fo.get("missing") else ""))
        tfs = ds.get("transforms")
        if tfs:
            out.append("  transforms: %s" % ", ".join(
                t["name"] + ("(in %s)" % t["within"] if t.get("within") else "") +
                (" [unreadable]" if t.get("unreadable") else "") for t in tfs))
        for u in ds.get("unread") or []:
            out.append("  not understood: %s" % u)
    if rep.get("dataparallel"):
        dp = rep["dataparallel"]
        out.append("  model: nn.DataParallel(%s), %d parameters, device_ids %s%s" %
                   (dp["module"], dp["params"], dp["device_ids"],
                    "" if dp["active"] else " (no GPU: a plain wrapper here)"))
    for e in rep.get("profile_errors") or []:
        out.append("  profiling stopped early (%s): the figures are of the steps before" % e)
    out.append("  accelerator utilisation (compute / wall, warm-up excluded) %.2f" % rep["au"])
    out += ["", "verdict: %s" % rep["verdict"]] + ["  " + x for x in rep["why"]] + ["advice:"]
    out += ["  - " + x for x in rep["advice"]]
    lines = (rep.get("swap") or {}).get("lines")
    if lines:
        out.append("the swap to loaderd, lines to change:")
        out += ["  " + x for x in lines]
    if files:
        out.append("files: %s" % ", ".join(files))
    out.append("loaderd.diagnose: samples_per_s=%.1f data_wait=%.3f verdict=%s%s" %
               (rep["samples_per_s"], sh["data"], rep["verdict"],
                " with_loaderd=%.1f" % rep["with_loaderd"] if rep.get("with_loaderd") else ""))
    return "\n".join(out) + "\n"


def render_svg(path, rep):
    ld = rep.get("loaderd") or {}
    title = "loaderd.diagnose: %d rank%s x batch %s: %s" % (
        rep["ranks"], plural(rep["ranks"]), rep.get("batch"), rep["verdict"])
    if rep.get("dataloader"):
        src = "torch DataLoader, num_workers=%d" % (rep["dataloader"].get("num_workers") or 0)
    else:
        src = "loaderd %s worker%s" % (ld.get("workers", "?"), plural(ld.get("workers", 2)))
    sub = "device %s; %s; %s samples/s actual, AU %.2f" % (
        rep.get("device"), src, TL.fmt_rate(rep["samples_per_s"]), rep["au"])
    bars = []
    if ld.get("capacity_per_s"):
        bars.append(("loaderd capacity", ld["capacity_per_s"], "#8c564b"))
    if rep.get("with_loaderd"):
        bars.append(("predicted with loaderd", rep["with_loaderd"], "#8c564b"))
    bars.append(("without data wait", _rate_without_wait(rep), "#2ca02c"))
    bars.append(("actual", rep["samples_per_s"], "#17becf"))
    ranks = {rep["rank_ids"][i]: v for i, v in rep["_ranks"].items()}
    shown = dict(rep, per_rank=[dict(x, rank=rep["rank_ids"][x["rank"]])
                                for x in rep["per_rank"]])
    TL.render(path, title, sub, shown, ranks, bars, rep["verdict"], rep["why"],
              "the profiled loop")


def write_outputs(rep, out_dir):
    files = [os.path.join(out_dir, f) for f in ("report.json", "report.txt", "timeline.svg")]
    public = {k: v for k, v in rep.items() if not k.startswith("_")}
    with open(files[0] + ".tmp", "w") as f:
        json.dump(public, f, indent=1)
        f.write("\n")
    os.replace(files[0] + ".tmp", files[0])
    render_svg(files[2], rep)
    text = render_text(rep, files)
    with open(files[1], "w") as f:
        f.write(text)
    return text


# ---- the command ----

TAIL_LINES = 12        # the command's last stderr lines quoted when it fails early
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def _tee(src, tail):
    """The command's stderr to ours, line by line, its last lines kept in @tail."""
    out = getattr(sys.stderr, "buffer", None)
    for ln in iter(src.readline, b""):
        tail.append(ln.decode("utf-8", "replace").rstrip("\n"))
        try:
            if out is not None:
                out.write(ln)
                out.flush()
            else:
                sys.stderr.write(ln.decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass
    src.close()


def is_launcher(cmd):
    return any(os.path.basename(c) in LAUNCHERS or c in LAUNCHERS for c in cmd[:4])


def no_record_text(cmd, rc, recdir, tail):
    """Why there is no report: a launcher that died before any rank started (no rank marker
    from profile.py's sitecustomize), a command that failed, or one that never iterated a
    loader; with the command's last lines when it failed."""
    started = glob.glob(os.path.join(recdir, "started-*.rank"))
    name = os.path.basename(cmd[0])
    if is_launcher(cmd) and not started:
        what = next((c for c in cmd if os.path.basename(c) in LAUNCHERS or c in LAUNCHERS),
                    name)
        head = ("loaderd.diagnose: the command (%s) exited with status %d before any rank "
                "started: nothing of the training script ran" % (what, rc)) if rc else \
            ("loaderd.diagnose: the command (%s) exited (status 0) before any rank started" %
             what)
    elif rc:
        head = ("loaderd.diagnose: %s exited with status %d and left no record in %s%s" %
                (name, rc, recdir, " (%d rank%s had started)" % (len(started), plural(
                    len(started))) if started else ""))
    else:
        return ("loaderd.diagnose: %s left no record in %s: does it iterate a loaderd.Loader "
                "or a torch.utils.data.DataLoader (and run at least two steps)?" %
                (name, recdir))
    lines = [x for x in tail if x.strip()]
    if lines:
        head += "; its last lines:\n" + "\n".join("  | " + x for x in lines)
    return head


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        i = argv.index("--")
        opts, cmd = argv[:i], argv[i + 1:]
    else:   # the options before the first word that is none of theirs
        i = 0
        while i < len(argv) and argv[i].startswith("-"):
            i += 2 if argv[i] in ("--out", "--warmup", "--sample", "--swap-seconds") else 1
        opts, cmd = argv[:i], argv[i:]
    p = argparse.ArgumentParser(
        prog="python -m loaderd.diagnose",
        usage="python -m loaderd.diagnose [--out DIR] [--warmup N] [--no-swap] [--sample N] "
              "[--swap-seconds S] -- CMD ...",
        description="Run CMD (python train.py ..., torchrun ...), whose loop iterates a "
                    "loaderd.Loader or a torch.utils.data.DataLoader, unchanged, with "
                    "loaderd's per-step attribution on (LOADERD_PROFILE=1), gather its ranks' "
                    "records and say "
                    "whether the training is loader-, compute-, communication- or "
                    "straggler-limited, with advice in numbers. Writes report.json, report.txt "
                    "and timeline.svg into DIR.")
    p.add_argument("--out", default="loaderd-diagnose", metavar="DIR",
                   help="report directory, created if missing (default ./loaderd-diagnose)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help="steps left out at the start (default: a tenth, 2 to 20)")
    p.add_argument("--no-swap", dest="swap", action="store_false",
                   help="for a loader-limited torch DataLoader over an ImageFolder of JPEGs: do "
                        "not measure loaderd on a sample of its files")
    p.add_argument("--sample", type=int, default=SAMPLE_FILES, metavar="N",
                   help="files packed for that measurement (default %d)" % SAMPLE_FILES)
    p.add_argument("--swap-seconds", type=float, default=MEASURE_S, metavar="S",
                   help="how long that measurement drains loaderd (default %g)" % MEASURE_S)
    a = p.parse_args(opts)
    if not cmd:
        p.error("no command: python -m loaderd.diagnose [--out DIR] -- CMD ...")
    out = os.path.abspath(a.out)
    recdir = os.path.join(out, "records")
    os.makedirs(recdir, exist_ok=True)
    for f in glob.glob(os.path.join(recdir, "rank-*.json")) + \
            glob.glob(os.path.join(recdir, "started-*.rank")) + \
            glob.glob(os.path.join(recdir, "files-*.tsv")):
        os.unlink(f)
    # torch DataLoader loops: a sitecustomize of ours, first on the path (profile.py)
    site = P.write_sitecustomize(os.path.join(out, "site"))
    pp = os.environ.get("PYTHONPATH")
    env = dict(os.environ, LOADERD_PROFILE="1", LOADERD_PROFILE_DIR=recdir,
               PYTHONPATH=site + (os.pathsep + pp if pp else ""))
    print("loaderd.diagnose: running %s" % " ".join(shlex.quote(c) for c in cmd),
          file=sys.stderr, flush=True)
    try:   # its stderr passes through us: its last lines for a command that fails early
        proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    except OSError as e:
        print("loaderd.diagnose: cannot run %s: %s" % (cmd[0], e), file=sys.stderr)
        return 127
    tail = collections.deque(maxlen=TAIL_LINES)
    tee = threading.Thread(target=_tee, args=(proc.stderr, tail), daemon=True)
    tee.start()
    while True:
        try:
            rc = proc.wait()
            break
        except KeyboardInterrupt:   # the command got it too (same terminal); wait for it
            proc.send_signal(signal.SIGINT)
    tee.join(5)
    recs = load_records(recdir)
    if not recs:
        print(no_record_text(cmd, rc, recdir, list(tail)), file=sys.stderr)
        return rc or 1
    try:
        script = [os.path.basename(c) for c in cmd if c.endswith(".py")]
        rep = analyse(recs, a.warmup, info={"model": script[0] if script else None})
        rep["_out"] = out
        keep_file_list(rep, recdir, out)
        if rep.get("dataloader_model") and rep["verdict"] == "loader-limited" and a.swap:
            scripts = [c for c in cmd if c.endswith(".py")]
            rep["advice"] += swap_advice(rep, scripts[0] if scripts else None, a.sample,
                                         a.swap_seconds)
        text = write_outputs(rep, out)
    except (ValueError, OSError) as e:
        print("loaderd.diagnose: %s" % e, file=sys.stderr)
        return rc or 1
    if rc:
        print("loaderd.diagnose: the command exited with status %d; the report is of the "
              "steps it ran" % rc, file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()
    return rc


if __name__ == "__main__":
    sys.exit(main())
