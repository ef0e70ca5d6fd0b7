#!/usr/bin/python3
"""imagefolder_parity.py - dpack pack against torchvision's own ImageFolder (tests/it_imagefolder.sh).

make-tree DIR PHOTO: a tree with the quirks of real datasets: CMYK JPEGs (Adobe, 4:2:0, and with
  the APP14 marker cut out), a PNG named .JPEG, PNGs of every colour type (16-bit, grey 16-bit above
  255, palette with tRNS, interlaced, grey+alpha, RGBA, 1-bit), WebP lossy/lossless/alpha, PPM,
  PGM (maxval 255 and 15), BMP (24-bit, 8-bit palette), TIFF (RGB raw/LZW, grey deflate,
  RGBA packbits), uppercase extensions,
  nested folders whose os.walk order differs from a depth-first walk, hidden files, a hidden class
  folder, and files ImageFolder does not list (.txt, .gif, no extension).
compare DIR D.dpk DPACK: sample i of D.dpk is ImageFolder's sample i: same class names, same
  label, and pixels equal to PIL's convert("RGB") (mean absolute difference <= 1 for CMYK JPEGs,
  exact for every other kind). Prints one line per sample kind; exit 1 on any difference.
"""
import io
import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image


def photo(path, side):
    im = Image.open(path).convert("RGB")
    im.thumbnail((side, side))
    return im


def save(im, path, fmt, **kw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im.save(path, fmt, **kw)


def make_tree(root, photo_path):
    p = photo(photo_path, 203)          # odd sizes
    small = photo(photo_path, 37)
    rng = np.random.default_rng(7)
    # class a: JPEGs, CMYK ones, a PNG in disguise, uppercase extensions
    save(p, f"{root}/a/plain.jpg", "JPEG", quality=90)
    save(p.convert("CMYK"), f"{root}/a/cmyk.JPEG", "JPEG", quality=92)
    # PIL's 4:2:0 for CMYK: sampling factors TurboJPEG's API cannot name
    save(small.convert("CMYK"), f"{root}/a/cmyk420.jpg", "JPEG", quality=90, subsampling=2)
    buf = io.BytesIO()
    small.convert("CMYK").save(buf, "JPEG", quality=95)
    b = buf.getvalue()
    i = b.find(b"\xff\xee")                          # cut out APP14 (Adobe): plain CMYK
    assert i > 0
    n = int.from_bytes(b[i + 2:i + 4], "big")
    with open(f"{root}/a/noadobe_cmyk.jpg", "wb") as f:
        f.write(b[:i] + b[i + 2 + n:])
    save(small, f"{root}/a/disguised_png.JPEG", "PNG")
    save(p, f"{root}/a/UPPER.JPG", "JPEG", quality=80, progressive=True)
    save(small.convert("L"), f"{root}/a/grey.jpeg", "JPEG")
    # class b: PNG of every colour type, nested folders in os.walk order
    arr16 = (rng.integers(0, 65536, (19, 23, 3))).astype(">u2")
    with open(f"{root}/tmp16.raw", "wb") as f:
        f.write(arr16.tobytes())
    im16 = Image.frombytes("RGB", (23, 19), arr16.tobytes(), "raw", "RGB;16B")
    save(im16, f"{root}/b/rgb16.png", "PNG")   # PIL writes 8-bit: make 16-bit below
    os.remove(f"{root}/tmp16.raw")
    write_png16(f"{root}/b/rgb16.png", arr16)
    g16 = rng.integers(0, 600, (17, 13)).astype(np.uint16)
    save(Image.fromarray(g16), f"{root}/b/grey16.png", "PNG")
    pal = small.convert("P", palette=Image.ADAPTIVE, colors=16)
    save(pal, f"{root}/b/x/palette_trns.png", "PNG", transparency=3)
    save(small, f"{root}/b/x/interlaced.PNG", "PNG")
    write_interlaced(f"{root}/b/x/interlaced.PNG")
    save(small.convert("LA"), f"{root}/b/x-y/la.png", "PNG")
    rgba = small.copy()
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, (small.height, small.width), dtype=np.uint8)))
    save(rgba, f"{root}/b/x-y/rgba.png", "PNG")
    save(small.convert("1"), f"{root}/b/x/y/bits.png", "PNG")
    save(Image.new("RGB", (1, 1), (1, 2, 3)), f"{root}/b/one.png", "PNG")
    # class c: WebP, Netpbm, BMP
    save(p, f"{root}/c/lossy.webp", "WEBP", quality=80)
    save(small, f"{root}/c/lossless.WebP", "WEBP", lossless=True)
    save(rgba, f"{root}/c/alpha.webp", "WEBP", quality=70)
    save(small, f"{root}/c/img.ppm", "PPM")
    save(small.convert("L"), f"{root}/c/img.pgm", "PPM")
    with open(f"{root}/c/maxval15.pgm", "wb") as f:
        f.write(b"P5\n# comment\n5 3\n15\n" + bytes(rng.integers(0, 16, 15, dtype=np.uint8)))
    save(small, f"{root}/c/img.bmp", "BMP")
    save(small.convert("P", palette=Image.ADAPTIVE, colors=50), f"{root}/c/pal.BMP", "BMP")
    save(p, f"{root}/c/img.tif", "TIFF")
    save(small, f"{root}/c/lzw.TIFF", "TIFF", compression="tiff_lzw")
    save(small.convert("L"), f"{root}/c/grey.tif", "TIFF", compression="tiff_deflate")
    save(rgba, f"{root}/c/rgba.tif", "TIFF", compression="packbits")
    # hidden files and folders, files ImageFolder does not list
    save(small, f"{root}/c/.hidden.png", "PNG")
    save(small, f"{root}/.ipynb_checkpoints/h.jpg", "JPEG")
    for name in ("a/README.txt", "b/notes", "c/anim.gif"):
        with open(f"{root}/{name}", "w") as f:
            f.write("not listed\n")


