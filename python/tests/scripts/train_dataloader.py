"""train_dataloader.py - a classification training script in the shape people write it, for the
loaderd.diagnose tests: torchvision's ImageFolder + transforms, torch.utils.data.DataLoader,
optionally nn.DataParallel or DDP under torchrun (DistributedSampler), an evaluation loop under
no_grad after each epoch. Nothing in it knows of loaderd. Prints "loss STEP VALUE" per step and
"done" at the end.

    python train_dataloader.py DATA_DIR [--workers N] [--batch B] [--crop C] [--model tiny|conv]
        [--epochs E] [--steps S] [--eval] [--dataparallel] [--ddp] [--pin-memory]
        [--persistent-workers] [--seed N] [--exit-by-exception]
        [--loaderd SOCKET --dpk DATA.dpk]

--loaderd/--dpk: the same script swapped to loaderd.Loader as loaderd.diagnose prints it (the
DataLoader line, set_epoch; normalize= in the Loader), for the prediction check
(tools/bench/dataloader_swap.py).
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data
import torchvision.datasets as datasets
import torchvision.transforms as transforms


def model_of(name, classes):
    if name == "tiny":     # little more than a pooling: the loader is the limit
        return nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(48, classes))
    return nn.Sequential(   # three convolutions at full resolution: compute is the limit
        nn.Conv2d(3, 48, 3, padding=1), nn.ReLU(), nn.Conv2d(48, 48, 3, padding=1), nn.ReLU(),
        nn.Conv2d(48, 48, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(48, classes))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--model", default="tiny")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many (0: epochs)")
    p.add_argument("--eval", action="store_true")
    p.add_argument("--dataparallel", action="store_true")
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exit-by-exception", action="store_true")
    p.add_argument("--loaderd", metavar="SOCKET")
    p.add_argument("--dpk")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    if a.ddp:
        torch.distributed.init_process_group("gloo")
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_ds = datasets.ImageFolder(os.path.join(a.data), transforms.Compose([
        transforms.RandomResizedCrop(a.crop), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), normalize]))
    sampler = torch.utils.data.distributed.DistributedSampler(train_ds) if a.ddp else None
    if a.loaderd:   # the swap
        import loaderd
        train = loaderd.Loader(a.loaderd, a.dpk, a.batch, crop=a.crop, transforms="train",
                               normalize=(normalize.mean, normalize.std), layout="NCHW",
                               epochs=a.epochs, seed=a.seed)
        sampler = train
    else:
        train = torch.utils.data.DataLoader(
            train_ds, batch_size=a.batch, shuffle=sampler is None, sampler=sampler,
            num_workers=a.workers, pin_memory=a.pin_memory,
            persistent_workers=a.persistent_workers and a.workers > 0)
    model = model_of(a.model, len(train_ds.classes))
    if a.dataparallel:
        model = nn.DataParallel(model)
    if a.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    val = None
    if a.eval:
        val = torch.utils.data.DataLoader(datasets.ImageFolder(a.data, transforms.Compose([
            transforms.Resize(a.crop + a.crop // 7), transforms.CenterCrop(a.crop),
            transforms.ToTensor(), normalize])), batch_size=a.batch, num_workers=a.workers)
    step = 0
    for epoch in range(a.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        model.train()
        for images, target in train:
            loss = F.cross_entropy(model(images), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("loss %d %.6f" % (step, loss.item()), flush=True)
            step += 1
            if a.exit_by_exception and step == 12:
                raise RuntimeError("diverged at step %d" % step)
            if a.steps and step >= a.steps:
                break
        if val is not None:
            model.eval()
            with torch.no_grad():
                correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val)
            print("eval %d correct" % correct, flush=True)
        if a.steps and step >= a.steps:
            break
    print("done", flush=True)
    if a.ddp:  # as torchrun scripts end: gloo's teardown at exit can abort without it
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
