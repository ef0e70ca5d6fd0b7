#!/usr/bin/env python3
"""selfsize.py - issue 26's figures: loaderd sizing itself against fixed worker counts 1 and 2
(loaderd --fixed-workers), each scenario's rows run back to back within one round (rounds
interleave them again) so that other load on a shared host hits every row alike. Not part of
`make test`; results in docs/BENCHMARKS.md ("Self-sizing").

  a  a host trainer that needs one core (build/bin/trainer --device host, mlp:hidden=4096, one
     BLAS thread) beside loaderd: its samples/s, and loaderd's CPU-seconds per sample published
     against the same loaderd with a consumer that eats as fast as it can (ldcat) ("unconstrained")
  b  a consumer eating at a third of the loader's ceiling (ldcat --rate; the ceiling: ldcat
     unconstrained with 2 fixed workers): loaderd's CPU in cores
  c  two jobs, a fast consumer (ldcat, no rate) and a slow one (ldcat --rate, a tenth of the
     ceiling), decode CPU of 1 core (--cpu-budget 1 self-sizing, 1 fixed worker; 2 fixed
     workers for reference): both jobs' samples/s and the share of the slow job's steps at which
     it waited

loaderd's CPU is read from /proc (every thread's time on a CPU); the 1-minute load average is
printed beside each row. Ends with one JSON line: {"rounds": [...]}.

usage: tools/bench/selfsize.py [--rounds N] [--seconds S] [--dir DIR]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

BIN = os.path.join(os.environ.get("BUILD", "build"), "bin")
BATCH, CROP = 32, 64


def cpu_ns(pid):
    total = 0
    for p in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(p) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def load1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Loaderd:
    def __init__(self, d, args):
        self.sock = os.path.join(d, "l.sock")
        r, w = os.pipe()
        self.log = open(os.path.join(d, "loaderd.log"), "a")
        self.proc = subprocess.Popen([os.path.join(BIN, "loaderd"), "--socket", self.sock,
                                      "--ready-fd", str(w)] + args, pass_fds=(w,),
                                     stderr=self.log)
        os.close(w)
        with os.fdopen(r) as f:
            line = f.readline()
        if not line.startswith("READY"):
            sys.exit(f"selfsize: loaderd {args} did not start (see {self.log.name})")

    def cpu(self):
        return cpu_ns(self.proc.pid) * 1e-9

    def published(self):
        out = subprocess.run([os.path.join(BIN, "loaderctl"), "--socket", self.sock, "--json",
                              "stats"], check=True, capture_output=True, text=True).stdout
        return sum(j["samples"] for j in json.loads(out))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        self.log.close()


def ldcat(ld, ds, job, seconds, rate=None):
    cmd = [os.path.join(BIN, "ldcat"), "--socket", ld.sock, "--dataset", ds, "--job", job,
           "--crop", str(CROP), "--batch", str(BATCH), "--epochs", "0", "--seconds",
           str(seconds), "--json"]
    if rate:
        cmd += ["--rate", f"{rate:.1f}"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def ldcat_result(p):
    _, err = p.communicate(timeout=600)
    if p.returncode != 0:
        sys.exit(f"selfsize: ldcat failed: {err}")
    return json.loads(err.strip().splitlines()[-1])


CONFIGS = {"fixed1": ["--workers", "1", "--fixed-workers"],
           "fixed2": ["--workers", "2", "--fixed-workers"],
           "self": ["--workers", "2"]}


def run_ldcats(d, ds, cfg, specs, seconds):
    """Start loaderd with @cfg, run ldcats (job, rate) at once; their results, loaderd's CPU-s,
    samples published, wall seconds, load."""
    ld = Loaderd(d, cfg)
    l0, c0, t0 = load1(), ld.cpu(), time.monotonic()
    procs = [ldcat(ld, ds, job, seconds, rate) for job, rate in specs]
    res = [ldcat_result(p) for p in procs]
    wall, cpu, pub = time.monotonic() - t0, ld.cpu() - c0, ld.published()
    ld.stop()
    return res, cpu, pub, wall, (l0 + load1()) / 2


def trainer_run(d, ds, cfg, steps):
    ld = Loaderd(d, cfg)
    l0, c0 = load1(), ld.cpu()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([os.path.join(BIN, "trainer"), "--device", "host", "--socket", ld.sock,
                          "--dataset", ds, "--model", "mlp:hidden=4096", "--crop", str(CROP),
                          "--batch", str(BATCH), "--steps", str(steps), "--log-every", "0"],
                         env=env, capture_output=True, text=True, check=True).stdout
    cpu, pub = ld.cpu() - c0, ld.published()
    ld.stop()
    last = [x for x in out.splitlines() if x.startswith("trainer: samples_per_s=")][-1]
    sps = float(last.split("samples_per_s=")[1].split()[0])
    return {"samples_per_s": sps, "cpu_s_per_ksample": 1e3 * cpu / pub,
            "load": (l0 + load1()) / 2}


def one_round(d, ds, secs):
    r = {"a": {}, "b": {}, "c": {}}
    # ceiling, and the unconstrained CPU per sample, per config
    unc = {}
    for name, cfg in CONFIGS.items():
        res, cpu, pub, wall, load = run_ldcats(d, ds, cfg, [("u", None)], secs)
        unc[name] = {"samples_per_s": res[0]["samples_per_s"], "cpu_s_per_ksample":
                     1e3 * cpu / pub, "load": load}
    r["unconstrained"] = unc
    ceiling = unc["fixed2"]["samples_per_s"]
    # a: the host trainer
    steps = max(50, int(secs * 1500 / BATCH))
    for name, cfg in CONFIGS.items():
        r["a"][name] = trainer_run(d, ds, cfg, steps)
    # b: a third of the ceiling
    for name, cfg in CONFIGS.items():
        res, cpu, pub, wall, load = run_ldcats(d, ds, cfg, [("third", ceiling / 3)], secs)
        r["b"][name] = {"samples_per_s": res[0]["samples_per_s"], "cores": cpu / wall,
                        "waited_share": res[0]["waited"] / max(1, res[0]["steps"]),
                        "load": load}
    # c: fast and slow jobs, one core
    cfgs_c = {"fixed1": CONFIGS["fixed1"], "fixed2": CONFIGS["fixed2"],
              "self_budget1": ["--workers", "2", "--cpu-budget", "1"]}
    for name, cfg in cfgs_c.items():
        res, cpu, pub, wall, load = run_ldcats(d, ds, cfg, [("fast", None),
                                                            ("slow", ceiling / 10)], secs)
        fast, slow = res
        r["c"][name] = {"fast_samples_per_s": fast["samples_per_s"],
                        "slow_samples_per_s": slow["samples_per_s"],
                        "slow_waited_share": slow["waited"] / max(1, slow["steps"]),
                        "slow_steps": slow["steps"], "cores": cpu / wall, "load": load}
    return r


def show(r):
    u = r["unconstrained"]
    print("unconstrained (ldcat, no rate):")
    for k, v in u.items():
        print(f"  {k:12s} {v['samples_per_s']:8.0f} samples/s  {v['cpu_s_per_ksample']:.3f} "
              f"CPU-s/1k samples  load {v['load']:.1f}")
    best = max(r["a"]["fixed1"]["samples_per_s"], r["a"]["fixed2"]["samples_per_s"])
    print("a: host trainer beside loaderd:")
    for k, v in r["a"].items():
        print(f"  {k:12s} {v['samples_per_s']:8.0f} samples/s ({v['samples_per_s'] / best:.2f}x "
              f"best fixed)  {v['cpu_s_per_ksample']:.3f} CPU-s/1k samples "
              f"({v['cpu_s_per_ksample'] / u[k]['cpu_s_per_ksample']:.2f}x unconstrained)  "
              f"load {v['load']:.1f}")
    print("b: a consumer at a third of the ceiling:")
    for k, v in r["b"].items():
        print(f"  {k:12s} {v['samples_per_s']:8.0f} samples/s  loaderd {v['cores']:.2f} cores  "
              f"waited at {100 * v['waited_share']:.1f}% of steps  load {v['load']:.1f}")
    print("c: fast and slow jobs, 1 core of decode:")
    for k, v in r["c"].items():
        print(f"  {k:12s} fast {v['fast_samples_per_s']:7.0f} samples/s, slow "
              f"{v['slow_samples_per_s']:6.0f} samples/s waited at "
              f"{100 * v['slow_waited_share']:.1f}% of {v['slow_steps']} steps  loaderd "
              f"{v['cores']:.2f} cores  load {v['load']:.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--dir", default="build/bench-selfsize")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    ds = os.path.abspath(os.path.join(a.dir, "d.dpk"))
    if not os.path.exists(ds):
        subprocess.run([os.path.join(BIN, "dsgen"), "imagefolder", os.path.join(a.dir, "tree"),
                        "--classes", "10", "--per-class", "60", "--min-side", "120",
                        "--max-side", "360"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(BIN, "dpack"), "pack", os.path.join(a.dir, "tree"), ds],
                       check=True, stdout=subprocess.DEVNULL)
    rounds = []
    for i in range(a.rounds):
        print(f"=== round {i + 1}", flush=True)
        r = one_round(os.path.abspath(a.dir), ds, a.seconds)
        show(r)
        rounds.append(r)
    print(json.dumps({"rounds": rounds}))


if __name__ == "__main__":
    main()