def chunk(tag, data):
    import zlib
    return len(data).to_bytes(4, "big") + tag + data + \
        zlib.crc32(tag + data).to_bytes(4, "big")


def write_png16(path, arr):
    """A 16-bit RGB PNG of @arr (H x W x 3, big-endian uint16): PIL does not write one."""
    import zlib
    h, w, _ = arr.shape
    raw = b"".join(b"\0" + arr[y].tobytes() for y in range(h))
    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([16, 2, 0, 0, 0])
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) +
                chunk(b"IEND", b""))


def write_interlaced(path):
    """Rewrite @path (an 8-bit RGB PNG) Adam7-interlaced: PIL does not write interlaced PNGs."""
    import zlib
    a = np.asarray(Image.open(path).convert("RGB"))
    h, w, _ = a.shape
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        raw += b"".join(b"\0" + sub[y].tobytes() for y in range(sub.shape[0]))
    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 2, 0, 0, 1])
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) +
                chunk(b"IEND", b""))


def compare(root, dpk, dpack):
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(root)
    info = json.loads(subprocess.run([dpack, "inspect", dpk, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    names = [c["name"] for c in info["classes"]]
    bad = 0
    if names != ds.classes:
        print(f"classes differ: dpack {names}, ImageFolder {ds.classes}")
        bad += 1
    if info["samples"] != len(ds.samples):
        print(f"dpack has {info['samples']} samples, ImageFolder {len(ds.samples)}")
        return 1
    worst = {}
    for i, (path, target) in enumerate(ds.samples):
        r = subprocess.run([dpack, "decode", dpk, str(i)], capture_output=True)
        if r.returncode != 0:
            print(f"sample {i} ({path}): dpack decode failed: {r.stderr.decode().strip()}")
            bad += 1
            continue
        kind, _, label, _, shape = r.stderr.decode().split()
        ref = np.asarray(ds.loader(path))
        h, w, c = (int(v) for v in shape.split("x"))
        got = np.frombuffer(r.stdout, np.uint8)
        if (h, w, c) != ref.shape or got.size != ref.size:
            print(f"sample {i} ({path}): shape {shape}, PIL {ref.shape}")
            bad += 1
            continue
        diff = np.abs(got.reshape(ref.shape).astype(int) - ref.astype(int))
        mad, mx = diff.mean(), int(diff.max())
        # CMYK JPEGs: within 1 of PIL on average (the bound); other JPEGs go through
        # loaderd's crop-and-resize path even at full size, so they are held to the same bound;
        # every lossless or exactly specified decode is exact.
        ok = mad <= 1.0 if kind.startswith("jpeg") else mx == 0
        if int(label) != target or not ok:
            print(f"sample {i} ({path}, {kind}): label {label} vs {target}, mean abs diff "
                  f"{mad:.3f}, max {mx}")
            bad += 1
        k = worst.setdefault(kind, [0, 0.0, 0])
        k[0] += 1
        k[1] = max(k[1], mad)
        k[2] = max(k[2], mx)
    for kind, (n, mad, mx) in sorted(worst.items()):
        print(f"# {kind}: {n} samples, worst mean abs diff {mad:.3f}, worst max diff {mx}")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "make-tree":
        make_tree(sys.argv[2], sys.argv[3])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3], sys.argv[4]))
