#!/usr/bin/python3
"""photo_tree.py - a tree of real photographs for tools/bench/pack_photos.sh (issue 24's pack
cost): Debian's mate-backgrounds (/usr/share/backgrounds/mate, package mate-backgrounds) as

  DIR/tree/full/        the package's JPEGs as they are (1280-5640 px; 5 of 16 progressive)
  DIR/tree/inet_NN/     ImageNet-sized copies made by PIL: a random crop of each photograph (JPEG
                        or PNG) resized to about 500 x 375 (either orientation), JPEG quality
                        75..95, 4:2:0 (one in ten 4:4:4, one in twenty progressive, as ImageNet's
                        mix of encoders)
  DIR/shards/photos-NNN.tar  the same files as a WebDataset set (KEY.jpg + KEY.cls), SHARDS shards

Seeded (the seed is printed): the same arguments give the same bytes. Needs PIL (python3-pil).
Not part of `make test`.

usage: tools/bench/photo_tree.py DIR [--per-source N] [--classes C] [--shards S] [--seed X]
"""
import argparse
import glob
import io
import os
import random
import sys
import tarfile

from PIL import Image

SRC = "/usr/share/backgrounds/mate"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--per-source", type=int, default=14, help="ImageNet-sized copies per photo")
    ap.add_argument("--classes", type=int, default=8, help="inet_NN classes")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seed", type=int, default=24)
    a = ap.parse_args()
    srcs = sorted(glob.glob(SRC + "/*/*.jpg") + glob.glob(SRC + "/*/*.png"))
    if not srcs:
        sys.exit("photo_tree.py: no photographs under %s (apt-get install mate-backgrounds)" % SRC)
    print("photo_tree.py: seed %d, %d source photographs" % (a.seed, len(srcs)))
    rng = random.Random(a.seed)
    tree = os.path.join(a.dir, "tree")
    os.makedirs(os.path.join(tree, "full"), exist_ok=True)
    files = []  # (class index, path)
    for s in srcs:
        if s.endswith(".jpg"):
            p = os.path.join(tree, "full", os.path.basename(s))
            with open(s, "rb") as f, open(p, "wb") as g:
                g.write(f.read())
            files.append((0, p))
    n = 0
    for s in srcs:
        im = Image.open(s).convert("RGB")
        W, H = im.size
        for _ in range(a.per_source):
            # a crop of 40..100% of the shorter side, aspect 3:4 or 4:3, resized to 500 x 375
            land = rng.random() < 0.75
            ow, oh = (500, 375) if land else (375, 500)
            side = rng.uniform(0.4, 1.0) * min(W * 3 / 4 if land else W, H if land else H * 3 / 4)
            cw, ch = (side * 4 / 3, side) if land else (side, side * 4 / 3)
            x, y = rng.uniform(0, W - cw), rng.uniform(0, H - ch)
            c = im.crop((int(x), int(y), int(x + cw), int(y + ch))).resize((ow, oh), Image.BICUBIC)
            k = 1 + n % a.classes
            d = os.path.join(tree, "inet_%02d" % k)
            os.makedirs(d, exist_ok=True)
            p = os.path.join(d, "n%05d.JPEG" % n)
            opt = {"quality": rng.randint(75, 95), "subsampling": 2}
            if rng.random() < 0.1:
                opt["subsampling"] = 0
            if rng.random() < 0.05:
                opt["progressive"] = True
            c.save(p, "JPEG", **opt)
            files.append((k, p))
            n += 1
    sd = os.path.join(a.dir, "shards")
    os.makedirs(sd, exist_ok=True)
    files.sort(key=lambda t: t[1])
    per = (len(files) + a.shards - 1) // a.shards
    for si in range(a.shards):
        with tarfile.open(os.path.join(sd, "photos-%03d.tar" % si), "w",
                          format=tarfile.USTAR_FORMAT) as t:
            for j, (k, p) in enumerate(files[si * per:(si + 1) * per]):
                key = "%06d" % (si * per + j)
                for ext, data in ((".jpg", open(p, "rb").read()), (".cls", b"%d" % k)):
                    ti = tarfile.TarInfo(key + ext)
                    ti.size = len(data)
                    ti.mtime = 0
                    t.addfile(ti, io.BytesIO(data))
    print("photo_tree.py: %d files (%d full size) in %s, %d shards in %s"
          % (len(files), sum(1 for k, _ in files if k == 0), tree, a.shards, sd))


if __name__ == "__main__":
    main()
