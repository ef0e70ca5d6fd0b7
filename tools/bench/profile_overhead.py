#!/usr/bin/env python3
"""profile_overhead.py - what per-step attribution (Loader(profile=True), what loaderd.diagnose
turns on) costs a training loop. Not a test: a benchmark whose figures go into the docs.

    /usr/bin/python3 tools/bench/profile_overhead.py [--steps 3000] [--rounds 5]

It makes a small raw dataset (dsgen npy + dpack: 8x8x3 records, batch 8, so that loaderd is never
the bottleneck and a step is as short as the client can make it), starts a loaderd, and iterates
the same number of steps with profile off and on, alternating, --rounds times each; the loop body
does nothing. The difference of the best per-step times is the client's extra cost per step
(clock reads, the record append, the stats request at the start and end spread over the steps).
It then prints that cost as a share of a 10 ms, 50 ms and 200 ms step (a small model's step on
the CPU is 50-250 ms here). With --ddp, a second part times DDP steps of one bucket (two gloo
processes on this host) with DDP's built-in allreduce and with the timed hook the Loader
registers, interleaved in the same processes, best of --rounds. With --dataloader, a third part
times a torch.utils.data.DataLoader loop (num_workers=0, a dataset of ready tensors: the
shortest step a DataLoader makes; and one backward per step, as a training step has) with
loaderd.diagnose's DataLoader hook (profile.patch_dataloader) off and on, the class attributes
swapped between interleaved rounds in one process.
Needs the build (make) and, for --ddp and --dataloader, torch.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "build" / "bin"
sys.path.insert(0, str(REPO / "python"))
os.environ.setdefault("LOADERD_LIB", str(REPO / "build" / "lib" / "libldc.so"))

import loaderd  # noqa: E402


def loop(sock, dpk, steps, profile):
    with loaderd.Loader(sock, dpk, 8, crop=None, output="numpy", profile=profile,
                        sampling="sequential") as it:
        n = 0
        t0 = None
        while n < steps:
            for _ in it:
                if t0 is None:
                    t0 = time.perf_counter()
                n += 1
                if n >= steps:
                    break
        return (time.perf_counter() - t0) / (steps - 1)


DDP_SCRIPT = r'''
import os, sys, time, torch, torch.distributed as dist
from torch import nn
sys.path.insert(0, sys.argv[1])
from loaderd import profile as P
torch.set_num_threads(1)
dist.init_process_group("gloo")
best = {}
x = torch.randn(4, 64)
for r in range(int(sys.argv[2])):
    for mode in ("builtin", "timed"):     # interleaved: the load of the host drifts
        m = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))
        if mode == "timed":
            m.register_comm_hook(None, P._gloo_allreduce_hook)
        for i in range(20):
            m(x).sum().backward()
        dist.barrier()
        t0 = time.perf_counter()
        for i in range(200):
            m(x).sum().backward()
        best[mode] = min(best.get(mode, 1e9), (time.perf_counter() - t0) / 200)
if dist.get_rank() == 0:
    print("STEP", best["builtin"], best["timed"])
dist.destroy_process_group()
'''


def ddp_steps(tmp, rounds):
    """Best step time of DDP's built-in allreduce and of loaderd's timed hook (gloo, 2 ranks,
    1 bucket per step), interleaved in the same processes."""
    script = Path(tmp) / "ddp.py"
    script.write_text(DDP_SCRIPT)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node", "2", "--redirects", "1", "--tee", "1",
                          "--log_dir", str(Path(tmp) / "logs"), str(script),
                          str(REPO / "python"), str(rounds)],
                         capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    for line in out.stdout.splitlines():
        if "STEP" in line:
            return [float(v) for v in line.split()[-2:]]
    raise SystemExit("the DDP part failed:\n" + out.stdout[-2000:] + out.stderr[-2000:])


def dataloader_steps(steps, rounds):
    """Best per-step time of a DataLoader loop with the hook off and on (interleaved)."""
    import torch
    import torch.utils.data.dataloader as dl
    from loaderd import profile as P
    torch.set_num_threads(1)
    ds = torch.utils.data.TensorDataset(torch.randn(steps * 8, 4), torch.zeros(steps * 8))
    w = torch.zeros(4, requires_grad=True)
    off = (dl.DataLoader.__iter__, dl._BaseDataLoaderIter.__next__, torch.autograd.backward)
    P.patch_dataloader(dl)
    on = (dl.DataLoader.__iter__, dl._BaseDataLoaderIter.__next__, torch.autograd.backward)

    def run(attrs):
        dl.DataLoader.__iter__, dl._BaseDataLoaderIter.__next__, torch.autograd.backward = attrs
        loader = torch.utils.data.DataLoader(ds, batch_size=8)
        t0 = None
        for x, _ in loader:
            if t0 is None:
                t0 = time.perf_counter()
            (x @ w).sum().backward()
        return (time.perf_counter() - t0) / (len(loader) - 1)
    b_off, b_on = [], []
    for _ in range(rounds):
        b_off.append(run(off))
        b_on.append(run(on))
    run(off)
    os.environ.pop(P.ENV_DIR, None)   # no records from the benchmark's loaders
    return min(b_off), min(b_on)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ddp", action="store_true", help="also time the DDP allreduce hook")
    ap.add_argument("--dataloader", action="store_true",
                    help="also time the torch DataLoader hook")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="profov.")
    ld = None
    try:
        subprocess.run([BIN / "dsgen", "npy", f"{tmp}/x.npy", f"{tmp}/y.npy", "--count", "4096",
                        "--height", "8", "--width", "8", "--channels", "3", "--classes", "4"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([BIN / "dpack", "pack", f"{tmp}/x.npy", f"{tmp}/y.npy", f"{tmp}/d.dpk"],
                       check=True, stdout=subprocess.DEVNULL)
        sock = f"{tmp}/s.sock"
        ld = subprocess.Popen([BIN / "loaderd", "--socket", sock, "--workers", "1"],
                              stderr=subprocess.DEVNULL)
        while not os.path.exists(sock):
            time.sleep(0.05)
        off, on = [], []
        for _ in range(a.rounds):
            off.append(loop(sock, f"{tmp}/d.dpk", a.steps, False))
            on.append(loop(sock, f"{tmp}/d.dpk", a.steps, True))
        b_off, b_on = min(off), min(on)
        cost = b_on - b_off
        print("loop of %d steps, best of %d rounds: %.2f us per step off, %.2f us on: "
              "attribution costs %.2f us per step" % (a.steps, a.rounds, b_off * 1e6,
                                                      b_on * 1e6, cost * 1e6))
        for ms in (10, 50, 200):
            print("  = %.4f%% of a %d ms step" % (100 * max(cost, 0) / (ms * 1e-3), ms))
        if a.ddp:
            s_off, s_on = ddp_steps(tmp, a.rounds)
            print("DDP, 2 gloo ranks, 1 bucket per step, best of %d rounds: %.1f us per step "
                  "with the built-in allreduce, %.1f us with the timed hook: %+.1f us per bucket"
                  % (a.rounds, s_off * 1e6, s_on * 1e6, (s_on - s_off) * 1e6))
        if a.dataloader:
            d_off, d_on = dataloader_steps(min(a.steps, 2000), a.rounds)
            dc = d_on - d_off
            print("torch DataLoader, num_workers=0, batch 8 of ready tensors, one backward per "
                  "step, best of %d rounds: %.2f us per step off, %.2f us with the hook: %+.2f us "
                  "per step = %.3f%% of this step, %.4f%% of a 10 ms step" %
                  (a.rounds, d_off * 1e6, d_on * 1e6, dc * 1e6, 100 * dc / d_off,
                   100 * max(dc, 0) / 10e-3))
    finally:
        if ld is not None:
            ld.terminate()
            ld.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
