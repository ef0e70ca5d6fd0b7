#!/usr/bin/env python3
"""train_loop.py - a plain PyTorch training loop fed by loaderd.Loader, on one process or under
torchrun (DistributedDataParallel over gloo when WORLD_SIZE > 1). Nothing in it knows about
profiling: run it under `python -m loaderd.diagnose -- ...` to learn what limits it.

    python3 -m loaderd.diagnose --out /tmp/diag -- python3 examples/train_loop.py \\
        --socket /tmp/ld.sock --dpk train.dpk --classes 4 --model conv --crop 32 --steps 40
    python3 -m loaderd.diagnose --out /tmp/diag -- python3 -m torch.distributed.run \\
        --standalone --nproc_per_node 2 --redirects 1 --tee 1 examples/train_loop.py ...

--model tiny: pooling and one linear layer (almost no compute: the loader shows);
--model conv: three 3x3 convolutions at full resolution (compute shows). tests/it_diagnose.sh
runs both, and the DDP case. Needs torch; uses the installed loaderd package, else this
checkout's (python/).
"""
import argparse
import os
import sys
from pathlib import Path

import torch
from torch import nn

try:
    import loaderd
except ImportError:  # not pip-installed: the package of this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import loaderd


def make_model(name, classes):
    if name == "tiny":
        return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(48, classes))
    if name == "conv":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))
    raise SystemExit("--model: tiny or conv")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=None, help="loaderd's socket (default: loaderd's own)")
    ap.add_argument("--dpk", required=True, help="the packed dataset (dpack pack)")
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--model", default="conv", choices=("tiny", "conv"))
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--crop", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--device", default=None, help="Loader(device=...): e.g. cuda")
    ap.add_argument("--profile-report", action="store_true",
                    help="at the end, Loader.profile_report() (every rank: a collective under "
                         "torch.distributed); rank 0 prints its verdict. Needs profiling on "
                         "(LOADERD_PROFILE=1, as loaderd.diagnose sets)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model = make_model(a.model, a.classes)
    dev = torch.device(a.device) if a.device else torch.device("cpu")
    model.to(dev)
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    with loaderd.Loader(a.socket, a.dpk, a.batch, crop=a.crop, layout="NCHW", seed=0,
                        output="torch", device=a.device) as it:
        while step < a.steps:
            for images, labels in it:
                loss = loss_fn(model(images.float().div_(255)), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if step >= a.steps:
                    break
        if a.profile_report:
            rep = it.profile_report()
            if int(os.environ.get("RANK", "0")) == 0:
                print("train_loop: profile_report ranks=%d verdict=%s" %
                      (rep["ranks"], rep["verdict"]), flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()
    print("train_loop: %d steps, last loss %.4f" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
