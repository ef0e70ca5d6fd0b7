#!/usr/bin/env python3
"""train_torch.py - train a torchvision ResNet-18 for a few steps from loaderd, then the same with
the PyTorch DataLoader over the ImageFolder tree, and print both samples/s.

    python3 examples/train_torch.py                         # makes a dataset, runs a loaderd
    python3 examples/train_torch.py --socket S --dpk D.dpk --tree TREE/ --steps 50 --crop 224

Both pipelines do the same work: RandomResizedCrop + horizontal flip to uint8, then on the
device: float, /255, normalise, forward, backward, SGD step. Needs torch and torchvision
(pip install torch torchvision) and the loaderd build (make); not run by `make test`.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))  # the package of this tree, when not pip-installed
os.environ.setdefault("LOADERD_LIB", str(REPO / "build" / "lib" / "libldc.so"))

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision import transforms as T  # noqa: E402

import loaderd  # noqa: E402

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def train(batches, model, opt, dev, steps, warmup):
    """Run @steps steps from the iterator @batches of (uint8 NCHW images, labels); returns
    (samples/s after @warmup steps, fraction of that time spent waiting for data)."""
    mean, std = MEAN.to(dev), STD.to(dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = wait = 0
    t0 = None
    it = iter(batches)
    for step in range(steps + warmup):
        if step == warmup:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0, n, wait = time.perf_counter(), 0, 0.0
        tw = time.perf_counter()
        try:
            images, labels = next(it)
        except StopIteration:
            it = iter(batches)  # next epoch
            images, labels = next(it)
        wait += time.perf_counter() - tw
        x = images.to(dev, non_blocking=True).float().sub_(mean).div_(std)
        y = labels.to(dev, non_blocking=True)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        n += len(labels)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return n / dt, wait / dt, loss.item()


def make_dataset(work, classes, per_class):
    b = REPO / "build" / "bin"
    tree, dpk = work / "tree", work / "train.dpk"
    subprocess.run([b / "dsgen", "imagefolder", tree, "--classes", str(classes), "--per-class",
                    str(per_class), "--min-side", "200", "--max-side", "500"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([b / "dpack", "pack", tree, dpk], check=True, stdout=subprocess.DEVNULL)
    return tree, dpk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", help="a running loaderd (default: start one for this run)")
    ap.add_argument("--dpk", help="packed dataset (default: generate one)")
    ap.add_argument("--tree", help="the ImageFolder tree the .dpk was packed from")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--crop", type=int, default=112)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per pipeline")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2,
                    help="DataLoader workers, and loaderd's decode threads when started here")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    if bool(args.dpk) != bool(args.tree):
        ap.error("--dpk and --tree go together (the same data in both forms)")

    dev = torch.device(args.device)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="train_torch."))
    daemon = None
    try:
        if args.dpk:
            tree, dpk = Path(args.tree), Path(args.dpk)
        else:
            tree, dpk = make_dataset(work, classes=10, per_class=max(20, args.batch * 4 // 10))
        sock = args.socket
        if not sock:
            sock = str(work / "loaderd.sock")
            daemon = subprocess.Popen([str(REPO / "build" / "bin" / "loaderd"), "--socket", sock,
                                       "--workers", str(args.workers), "--log-level", "warn"])
            for _ in range(200):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
        classes = sum(1 for p in tree.iterdir() if p.is_dir())

        results = {}
        # --- loaderd (the DataLoader version below differs only in how batches are made) ---
        model = torchvision.models.resnet18(num_classes=classes).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        with loaderd.Loader(sock, dpk, args.batch, crop=args.crop, layout="NCHW",
                            transforms="train", seed=0) as it:
            results["loaderd"] = train(it, model, opt, dev, args.steps, args.warmup)
            st = it.stats()
            print(f"loaderd: {st['bad_records']} bad records, decode {st['decode_ns'] / 1e9:.2f} s, "
                  f"read {st['io_ns'] / 1e9:.2f} s in loaderd's threads")

        # --- torch DataLoader over the ImageFolder tree ---
        model = torchvision.models.resnet18(num_classes=classes).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        tf = T.Compose([T.RandomResizedCrop(args.crop), T.RandomHorizontalFlip(), T.PILToTensor()])
        ds = torchvision.datasets.ImageFolder(str(tree), transform=tf)
        dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                         num_workers=args.workers,
                                         pin_memory=dev.type == "cuda",
                                         persistent_workers=args.workers > 0)
        results["DataLoader"] = train(dl, model, opt, dev, args.steps, args.warmup)

        print(f"resnet18, batch {args.batch}, crop {args.crop}, {args.steps} timed steps on "
              f"{dev}, {args.workers} workers/threads")
        for name, (rate, wait, loss) in results.items():
            print(f"  {name:10s} {rate:8.1f} samples/s   data wait {100 * wait:5.1f}% of the time"
                  f"   last loss {loss:.3f}")
    finally:
        if daemon:
            daemon.terminate()
            daemon.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
