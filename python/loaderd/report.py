"""report.py - the trainer's report (trainer/report.c) for steps measured anywhere else: from every
rank's step table, the per-rank and per-phase figures, AU, samples/s and the verdict (loader-,
compute-, communication- or straggler-limited), as the same loaderd-trainer-report/1 JSON object
that `trainer --report-json` writes (README "Reading the report").

The thresholds and the verdicts' names are not here: they are read from the one table,
trainer/report_limits.def, the file trainer/report.c compiles (shipped inside the package as
loaderd/report_limits.def by setup.py). The computation follows report.c step for step: per
step across ranks, the worst rank's data wait + exposed copy, the least exposed rank's
allreduce, and the slowest rank's compute beyond the others' median (python/tests/test_report.py
checks the cases of tests/test_trn_report.c). Standard library only.

A rank's run: {"steps": [(start_ns, data_ns, copy_ns, compute_ns, comm_ns, opt_ns), ...] (the
measured steps, warm-up left out, in order), "sum_ns": [5 totals] (optional: the sums of the
steps), "samples": measured samples, "wall_ns": from the first measured step's start to the
end}.
"""
import math
import os
import re

SCHEMA = "loaderd-trainer-report/1"
PHASES = ("data", "copy", "compute", "comm", "opt")
DATA, COPY, COMPUTE, COMM, OPT = range(5)
_DEF = "report_limits.def"


def _def_path():
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, _DEF),                                # pip-installed
              os.path.join(here, "..", "..", "trainer", _DEF)):        # a loaderd checkout
        if os.path.isfile(p):
            return p
    raise FileNotFoundError("loaderd: %s is neither in the package (%s) nor in the checkout "
                            "(trainer/)" % (_DEF, here))


def read_table(path=None):
    """The one table: ({threshold: value}, [verdict names in order, ties to the first])."""
    with open(path or _def_path()) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    limits = {k: float(v) for k, v in
              re.findall(r"^\s*LIMIT\(\s*(\w+)\s*,\s*([-+0-9.eE]+)\s*\)", text, re.M)}
    verdicts = re.findall(r'^\s*VERDICT\(\s*\w+\s*,\s*"([^"]+)"\s*\)', text, re.M)
    if set(limits) != {"lost_min", "imbalance_min", "straggler_steps"} or len(verdicts) != 4:
        raise ValueError("%s: expected 3 LIMIT and 4 VERDICT lines" % (path or _def_path()))
    return limits, verdicts


_TABLE = None


def table():
    global _TABLE
    if _TABLE is None:
        _TABLE = read_table()
    return _TABLE


def thresholds():
    return dict(table()[0])


def verdict_names():
    """loader-limited, communication-limited, straggler-limited, compute-limited."""
    return list(table()[1])


def _median(v):
    v = sorted(v)
    n = len(v)
    return 0.0 if n == 0 else v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def _sums(run):
    s = run.get("sum_ns")
    if s is None:
        s = [sum(st[1 + p] for st in run["steps"]) for p in range(5)]
    return [float(x) for x in s]


def _shares(share, gap):
    d = {PHASES[p]: share[p] for p in range(5)}
    d["gap"] = gap
    return d


