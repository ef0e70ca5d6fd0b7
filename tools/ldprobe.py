#!/usr/bin/env python3
# ldprobe.py - installed as build/bin/ldprobe: why doesn't adding GPUs make training faster?
#
# One command measures, for a dataset, a transform (crop), a model and a number of ranks:
#   1. the loader ceiling: loaderd alone, one ldcat per rank draining the rings as fast as they
#      fill (RandomResizedCrop + flip, as the trainer asks), samples/s from loaderd's own counters
#      over a window that leaves the start-up out;
#   2. the compute ceiling: trainer --synthetic (no loader), same model, batch, crop and ranks;
#   3. the real run: trainer through loaderd with --trace and --report-json,
# and says which of loader, compute, communication or a straggler rank holds the run back, with
# advice in numbers. The figures and the verdict are the trainer's (trainer/report.c, one
# threshold table): ldprobe reads its JSON report and decides nothing the report decided; it adds
# the two ceilings and turns them into advice. It writes report.txt (also printed), timeline.svg,
# trace.json, the trainer's JSON reports (trainer-*.json) and the logs of every process into
# --out DIR. The last line is
#   ldprobe: loader_per_s=X compute_per_s=Y actual_per_s=Z au=A verdict=V
#
# Why Python: the report and the trace are JSON and the project has no JSON parser in C (nor
# wants a home-made one); this is orchestration of the C programs next to it, standard library
# only. Importable (tools/tests/test_ldprobe.py): nothing runs on import.
#
# Several nodes (--hostfile FILE, --launch-agent CMD): one loaderd per node already serves on
# --socket, the same path on every node. The loader ceiling is measured on each node, by this
# program run there through the launch agent (`CMD HOST COMMAND`, as ssh: --node-ceiling), all
# nodes at once, each draining the rings of its own ranks; the job's loader ceiling is the slowest
# node's per rank times the ranks (synchronous steps wait for the slowest node). mpirun gets the
# hostfile and the agent. When the loader limits the run, the slowest node is named.
#
# Processes: loaderd (unless --socket names a running one), ldcat and mpirun are started in their
# own sessions, with PR_SET_PDEATHSIG so that they die with ldprobe even after a SIGKILL, and are
# stopped (SIGTERM, then SIGKILL after 5 s) on every path, including SIGINT/SIGTERM to ldprobe.
# With --socket, ldprobe's jobs on that loaderd are ended with `loaderctl stop` and the daemon
# is left running.
import argparse
import ctypes
import json
import math
import os
import select
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

EXIT_USAGE = 2
STOP_TIMEOUT_S = 5.0
# Advice only (the verdict's thresholds are the trainer's, in its report):
READY_TIMEOUT_S = 10
# The loader ceiling's bounds: its warm-up (every rank attached, 2 steps each) and one answer of
# loaderctl stats (its refusals waited out). A node's ceiling (--node-ceiling) ends within
# about --seconds + NODE_LIMIT_S, failing with what it waited for; the ldprobe that asked gives
# up on a node NODE_SLACK_S later (a node that did not even start).
WARMUP_LIMIT_S = 30.0
STATS_LIMIT_S = 10.0
# a node's: loaderctl status, the warm-up, the window, the last stats, 2 ldcats and the job stopped
NODE_LIMIT_S = 2 * STATS_LIMIT_S + WARMUP_LIMIT_S + STATS_LIMIT_S + 2 * STOP_TIMEOUT_S + 10
NODE_SLACK_S = 30.0
AU_TARGET = 0.90
LATENCY_BOUND_MIBS = 200  # exposed allreduce slower than this per MiB of gradient: per-call cost
PER_CALL_MS = 5          # ... when each bucket's allreduce is shorter; else it is the link's rate
BATCH_KS = (2, 4, 8, 16, 32)   # the larger batches (x --batch) the advice considers
COPY_MIN = 0.05          # exposed H2D share that earns ring/prefetch advice
GAP_MIN = 0.10           # time in no phase worth a remark
PREFETCH_MAX = 8
REPORT_SCHEMA = "loaderd-trainer-report/1"

TRACE_NAME = {"data wait": "data", "h2d": "copy", "compute": "compute", "allreduce": "comm",
              "optimizer": "opt"}


def _import_timeline():
    """The SVG renderer shared with loaderd.diagnose: python/loaderd/timeline.py of the checkout
    (next to tools/, or to build/bin/), share/loaderd/timeline.py of `make install`, else the
    pip-installed loaderd package's."""
    import importlib.util
    here = os.path.dirname(os.path.realpath(__file__))
    for path in (os.path.join(here, "..", "python", "loaderd", "timeline.py"),
                 os.path.join(here, "..", "..", "python", "loaderd", "timeline.py"),
                 os.path.join(here, "..", "share", "loaderd", "timeline.py")):
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("loaderd_timeline", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    from loaderd import timeline
    return timeline


timeline = _import_timeline()
PHASES, LABEL, COLOUR = timeline.PHASES, timeline.LABEL, timeline.COLOUR
fmt_rate, common_steps, align = timeline.fmt_rate, timeline.common_steps, timeline.align


class Failure(Exception):
    """A runtime error: message, exit status."""

    def __init__(self, msg, code=1):
        super().__init__(msg)
        self.code = code


class Interrupted(Exception):
    pass


def say(msg):
    """Progress, on stderr: stdout is the report."""
    print("ldprobe: " + msg, file=sys.stderr, flush=True)


# ---- child processes ----

_libc = None


def _child_setup(parent):
    """In the child before exec: die with ldprobe (PR_SET_PDEATHSIG = 1), even if it is killed."""
    def setup():
        try:
            _libc.prctl(1, signal.SIGTERM, 0, 0, 0)
        except Exception:
            pass
        if os.getppid() != parent:
            os._exit(127)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    return setup


class Children:
    """Every process ldprobe starts; each leads its own process group (mpirun's ranks too)."""

    def __init__(self):
        self.procs = []

    def spawn(self, cmd, stdout, stderr, env=None, pass_fds=()):
        global _libc
        if _libc is None:
            try:
                _libc = ctypes.CDLL(None, use_errno=True)
            except OSError:
                _libc = False
        p = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=stdout,
                             stderr=stderr, env=env, start_new_session=True, pass_fds=pass_fds,
                             preexec_fn=_child_setup(os.getpid()))
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM):
        """Stop @p and its process group: @sig, then SIGKILL after 5 s. Returns its status."""
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        else:
            # the leader is gone; a rank it left behind would still be in the group
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        if p in self.procs:
            self.procs.remove(p)
        return p.returncode

    def stop_all(self):
        for p in list(reversed(self.procs)):
            self.stop(p)


def run_logged(children, cmd, log_path, timeout, env=None):
    """Run @cmd to completion with stdout+stderr in @log_path. Returns (status, log text)."""
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(str(c)) for c in cmd) + "\n")
        log.flush()
        p = children.spawn(cmd, log, subprocess.STDOUT, env=env)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            children.stop(p)
            raise Failure("%s did not finish within %.0f s (log: %s)" %
                          (os.path.basename(str(cmd[0])), timeout, log_path))
        children.stop(p)  # reaps; kills a straggling group member if any
    with open(log_path) as f:
        return rc, f.read()


def tail(text, n=15):
    lines = [l for l in text.splitlines() if l.strip()]
    return "\n".join("  " + l for l in lines[-n:])


# ---- loaderd ----

