"""analysis.py - the ranks' profiling records (profile.py) -> the report: the trainer's figures
and verdict (loaderd.report), loaderd's side, the torch DataLoader's knobs modelled, "why" and
"advice" in numbers. Pure computation on the records: no process, no file, no Loader. Used by
Loader.profile_report() and by loaderd.diagnose (which adds the swap measurement and the
output files), so that the Loader does not depend on the diagnosis tool.
"""
import json
import math
import os

from . import report as R

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
    cpus = [r["rest_cpu_ms"] for r in recs if r.get("rest_cpu_ms") is not None]
    return {"num_workers": w, "load_ms_per_batch": load, "rest_ms": rest, "step_ms": step,
            "rest_cpu_ms": max(cpus) if cpus else None,
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
                       "cheaper or have cores of its own" %
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
