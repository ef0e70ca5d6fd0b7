#!/usr/bin/python3
"""augment_cost.py - what a recipe's per-sample augmentations cost, loaderd's C ops (build/bin/ldaug
bench: codec/augment.c through loader/job_aug.c, as a worker runs them) against torchvision's own
(the tensor ops on uint8 CHW, torch on one thread), on the same decoded images: CPU-seconds per
1,000 samples. Recipes: RandAugment(2, 9), ColorJitter(0.4, 0.4, 0.4), and both (timm's
rand-m9 recipes and torchvision's reference use one or the other; both is the worst case).

Each RandAugment op is also timed alone, on both sides, at RandAugment's magnitude 9 of 31 (the
sign +): a RandAugment(2, 9) sample costs twice the mean of the 14 (its ops are drawn uniformly),
which the per-op table gives without the noise of which ops a run happened to draw.

Images: photographs (default: Debian's mate-backgrounds, /usr/share/backgrounds/mate/*/*),
each decoded by PIL and cut by RandomResizedCrop to 224x224 (PIL's antialiased resize), N crops in
all; the same uint8 arrays go to both sides. Ends on one JSON line per recipe and a Markdown
table.

    python3 tools/bench/augment_cost.py [--images GLOB] [-n 64] [--repeat 4]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

RECIPES = [
    ("RandAugment(2, 9)", "randaugment=2:9:31",
     lambda T: T.RandAugment(num_ops=2, magnitude=9)),
    ("ColorJitter(0.4, 0.4, 0.4)", "jitter=0.4:0.4:0.4",
     lambda T: T.ColorJitter(0.4, 0.4, 0.4)),
    ("ColorJitter(0.4, 0.4, 0.4, 0.1)", "jitter=0.4:0.4:0.4:0.1",
     lambda T: T.ColorJitter(0.4, 0.4, 0.4, 0.1)),
    ("ColorJitter(0.4) + RandAugment(2, 9)", "jitter=0.4:0.4:0.4,randaugment=2:9:31",
     lambda T: T.Compose([T.ColorJitter(0.4, 0.4, 0.4), T.RandAugment(num_ops=2, magnitude=9)])),
]


def crops(paths, n, size=224, seed=0):
    import numpy as np
    import torch
    import torchvision.transforms as T
    from PIL import Image
    torch.manual_seed(seed)
    rrc = T.RandomResizedCrop(size)
    imgs = [Image.open(p).convert("RGB") for p in paths]
    for im in imgs:
        im.thumbnail((500, 500))  # ImageNet-like sizes, as BENCHMARKS.md's kind table
    return [np.asarray(rrc(imgs[i % len(imgs)]), dtype=np.uint8) for i in range(n)]


def loaderd_cost(ldaug, spec, arrays, repeat):
    h, w, _ = arrays[0].shape
    data = b"".join(a.tobytes() for a in arrays)
    r = subprocess.run([ldaug, "bench", spec, str(len(arrays)), str(h), str(w), str(repeat)],
                       input=data, capture_output=True, check=True)
    return json.loads(r.stdout.decode().strip().splitlines()[-1])["cpu_s_per_1000"]


def torchvision_cost(make, arrays, repeat):
    import torch
    import torchvision.transforms as T
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tf = make(T)
    ts = [torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous() for a in arrays]
    for t in ts[:4]:  # warm up (first calls allocate)
        tf(t)
    t0 = time.process_time()
    for _ in range(repeat):
        for t in ts:
            tf(t)
    return (time.process_time() - t0) / (len(ts) * repeat) * 1000.0


OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
       "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]


def op_magnitudes(h, w):
    from torchvision.transforms import RandAugment
    meta = RandAugment()._augmentation_space(31, (h, w))
    return {op: (float(m[9]) if m.ndim > 0 else 0.0) for op, (m, _s) in meta.items()}


def loaderd_op_cost(ldaug, op, mag, arrays, repeat):
    h, w, _ = arrays[0].shape
    data = b"".join(a.tobytes() for a in arrays)
    r = subprocess.run([ldaug, "bench-op", op, repr(mag), str(len(arrays)), str(h), str(w),
                        str(repeat)], input=data, capture_output=True, check=True)
    return json.loads(r.stdout.decode().strip().splitlines()[-1])["cpu_s_per_1000"]


def torchvision_op_cost(op, mag, arrays, repeat):
    import torch
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import _apply_op
    torch.set_num_threads(1)
    ts = [torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous() for a in arrays]
    for t in ts[:4]:
        _apply_op(t, op, mag, InterpolationMode.NEAREST, None)
    t0 = time.process_time()
    for _ in range(repeat):
        for t in ts:
            _apply_op(t, op, mag, InterpolationMode.NEAREST, None)
    return (time.process_time() - t0) / (len(ts) * repeat) * 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", default="/usr/share/backgrounds/mate/*/*")
    ap.add_argument("-n", type=int, default=64, help="224x224 crops (default 64)")
    ap.add_argument("--repeat", type=int, default=4, help="passes over them (default 4)")
    ap.add_argument("--ldaug", default=os.path.join(os.environ.get("BUILD", "build"), "bin",
                                                    "ldaug"))
    a = ap.parse_args()
    paths = sorted(p for p in glob.glob(a.images) if p.lower().endswith((".jpg", ".jpeg", ".png")))
    if not paths:
        sys.exit(f"augment_cost: no images match {a.images}")
    if not os.path.exists(a.ldaug):
        sys.exit(f"augment_cost: {a.ldaug} not built (make)")
    arrays = crops(paths, a.n)
    rows = []
    for name, spec, make in RECIPES:
        ours = loaderd_cost(a.ldaug, spec, arrays, a.repeat)
        theirs = torchvision_cost(make, arrays, a.repeat)
        row = {"recipe": name, "spec": spec, "samples": a.n * a.repeat,
               "loaderd_cpu_s_per_1000": round(ours, 3),
               "torchvision_cpu_s_per_1000": round(theirs, 3),
               "ratio": round(theirs / ours, 1), "load": os.getloadavg()[0]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    h, w, _ = arrays[0].shape
    ops = []
    for op, mag in op_magnitudes(h, w).items():
        ours = loaderd_op_cost(a.ldaug, op, mag, arrays, a.repeat)
        theirs = torchvision_op_cost(op, mag, arrays, a.repeat)
        ops.append((op, mag, ours, theirs))
        print(json.dumps({"op": op, "magnitude": mag, "loaderd_cpu_s_per_1000": round(ours, 3),
                          "torchvision_cpu_s_per_1000": round(theirs, 3)}), flush=True)
    mo = 2 * sum(o[2] for o in ops) / len(ops)
    mt = 2 * sum(o[3] for o in ops) / len(ops)
    print(json.dumps({"recipe": "RandAugment(2, 9), from the per-op means",
                      "loaderd_cpu_s_per_1000": round(mo, 3),
                      "torchvision_cpu_s_per_1000": round(mt, 3), "ratio": round(mt / mo, 1)}))
    print()
    print("| op (magnitude bin 9 of 31) | loaderd | torchvision | ratio |")
    print("|---|--:|--:|--:|")
    for op, mag, ours, theirs in ops:
        print(f"| {op} ({mag:g}) | {ours:.3f} | {theirs:.3f} | {theirs / ours:.1f}x |")
    print(f"| RandAugment(2, 9) = 2 x the mean | {mo:.3f} | {mt:.3f} | {mt / mo:.1f}x |")
    print()
    print("| recipe | loaderd (CPU-s / 1,000) | torchvision (CPU-s / 1,000) | ratio |")
    print("|---|--:|--:|--:|")
    for r in rows:
        print(f"| {r['recipe']} | {r['loaderd_cpu_s_per_1000']:.2f} | "
              f"{r['torchvision_cpu_s_per_1000']:.2f} | {r['ratio']:.1f}x |")


if __name__ == "__main__":
    main()
