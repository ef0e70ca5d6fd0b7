#!/usr/bin/env python3
"""ddp_torchrun.py - data-parallel training under torchrun, fed by loaderd: each process is one
rank, gets its share of every step from loaderd's ring (rank and world size from torchrun's
environment) and averages gradients with DistributedDataParallel over gloo on the CPU.

    build/bin/dsgen imagefolder /tmp/dd/tree --classes 4 --per-class 48 --min-side 48 --max-side 96
    build/bin/dpack pack /tmp/dd/tree /tmp/dd/train.dpk
    build/bin/loaderd --socket /tmp/dd/ld.sock &
    torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 examples/ddp_torchrun.py \\
        --socket /tmp/dd/ld.sock --dpk /tmp/dd/train.dpk --classes 4 --epochs 6

(--redirects 1 --tee 1: Debian 12's torchrun, torch 1.13 under Python 3.11, fails on its
default "0", which it cannot parse: "'NoneType' object has no attribute 'get'".)

The model is a small convolutional network; dsgen's classes differ in colour, so it learns them
within a few epochs. Rank 0 prints a line per epoch (mean loss and accuracy of the training
batches over all ranks) and ends on one JSON line with the per-epoch lists (also written to
--json PATH, which tests/it_torchrun.sh reads). Needs torch and numpy; uses the installed loaderd
package, else the one in this checkout (python/).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

try:
    import loaderd
except ImportError:  # not pip-installed: the package of this checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import loaderd


def small_cnn(classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=None, help="loaderd's socket (default: loaderd's own)")
    ap.add_argument("--dpk", required=True, help="the packed dataset (dpack pack)")
    ap.add_argument("--classes", type=int, required=True)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--crop", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--json", help="rank 0 writes the per-epoch results there too")
    a = ap.parse_args()

    torch.set_num_threads(1)  # one core per rank: the ranks and loaderd share the machine
    torch.manual_seed(0)      # the same initial weights on every rank (DDP broadcasts rank 0's)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.parallel.DistributedDataParallel(small_cnn(a.classes))
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # Rank and world come from $RANK and $WORLD_SIZE, as torchrun sets them.
    it = loaderd.Loader(a.socket, a.dpk, a.batch, crop=a.crop, layout="NCHW", seed=0,
                        epochs=a.epochs, output="torch")
    hist = {"loss": [], "acc": []}
    t0 = time.monotonic()
    with it:
        for epoch in range(a.epochs):
            it.set_epoch(epoch)
            sums = torch.zeros(3, dtype=torch.float64)  # loss * n, correct, n
            for images, labels in it:
                x = images.float().div_(255).sub_(0.5)  # uint8 NCHW view of the ring
                out = model(x)
                loss = loss_fn(out, labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                n = len(labels)
                sums += torch.tensor([loss.item() * n, (out.argmax(1) == labels).sum().item(), n],
                                     dtype=torch.float64)
            dist.all_reduce(sums)
            hist["loss"].append(sums[0].item() / sums[2].item())
            hist["acc"].append(sums[1].item() / sums[2].item())
            if rank == 0:
                print(f"epoch {epoch}: loss {hist['loss'][-1]:.4f} accuracy "
                      f"{hist['acc'][-1]:.3f} ({int(sums[2].item())} samples, {world} ranks)",
                      flush=True)
    if rank == 0:
        res = json.dumps({"world": world, "epochs": a.epochs, "seconds":
                          round(time.monotonic() - t0, 2), **hist})
        print(res, flush=True)
        if a.json:
            Path(a.json).write_text(res + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