def compute(runs, info=None, limits=None):
    """The report of @runs (one per rank, rank order) as a dict in the trainer's JSON schema.
    @info: the run's description (device, backend, model, batch, crop, classes, params, buckets,
    bucket_mb, first_bucket_mb, steps, warmup, accum); @limits: thresholds (default: the
    table's)."""
    if not runs:
        raise ValueError("no rank")
    lim = dict(limits or thresholds())
    names = verdict_names()
    info = info or {}
    nr = len(runs)
    sums = [_sums(r) for r in runs]
    rank = [{"share": [0.0] * 5, "gap": 0.0, "step_ms": 0.0, "compute_ms": 0.0,
             "samples_per_s": 0.0, "au": 0.0} for _ in runs]
    share, sum_share, slowest = [0.0] * 5, 0.0, math.inf
    # totals: every measured step
    for r, x in enumerate(runs):
        wall = x["wall_ns"] * 1e-9
        f = rank[r]
        f["samples_per_s"] = x["samples"] / wall if wall > 0 else 0.0
        tot = 0.0
        for p in range(5):
            s = sums[r][p] * 1e-9 / wall if wall > 0 else 0.0
            share[p] += s / nr
            tot += s
        f["au"] = sums[r][COMPUTE] * 1e-9 / wall if wall > 0 else 0.0
        sum_share += tot
        slowest = min(slowest, f["samples_per_s"])
    rep = {"gap": max(0.0, 1 - sum_share / nr), "au": share[COMPUTE],
           "rank_samples_per_s": slowest, "samples_per_s": slowest * nr,
           "wall_s": runs[0]["wall_ns"] * 1e-9}
    n = min(len(x["steps"]) for x in runs)
    slow = fast = 0
    loader = comm = strag = consistency = 0.0
    step_ms = compute_ms = 0.0
    if n >= 2:
        mean_wall = 0.0
        for r, x in enumerate(runs):
            st = x["steps"][:n]
            s = [sum(float(v[1 + p]) for v in st) for p in range(5)]
            allp = sum(s)
            wall = float(st[-1][0] - st[0][0]) + sum(float(v) for v in st[-1][1:6])
            wall = max(wall, allp, 1.0)
            f = rank[r]
            f["share"] = [v / wall for v in s]
            f["gap"] = max(0.0, 1 - allp / wall)
            f["step_ms"] = wall / n * 1e-6
            f["compute_ms"] = s[COMPUTE] / n * 1e-6
            mean_wall += wall / nr
        for r in range(nr):
            if rank[r]["compute_ms"] > rank[slow]["compute_ms"]:
                slow = r
            if rank[r]["compute_ms"] < rank[fast]["compute_ms"]:
                fast = r
        slowest_steps = 0
        for i in range(n):
            worst_data, least_comm, worst = 0.0, math.inf, 0
            cs = []
            for r in range(nr):
                s = runs[r]["steps"][i]
                worst_data = max(worst_data, float(s[1 + DATA] + s[1 + COPY]))
                least_comm = min(least_comm, float(s[1 + COMM]))
                cs.append(float(s[1 + COMPUTE]))
                if cs[r] > cs[worst]:
                    worst = r
            loader += worst_data
            comm += least_comm
            slowest_steps += cs[slow] >= cs[worst]
            if nr > 1:
                strag += cs[worst] - _median(cs[:worst] + cs[worst + 1:])
        loader /= mean_wall
        comm /= mean_wall
        strag /= mean_wall
        consistency = slowest_steps / n
        step_ms = mean_wall / n * 1e-6
        compute_ms = sum(f["compute_ms"] for f in rank) / nr
        cs_, cf_ = rank[slow]["compute_ms"], rank[fast]["compute_ms"]
    else:
        n = 0
        for r, x in enumerate(runs):
            if sums[r][COMPUTE] > sums[slow][COMPUTE]:
                slow = r
            if sums[r][COMPUTE] < sums[fast][COMPUTE]:
                fast = r
            rank[r]["share"] = [v / x["wall_ns"] if x["wall_ns"] else 0.0 for v in sums[r]]
        loader = share[DATA] + share[COPY]
        comm = share[COMM]
        cs_, cf_ = sums[slow][COMPUTE], sums[fast][COMPUTE]
    imbalance = cs_ / cf_ if cf_ > 0 else 1.0
    wait_for_slow = 0.0
    if nr > 1:
        wait_for_slow = sum(rank[r]["share"][COMM] for r in range(nr) if r != slow) / (nr - 1)
    # the verdict: the largest cause, if it costs at least lost_min; ties to the loader, then
    # the network
    s_cost = strag if (imbalance >= lim["imbalance_min"] and
                       consistency >= lim["straggler_steps"]) else 0.0
    v, worst = 0, loader
    if comm > worst:
        v, worst = 1, comm
    if s_cost > worst:
        v, worst = 2, s_cost
    verdict = names[v] if worst >= lim["lost_min"] else names[3]
    out = {
        "schema": SCHEMA, "verdict": verdict,
        "device": info.get("device"), "backend": info.get("backend"), "model": info.get("model"),
        "synthetic": False, "ranks": nr, "batch": info.get("batch"), "accum": info.get("accum", 1),
        "crop": info.get("crop"), "classes": info.get("classes"), "params": info.get("params"),
        "buckets": info.get("buckets"), "bucket_mb": info.get("bucket_mb"),
        "first_bucket_mb": info.get("first_bucket_mb"), "steps": info.get("steps"),
        "warmup": info.get("warmup"), "steps_compared": n, "wall_s": rep["wall_s"],
        "samples_per_s": rep["samples_per_s"], "rank_samples_per_s": rep["rank_samples_per_s"],
        "au": rep["au"], "step_ms": step_ms, "compute_ms": compute_ms,
        "shares": _shares(share, rep["gap"]),
        "causes": {"loader": loader, "comm": comm, "straggler": strag},
        "straggler": {"slow_rank": slow, "fast_rank": fast, "imbalance": imbalance,
                      "consistency": consistency, "wait_for_slow": wait_for_slow},
        "thresholds": lim,
        "per_rank": [{"rank": r, "shares": _shares(f["share"], f["gap"]),
                      "step_ms": f["step_ms"], "compute_ms": f["compute_ms"],
                      "samples_per_s": f["samples_per_s"], "au": f["au"]}
                     for r, f in enumerate(rank)],
    }
    return out