class Loaderd:
    def __init__(self, args, children, out):
        self.args, self.children, self.out = args, children, out
        self.proc = None
        self.tmpdir = None
        self.sock = args.socket
        self.workers = args.workers
        self.private = args.socket is None
        self.jobs = []
        self.busy_ranks = 0      # other jobs' ranks attached to a given loaderd at the start

    def ctl(self, *words, json_out=True, timeout=10):
        cmd = [self.args.bin_loaderctl, "--socket", self.sock] + (["--json"] if json_out else [])
        cmd += list(words)
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return 1, "", "loaderctl timed out"
        return r.returncode, r.stdout, r.stderr

    def status(self):
        rc, out, err = self.ctl("status")
        if rc != 0:
            return None, err.strip()
        try:
            return json.loads(out), ""
        except ValueError:
            return None, "loaderctl status: not JSON"

    def start(self):
        if not self.private:
            st, err = self.status()
            if st is None:
                raise Failure("--socket %s: %s" % (self.sock, err or "loaderd unreachable"))
            self.workers = int(st.get("workers", 0)) or None
            self.busy_ranks = int(st.get("ranks_attached", 0))
            return
        base = os.environ.get("TMPDIR") or "/tmp"
        self.tmpdir = tempfile.mkdtemp(prefix="ldprobe.", dir=base)
        self.sock = os.path.join(self.tmpdir, "s.sock")
        if len(self.sock) > 100:
            raise Failure("TMPDIR %s is too long for a unix socket path" % base)
        cmd = [self.args.bin_loaderd, "--socket", self.sock, "--workers", self.workers]
        if self.args.slots:
            cmd += ["--slots", self.args.slots]
        if self.args.io:
            cmd += ["--io", self.args.io]
        self.log_path = os.path.join(self.out, "loaderd.log")
        self.log = open(self.log_path, "w")
        self.log.write("$ " + " ".join(shlex.quote(str(c)) for c in cmd) + "\n")
        self.log.flush()
        # --ready-fd: loaderd writes one line on the pipe once it serves; EOF if it exits first
        r, w = os.pipe()
        try:
            self.proc = self.children.spawn(cmd + ["--ready-fd", w], self.log, subprocess.STDOUT,
                                            pass_fds=(w,))
        finally:
            os.close(w)
        with os.fdopen(r, "rb") as ready:
            got = select.select([ready], [], [], READY_TIMEOUT_S)[0] and ready.readline()
        if not got or not got.startswith(b"READY"):
            rc = self.proc.poll()
            self.children.stop(self.proc)
            self.proc = None
            self.log.close()
            why = ("did not serve within %d s" % READY_TIMEOUT_S if rc is None else
                   "exited (status %d) before serving" % rc)
            raise Failure("loaderd %s:\n%s" % (why, tail(open(self.log_path).read())))

    def job_stats(self, job, limit=None):
        """loaderctl stats JOB within @limit s (STATS_LIMIT_S). Returns (the job's stats, "") or
        (None, why: what loaderctl said, or that it did not answer in time)."""
        deadline = time.monotonic() + (STATS_LIMIT_S if limit is None else limit)
        # loaderd charges every loaderctl answer to the asking user's --admin-share: when a loaded
        # machine makes the answers dear, it refuses for a while and says how long; wait that out
        while True:
            left = deadline - time.monotonic()
            rc, out, err = self.ctl("stats", job, timeout=max(0.5, left))
            why = (err.strip().splitlines() or ["exit status %d" % rc])[-1] if rc != 0 else ""
            m = re.search(r"admin-share\); try again in (\d+) ms", err) if rc != 0 else None
            left = deadline - time.monotonic()
            if not m or left <= 0:
                break
            time.sleep(min(left, 2.0, (int(m.group(1)) + 10) / 1000.0))
        if rc != 0:
            return None, "loaderctl stats %s on %s: %s" % (job, self.sock, why)
        try:
            d = json.loads(out)
        except ValueError:
            return None, "loaderctl stats %s on %s: not JSON" % (job, self.sock)
        for j in d if isinstance(d, list) else [d]:
            if j.get("job") == job:
                return j, ""
        return None, "loaderctl stats on %s: no job %s" % (self.sock, job)

    def stop_job(self, job):
        if not self.args.nodes:
            self.ctl("stop", job, json_out=False)
            return
        # one loaderd per node: stop the job on each, through the launch agent, all at once
        procs = []
        for host, _ in self.args.nodes:
            words = [self.args.bin_loaderctl, "--socket", self.sock, "stop", job]
            procs.append(subprocess.Popen(
                shlex.split(self.args.launch_agent) +
                [host, " ".join(shlex.quote(str(w)) for w in words)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop(self):
        if not self.private:   # our own loaderd takes its jobs with it
            for j in self.jobs:
                self.stop_job(j)
        self.jobs = []
        if self.proc is not None:
            rc = self.children.stop(self.proc)
            self.proc = None
            self.log.close()
            if rc not in (0, None):
                say("loaderd exited with status %s (log: %s)" % (rc, self.log_path))
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


# ---- 1. the loader ceiling ----

def measure_loader(a, ld, children, crop, seconds, tag, job=None):
    """Drain one ring per rank with ldcat; samples/s over a window read from loaderd's counters.
    The ranks are a.node_ranks (this node's, --node-ceiling) or all of them, of a.ranks.
    Returns dict(rate, seconds, busy (workers' busy share), decode_share)."""
    job = job or "ldprobe-%d-%s" % (os.getpid(), tag)
    my_ranks = a.node_ranks or range(a.ranks)
    ld.jobs.append(job)
    log_path = os.path.join(a.out, "ldcat-%s.log" % tag)
    log = open(log_path, "w")
    procs = []
    try:
        for r in my_ranks:
            cmd = [a.bin_ldcat, "--socket", ld.sock, "--dataset", a.dataset_abs, "--job", job,
                   "--rank", r, "--world", a.ranks, "--batch", a.batch, "--crop", crop,
                   "--transforms", "rrc", "--flip", "--epochs", 0, "--seed", a.seed,
                   "--timeout-ms", 60000]
            if a.slots:
                cmd += ["--slots", a.slots]
            procs.append(children.spawn(cmd, subprocess.DEVNULL, log))

        def sample(limit):
            st, why = ld.job_stats(job, limit)
            for p in procs:
                if p.poll() is not None:
                    log.flush()
                    raise Failure("ldcat (loader ceiling) exited with status %d:\n%s" %
                                  (p.returncode, tail(open(log_path).read())))
            if st is None:
                return None, why
            # this node's ranks: a job's other ranks are another node's loaderd's
            ranks = [r for r in st.get("ranks", []) if int(r.get("rank", -1)) in my_ranks]
            return (time.monotonic(), sum(int(r.get("samples", 0)) for r in ranks),
                    min((int(r.get("published", 0)) for r in ranks), default=0),
                    float(st.get("fill_s", 0)), float(st.get("decode_s", 0)), len(ranks)), ""

        # Warm-up, left out: every rank attached, at least 2 steps each, and a fraction of a second;
        # within WARMUP_LIMIT_S, loaderctl's answers included, else a failure naming what is missing.
        t_start = time.monotonic()
        deadline = t_start + WARMUP_LIMIT_S
        warm = max(0.3, min(1.0, 0.2 * seconds))
        s0 = None
        while True:
            s, why = sample(max(0.5, min(STATS_LIMIT_S, deadline - time.monotonic())))
            if s and s[5] == len(my_ranks) and s[2] >= 2 and s[0] - t_start >= warm:
                s0 = s
                break
            if time.monotonic() >= deadline:
                seen = why if s is None else (
                    "%d of its %d ranks here attached, the fewest steps published %d" %
                    (s[5], len(my_ranks), s[2]))
                raise Failure("loader ceiling: waited %.0f s for every rank of job %s on %s to be "
                              "attached with 2 steps published; last seen: %s (log: %s)" %
                              (WARMUP_LIMIT_S, job, ld.sock, seen, ld_log_hint(ld)))
            # a quarter second between polls: each answer is charged to this user's
            # --admin-share of loaderd's control thread, which a loaded node makes dear
            time.sleep(0.25)
        time.sleep(seconds)
        s1, why = sample(STATS_LIMIT_S)
        if s1 is None:
            raise Failure("loader ceiling: no stats after the %.1f s window: %s" % (seconds, why))
        dt = s1[0] - s0[0]
        rate = (s1[1] - s0[1]) / dt if dt > 0 else 0.0
        workers = ld.workers or 1
        return {"rate": rate, "seconds": dt, "samples": s1[1] - s0[1],
                "busy": (s1[3] - s0[3]) / (dt * workers) if dt > 0 else 0.0,
                "decode_share": (s1[4] - s0[4]) / (s1[3] - s0[3]) if s1[3] > s0[3] else 0.0}
    finally:
        for p in procs:
            children.stop(p)
        log.close()
        ld.stop_job(job)
        if job in ld.jobs:
            ld.jobs.remove(job)


def ld_log_hint(ld):
    return ld.log_path if ld.private else "the log of the loaderd on %s" % ld.sock


# ---- several nodes ----

def parse_hostfile(text):
    """An Open MPI hostfile: one node a line, `HOST slots=N` (max_slots and other words are
    ignored; # starts a comment). Returns [(host, slots)]; ValueError saying what is wrong."""
    nodes = []
    for no, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        slots = None
        for w in words[1:]:
            if w.startswith("slots="):
                try:
                    slots = int(w[6:])
                except ValueError:
                    slots = 0
                if slots < 1:
                    raise ValueError("line %d: '%s' is not a slot count >= 1" % (no, w))
        if slots is None:
            raise ValueError("line %d: give the node's ranks as slots=N (%s)" % (no, words[0]))
        if any(h == words[0] for h, _ in nodes):
            raise ValueError("line %d: node %s again" % (no, words[0]))
        nodes.append((words[0], slots))
    if not nodes:
        raise ValueError("no node in it")
    return nodes


def node_ranks(nodes):
    """Ranks per node as mpirun places them by slot: [(host, first rank, count)]."""
    out, first = [], 0
    for host, slots in nodes:
        out.append((host, first, slots))
        first += slots
    return out


def measure_nodes(a, children):
    """The loader ceiling of every node, measured on it (ldprobe --node-ceiling through the launch
    agent), all nodes at once. Returns [{host, first, count, rate, busy, decode_share, workers}]."""
    me = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else os.path.abspath(__file__)
    job = "ldprobe-%d-ceiling" % os.getpid()
    procs = []
    for host, first, count in node_ranks(a.nodes):
        words = [me, "--node-ceiling", "%d:%d" % (first, count), "--ranks", a.ranks,
                 "--socket", a.socket, "--dataset", a.dataset_abs, "--batch", a.batch,
                 "--crop", a.crop, "--seconds", a.seconds, "--seed", a.seed, "--bin",
                 os.path.abspath(a.bin), "--node-job", job]
        if a.slots:
            words += ["--slots", a.slots]
        cmd = shlex.split(a.launch_agent) + [host, " ".join(shlex.quote(str(w)) for w in words)]
        log_path = os.path.join(a.out, "node-%s.log" % host)
        out = open(os.path.join(a.out, "node-%s.json" % host), "w+")
        log = open(log_path, "w")
        log.write("$ " + " ".join(shlex.quote(str(c)) for c in cmd) + "\n")
        log.flush()
        procs.append((host, first, count, children.spawn(cmd, out, log), out, log, log_path))
    nodes = []
    # each node's ldprobe ends within --seconds + NODE_LIMIT_S, with a message if it failed
    limit = a.seconds + NODE_LIMIT_S + NODE_SLACK_S
    deadline = time.monotonic() + limit
    try:
        for host, first, count, p, out, log, log_path in procs:
            try:
                rc = p.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise Failure("loader ceiling on node %s: ldprobe --node-ceiling there did not "
                              "answer within %.0f s (log: %s)" % (host, limit, log_path))
            out.seek(0)
            lines = [l for l in out.read().splitlines() if l.startswith("ldprobe-node: ")]
            if rc != 0 or not lines:
                raise Failure("loader ceiling on node %s: status %d (log: %s):\n%s" %
                              (host, rc, log_path, tail(open(log_path).read())))
            try:
                d = json.loads(lines[-1][len("ldprobe-node: "):])
            except ValueError as e:
                raise Failure("loader ceiling on node %s: unreadable answer (%s; log: %s)" %
                              (host, e, log_path))
            d.update(host=host, first=first, count=count)
            nodes.append(d)
    finally:
        for _, _, _, p, out, log, _ in procs:
            children.stop(p)
            out.close()
            log.close()
    return nodes


def node_ceiling_main(a, children):
    """--node-ceiling FIRST:COUNT: on one node, the loader ceiling of its ranks against the loaderd
    on --socket; one line `ldprobe-node: JSON` on stdout."""
    ld = Loaderd(a, children, a.out)
    ld.start()
    r = measure_loader(a, ld, children, a.crop, a.seconds, "ceiling", job=a.node_job)
    r["workers"] = ld.workers
    r["busy_ranks"] = ld.busy_ranks
    print("ldprobe-node: " + json.dumps(r), flush=True)
    return 0


def nodes_summary(nodes, world):
    """The job's loader ceiling from the nodes' (synchronous steps run at the slowest node's pace
    per rank) and the slowest node. Returns (job rate, slowest node, fastest per-rank rate)."""
    per = [(n["rate"] / n["count"], i) for i, n in enumerate(nodes)]
    slow_rate, slow_i = min(per)
    return slow_rate * world, nodes[slow_i], max(per)[0]


def node_lines(nodes, world, real):
    """One report line per node: its ceiling, per rank, its workers, and how long its ranks waited
    for data in the real run (the report's per-rank shares)."""
    _, slow, _ = nodes_summary(nodes, world)
    data = {x["rank"]: x["shares"]["data"] + x["shares"]["copy"] for x in real.get("per_rank", [])}
    out = []
    for n in nodes:
        ranks = range(n["first"], n["first"] + n["count"])
        waits = [data[r] for r in ranks if r in data]
        out.append("  node %s (ranks %d-%d): %s samples/s alone, %s per rank, %s decode "
                   "worker%s%s%s" %
                   (n["host"], n["first"], n["first"] + n["count"] - 1, fmt_rate(n["rate"]),
                    fmt_rate(n["rate"] / n["count"]), n.get("workers") or "?",
                    plural(n.get("workers") or 0),
                    "; its ranks wait for data %.0f%% of the run" % (100 * max(waits))
                    if waits else "",
                    " (the slowest)" if n is slow and len(nodes) > 1 else ""))
    return out


def advise_nodes(nodes, world, real):
    """Why and advice about the nodes: when the loader limits the run, the slowest node is what
    limits it (named, with its figures); when the nodes' ceilings differ by more than 1.5x, say so
    whatever the verdict. Returns (why, advice)."""
    job_rate, slow, fast = nodes_summary(nodes, world)
    slow_pr = slow["rate"] / slow["count"]
    why, lines = [], []
    if len(nodes) < 2:
        return why, lines
    if real["verdict"] == "loader-limited":
        why.append("node %s is the slowest loader: %s samples/s per rank against %s on the "
                   "fastest node; every step waits for it, so the job's loader ceiling is %s "
                   "samples/s (%d ranks x %s)" %
                   (slow["host"], fmt_rate(slow_pr), fmt_rate(fast), fmt_rate(job_rate), world,
                    fmt_rate(slow_pr)))
        lines.append("node %s: the worker advice below is for its loaderd; the other nodes "
                     "deliver enough per rank up to %s samples/s per rank" %
                     (slow["host"], fmt_rate(fast)))
    elif fast > 1.5 * slow_pr:
        lines.append("nodes: node %s's loader (%s samples/s per rank) is %.1fx slower than the "
                     "fastest node's (%s); it does not limit this run, it will first when "
                     "compute gets faster" % (slow["host"], fmt_rate(slow_pr), fast / slow_pr,
                                              fmt_rate(fast)))
    return why, lines


# ---- 2. and 3. the trainer ----

def mpi_prefix(a):
    if a.ranks == 1 and not a.mpirun and not a.nodes:
        return []
    if a.mpirun:
        return shlex.split(a.mpirun) + ["-np", str(a.ranks)]
    where = []
    if a.nodes:
        where = ["--hostfile", a.hostfile]
        if a.launch_agent != "ssh":
            where += ["--mca", "plm_rsh_agent", a.launch_agent]
    return ["mpirun"] + a.mpirun_extra + where + ["-np", str(a.ranks)]


def trainer_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI refuses root unless told
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def load_report(path, what, log_path, text=""):
    """The trainer's --report-json: a dict (schema in docs/DIAGNOSE.md, "Reading the trainer's report")."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure("%s: no readable report %s (%s; log: %s):\n%s" %
                      (what, path, e, log_path, tail(text)))
    if not isinstance(r, dict) or r.get("schema") != REPORT_SCHEMA:
        raise Failure("%s: %s is not a %s report (log: %s)" % (what, path, REPORT_SCHEMA,
                                                                log_path))
    return r


def run_trainer(a, children, extra, steps, warmup, name, timeout):
    log_path = os.path.join(a.out, "trainer-%s.log" % name)
    report = os.path.join(a.out, "trainer-%s.json" % name)
    if os.path.exists(report):
        os.unlink(report)
    cmd = mpi_prefix(a) + [a.bin_trainer] + extra + [
        "--model", a.model, "--crop", a.crop, "--batch", a.batch, "--steps", steps,
        "--warmup", warmup, "--log-every", 0, "--seed", a.seed, "--report-json", report]
    if a.device:
        cmd += ["--device", a.device]
    cmd += a.trainer_args_list
    rc, text = run_logged(children, cmd, log_path, timeout, env=trainer_env())
    if rc != 0:
        usage = rc == EXIT_USAGE or "(see --help)" in text or "usage: trainer" in text
        raise Failure("trainer (%s) exited with status %d (log: %s):\n%s" %
                      (name, rc, log_path, tail(text)), EXIT_USAGE if usage else 1)
    return load_report(report, "trainer (%s)" % name, log_path, text)


def preflight(a, children):
    """One synthetic step of one rank, before anything is measured: a model or trainer option
    the trainer refuses is a usage error, found in a second rather than after the loader run."""
    log_path = os.path.join(a.out, "trainer-check.log")
    cmd = [a.bin_trainer, "--synthetic", "--dataset", a.dataset_abs, "--model", a.model,
           "--crop", a.crop, "--batch", 1, "--steps", 1, "--warmup", 0, "--log-every", 0]
    if a.device:
        cmd += ["--device", a.device]
    cmd += a.trainer_args_list
    rc, text = run_logged(children, cmd, log_path, a.timeout, env=trainer_env())
    if rc != 0:
        lines = [l for l in text.splitlines()[1:] if l.strip()]
        cut = [i for i, l in enumerate(lines) if l.startswith("usage: trainer")]
        lines = lines[:cut[0]] if cut else lines[-6:]   # the complaint, not the whole --help
        raise Failure("the trainer refuses these options (status %d; log: %s):\n%s" %
                      (rc, log_path, "\n".join("  " + l for l in lines)), EXIT_USAGE)


def measure_scaling(a, children):
    """How compute per step grows with the batch: one synthetic rank (no allreduce) at --batch
    and at the largest batch the advice considers. Returns {batch: compute ms}, or None when the
    larger batch does not run (device memory)."""
    out = {}
    for b in sorted({a.batch, min(65536, a.batch * BATCH_KS[-1])}):
        name = "batch%d" % b
        log_path = os.path.join(a.out, "trainer-%s.log" % name)
        report = os.path.join(a.out, "trainer-%s.json" % name)
        cmd = [a.bin_trainer, "--synthetic", "--dataset", a.dataset_abs, "--model", a.model,
               "--crop", a.crop, "--batch", b, "--steps", 8, "--warmup", 2, "--log-every", 0,
               "--seed", a.seed, "--report-json", report]
        if a.device:
            cmd += ["--device", a.device]
        cmd += a.trainer_args_list
        rc, text = run_logged(children, cmd, log_path, a.timeout, env=trainer_env())
        if rc != 0:
            say("compute at --batch %d did not run (log: %s): no measured batch advice" %
                (b, log_path))
            return None
        out[b] = load_report(report, "trainer (%s)" % name, log_path, text)["compute_ms"]
    return out if len(out) >= 2 else None


def warmup_for(steps):
    return max(2, min(20, steps // 10))


def measure_compute(a, children):
    """trainer --synthetic (the model sized for the dataset's classes); a short first pass sizes
    a second one to about --seconds."""
    extra = ["--synthetic", "--dataset", a.dataset_abs]
    steps = 12
    r = run_trainer(a, children, extra, steps, 2, "synthetic", a.timeout)
    measured = r["steps"] - r["warmup"]
    if r["wall_s"] < 0.6 * a.seconds and measured > 0:
        per_step = max(r["wall_s"], 1e-4) / measured
        steps = int(min(1_000_000, max(20, math.ceil(a.seconds / per_step))))
        steps += warmup_for(steps)
        r = run_trainer(a, children, extra, steps, warmup_for(steps), "synthetic", a.timeout)
    return r


# ---- the trace (for the picture only: the figures are the report's) ----

def load_trace(path, warmup):
    """Per rank: {step: {"start": us, "data": us, ...}} for the steps after the warm-up."""
    with open(path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    ranks = {}
    for e in events:
        if e.get("ph") != "X" or e.get("name") not in TRACE_NAME:
            continue
        step = int(e.get("args", {}).get("step", -1))
        if step < warmup:
            continue
        rec = ranks.setdefault(int(e["pid"]), {}).setdefault(
            step, {"start": float("inf"), **{p: 0.0 for p in PHASES}})
        rec[TRACE_NAME[e["name"]]] += float(e["dur"])
        rec["start"] = min(rec["start"], float(e["ts"]))
    return ranks


# ---- verdict and advice ----

def plural(n, one="", many="s"):
    return one if n == 1 else many


def advise_loader(a, ld, loader, compute, real, cheaper, info, cores):
    """Reasons and advice for a loader-limited run: the workers (and cores) that reach the target,
    a cheaper transform when one was measured."""
    L, C, A, au = loader["rate"], compute["samples_per_s"], real["samples_per_s"], real["au"]
    host = real.get("device") == "host"
    why = ["the ranks wait for data %.0f%% of each step (worst rank per step)" %
           (100 * real["causes"]["loader"])]
    lines = []
    workers = ld.workers or 1
    per_worker = L / workers
    # AU = compute seconds per sample x rate: the rate that gives AU_TARGET, capped by what
    # compute alone reaches
    need = AU_TARGET * A / au if au > 0 else C
    capped = need > C
    target = min(need, C)
    n = max(workers + 1, math.ceil(target / per_worker)) if per_worker > 0 else workers + 1
    s = ("decode workers: %d worker%s deliver%s %s samples/s alone (%s per worker); "
         % (workers, plural(workers), plural(workers, "s", ""), fmt_rate(L),
            fmt_rate(per_worker)))
    if not capped:
        s += ("AU >= %.0f%% needs about %s samples/s -> loaderd --workers %d" %
              (100 * AU_TARGET, fmt_rate(target), n))
    else:
        s += ("AU >= %.0f%% would need %s samples/s, more than compute alone reaches (%s/s, "
              "AU %.2f there): to reach the compute ceiling -> loaderd --workers %d" %
              (100 * AU_TARGET, fmt_rate(need), fmt_rate(C), compute["au"], n))
    if host and n + a.ranks > cores:
        s += ("; this host has %d cores shared by the decode workers and %d host rank%s, so "
              "that many workers need cores of their own (another node, or a GPU device)" %
              (cores, a.ranks, plural(a.ranks)))
    if not ld.private:
        s += " (restart the loaderd on %s with it)" % ld.sock
    lines.append(s)
    if cheaper and cheaper[1] < 1.15 * L:
        c2, r2 = cheaper
        img = (info or {}).get("images") or {}
        wm = (img.get("width") or {}).get("mean")
        hm = (img.get("height") or {}).get("mean")
        lines.append("cheaper transform: a smaller crop does not help here (--crop %d: %s "
                     "samples/s, measured): decode is not in the crop's size but in the "
                     "stored images%s: pack them at a lower resolution (the crop window "
                     "decodes at a DCT scale of 1/2, 1/4 or 1/8 at best)" %
                     (c2, fmt_rate(r2), " (%.0fx%.0f px on average)" % (wm, hm)
                      if wm and hm else ""))
    elif cheaper:
        c2, r2 = cheaper
        n2 = max(1, math.ceil(target / (r2 / workers))) if r2 > 0 else 0
        lines.append("cheaper transform: at --crop %d the same %d worker%s %s samples/s "
                     "(measured, %.1fx): %s" %
                     (c2, workers, " delivers" if workers == 1 else "s deliver", fmt_rate(r2),
                      r2 / L if L else 0,
                      "enough for the same target" if r2 >= target else
                      "the same target then needs --workers %d" % n2) +
                     "; a smaller input changes the model's cost too: re-run ldprobe with "
                     "--crop %d" % c2)
    if L >= 1.5 * C or (L > 2 * A and host):
        lines.append("the loader alone makes %s samples/s but delivered %s in the run: "
                     "%s" % (fmt_rate(L), fmt_rate(A),
                             "decode workers and host ranks share %d cores" % cores if host
                             else "look at ring depth (--slots) and --prefetch"))
    return why, lines


def batch_share(comm_ms, rest, compute_ms, scaling, batch, k):
    """The exposed allreduce's share at --batch k x @batch, the allreduce costing the same per
    step and compute growing as @scaling says: {batch: compute ms} of one rank, measured at
    @batch and a larger one; per-step cost plus per-sample cost, a line through the two points
    (small batches are often bound by reading the weights, not by the samples)."""
    (b0, c0), (b1, c1) = sorted(scaling.items())[:2]
    slope = (c1 - c0) / (b1 - b0) if b1 != b0 else 0.0
    at = lambda b: max(c0 + slope * (b - b0), 1e-6)   # noqa: E731
    grow = at(batch * k) / at(batch)
    return comm_ms / (rest + compute_ms * (grow - 1) + comm_ms), grow


def advise_comm(a, compute, real, scaling=None):
    """Reasons and advice for a communication-limited run: the batch that hides the allreduce,
    and what the gradient's size says about buckets. @scaling ({batch: compute ms}, measured
    with one synthetic rank at --batch and a larger one) turns the batch advice into its own line
    with a measured prediction; without it --batch and --accum are assumed to scale alike."""
    share = real["causes"]["comm"]
    step_ms = real["step_ms"]
    comm_ms = share * step_ms
    lost_min = real["thresholds"]["lost_min"]
    why = ["exposed allreduce %.0f%% of each step (%.1f ms of %.1f ms, the least exposed rank)" %
           (100 * share, comm_ms, step_ms)]
    lines = []
    rest = step_ms - comm_ms
    k_ok = None
    for k in (2, 4, 8, 16, 32):
        if rest > 0 and comm_ms / (k * rest + comm_ms) <= lost_min:
            k_ok = k
            break
    if scaling and len(scaling) >= 2 and rest > 0:
        # --accum K: K micro-steps per allreduce, compute K times as much, exactly
        k = k_ok or 32
        lines.append("fewer allreduces per sample: %s--accum %d %s about %.0f%% (K micro-steps "
                     "of --batch %d per allreduce: the allreduce costs the same per step, the "
                     "rest K times as much)" %
                     ("" if k_ok else "even ", k, "brings its share to" if k_ok else "leaves",
                      100 * comm_ms / (k * rest + comm_ms), a.batch))
        compute_ms = real.get("compute_ms", 0.0)
        for k in BATCH_KS:
            sh, grow = batch_share(comm_ms, rest, compute_ms, scaling, a.batch, k)
            if sh <= lost_min:
                break
        lines.append("larger batch: compute per step grows %.2fx from --batch %d to %d "
                     "(measured, one rank, synthetic), so %s--batch %d %s about %.0f%%%s" %
                     (grow, a.batch, a.batch * k, "" if sh <= lost_min else "even ", a.batch * k,
                      "brings its share to" if sh <= lost_min else "leaves it at", 100 * sh,
                      "" if sh <= lost_min or grow >= 0.5 * k else
                      ": compute grows much less than the batch here (a per-step cost, e.g. "
                      "reading the weights, dominates), so --accum does more than the batch"))
    elif k_ok:
        lines.append("larger batch: the allreduce costs the same per step, so --batch %d "
                     "(or --accum %d) brings its share to about %.0f%%" %
                     (a.batch * k_ok, k_ok, 100 * comm_ms / (k_ok * rest + comm_ms)))
    else:
        lines.append("larger batch: even --batch %d (or --accum 32) leaves about %.0f%% "
                     "exposed: the allreduce itself has to get faster (network, backend)" %
                     (a.batch * 32, 100 * comm_ms / (32 * rest + comm_ms) if rest > 0 else 100))
    params, nb, cap = real.get("params"), real.get("buckets"), real.get("bucket_mb", 25.0)
    if params and nb and comm_ms > 0:
        mb = params * 4 / 2**20
        bw = mb / (comm_ms / 1e3)   # MiB/s, were the exposed time all transfer
        if bw < LATENCY_BOUND_MIBS and comm_ms / nb >= PER_CALL_MS:
            # hundreds of ms per bucket is no per-call latency: the link moves few bytes
            bwd = 2.0 / 3.0 * real.get("compute_ms", 0.0)   # backward, what buckets overlap
            s = ("buckets: the gradient is %.2f MiB in %d bucket%s and %.1f ms of allreduce "
                 "stays exposed (%.0f ms per bucket): %.0f MiB/s, the rate of a slow or shared "
                 "link, not a per-call cost; buckets overlap the allreduce with backward only, "
                 "about %.1f ms per step here, so bucket size will not hide it: fewer bytes per "
                 "sample (the batch or --accum above) or a faster network will" %
                 (mb, nb, plural(nb), comm_ms, comm_ms / nb, bw, bwd))
        elif bw < LATENCY_BOUND_MIBS:
            s = ("buckets: the gradient is %.2f MiB in %d bucket%s and %.1f ms of allreduce "
                 "stays exposed: %.0f MiB/s, far below any link, so the cost is per call "
                 "(latency; a slow or shared network), not volume" %
                 (mb, nb, plural(nb), comm_ms, bw))
            s += ("; fewer, larger buckets: --bucket-mb %.3g" % max(cap * 2, mb)
                  if nb > 1 else "; bucket size will not hide it, fewer allreduces per "
                  "sample will (the batch above)")
        elif nb == 1:
            s = ("buckets: the whole gradient (%.2f MiB) is one bucket, so its allreduce "
                 "starts only when backward ends: --bucket-mb %.3g (about 4 buckets) lets "
                 "it overlap backward" % (mb, max(mb / 4, 0.01)))
        else:
            s = ("buckets: %d buckets of about %.2f MiB (cap %g MiB): --bucket-mb %.3g "
                 "starts the allreduce earlier in backward" % (nb, mb / nb, cap, cap / 2))
        lines.append(s + (" (pass it with --trainer-args)" if "--bucket-mb" in s else ""))
    if compute["shares"]["comm"] >= lost_min:
        lines.append("the compute ceiling (no loader) shows the same: exposed allreduce "
                     "%.0f%% there" % (100 * compute["shares"]["comm"]))
    return why, lines


def advise_straggler(loader, real):
    """Reasons and advice for a straggler-limited run: which rank, how much, what it costs."""
    st = real["straggler"]
    slow, fast = st["slow_rank"], st["fast_rank"]
    per = {x["rank"]: x for x in real["per_rank"]}
    A, step_ms, cost = real["samples_per_s"], real["step_ms"], real["causes"]["straggler"]
    why = ["rank %d computes %.2fx as long as rank %d (%.1f ms vs %.1f ms per step, the slowest "
           "in %.0f%% of the steps); the other ranks wait for it in the allreduce %.0f%% of their "
           "time" % (slow, st["imbalance"], fast, per[slow]["compute_ms"], per[fast]["compute_ms"],
                     100 * st["consistency"], 100 * st["wait_for_slow"])]
    est = A * step_ms / (step_ms - cost * step_ms) if cost < 1 else A
    est = min(est, loader["rate"])   # and no faster than the loader feeds it
    lines = ["straggler: rank %d's compute takes %.2fx as long as rank %d's: a slower or shared "
             "device (check what else runs on it, its clocks and temperature, nvidia-smi); with "
             "rank %d at the others' pace the job would reach about %s samples/s (%.0f%% more)" %
             (slow, st["imbalance"], fast, slow, fmt_rate(est), 100 * (est / A - 1) if A else 0)]
    # Balanced shares: each rank's part of a global step follows its speed, so the job runs
    # at about the sum of the ranks' own rates (each rank's samples per step / its compute).
    n = A * step_ms / 1000 / len(per) if per else 0
    ideal = sum(n / (x["compute_ms"] / 1000) for x in per.values() if x["compute_ms"] > 0)
    ideal = min(ideal, loader["rate"])
    lines.append("or let loaderd split each global step by the ranks' speeds: trainer --balance "
                 "(loaderd --balance; PyTorch: Loader(balance=True) and loaderd.ddp.register), "
                 "with the same update as even splits; the ranks' own rates add up to about %s "
                 "samples/s (%.0f%% more)" %
                 (fmt_rate(ideal), 100 * (ideal / A - 1) if A else 0))
    return why, lines


def advise_compute(loader, real):
    L, A = loader["rate"], real["samples_per_s"]
    why = ["compute takes %.0f%% of the step time; data wait, exposed copy, allreduce and rank "
           "imbalance each cost less than %.0f%%" %
           (100 * real["shares"]["compute"], 100 * real["thresholds"]["lost_min"])]
    if L < 1.3 * A:
        lines = ["headroom: the loader ceiling (%s/s) is only %.0f%% above the actual rate: a "
                 "faster model or more ranks will make it the limit" %
                 (fmt_rate(L), 100 * (L / A - 1) if A else 0)]
    else:
        lines = ["the loader has %.1fx headroom (%s/s alone); to go faster, make compute faster "
                 "(device, model) or add ranks" % (L / A if A else 0, fmt_rate(L))]
    return why, lines


def diagnose(a, ld, loader, compute, real, cheaper, info=None, cores=None, scaling=None):
    """The report's verdict, with reasons and advice in numbers from the report, the two ceilings
    and (when the loader is the limit) the cheaper transform measured. @a: batch, ranks,
    prefetch; @ld: workers, private, sock; @compute and @real: trainer reports; @loader: the
    loader ceiling (rate, busy, decode_share). Returns (verdict, why, ceilings, advice)."""
    cores = cores or os.cpu_count() or 1
    verdict = real["verdict"]
    L, C = loader["rate"], compute["samples_per_s"]
    host = real.get("device") == "host"
    if verdict == "loader-limited":
        why, lines = advise_loader(a, ld, loader, compute, real, cheaper, info, cores)
    elif verdict == "communication-limited":
        why, lines = advise_comm(a, compute, real, scaling)
    elif verdict == "straggler-limited":
        why, lines = advise_straggler(loader, real)
    else:
        why, lines = advise_compute(loader, real)
    if loader.get("nodes"):
        why_n, lines_n = advise_nodes(loader["nodes"], real["ranks"], real)
        why, lines = why + why_n, lines_n + lines
    # compute slower beside the loader than alone: the device (or the host's cores) is shared
    c_real, c_alone = real.get("compute_ms", 0), compute.get("compute_ms", 0)
    if c_alone > 0 and c_real >= 1.25 * c_alone:
        lines.append("compute per step takes %.1f ms in the real run but %.1f ms without the "
                     "loader (%.2fx): %s" %
                     (c_real, c_alone, c_real / c_alone,
                      "decode workers and host ranks share this host's %d cores" % cores if host
                      else "something else runs on the devices during the real run"))
    # copies that do not overlap, whatever the verdict
    copy = real["shares"]["copy"]
    if copy >= COPY_MIN:
        pf = a.prefetch or 2
        lines.append("copies: exposed H2D copy %.0f%% of the step: raise --prefetch to %d "
                     "(now %d) and the ring depth --slots to at least %d" %
                     (100 * copy, min(PREFETCH_MAX, pf + 2), pf, min(PREFETCH_MAX, pf + 2) + 2))
    if real["shares"]["gap"] >= GAP_MIN:
        lines.append("%.0f%% of the step time is in no phase of the trace%s" %
                     (100 * real["shares"]["gap"], " (on the host device the copy out of the "
                      "ring is a memcpy the trainer does not attribute)" if host else ""))
    lower = "loader" if L < C else "compute"
    ceilings = ("the ceilings agree: the %s ceiling is the lower one" % lower
                if (lower == "loader") == (verdict == "loader-limited") else
                "the lower ceiling is %s (%s/s vs %s/s)" % (lower, fmt_rate(min(L, C)),
                                                             fmt_rate(max(L, C))))
    return verdict, why, ceilings, lines


# ---- the picture ----

def svg_report(path, a, ld, loader, compute, real, ranks, verdict, why):
    """timeline.svg (the renderer shared with loaderd.diagnose): the measured steps of every rank
    (from the trace), the report's shares per rank, the ceilings and the actual rate."""
    title = "ldprobe: %s - %s, crop %d, batch %d x %d rank%s: %s" % (
        os.path.basename(a.dataset), a.model, a.crop, a.batch, a.ranks, plural(a.ranks), verdict)
    sub = "loaderd %d worker%s; device %s; %s samples/s actual, AU %.2f" % (
        ld.workers or 0, plural(ld.workers), real.get("device", "?"),
        fmt_rate(real["samples_per_s"]), real["au"])
    bars = [("loader ceiling", loader["rate"], "#8c564b"),
            ("compute ceiling", compute["samples_per_s"], "#2ca02c"),
            ("actual", real["samples_per_s"], "#17becf")]
    timeline.render(path, title, sub, real, ranks, bars, verdict, why)


# ---- main ----

def ranged(kind, lo, hi):
    """An argparse type: @kind (int or float) within [lo, hi]."""
    what, fmt = ("a whole number", "%d") if kind is int else ("a number", "%g")

    def conv(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError("'%s' is not %s" % (s, what))
        if not (lo <= v <= hi):
            raise argparse.ArgumentTypeError((fmt + " is not in " + fmt + ".." + fmt) % (v, lo, hi))
        return v
    return conv


def pos_int(lo, hi):
    return ranged(int, lo, hi)


def pos_float(lo, hi):
    return ranged(float, lo, hi)


def make_parser(ncpu):
    """ldprobe's options: argparse is the table, one add_argument a row (name, kind and range,
    default, help), and it both parses and prints --help. Rules between options: check_usage()."""
    p = argparse.ArgumentParser(
        prog="ldprobe", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="ldprobe --dataset D.dpk [--model M] [--crop N] [--batch B] [--ranks N] "
              "[--workers N | --socket PATH] [--hostfile FILE] [--seconds S] [--out DIR] "
              "[options]",
        description=(
            "Why doesn't adding GPUs make training faster? Measures in one go\n"
            "  1. the loader ceiling: loaderd alone, every rank's ring drained as fast as it fills;\n"
            "  2. the compute ceiling: trainer --synthetic (no loader), same model, batch, crop, ranks;\n"
            "  3. the real run: trainer through loaderd, per-step attribution and --trace,\n"
            "and prints the three rates, AU, the verdict (loader-, compute-, communication- or\n"
            "straggler-limited) and what to change, with numbers. Writes report.txt, timeline.svg\n"
            "(per-rank step timeline and the ceilings), trace.json and the logs into --out DIR.\n"
            "Starts its own loaderd on a private socket (--workers N) unless --socket is given,\n"
            "and always stops what it started. Several nodes: --hostfile FILE --socket PATH, and\n"
            "step 1 runs on every node (through --launch-agent), naming the slowest node when the\n"
            "loader limits the run. Communication-limited: it also measures how compute grows\n"
            "with the batch, for the --batch and --accum advice. The last line is\n"
            "  ldprobe: loader_per_s=X compute_per_s=Y actual_per_s=Z au=A verdict=V"),
        epilog="Exit status: 0 measured, 1 runtime error (the failing program's log is shown), "
               "2 bad usage.")
    p.add_argument("--dataset", required=True, metavar="D.dpk", help="packed dataset (dpack); required")
    p.add_argument("--model", default="mlp", metavar="M",
                   help="trainer model: mlp, mlp:hidden=N, synthetic:resnet50, "
                        "synthetic:flops=F,params=P (default mlp)")
    p.add_argument("--crop", type=pos_int(1, 8192), default=224, metavar="N",
                   help="image side, the transform (RandomResizedCrop + flip) (default 224)")
    p.add_argument("--batch", type=pos_int(1, 65536), default=64, metavar="B",
                   help="samples per rank per step (default 64)")
    p.add_argument("--ranks", type=pos_int(1, 4096), default=None, metavar="N",
                   help="trainer ranks (mpirun -np N; default 1, with --hostfile its slots)")
    p.add_argument("--hostfile", metavar="FILE", default=None,
                   help="several nodes: an Open MPI hostfile, `HOST slots=N` a line (N ranks on "
                        "HOST). Needs --socket: the loaderd of every node, the same path on each. "
                        "Each node's loader ceiling is measured on it; mpirun gets the hostfile (default: "
                        "this node only)")
    p.add_argument("--launch-agent", metavar="'CMD'", default="ssh",
                   help="with --hostfile: runs a command on a node as `CMD HOST COMMAND` (default "
                        "ssh); also mpirun's --mca plm_rsh_agent when not ssh")
    p.add_argument("--node-ceiling", metavar="FIRST:COUNT", default=None,
                   help="(what ldprobe runs on each node) only the loader ceiling of ranks FIRST.. "
                        "FIRST+COUNT-1 of --ranks, against --socket; prints `ldprobe-node: JSON` (default: "
                        "the whole probe)")
    p.add_argument("--node-job", default=None, help=argparse.SUPPRESS)
    p.add_argument("--workers", type=pos_int(1, 1024), default=None, metavar="N",
                   help="decode workers of ldprobe's own loaderd (default: all cores, here %d)"
                        % ncpu)
    p.add_argument("--socket", metavar="PATH",
                   help="use the loaderd already serving on PATH instead of starting one "
                        "(its workers are what is measured; it is left running) (default: ldprobe starts "
                        "its own)")
    p.add_argument("--slots", type=pos_int(2, 1024), default=None, metavar="N",
                   help="ring depth asked of loaderd (default: loaderd's)")
    p.add_argument("--prefetch", type=pos_int(1, PREFETCH_MAX), default=None, metavar="N",
                   help="trainer --prefetch (default: the trainer's, 2)")
    p.add_argument("--device", choices=("cuda", "host"), default=None,
                   help="trainer device (default: the trainer's: cuda when a GPU is visible)")
    p.add_argument("--seconds", type=pos_float(0.5, 3600), default=5.0, metavar="S",
                   help="measured time of each of the three runs (default 5)")
    p.add_argument("--seed", type=pos_int(0, 2**62), default=1, metavar="S",
                   help="sampling seed (default 1)")
    p.add_argument("--trainer-args", default="", metavar="'ARGS'",
                   help="more trainer options for both trainer runs, e.g. '--bucket-mb 4' or the "
                        "test knobs '--inject-slow-rank 1:3', '--inject-comm-delay-ms 20' "
                        "(a single word: --trainer-args=--WORD) (default: none)")
    p.add_argument("--io", choices=("auto", "buffered", "pread"), default=None,
                   help="loaderd --io of ldprobe's own loaderd (default: loaderd's, auto)")
    p.add_argument("--mpirun", metavar="'CMD'", default=None,
                   help="launcher, given -np N after it (default: mpirun; for Open MPI with "
                        "--oversubscribe --bind-to none)")
    p.add_argument("--out", default="ldprobe-report", metavar="DIR",
                   help="report directory, created if missing (default ./ldprobe-report)")
    p.add_argument("--timeout", type=pos_float(10, 86400), default=None, metavar="S",
                   help="longest a single trainer run may take (default max(120, 20 x --seconds))")
    p.add_argument("--bin", metavar="DIR", default=None,
                   help="where loaderd, trainer, ldcat and loaderctl are (default: next to "
                        "ldprobe, else build/bin)")
    return p


def parse_options(argv, ncpu=None):
    """The command line, checked (exit 2 with a message on bad usage) and with the defaults that
    depend on other options filled in; the programs are not looked for (parse_args does)."""
    ncpu = ncpu or os.cpu_count() or 1
    p = make_parser(ncpu)
    a = p.parse_args(argv)
    check_usage(p, a)
    a.workers = a.workers or (None if a.socket else ncpu)
    a.dataset_abs = os.path.realpath(a.dataset)
    a.timeout = a.timeout or max(120.0, 20 * a.seconds)
    a.prefetch = trainer_prefetch(a.trainer_args_list, a.prefetch)
    return a


def usage_error(p, msg):
    p.print_usage(sys.stderr)
    print("ldprobe: error: %s" % msg, file=sys.stderr)
    sys.exit(EXIT_USAGE)


def check_usage(p, a):
    """The rules between options that argparse's rows cannot state; sets a.nodes, a.node_ranks,
    a.ranks (1 by default, the hostfile's slots with one) and a.trainer_args_list."""
    if a.socket and (a.workers or a.io):
        usage_error(p, "--workers and --io configure ldprobe's own loaderd: not with --socket")
    if not os.path.isfile(a.dataset):
        usage_error(p, "--dataset %s: no such file" % a.dataset)
    a.nodes, a.node_ranks = None, None
    if a.hostfile:
        if not a.socket:
            usage_error(p, "--hostfile: give --socket, the path of the loaderd on every node")
        try:
            with open(a.hostfile) as f:
                a.nodes = parse_hostfile(f.read())
        except (OSError, ValueError) as e:
            usage_error(p, "--hostfile %s: %s" % (a.hostfile, e))
        a.hostfile = os.path.abspath(a.hostfile)
        slots = sum(n for _, n in a.nodes)
        if a.ranks is not None and a.ranks != slots:
            usage_error(p, "--ranks %d: the hostfile has %d slots (one rank each)" %
                        (a.ranks, slots))
        a.ranks = slots
    if a.node_ceiling:
        try:
            first, count = (int(x) for x in a.node_ceiling.split(":"))
        except ValueError:
            usage_error(p, "--node-ceiling %s: give FIRST:COUNT" % a.node_ceiling)
        if not a.socket or a.ranks is None or first < 0 or count < 1 or first + count > a.ranks:
            usage_error(p, "--node-ceiling %s: needs --socket and --ranks N > FIRST + COUNT - 1" %
                        a.node_ceiling)
        a.node_ranks = range(first, first + count)
    a.ranks = a.ranks or 1
    try:
        a.trainer_args_list = shlex.split(a.trainer_args)
    except ValueError as e:
        usage_error(p, "--trainer-args: %s" % e)
    if a.socket and not os.path.exists(a.socket) and not a.nodes:
        usage_error(p, "--socket %s: no such socket (is loaderd running?)" % a.socket)


def trainer_prefetch(words, prefetch):
    """The --prefetch the trainer will use, for the advice: the last one in @words (as getopt
    takes it), else @prefetch."""
    for i, w in enumerate(words):
        if w.startswith("--prefetch"):
            v = w.split("=", 1)[1] if "=" in w else (words[i + 1] if i + 1 < len(words) else "")
            try:
                prefetch = int(v)
            except ValueError:
                pass
    return prefetch


def find_programs(a):
    """a.bin and a.bin_PROG for trainer, loaderd, ldcat, loaderctl: --bin, else next to ldprobe,
    else build/bin. Exits 1 naming what is missing."""
    here = os.path.dirname(os.path.realpath(__file__))
    cands = [a.bin] if a.bin else [here, os.path.join(here, "..", "build", "bin"),
                                   os.path.join("build", "bin")]
    for d in cands:
        if os.access(os.path.join(d, "trainer"), os.X_OK):
            a.bin = d
            break
    else:
        print("ldprobe: trainer not found in %s (build with make, or give --bin DIR)" %
              ", ".join(cands), file=sys.stderr)
        sys.exit(1)
    for prog in ("trainer", "loaderd", "ldcat", "loaderctl"):
        path = os.path.join(a.bin, prog)
        if not os.access(path, os.X_OK):
            print("ldprobe: %s not found (build with make, or give --bin DIR)" % path,
                  file=sys.stderr)
            sys.exit(1)
        setattr(a, "bin_" + prog, path)


def mpirun_options(a):
    """Options for the default mpirun: Open MPI's --oversubscribe --bind-to none. Exits 1 when
    the run needs mpirun and there is none."""
    if not ((a.ranks > 1 or a.nodes) and not a.mpirun and not a.node_ranks):
        return []
    if not shutil.which("mpirun"):
        print("ldprobe: --ranks %d needs mpirun (or --mpirun 'CMD')" % a.ranks, file=sys.stderr)
        sys.exit(1)
    try:
        v = subprocess.run(["mpirun", "--version"], capture_output=True, text=True,
                           timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        v = ""
    if "Open MPI" in v or "OpenRTE" in v:
        # ranks + decode workers > cores is the common case; pinning each rank to one core
        # would make a rank that shares its core with a decode worker look like a straggler
        return ["--oversubscribe", "--bind-to", "none"]
    return []


def parse_args(argv):
    """The options checked, the programs found, mpirun's options chosen."""
    a = parse_options(argv)
    find_programs(a)
    a.mpirun_extra = mpirun_options(a)
    return a


def dataset_info(a):
    """dpack inspect --json of the dataset (samples, image sizes), or None. The class count is
    the trainer's (its report), not computed here."""
    try:
        r = subprocess.run([os.path.join(a.bin, "dpack"), "inspect", "--json", a.dataset],
                           capture_output=True, text=True, timeout=60)
        d = json.loads(r.stdout)
        return d if isinstance(d, dict) else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def measure(a, ld, children):
    """The three runs, a cheaper transform when the loader is the limit, how compute grows with
    the batch when communication is. Returns (loader, compute, real, trace per rank, cheaper,
    scaling)."""
    trace = os.path.join(a.out, "trace.json")
    if os.path.exists(trace):
        os.unlink(trace)
    if not a.mpirun:
        preflight(a, children)
    if a.nodes:
        say("measuring the loader ceiling on each of %d nodes (%.1f s), loaderd on %s" %
            (len(a.nodes), a.seconds, a.socket))
        nodes = measure_nodes(a, children)
        rate, slow, _ = nodes_summary(nodes, a.ranks)
        loader = {"rate": rate, "busy": slow["busy"], "decode_share": slow["decode_share"],
                  "nodes": nodes}
        ld.workers = slow.get("workers")
    else:
        ld.start()
        say("loaderd %s (decode workers: %s); measuring the loader ceiling (%.1f s)" %
            ("started on a private socket" if ld.private else "on " + ld.sock,
             ld.workers or "?", a.seconds))
        loader = measure_loader(a, ld, children, a.crop, a.seconds, "ceiling")
    if loader["rate"] <= 0:
        raise Failure("loader ceiling: loaderd delivered nothing in %.1f s" % a.seconds)
    say("loader ceiling %s samples/s; measuring the compute ceiling (trainer --synthetic)" %
        fmt_rate(loader["rate"]))
    compute = measure_compute(a, children)
    say("compute ceiling %s samples/s; the real run through loaderd" %
        fmt_rate(compute["samples_per_s"]))
    est = min(loader["rate"], compute["samples_per_s"])
    steps = int(min(1_000_000, max(20, math.ceil(a.seconds * est / (a.batch * a.ranks)))))
    warm = warmup_for(steps)
    job = "ldprobe-%d-real" % os.getpid()
    ld.jobs.append(job)
    extra = ["--socket", ld.sock, "--dataset", a.dataset_abs, "--job", job, "--trace", trace]
    if a.slots:
        extra += ["--slots", a.slots]
    if a.prefetch:
        extra += ["--prefetch", a.prefetch]
    real = run_trainer(a, children, extra, steps + warm, warm, "real", a.timeout)
    ld.stop_job(job)
    ld.jobs.remove(job)
    ranks = {}
    try:
        ranks = load_trace(trace, real["warmup"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        say("the trace %s could not be read (%s): no step timeline" % (trace, e))
    # a cheaper transform, measured, when the loader is the limit
    cheaper = None
    if real["verdict"] == "loader-limited" and a.crop >= 32 and not a.nodes:
        c2 = a.crop // 2
        say("loader-limited: measuring the loader at --crop %d" % c2)
        cheaper = (c2, measure_loader(a, ld, children, c2, max(1.0, a.seconds / 2),
                                      "crop%d" % c2)["rate"])
    scaling = None
    if real["verdict"] == "communication-limited":
        say("communication-limited: measuring how compute grows with the batch (one rank)")
        scaling = measure_scaling(a, children)
    return loader, compute, real, ranks, cheaper, scaling


def render_report(a, ld, loader, compute, real, info, diag):
    """report.txt: the three rates, the report's figures per rank, the verdict and the advice;
    the last line is the machine-readable one."""
    verdict, why, ceilings, advice = diag
    L, C, A = loader["rate"], compute["samples_per_s"], real["samples_per_s"]
    w = ld.workers or 0
    rep = ["ldprobe: %s (%s samples, %s classes), model %s, crop %d, batch %d x %d rank%s, "
           "device %s" % (a.dataset, (info or {}).get("samples", "?"), real.get("classes", "?"),
                          a.model, a.crop, a.batch, a.ranks, plural(a.ranks),
                          real.get("device", "?")),
           "  loaderd: %d decode worker%s (%s)%s" %
           (w, plural(w), "private, started by ldprobe" if ld.private else
            "on %s of each of %d nodes, the slowest's" % (ld.sock, len(a.nodes)) if a.nodes else
            "on " + ld.sock, ("; trainer options: " + a.trainer_args) if a.trainer_args else "")]
    if ld.busy_ranks:
        rep.append("  (that loaderd was serving %d other rank%s when ldprobe started: the "
                   "ceilings and the run share its workers with them)" %
                   (ld.busy_ranks, plural(ld.busy_ranks)))
    rep += ["",
            "  loader ceiling  %10.1f samples/s  loaderd alone, %d ring%s drained (%s per "
            "worker; workers busy %.0f%%, decoding %.0f%% of that)" %
            (L, a.ranks, plural(a.ranks), fmt_rate(L / w) if w else "?",
             100 * loader["busy"], 100 * loader["decode_share"])]
    if loader.get("nodes"):
        rep[-1] = ("  loader ceiling  %10.1f samples/s  the slowest node's per rank x %d ranks, "
                   "each node's loaderd measured on it, all at once:" % (L, a.ranks))
        rep += node_lines(loader["nodes"], a.ranks, real)
    rep += ["  compute ceiling %10.1f samples/s  trainer --synthetic, no loader (AU %.2f)" %
            (C, compute["au"]),
            "  actual          %10.1f samples/s  trainer through loaderd, %d steps, %.1f s "
            "(AU %.2f)" % (A, real["steps"], real["wall_s"], real["au"]),
            "  actual / lower ceiling: %.0f%%; %s" % (100 * A / min(L, C), ceilings)]
    if A > 1.1 * min(L, C):
        rep.append("  (the actual rate is above a ceiling: the three runs are measured one after "
                   "the other, and the load on this machine changed between them; a longer "
                   "--seconds averages more)")
    sh = real["shares"]
    rep += ["", "time per step (trainer, average rank): data wait %.1f%%, exposed copy %.1f%%, "
            "compute %.1f%%, exposed allreduce %.1f%%, optimizer %.1f%%" %
            tuple(100 * sh[p] for p in PHASES)]
    for x in real["per_rank"]:
        s = x["shares"]
        rep.append("  rank %d: data %.1f%%, copy %.1f%%, compute %.1f%%, allreduce %.1f%%, "
                   "optimizer %.1f%%, unattributed %.1f%%; %.2f ms per step, compute %.2f ms" %
                   (x["rank"], *(100 * s[p] for p in PHASES + ("gap",)), x["step_ms"],
                    x["compute_ms"]))
    if len(real["per_rank"]) > 1:
        c, st = real["causes"], real["straggler"]
        rep.append("  per step, across ranks: worst rank's data wait + copy %.1f%%, least "
                   "exposed allreduce %.1f%%; compute, slowest rank %d / fastest rank %d: "
                   "%.2fx (the slowest in %.0f%% of the steps)" %
                   (100 * c["loader"], 100 * c["comm"], st["slow_rank"], st["fast_rank"],
                    st["imbalance"], 100 * st["consistency"]))
    rep += ["", "verdict: %s" % verdict] + ["  " + x for x in why] + ["advice:"]
    rep += ["  - " + x for x in advice]
    rep.append("files: %s" % ", ".join(os.path.join(a.out, f) for f in
                                        ("report.txt", "timeline.svg", "trace.json")))
    rep.append("ldprobe: loader_per_s=%.1f compute_per_s=%.1f actual_per_s=%.1f au=%.3f verdict=%s"
               % (L, C, A, real["au"], verdict))
    return "\n".join(rep) + "\n"


def main(argv):
    a = parse_args(argv)
    children = Children()
    if a.node_ranks:
        a.out = tempfile.mkdtemp(prefix="ldprobe-node.")   # ldcat's log
        try:
            return node_ceiling_main(a, children)
        except Failure as e:
            print("ldprobe: %s" % e, file=sys.stderr)
            return e.code
        finally:
            children.stop_all()
            shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out, exist_ok=True)
    ld = Loaderd(a, children, a.out)

    def on_signal(sig, frame):
        # once: a second signal must not cut the clean-up short
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    try:
        info = dataset_info(a)
        loader, compute, real, ranks, cheaper, scaling = measure(a, ld, children)
    except Interrupted:
        say("interrupted; stopping what was started")
        children.stop_all()
        ld.stop()
        return 130
    except Failure as e:
        print("ldprobe: %s" % e, file=sys.stderr)
        children.stop_all()
        ld.stop()
        return e.code
    finally:
        children.stop_all()
        ld.stop()

    diag = diagnose(a, ld, loader, compute, real, cheaper, info, scaling=scaling)
    text = render_report(a, ld, loader, compute, real, info, diag)
    try:
        with open(os.path.join(a.out, "report.txt"), "w") as f:
            f.write(text)
        svg_report(os.path.join(a.out, "timeline.svg"), a, ld, loader, compute, real, ranks,
                   diag[0], diag[1])
    except OSError as e:
        print("ldprobe: writing the report into %s: %s" % (a.out, e), file=sys.stderr)
        sys.stdout.write(text)
        return 1
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
