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
import glob
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import profile as P
from . import report as R
from . import timeline as TL

BUSY_TARGET = 0.90    # advice: workers sized to be busy at most this share of the time
COPY_MIN = 0.05       # exposed copy share that earns a remark
GAP_MIN = 0.10        # time in no step worth a remark
LATENCY_BOUND_MIBS = 200   # exposed allreduce slower than this per MiB: per-call cost
BURST_SHARE = 0.25    # a DataLoader's median wait under this share of its mean: bursts


def warmup_for(steps):
    """The trainer's warm-up rule (tools/ldprobe.py): a tenth of the steps, 2 to 20."""
    return max(2, min(20, steps // 10))


def plural(n, one="", many="s"):
    return one if n == 1 else many


# ---- records -> runs -> report ----

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


def _train_key(r):
    """Which of a rank's loops is the training loop: one whose steps ran backward (a
    DataLoader's "loop"; a Loader's record does not say), then the most steps."""
    return (r.get("loop", "train") == "train", len(r["steps"]))


def per_rank(records):
    """One record per rank: its training loop (see _train_key), not an evaluation loop."""
    by = {}
    for r in records:
        k = int(r.get("rank", 0))
        if k not in by or _train_key(r) > _train_key(by[k]):
            by[k] = r
    return [by[k] for k in sorted(by)]


def other_loops(records, chosen):
    """The loops that are not the training loop (evaluation), summed over ranks per job:
    reported apart, never in the verdict."""
    ids = set(id(r) for r in chosen)
    out = {}
    for r in records:
        if id(r) in ids:
            continue
        st = r["steps"]
        o = out.setdefault(r.get("job") or "?", {"job": r.get("job"), "loop": r.get("loop",
                           "other"), "ranks": 0, "steps": 0, "samples": 0, "data_ns": 0,
                           "period_ns": 0})
        o["ranks"] += 1
        o["steps"] += len(st)
        o["samples"] += sum(s[7] for s in st)
        o["data_ns"] += sum(s[2] for s in st)
        o["period_ns"] += sum(s[2] + s[3] + s[4] + s[5] + s[6] for s in st)
    res = []
    for o in out.values():
        per = o.pop("period_ns")
        o["data_share"] = o.pop("data_ns") / per if per else 0.0
        o["step_ms"] = per / o["steps"] / 1e6 if o["steps"] else 0.0
        res.append(o)
    return sorted(res, key=lambda o: o["job"] or "")


def runs_of(recs, warmup=None):
    """The report's input: per rank the measured steps that every rank has (by step number),
    warm-up left out. Returns (runs, steps in common, warm-up)."""
    common = set.intersection(*(set(s[0] for s in r["steps"]) for r in recs))
    order = sorted(common)
    warm = warmup_for(len(order)) if warmup is None else max(0, int(warmup))
    warm = max(0, min(warm, len(order) - 2))
    keep = set(order[warm:])
    runs = []
    for r in recs:
        st = [s for s in r["steps"] if s[0] in keep]
        st.sort(key=lambda s: s[0])
        steps = [(s[1], s[2], s[3], s[4], s[5], s[6]) for s in st]
        wall = (st[-1][1] + sum(st[-1][2:7]) - st[0][1]) if st else 0
        runs.append({"steps": steps, "samples": sum(s[7] for s in st), "wall_ns": wall,
                     "buckets": [s[9] for s in st], "comm_busy": [s[8] for s in st]})
    return runs, len(order), warm


def loader_side(recs):
    """loaderd's side over the ranks: fill time per sample, the workers' busy share for this
    job, what its workers could deliver."""
    ld = [r["loaderd"] for r in recs if r.get("loaderd")]
    if not ld:
        return None
    fill = sum(x["fill_ns"] for x in ld)
    samples = sum(x["samples"] for x in ld)
    workers = max(x.get("workers", 0) for x in ld)
    wall = max(x["wall_ns"] for x in ld) * 1e-9
    per = fill * 1e-9 / samples if samples else 0.0
    out = {"workers": workers, "samples": samples, "fill_s": fill * 1e-9,
           "fill_ms_per_sample": per * 1e3,
           "read_share": sum(x.get("io_ns", 0) for x in ld) / fill if fill else 0.0,
           "decode_share": sum(x.get("decode_ns", 0) for x in ld) / fill if fill else 0.0,
           "wall_s": wall,
           "busy": fill * 1e-9 / (wall * workers) if wall > 0 and workers else None,
           "capacity_per_s": workers / per if per > 0 and workers else None,
           "per_worker_per_s": 1 / per if per > 0 else None,
           "ranks_attached": max(x.get("ranks_attached", 0) for x in ld)}
    return out


def analyse(records, warmup=None, info=None, cores=None):
    """The report of the ranks' @records: the trainer's figures and verdict, plus "loaderd"
    (its side), "why" and "advice", and "timeline" input under "_ranks" (not in report.json)."""
    recs = per_rank(records)
    if not recs:
        raise ValueError("no records")
    runs, n_common, warm = runs_of(recs, warmup)
    r0 = recs[0]
    nb = sorted(runs[0]["buckets"])
    inf = {"device": r0.get("device"), "backend": r0.get("backend"), "model": None,
           "batch": r0.get("batch"), "crop": r0.get("crop"), "params": r0.get("params"),
           "buckets": nb[len(nb) // 2] if nb and r0.get("ddp") else None,
           "bucket_mb": r0.get("bucket_mb"), "steps": n_common, "warmup": warm}
    inf.update(info or {})
    rep = R.compute(runs, inf)
    rep["source"] = "loaderd.diagnose"
    rep["rank_ids"] = [int(r["rank"]) for r in recs]
    world = max(int(r.get("world", 1)) for r in recs)
    rep["world"] = world
    if len(recs) < world:
        rep["missing_ranks"] = sorted(set(range(world)) - set(rep["rank_ids"]))
    rep["loaderd"] = loader_side(recs)
    rep["input"] = r0.get("source", "loaderd.Loader")
    if r0.get("dataloader"):
        # the folder's file list (for the swap's sample) stays out of report.json: a count there
        rep["dataloader"] = json.loads(json.dumps(r0["dataloader"]))
        folder = rep["dataloader"].get("dataset", {}).get("folder")
        if folder:
            rep["_folder_files"] = folder.pop("files", [])
            folder["files_listed"] = len(rep["_folder_files"])
        rep["loop"] = r0.get("loop")
    dp = [d for r in recs for d in (r.get("dataparallel") or [])]
    if dp:
        rep["dataparallel"] = dp[0]
    rep["other_loops"] = other_loops(records, recs)
    errs = ["rank %s: %s" % (r.get("rank"), r["profile_error"]) for r in recs
            if r.get("profile_error")]
    if errs:   # a hook failed: profiling of that loader stopped there (the script went on)
        rep["profile_errors"] = errs
    if rep.get("dataloader"):
        rep["dataloader_model"] = dataloader_model(rep, recs, cores)
    rep["why"], rep["advice"] = advise(rep, cores or os.cpu_count() or 1)
    # the timeline's input: per rank, measured step k -> its start and phases in us
    rep["_ranks"] = {i: {k: dict({"start": s[0] / 1e3},
                                 **{p: s[1 + j] / 1e3 for j, p in enumerate(R.PHASES)})
                         for k, s in enumerate(run["steps"])}
                     for i, run in enumerate(runs)}
    return rep


# ---- advice ----

def dataloader_model(rep, recs, cores=None):
    """What a torch DataLoader's knobs would do, from the loop's own figures: the time one core
    takes to load a batch (load_ms: the data wait itself with num_workers=0; with W workers that
    keep the loop waiting, W x the step time), the rest of the step (compute, allreduce), the
    cores free for workers per rank, and the workers' start-up at each epoch's first batch."""
    f = rep["dataloader"]
    w = int(f.get("num_workers") or 0)
    # per step, the worst rank's wait; time in no step (evaluation between epochs) left out
    warm = rep.get("warmup", 0)
    waits, rests, medians = [], [], []
    for r in recs:
        st = sorted(r["steps"])[warm:] or r["steps"]
        if w > 0:   # the workers' start-up at an epoch's first batch: persistent_workers below
            starts = set(r.get("epoch_starts") or [])
            st = [s for s in st if s[0] not in starts] or st
        waits.append(sum(s[2] for s in st) / len(st) / 1e6)
        rests.append(sum(s[3] + s[4] + s[5] + s[6] for s in st) / len(st) / 1e6)
        medians.append(sorted(s[2] for s in st)[len(st) // 2] / 1e6)
    wait, rest = max(waits), max(max(rests), 1e-3)
    step = wait + rest
    limited = rep["verdict"] == "loader-limited"
    load = wait if w == 0 else (w * step if limited else w * rest)
    cores = cores or max(int(r.get("cores") or 0) for r in recs) or os.cpu_count() or 1
    hosts = {}
    for r in recs:
        hosts[r.get("host")] = hosts.get(r.get("host"), 0) + 1
    per_host = max(hosts.values())
    free = max(0, cores - per_host) // per_host
    # start-up: an epoch's first wait beyond the loop's usual one
    startup = None
    starts = recs[0].get("epoch_starts") or []
    if w > 0 and len(starts) > 1:
        waits = {s[0]: s[2] for s in recs[0]["steps"]}
        usual = sorted(waits.values())[len(waits) // 2] if waits else 0
        firsts = [waits[s] - usual for s in starts[1:] if s in waits]
        if firsts:
            startup = max(0.0, sum(firsts) / len(firsts) / 1e6)
    return {"num_workers": w, "load_ms_per_batch": load, "rest_ms": rest, "step_ms": step,
            "cores": cores, "ranks_per_host": per_host, "free_cores_per_rank": free,
            "startup_ms": startup, "load_is_bound": not limited and w > 0,
            "wait_ms": wait, "wait_median_ms": max(medians)}


def predict_step(m, workers):
    """Step time (ms) with @workers DataLoader workers, each on a free core of its own (more
    workers than free cores share them)."""
    par = min(workers, m["free_cores_per_rank"])
    if par <= 0:
        return m["rest_ms"] + m["load_ms_per_batch"]
    return max(m["rest_ms"], m["load_ms_per_batch"] / par)


def dataloader_advice(rep):
    m, f = rep["dataloader_model"], rep["dataloader"]
    lost_min = rep["thresholds"]["lost_min"]
    gb = (rep.get("batch") or 0) * rep["ranks"]
    adv = []

    def rate(ms):
        return gb / (ms * 1e-3) if ms > 0 else 0.0
    w, free, load, rest = m["num_workers"], m["free_cores_per_rank"], m["load_ms_per_batch"], \
        m["rest_ms"]
    now = m["step_ms"]
    if rep["verdict"] == "loader-limited":
        want = max(1, math.ceil(load / rest)) if rest > 0 else 1
        k = min(want, free)
        base = ("num_workers: %d now; one core loads a batch in %.1f ms, the rest of the step "
                "takes %.1f ms; this host has %d cores for %d rank%s: %d free per rank" %
                (w, load, rest, m["cores"], m["ranks_per_host"],
                 plural(m["ranks_per_host"]), free))
        if k > w:
            p = predict_step(m, k)
            adv.append(base + " -> DataLoader(num_workers=%d): about %.1f ms per step, %.0f "
                       "samples/s (%.2fx)%s" % (k, p, rate(p), now / p if p else 0,
                                                "" if k >= want else
                                                "; %d workers would keep up, but the cores "
                                                "are not there" % want))
        else:
            adv.append(base + ": more workers than free cores share them, no faster "
                       "(about %.1f ms per step with %d): the loading itself has to get "
                       "cheaper (below) or have cores of its own" %
                       (predict_step(m, max(w, 1)), max(w, 1)))
        if w > 0 and m["wait_median_ms"] < BURST_SHARE * m["wait_ms"]:
            # most steps do not wait, a few wait long: the workers keep up on average and the
            # queue is too shallow for the jitter
            pf = f.get("prefetch_factor") or 2
            p = rest + m["wait_median_ms"]
            adv.append("prefetch_factor: the waits come in bursts (median %.1f ms, mean %.1f ms "
                       "per step): the %d workers keep up on average, the queue (%d batches "
                       "per worker) is too shallow for the jitter -> DataLoader(prefetch_factor="
                       "%d): about %.1f ms per step, %.0f samples/s (%.2fx)" %
                       (m["wait_median_ms"], m["wait_ms"], w, pf, pf * 2, p, rate(p),
                        now / p if p else 0))
    if w > 0 and not f.get("persistent_workers") and m.get("startup_ms") and \
            m["startup_ms"] > lost_min * now:
        adv.append("persistent_workers: the workers start again at every epoch, %.0f ms at its "
                   "first batch -> DataLoader(persistent_workers=True) saves that per epoch" %
                   m["startup_ms"])
    if rep.get("device") == "cuda" and not f.get("pin_memory"):
        adv.append("pin_memory: the batches are in pageable memory, so their copy to the GPU is "
                   "synchronous -> DataLoader(pin_memory=True) and .to(device, "
                   "non_blocking=True); (the copy is in compute here: not timed apart for a "
                   "DataLoader)")
    return adv

def _rate_without_wait(rep):
    """Samples/s were every step's data wait (the worst rank's) gone."""
    step_s = rep["step_ms"] * 1e-3 * (1 - rep["causes"]["loader"])
    gb = (rep.get("batch") or 0) * rep["ranks"]
    return gb / step_s if step_s > 0 and gb else 0.0


def advise(rep, cores):
    v = rep["verdict"]
    lost_min = rep["thresholds"]["lost_min"]
    ld = rep.get("loaderd")
    step_ms, A = rep["step_ms"], rep["samples_per_s"]
    c = rep["causes"]
    why, adv = [], []
    if v == "loader-limited":
        why.append("the ranks wait for batches %.0f%% of each step (worst rank per step: "
                   "%.1f ms of %.1f ms)" % (100 * c["loader"], c["loader"] * step_ms, step_ms))
        need = _rate_without_wait(rep)
        if rep.get("dataloader_model"):
            adv += dataloader_advice(rep)
        elif ld and ld.get("per_worker_per_s"):
            w, pw = ld["workers"], ld["per_worker_per_s"]
            k = max(w + 1, math.ceil(need / (pw * BUSY_TARGET))) if need else w + 1
            s = ("decode workers: loaderd's %d worker%s busy %.0f%% for this job, %.2f ms "
                 "of worker time per sample (reading %.0f%%, decoding %.0f%%): %.0f samples/s "
                 "per worker; without waiting this loop would take about %.0f samples/s -> "
                 "loaderd --workers %d" %
                 (w, plural(w, " was", "s were"), 100 * (ld["busy"] or 0),
                  ld["fill_ms_per_sample"],
                  100 * ld["read_share"], 100 * ld["decode_share"], pw, need, k))
            if k + rep["ranks"] > cores and rep.get("device") in ("cpu", None):
                s += ("; this host has %d cores for them and %d rank%s: the workers need cores "
                      "of their own (another node, a GPU for compute), or a cheaper input" %
                      (cores, rep["ranks"], plural(rep["ranks"])))
            adv.append(s)
            if ld["busy"] is not None and ld["busy"] < 0.6:
                adv.append("loaderd's workers were idle %.0f%% of the time while the ranks "
                           "waited: the ring is too shallow for the step's jitter (Loader "
                           "slots=, loaderd --slots) or the workers serve other jobs too "
                           "(loaderctl stats)" % (100 * (1 - ld["busy"])))
        else:
            adv.append("decode workers: add loaderd --workers (loaderd's counters were not "
                       "read: an older loaderd, or the loop ended before its first batch)")
        if not rep.get("dataloader_model"):
            adv.append("cheaper input: a smaller crop= decodes at a coarser DCT scale; pack the "
                       "images at a lower resolution (dpack) when they are much larger than "
                       "the crop")
    elif v == "communication-limited":
        comm_ms = c["comm"] * step_ms
        rest = step_ms - comm_ms
        why.append("exposed allreduce %.0f%% of each step (%.1f ms of %.1f ms, the least "
                   "exposed rank): gradients wait for the network after backward" %
                   (100 * c["comm"], comm_ms, step_ms))
        b = rep.get("batch") or 0
        for k in (2, 4, 8, 16, 32):
            if rest > 0 and comm_ms / (k * rest + comm_ms) <= lost_min:
                adv.append("larger batch: the allreduce costs the same per step, so batch %d "
                           "per rank (or %d accumulation steps with no_sync) brings it to about "
                           "%.0f%%" % (b * k, k, 100 * comm_ms / (k * rest + comm_ms)))
                break
        else:
            adv.append("larger batch: even 32x leaves the allreduce exposed: it has to get "
                       "faster (network, backend)")
        params, nbk, cap = rep.get("params"), rep.get("buckets"), rep.get("bucket_mb") or 25
        if params and nbk and comm_ms > 0:
            mb = params * 4 / 2**20
            bw = mb / (comm_ms / 1e3)
            if bw < LATENCY_BOUND_MIBS and nbk > 1:
                adv.append("buckets: %.2f MiB of gradient in %d buckets, %.0f MiB/s exposed: "
                           "the cost is per call, not volume: DistributedDataParallel("
                           "bucket_cap_mb=%.3g) makes fewer, larger buckets" %
                           (mb, nbk, bw, max(cap * 2, mb)))
            elif nbk == 1:
                adv.append("buckets: the whole gradient (%.2f MiB) is one bucket, so its "
                           "allreduce starts only when backward ends: DistributedDataParallel("
                           "bucket_cap_mb=%.3g) (about 4 buckets) overlaps it with backward" %
                           (mb, max(mb / 4, 0.01)))
            else:
                adv.append("buckets: %d buckets (cap %g MiB): bucket_cap_mb=%.3g starts the "
                           "allreduce earlier in backward" % (nbk, cap, cap / 2))
    elif v == "straggler-limited":
        st = rep["straggler"]
        pr = {x["rank"]: x for x in rep["per_rank"]}
        s, f = st["slow_rank"], st["fast_rank"]
        why.append("rank %d computes %.2fx as long as rank %d (%.1f ms vs %.1f ms per step, the "
                   "slowest in %.0f%% of the steps); the others wait for it in the allreduce" %
                   (rep["rank_ids"][s], st["imbalance"], rep["rank_ids"][f],
                    pr[s]["compute_ms"], pr[f]["compute_ms"], 100 * st["consistency"]))
        est = A / (1 - c["straggler"]) if c["straggler"] < 1 else A
        adv.append("straggler: rank %d's device (or host) is slower or shared (nvidia-smi, "
                   "other processes, clocks); at the others' pace about %.0f samples/s "
                   "(%.0f%% more)" % (rep["rank_ids"][s], est, 100 * (est / A - 1) if A else 0))
    else:
        why.append("compute takes %.0f%% of the step time; data wait, exposed copy, exposed "
                   "allreduce and rank imbalance each cost less than %.0f%%" %
                   (100 * rep["shares"]["compute"], 100 * lost_min))
        if rep.get("dataloader_model"):
            adv += dataloader_advice(rep)
            adv.append("the loader keeps up: to go faster make compute faster or add ranks")
        elif ld and ld.get("capacity_per_s"):
            cap = ld["capacity_per_s"]
            adv.append("headroom: loaderd's %d worker%s could deliver about %.0f samples/s "
                       "(%.1fx this run's %.0f; busy %.0f%% now): %s" %
                       (ld["workers"], plural(ld["workers"]), cap, cap / A if A else 0, A,
                        100 * (ld["busy"] or 0),
                        "a faster model or more ranks will make the loader the limit, add "
                        "workers with them" if cap < 1.3 * A else
                        "to go faster make compute faster (device, model, mixed precision) "
                        "or add ranks"))
        else:
            adv.append("the loader keeps up: to go faster make compute faster or add ranks")
    sh = rep["shares"]
    if sh["copy"] >= COPY_MIN:
        adv.append("copies: the compute stream waited %.0f%% of the step for the host-to-device "
                   "copy: deepen the ring (slots=) so that copies start earlier" %
                   (100 * sh["copy"]))
    if sh["gap"] >= GAP_MIN:
        adv.append("%.0f%% of the time is in no step: between the loops over the %s (epoch "
                   "ends, evaluation, checkpoints)%s" %
                   (100 * sh["gap"], "DataLoader" if rep.get("dataloader") else "Loader",
                    "; the evaluation loops are reported apart above" if rep.get("other_loops")
                    else ""))
    dp = rep.get("dataparallel")
    if dp:
        adv.append(dataparallel_advice(rep, dp))
    if rep.get("missing_ranks"):
        adv.append("no record from rank%s %s: the report is of the others" %
                   (plural(len(rep["missing_ranks"])),
                    ", ".join(map(str, rep["missing_ranks"]))))
    return why, adv


def dataparallel_advice(rep, dp):
    n = len(dp["device_ids"])
    b = rep.get("batch") or 0
    if not dp["active"]:
        return ("nn.DataParallel(%s) (%d parameters) without GPUs here: a plain wrapper, "
                "nothing scattered or replicated on this host. On N GPUs it scatters each batch "
                "from device 0 (batch %d -> %s per device), copies the whole module to every "
                "device each step, runs the replicas in threads of this one process and gathers "
                "the outputs (and the loss) on device 0, which carries that extra load. "
                "DistributedDataParallel instead: one process per GPU (torchrun "
                "--nproc_per_node N train.py), torch.distributed.init_process_group('nccl'), "
                "model = nn.parallel.DistributedDataParallel(model.to(rank), "
                "device_ids=[rank]) in place of nn.DataParallel(model), and "
                "DataLoader(..., sampler=DistributedSampler(dataset)) with the batch per "
                "process; the gain needs the GPUs to measure (not measured here)" %
                (dp["module"], dp["params"], b, "%d/N" % b if b else "batch/N"))
    return ("nn.DataParallel(%s) over devices %s: batch %d -> %d per device; each step "
            "scatters the inputs from device %s, replicates the module (%d parameters), "
            "applies the replicas in threads and gathers the outputs on device %s. "
            "DistributedDataParallel instead: torchrun --nproc_per_node %d, "
            "init_process_group('nccl'), DistributedDataParallel(model.to(rank), "
            "device_ids=[rank]), a DistributedSampler; the per-step split of scatter, "
            "replicate, apply and gather is not measured by this version" %
            (dp["module"], dp["device_ids"], b, b // max(n, 1), dp["device_ids"][0],
             dp["params"], dp["output_device"], n))


# ---- the swap to loaderd, measured on the user's own files ----

JPEG_EXT = (".jpg", ".jpeg")
SAMPLE_FILES = 256          # files of the dataset packed for the measurement
MEASURE_S = 3.0             # drain the private loaderd this long (at least 2 epochs of it)


def swap_plan(rep):
    """Whether the training DataLoader maps onto a loaderd.Loader: an ImageFolder/DatasetFolder
    of JPEGs with RandomResizedCrop [+ flip] ("train") or Resize + CenterCrop ("eval"), then
    ToTensor [+ Normalize]. Returns a dict (transforms, crop, normalize, files) or a reason
    (str) why not."""
    f = rep.get("dataloader") or {}
    ds = f.get("dataset") or {}
    folder = ds.get("folder")
    if not folder:
        return "the dataset is a %s, not an ImageFolder/DatasetFolder" % ds.get("class")
    listed = rep.get("_folder_files") or []
    files = [x for x in listed if x.lower().endswith(JPEG_EXT)]
    if not files or len(files) < len(listed) * 0.9:
        return "the ImageFolder's files are not JPEGs"
    names = [t["name"] for t in ds.get("transforms") or []]
    tf = {t["name"]: t for t in ds.get("transforms") or []}
    rest = [n for n in names if n not in ("RandomResizedCrop", "RandomHorizontalFlip", "Resize",
                                          "CenterCrop", "ToTensor", "Normalize",
                                          "ConvertImageDtype", "PILToTensor")]
    if rest:
        return "transforms loaderd does not do: %s" % ", ".join(rest)
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
            "root": folder["root"], "classes": folder["classes"]}


def find_bin(name):
    """A loaderd program: $LOADERD_BIN_DIR, then PATH, then this checkout's build/bin."""
    d = os.environ.get("LOADERD_BIN_DIR")
    cands = [os.path.join(d, name)] if d else []
    w = shutil.which(name)
    if w:
        cands.append(w)
    here = os.path.dirname(os.path.abspath(__file__))
    cands.append(os.path.join(here, "..", "..", os.environ.get("BUILD", "build"), "bin", name))
    for c in cands:
        if os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


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
        raise RuntimeError("dpack/loaderd not found ($LOADERD_BIN_DIR, PATH, build/bin)")
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
            st0, t0 = None, time.monotonic()
            while st0 is None or time.monotonic() - t0 < seconds:
                for b in it:         # one epoch per loop
                    if st0 is None:  # the first batch: loaderd is warm from here
                        st0, t0 = it.stats(), time.monotonic()
                        continue
                    n += len(b[1])
                    if time.monotonic() - t0 >= seconds:
                        break
            st1, t1 = it.stats(), time.monotonic()
        fill = st1["fill_ns"] - st0["fill_ns"]
        done = st1["samples"] - st0["samples"]
        if done <= 0 or fill <= 0:
            raise RuntimeError("the private loaderd delivered nothing")
        return {"files": len(pick), "workers": workers, "fill_ms_per_sample": fill / done / 1e6,
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


def convert_ms(batch, crop):
    """The Loader's uint8 NHWC batch to a normalised float NCHW one in this process (what the
    swapped script does per step, or Loader(normalize=) for it), per batch, in ms."""
    try:
        import torch
    except ImportError:
        return 0.0
    # the Loader's own conversion (NCHW layout: loaderd writes the planes), on one thread,
    # in this thread's CPU time: the cost itself, not the host's load at this moment
    from .loader import _parse_normalize, Loader
    norm = _parse_normalize(((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), None, crop, "NCHW",
                            torch)
    lo = Loader.__new__(Loader)
    lo._norm, lo._torch = norm, torch
    x = torch.randint(0, 255, (batch, 3, crop[0], crop[1]), dtype=torch.uint8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = None
        for _ in range(10):
            t = time.thread_time()
            lo._normalized(x)
            d = time.thread_time() - t
            best = d if best is None else min(best, d)
    finally:
        torch.set_num_threads(threads)
    return best * 1e3


def predict_swap(rep, meas, conv_ms):
    """Samples/s of the script with loaderd: per rank, a step takes the larger of the rest of
    the step (model, allreduce) plus the batch's conversion, and the batch's worker time over
    the rank's workers (free cores; none free: they share the rank's core, then the sum)."""
    m = rep["dataloader_model"]
    b = rep.get("batch") or meas["batch"]
    per_rank_w = m["free_cores_per_rank"]
    fill = b * meas["fill_ms_per_sample"]
    rest = m["rest_ms"] + conv_ms
    step = max(rest, fill / per_rank_w) if per_rank_w >= 1 else rest + fill
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
    new_dl = ("loaderd.Loader(None, %r, %d, crop=%s, transforms=%r%s, epochs=EPOCHS)" %
              (os.path.join(os.path.dirname(plan["root"].rstrip("/")) or ".",
                            os.path.basename(plan["root"].rstrip("/")) + ".dpk"),
               f.get("batch_size") or 0, crop_s, plan["transforms"], norm))
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
    if out:
        out.insert(0, "once: dpack pack %s %s.dpk" % (plan["root"], plan["root"].rstrip("/")))
    return out


def swap_advice(rep, cmd_script, sample=SAMPLE_FILES, seconds=MEASURE_S):
    """The loaderd swap for a loader-limited DataLoader run: measured, predicted, the lines.
    Sets rep["swap"]; returns advice lines."""
    plan = swap_plan(rep)
    if isinstance(plan, str):
        rep["swap"] = {"possible": False, "why": plan}
        return []
    m = rep["dataloader_model"]
    workers = max(1, m["free_cores_per_rank"] * m["ranks_per_host"])
    try:
        meas = measure_swap(rep, plan, workers, sample, seconds)
    except (RuntimeError, OSError, ValueError) as e:
        rep["swap"] = {"possible": True, "measured": False, "why": str(e)}
        return ["loaderd: this dataset and its transforms map onto loaderd.Loader, but the "
                "measurement failed: %s" % e]
    conv = convert_ms(rep.get("batch") or meas["batch"], plan["crop"]) if plan["normalize"] \
        else 0.0
    rate, step = predict_swap(rep, meas, conv)
    rep["swap"] = dict(meas, possible=True, measured=True, convert_ms=conv,
                       predicted_samples_per_s=rate, predicted_step_ms=step,
                       transforms=plan["transforms"], crop=plan["crop"])
    rep["with_loaderd"] = rate
    lines = script_lines(cmd_script, plan, rep, rate) if cmd_script else []
    rep["swap"]["lines"] = lines
    a = ("loaderd: measured on %d of this dataset's JPEGs (a temporary .dpk, a private loaderd "
         "with %d worker%s on this host): %.2f ms of worker time per sample against this "
         "loop's %.1f ms of loading per batch of %d in the DataLoader -> with loaderd.Loader "
         "about %.1f ms per step (%.1f ms of it converting to normalised floats), %.0f "
         "samples/s (%.2fx now)" %
         (meas["files"], workers, plural(workers), meas["fill_ms_per_sample"],
          m["load_ms_per_batch"], rep.get("batch") or 0, step, conv, rate,
          rate / rep["samples_per_s"] if rep["samples_per_s"] else 0))
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
                   "pin_memory=%s, persistent_workers=%s, prefetch_factor=%s" %
                   (ds.get("class"), ds.get("len", "?"), f.get("batch_size"),
                    f.get("num_workers") or 0, f.get("pin_memory"),
                    f.get("persistent_workers"), f.get("prefetch_factor")))
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
    for f in glob.glob(os.path.join(recdir, "rank-*.json")):
        os.unlink(f)
    # torch DataLoader loops: a sitecustomize of ours, first on the path (profile.py)
    site = P.write_sitecustomize(os.path.join(out, "site"))
    pp = os.environ.get("PYTHONPATH")
    env = dict(os.environ, LOADERD_PROFILE="1", LOADERD_PROFILE_DIR=recdir,
               PYTHONPATH=site + (os.pathsep + pp if pp else ""))
    print("loaderd.diagnose: running %s" % " ".join(shlex.quote(c) for c in cmd),
          file=sys.stderr, flush=True)
    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as e:
        print("loaderd.diagnose: cannot run %s: %s" % (cmd[0], e), file=sys.stderr)
        return 127
    while True:
        try:
            rc = proc.wait()
            break
        except KeyboardInterrupt:   # the command got it too (same terminal); wait for it
            proc.send_signal(signal.SIGINT)
    recs = load_records(recdir)
    if not recs:
        print("loaderd.diagnose: %s left no record in %s: does it iterate a loaderd.Loader "
              "or a torch.utils.data.DataLoader (and run at least two steps)?" % (cmd[0], recdir),
              file=sys.stderr)
        return rc or 1
    try:
        script = [os.path.basename(c) for c in cmd if c.endswith(".py")]
        rep = analyse(recs, a.warmup, info={"model": script[0] if script else None})
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
