"""field_train.py - a training script shaped like the ones people copy (a model zoo's train.py,
a framework's reference script), for the loaderd.diagnose tests: everything inside main(), the
model (optionally nn.DataParallel) made before the DataLoader; the train transform a preset
class holding a Compose (as reference scripts' ClassificationPresetTrain); the dataset a class
of the script's own over a parser object (--dataset parser: .parser.samples, as model zoos'
ImageDataset) or over the rows of a CSV file (--dataset csv: relative paths under a root);
DataLoader(drop_last=...). Nothing in it knows of loaderd. Prints "loss STEP VALUE" per step.

    python field_train.py DATA_DIR [--dataset parser|csv|memory] [--csv FILE] [--batch B]
        [--crop C] [--epochs E] [--dataparallel] [--drop-last] [--extra NAME,...]
        [--interpolation bilinear|bicubic] [--mixup] [--seed N]
"""
import argparse
import csv
import os

import torch
import torch.nn as nn
import torch.utils.data
import torchvision.transforms as T
from PIL import Image

EXT = (".jpg", ".jpeg", ".png")


class Parser:
    """Finds the (image file, label) pairs of a class-per-folder tree."""

    def __init__(self, root):
        self.root = root
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.samples = [(os.path.join(root, c, f), i) for i, c in enumerate(classes)
                        for f in sorted(os.listdir(os.path.join(root, c)))
                        if f.lower().endswith(EXT)]

    def __len__(self):
        return len(self.samples)


class ImageDataset(torch.utils.data.Dataset):
    def __init__(self, root, transform=None):
        self.parser = Parser(root)
        self.transform = transform

    def __len__(self):
        return len(self.parser)

    def __getitem__(self, i):
        path, target = self.parser.samples[i]
        img = Image.open(path).convert("RGB")
        return self.transform(img) if self.transform else img, target


class CsvDataset(torch.utils.data.Dataset):
    """Rows "image,label" of a CSV file, image paths relative to img_dir."""

    def __init__(self, csv_file, img_dir, transform=None):
        self.img_dir = img_dir
        with open(csv_file, newline="") as f:
            self.rows = list(csv.DictReader(f))
        self.transform = transform

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        img = Image.open(os.path.join(self.img_dir, r["image"])).convert("RGB")
        return self.transform(img), int(r["label"])


class MemoryDataset(torch.utils.data.Dataset):
    """Images made in memory: no files to find."""

    def __init__(self, n, transform):
        self.n, self.transform = n, transform

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8, generator=g)
        return self.transform(T.functional.to_pil_image(x)), i % 4


class ClassificationPresetTrain:
    def __init__(self, crop, extra=(), interpolation="bilinear"):
        interp = T.InterpolationMode(interpolation)
        trans = [T.RandomResizedCrop(crop, interpolation=interp), T.RandomHorizontalFlip()]
        for e in extra:
            if e == "ColorJitter":
                trans.append(T.ColorJitter(0.4, 0.4, 0.4))
            elif e == "TrivialAugmentWide":
                trans.append(T.TrivialAugmentWide())
            elif e == "RandAugment":
                trans.append(T.RandAugment())
            elif e == "AutoAugment":
                trans.append(T.AutoAugment())
        trans += [T.PILToTensor(), T.ConvertImageDtype(torch.float),
                  T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))]
        if "RandomErasing" in extra:
            trans.append(T.RandomErasing(p=0.25))
        self.transforms = T.Compose(trans)

    def __call__(self, img):
        return self.transforms(img)


def mixup_collate(batch):
    """Mixup on the batch: what recipes put in the collate_fn."""
    x, y = torch.utils.data.default_collate(batch)
    lam = 0.8
    return lam * x + (1 - lam) * x.flip(0), y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("--dataset", default="parser")
    p.add_argument("--csv")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--crop", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dataparallel", action="store_true")
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--extra", default="")
    p.add_argument("--interpolation", default="bilinear")
    p.add_argument("--mixup", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(48, 4))
    if a.dataparallel:
        model = nn.DataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tf = ClassificationPresetTrain(a.crop, [e for e in a.extra.split(",") if e],
                                   a.interpolation)
    if a.dataset == "csv":
        ds = CsvDataset(a.csv, a.data, tf)
    elif a.dataset == "memory":
        ds = MemoryDataset(32, tf)
    else:
        ds = ImageDataset(a.data, tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True,
                                         drop_last=a.drop_last,
                                         collate_fn=mixup_collate if a.mixup else None)
    step = 0
    for epoch in range(a.epochs):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("loss %d %.6f" % (step, loss.item()))
            step += 1
    print("done steps=%d" % step)


if __name__ == "__main__":
    main()
