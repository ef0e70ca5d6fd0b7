#!/usr/bin/env python3
"""run_loader.py - run ONE loader for a warm epoch plus one measured epoch; print one JSON line.

Called by compare.py, once per row, in a fresh process so that rows do not share imports, caches
or threads. Every loader does the same work: RandomResizedCrop(224) (scale 0.08..1, ratio 3/4..4/3),
random horizontal flip, uint8 output, batch 256, shuffled, WORKERS decode workers/threads.

What is measured (of the second epoch only; the first one warms page cache, pools and JITs):
  wall      seconds from asking for the epoch's first batch to receiving its last
  samples   samples actually yielded in that epoch (short or padded last batches count as given)
  cpu       user+sys seconds of this process tree over the epoch: for every process in the tree
            (this one, its DataLoader workers, a loaderd it started), utime+stime+cutime+cstime
            from /proc/PID/stat, summed, at the epoch's start and end. Threads are inside their
            process's figures; the workers live across epochs (persistent_workers) so none is
            lost by exiting mid-epoch.
The caller samples memory (it sees the whole tree from outside).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

CLK = os.sysconf("SC_CLK_TCK")
BATCH = 256
CROP = 224


def tree_pids(root):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_cpu(root):
    total = 0
    for p in tree_pids(root):
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fl = s[s.rindex(")") + 2:].split()
        total += sum(int(x) for x in fl[11:15])  # utime stime cutime cstime (fields 14..17)
    return total / CLK


def measure(epoch_iter):
    """epoch_iter(): iterator over one epoch of (images, labels); returns (samples, wall, cpu, shape)."""
    me = os.getpid()
    c0, t0 = tree_cpu(me), time.perf_counter()
    n, shape = 0, None
    for images, _labels in epoch_iter():
        n += len(images)
        shape = tuple(images.shape)
    t1 = time.perf_counter()
    c1 = tree_cpu(me)
    return n, t1 - t0, c1 - c0, shape


def two_epochs(epoch_iter):
    warm = measure(epoch_iter)
    n, wall, cpu, shape = measure(epoch_iter)
    return {"samples": n, "wall_s": wall, "cpu_s": cpu, "shape": list(shape or ()),
            "warm_samples": warm[0], "warm_wall_s": warm[1]}


# ---------------------------------------------------------------------------------------------
def run_torch_pil(a):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms as T
    ds = datasets.ImageFolder(a.tree, T.Compose([T.RandomResizedCrop(CROP), T.RandomHorizontalFlip(),
                                                 T.PILToTensor()]))
    dl = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=a.workers,
                    persistent_workers=True)
    r = two_epochs(lambda: iter(dl))
    r["note"] = (f"torch {torch.__version__}, PIL decode (full size), num_workers={a.workers}, "
                 "persistent_workers, default prefetch_factor 2")
    return r


def tensor_transforms():
    """torchvision's transforms on uint8 CHW tensors: (module, name). transforms.v2 where this
    torchvision has it (0.15 on); before it (Debian 12's 0.14) the v1 transforms, which take
    tensors too and do the same crop, resize and flip."""
    try:
        from torchvision.transforms import v2
        return v2, "v2"
    except ImportError:
        from torchvision import transforms
        return transforms, "v1 (no transforms.v2 in this torchvision)"


class DecodeJpegFolder:
    """ImageFolder listing; file bytes -> torchvision.io.decode_jpeg -> tensor transforms."""

    def __init__(self, root):
        from torchvision import datasets
        self.items = datasets.ImageFolder(root).samples
        T, _ = tensor_transforms()
        self.tf = T.Compose([T.RandomResizedCrop(CROP, antialias=True), T.RandomHorizontalFlip()])

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch
        from torchvision.io import decode_jpeg, ImageReadMode
        path, label = self.items[i]
        with open(path, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        img = decode_jpeg(data, mode=ImageReadMode.RGB)
        return self.tf(img), label


def run_torch_decode_jpeg(a):
    import torch
    import torchvision
    from torch.utils.data import DataLoader
    dl = DataLoader(DecodeJpegFolder(a.tree), batch_size=BATCH, shuffle=True, num_workers=a.workers,
                    persistent_workers=True)
    r = two_epochs(lambda: iter(dl))
    r["note"] = (f"torch {torch.__version__} torchvision {torchvision.__version__}, "
                 f"decode_jpeg (CPU, full size) + {tensor_transforms()[1]} transforms, "
                 f"num_workers={a.workers}")
    return r


def run_dali(a):
    import nvidia.dali as dali
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    @dali.pipeline_def(batch_size=BATCH, num_threads=a.workers, device_id=None, seed=1,
                       prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.tree, random_shuffle=True, name="Reader")
        img = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                            random_area=[0.08, 1.0],
                                            random_aspect_ratio=[3 / 4, 4 / 3])
        img = fn.resize(img, resize_x=CROP, resize_y=CROP)
        img = fn.flip(img, horizontal=fn.random.coin_flip())
        return img, labels

    p = pipe()
    p.build()
    steps = -(-p.epoch_size("Reader") // BATCH)

    def epoch():
        for _ in range(steps):
            imgs, labels = p.run()
            arr = imgs.as_array()  # uint8 N x 224 x 224 x 3 (dense: every sample is 224x224)
            yield arr, labels
    r = two_epochs(epoch)
    r["note"] = (f"DALI {dali.__version__}, device_id=None (CPU only), num_threads={a.workers}, "
                 f"{steps} x {BATCH} per epoch (last batch wraps into the next epoch's files)")
    return r


def run_ffcv(a):
    import numpy as np
    from ffcv.loader import Loader, OrderOption
    from ffcv.fields.decoders import RandomResizedCropRGBImageDecoder, IntDecoder
    from ffcv.transforms import RandomHorizontalFlip, ToTensor, Squeeze
    from importlib.metadata import version
    ld = Loader(a.beton, batch_size=BATCH, num_workers=a.workers, order=OrderOption.RANDOM,
                os_cache=True, drop_last=False,
                pipelines={"image": [RandomResizedCropRGBImageDecoder((CROP, CROP)),
                                     RandomHorizontalFlip(), ToTensor()],
                           "label": [IntDecoder(), ToTensor(), Squeeze()]})
    r = two_epochs(lambda: iter(ld))
    r["note"] = (f"ffcv {version('ffcv')}, num_workers={a.workers}, .beton with "
                 "JPEGs re-encoded by FFCV's writer (write_mode='jpg', quality 90)")
    return r


def run_loaderd_py(a):
    sys.path.insert(0, os.path.join(a.repo, "python"))
    import loaderd
    import loaderd.daemon
    d = tempfile.mkdtemp(prefix="ldbench-cmp-")
    sock = os.path.join(d, "ld.sock")
    log = open(os.path.join(d, "loaderd.log"), "w")
    proc, _ = loaderd.daemon.start([os.path.join(a.repo, "build/bin/loaderd"), "--socket", sock,
                                    "--workers", a.workers], log)
    try:
        it = loaderd.Loader(sock, a.dpk, BATCH, crop=CROP, transforms="train", layout="NCHW",
                            seed=1, output="numpy")
        r = two_epochs(lambda: iter(it))
        it.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    r["note"] = (f"Python client (python/loaderd, numpy views) over a private loaderd "
                 f"--workers {a.workers}; NCHW uint8; loaderd reads with io_uring, O_DIRECT where the "
                 "file system allows (--io auto)")
    return r


def write_beton(a):
    """The FFCV row's input: the same ImageFolder tree written as a .beton (FFCV re-encodes)."""
    from torchvision import datasets
    from ffcv.writer import DatasetWriter
    from ffcv.fields import RGBImageField, IntField
    ds = datasets.ImageFolder(a.tree)
    w = DatasetWriter(a.beton, {"image": RGBImageField(write_mode="jpg", jpeg_quality=90),
                                "label": IntField()}, num_workers=a.workers)
    w.from_indexed_dataset(ds)
    return {"wrote": a.beton}


RUNNERS = {"ffcv_write": write_beton, "torch_pil": run_torch_pil, "torch_decode_jpeg": run_torch_decode_jpeg,
           "dali_cpu": run_dali, "ffcv": run_ffcv, "loaderd_py": run_loaderd_py}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loader", choices=sorted(RUNNERS))
    ap.add_argument("--tree", required=True)
    ap.add_argument("--dpk")
    ap.add_argument("--beton")
    ap.add_argument("--repo", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    r = RUNNERS[a.loader](a)
    r["loader"] = a.loader
    print("RESULT " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
